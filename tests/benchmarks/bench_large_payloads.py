"""Memory and time of large tool results, each measured in a child process of its own (peak RSS from
`resource.getrusage`), against the budgets of the hostile-input issue:

- a commit over a session holding one 256 MiB payload: peak RSS ≤ 1.5 GB;
- `workmem expand SESSION archive_001` of that commit's archive: ≤ 60 s and ≤ 1 GB peak RSS;
- the read tool's listing of a session with six 64 MB payloads: ≤ 200 MB peak RSS.

Each row's baseline is its budget, so the ratio says how much of it is used (target ≤ 1). The sessions are built
by another child first (building one costs what storing a 256 MiB message costs; that is not what is measured).
Run: `python tests/benchmarks/bench_large_payloads.py [--quick]` (quick: 64 MiB and 6 × 16 MB, same budgets) or
`run.py --only large_payloads`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

MB = 1 << 20
COMMIT_BUDGET_MB = 1500
EXPAND_BUDGET_MB = 1000
EXPAND_BUDGET_S = 60
LISTING_BUDGET_MB = 200

_BUILD = """
import sys
from workmem.graphs.engine import WorkingMemoryEngine
root, session, sizes = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
line = "2026-11-30 10:00:00 INFO worker {w} compiled pkg/mod{i:08d}.go in {ms} ms\\n"
with WorkingMemoryEngine(root, durable=False) as engine:
    engine.add_messages(session, [{"role": "user", "content": "Build everything and tell me what broke."}])
    for k, size in enumerate(sizes):
        one = len(line.format(w=0, i=0, ms=0))
        tail = "FAILED: disk quota\\n"
        text = "".join(line.format(w=k, i=i, ms=i % 97) for i in range(size // one))[:size - len(tail)] + tail
        engine.add_messages(session, [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{k}", "type": "function", "function": {"name": "build", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "name": "build", "content": text}])
        del text
    engine.add_messages(session, [{"role": "assistant", "content": "The build failed on a disk quota."}])
"""

_MEASURED = """
import resource, sys, time
from workmem.graphs.engine import WorkingMemoryEngine
root, session, what = sys.argv[1], sys.argv[2], sys.argv[3]
start = time.perf_counter()
with WorkingMemoryEngine(root, durable=False) as engine:
    if what == "commit":
        out = engine.commit(session, keep_recent_count=0)
        assert out["status"] == "completed", out
    else:
        listed = engine.read_tool_result(session)["results"]
        assert len(listed) >= 1, listed
try:  # this process's own peak: ru_maxrss also holds the RSS of the process it was forked from (kept across exec)
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(peak_kb, time.perf_counter() - start)
"""

_CLI = """
import resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run([sys.executable, "-m", "workmem.graphs.cli", *sys.argv[1:]], stdout=subprocess.PIPE)
assert done.returncode == 0, done.returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - start, len(done.stdout))
"""


def _child(code: str, *args: str) -> list[float]:
    """Run `code` in a fresh interpreter; its last line, as numbers."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed: {done.stderr[-2000:]}")
    return [float(x) for x in done.stdout.split()]


def measure(tmp: Path, payload_mb: int, listing_mb: int) -> dict[str, float]:
    """Build both sessions, then measure the commit, the CLI expand and the listing, each in its own child."""
    big, many = tmp / "big", tmp / "many"
    _child(_BUILD, str(big), "s1", str(payload_mb * MB))
    _child(_BUILD, str(many), "s6", ",".join([str(listing_mb * MB)] * 6))
    commit_kb, commit_s = _child(_MEASURED, str(big), "s1", "commit")
    expand_kb, expand_s, printed = _child(_CLI, "--root", str(big), "expand", "s1", "archive_001")
    listing_kb, _ = _child(_MEASURED, str(many), "s6", "listing")
    return {"commit_mb": commit_kb / 1024, "commit_s": commit_s, "expand_mb": expand_kb / 1024, "expand_s": expand_s,
            "expand_printed_mb": printed / MB, "listing_mb": listing_kb / 1024}


def run(quick: bool = False) -> list[BenchRow]:
    """The three rows (quick: a 64 MiB payload and 6 × 16 MB, against the same budgets)."""
    payload_mb, listing_mb = (64, 16) if quick else (256, 64)
    with tempfile.TemporaryDirectory(prefix="wm-bench-payloads-") as name:
        started = time.perf_counter()
        got = measure(Path(name), payload_mb, listing_mb)
    print(json.dumps({**{k: round(v, 1) for k, v in got.items()}, "seconds": round(time.perf_counter() - started)}))
    return [
        BenchRow.of(f"commit peak RSS, one {payload_mb} MiB payload", got["commit_mb"], COMMIT_BUDGET_MB, 1.0, "MB"),
        BenchRow.of(f"CLI expand of its archive, peak RSS ({got['expand_printed_mb']:.1f} MB printed)",
                    got["expand_mb"], EXPAND_BUDGET_MB, 1.0, "MB"),
        BenchRow.of("CLI expand of its archive, time", got["expand_s"], EXPAND_BUDGET_S, 1.0, "s"),
        BenchRow.of(f"read tool listing, 6 × {listing_mb} MB payloads, peak RSS", got["listing_mb"],
                    LISTING_BUDGET_MB, 1.0, "MB"),
    ]


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv), title="workmem large payloads (ratio = share of the budget)")
