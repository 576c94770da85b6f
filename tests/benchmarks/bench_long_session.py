"""Long sessions in constant space (issue 12): a synthetic coding session of 3 000 turns, a commit every
15 turns with the offline model, and how each cost grows.

Printed: a growth table at 10 points (WM tokens, checkpoint MB and completed threads, commit ms,
archive.json bytes, RSS, `assemble` and `archive_search` ms) and rows checked against targets:
- ratios of the last 20 commits to a warmed-up baseline — the 20 commits after the WM first reaches
  80 % of its total budget (commits 41–60 at the latest): commit time ≤ 1.3×, RSS ≤ 1.3×;
- caps at every point: WM ≤ 12 000 tokens and inside the default `assemble()` context, archive.json
  ≤ 32 KiB, completed checkpoint threads == keep_checkpoints, checkpoints.sqlite ≤ (keep + failed +
  2) × the largest thread + 1 MiB.
`WORKMEM_BENCH_LONG=1` (or `run.py --long`) runs 20 000 turns; `--quick` 600.
Run: `python tests/benchmarks/bench_long_session.py [--quick | --long]`.
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

from rich.console import Console
from rich.table import Table

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import DEFAULT_MEMORY_BUDGET, budgets

SESSION = "long"
COMMIT_EVERY = 15
KEEP = 10
KEEP_CHECKPOINTS = 20
WARM_SHARE = 0.8
WINDOW = 20
LATEST_WARM_START = 40  # the baseline is commits 41–60 at the latest
WM_CAP = 12_000
ARCHIVE_JSON_CAP = 32 * 1024
POINTS = 10

_MODULES = [f"{area}/{name}.py" for area in ("app", "lib", "api", "jobs", "db", "ui", "cli", "etl")
            for name in ("loader", "parser", "client", "cache", "report", "export", "auth", "queue", "sync",
                         "config", "models", "views", "tasks", "utils", "schema", "retry", "limits", "audit",
                         "billing", "search", "mailer", "upload", "session", "metrics", "alerts")]
_PEOPLE = ["Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Omar", "Ingrid", "Dmitri", "Fatima", "Hugo"]
_ERRORS = ["KeyError: '{k}'", "TimeoutError after {n}s", "AssertionError: expected {n} rows",
           "ValueError: invalid literal for int(): '{k}'", "ConnectionResetError on port {n}"]


def coding_turn(i: int, rng: random.Random) -> list[dict[str, Any]]:
    """One turn of a plausible coding session: a request, a tool call and its result, an answer."""
    path, other = rng.choice(_MODULES), rng.choice(_MODULES)
    person, n = rng.choice(_PEOPLE), rng.randint(2, 9999)
    kind = i % 7
    if kind == 0:
        ask = f"{person} reports the nightly job fails in {path}: {rng.choice(_ERRORS).format(k=f'field_{n}', n=n)}."
    elif kind == 1:
        ask = f"No, do not change {other}; keep the retry limit at {n} and fix {path} instead."
    elif kind == 2:
        ask = f"Should we move the cache of {path} to Redis before the release on 2025-{i % 12 + 1:02d}-15?"
    elif kind == 3:
        ask = f"TODO: add a test for ticket OPS-{n} covering {path}."
    else:
        ask = f"Please refactor {path} so batch {n} runs in under {n % 60 + 5} seconds; {person} reviews it."
    code = "\n".join(f"def step_{n}_{k}(rows):\n    return [r for r in rows if r.id % {k + 2} == 0]" for k in range(4))
    return [
        {"role": "user", "content": ask},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{i}", "name": "read_file", "content": code},
        {"role": "assistant", "content": f"Updated {path}: decided to batch rows by {n % 50 + 10} because the "
                                         f"profile showed {n} ms per query. Tests for {other} pass."},
    ]


@dataclass
class Measures:
    """Per commit: time, WM tokens, archive.json bytes, RSS; per point: storage sizes and read latencies."""

    commit_ms: list[float] = field(default_factory=list)
    wm_tokens: list[int] = field(default_factory=list)
    archive_bytes: list[int] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    in_context: list[bool] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)


def rss_mb() -> float:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def thread_sizes(path: Path) -> dict[str, int]:
    """Bytes per checkpoint thread: every column of its `checkpoints` and `writes` rows."""
    conn = sqlite3.connect(path)
    try:
        sizes: dict[str, int] = {}
        for table in ("checkpoints", "writes"):
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            total = " + ".join(f"COALESCE(LENGTH({c}), 8)" for c in columns)
            for thread, size in conn.execute(f"SELECT thread_id, SUM({total}) FROM {table} GROUP BY 1"):
                sizes[thread] = sizes.get(thread, 0) + int(size or 0)
        return sizes
    finally:
        conn.close()


def file_mb(path: Path) -> float:
    """The database and its write-ahead log (the `-shm` index holds no data)."""
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists()) / 2**20


def session_run(turns: int, root: Path) -> Measures:
    """Ingest `turns` turns, commit every 15, and measure."""
    rng = random.Random(12)
    out = Measures()
    every_point = max(1, (turns // COMMIT_EVERY) // POINTS)
    with WorkingMemoryEngine(root, durable=False, keep_checkpoints=KEEP_CHECKPOINTS) as engine:
        for i in range(turns):
            engine.add_messages(SESSION, coding_turn(i, rng))
            if (i + 1) % COMMIT_EVERY:
                continue
            start = time.perf_counter()
            result = engine.commit(SESSION, keep_recent_count=KEEP)
            out.commit_ms.append((time.perf_counter() - start) * 1000)
            assert result["status"] == "completed", result
            archive_dir = root / "sessions" / SESSION / "history" / result["archive_id"]
            out.archive_bytes.append((archive_dir / "archive.json").stat().st_size)
            out.wm_tokens.append(engine.working_memory(SESSION)["tokens"]["working_memory"])
            out.rss_mb.append(rss_mb())
            out.in_context.append(engine.assemble(SESSION)["stats"]["summary_included"])
            if len(out.commit_ms) % every_point == 0:
                out.points.append(measure_point(engine, root, len(out.commit_ms)))
    return out


def measure_point(engine: WorkingMemoryEngine, root: Path, commits: int) -> dict[str, Any]:
    checkpoints = root / "checkpoints.sqlite"
    sizes = thread_sizes(checkpoints)
    tasks = engine.storage.tasks.list_tasks(SESSION)
    failed = sum(t["status"] == "failed" for t in tasks)
    completed = sum(1 for t in tasks if t["status"] == "completed" and t["thread_id"])
    start = time.perf_counter()
    engine.assemble(SESSION)
    assemble_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    engine.archive_search(SESSION, "retry limit Redis")
    search_ms = (time.perf_counter() - start) * 1000
    return {"commits": commits, "checkpoint_mb": file_mb(checkpoints), "threads": len(sizes),
            "completed_threads": completed, "failed_threads": failed, "largest_thread_mb": max(sizes.values()) / 2**20,
            "assemble_ms": assemble_ms, "search_ms": search_ms}


def warm_window(wm_tokens: list[int]) -> tuple[int, int]:
    """The baseline commits: the 20 after the WM first reaches 80 % of its budget (an engine's default),
    at the latest 41–60."""
    total = budgets(DEFAULT_MEMORY_BUDGET).total
    first = next((i for i, t in enumerate(wm_tokens) if t >= WARM_SHARE * total), LATEST_WARM_START)
    start = min(first + 1, LATEST_WARM_START, max(0, len(wm_tokens) - 2 * WINDOW))  # short (--quick) runs
    return start, start + WINDOW


def median(values: list[float]) -> float:
    """The middle value: one slow commit (a GC pause, a busy disk) does not move it."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def growth_table(m: Measures) -> Table:
    table = Table(title="growth over the session")
    for name in ("commits", "WM tokens", "checkpoints MB", "threads", "commit ms", "archive.json KiB", "RSS MB",
                 "assemble ms", "search ms"):
        table.add_column(name, justify="right")
    for p in m.points:
        c = p["commits"] - 1
        table.add_row(str(p["commits"]), str(m.wm_tokens[c]), f"{p['checkpoint_mb']:.2f}", str(p["threads"]),
                      f"{m.commit_ms[c]:.0f}", f"{m.archive_bytes[c] / 1024:.1f}", f"{m.rss_mb[c]:.0f}",
                      f"{p['assemble_ms']:.1f}", f"{p['search_ms']:.1f}")
    return table


def rows_of(m: Measures) -> list[BenchRow]:
    """Ratios against the warmed-up baseline, and caps (value / cap ≤ 1) at every point."""
    lo, hi = warm_window(m.wm_tokens)
    last = slice(-WINDOW, None)
    largest_thread = max(p["largest_thread_mb"] for p in m.points)
    size_ok = max(p["checkpoint_mb"] / ((KEEP_CHECKPOINTS + p["failed_threads"] + 2) * largest_thread + 1)
                  for p in m.points)
    threads_ok = max(abs(p["completed_threads"] - min(KEEP_CHECKPOINTS, p["commits"])) + 1 for p in m.points)
    return [
        BenchRow.of(f"commit ms (median), last {WINDOW} vs commits {lo + 1}–{hi}", median(m.commit_ms[last]),
                    median(m.commit_ms[lo:hi]), 1.3, "ms"),
        BenchRow.of(f"RSS, last {WINDOW} vs commits {lo + 1}–{hi}", median(m.rss_mb[last]),
                    median(m.rss_mb[lo:hi]), 1.3, "MB"),
        BenchRow.of("WM tokens, max vs cap 12 000", max(m.wm_tokens), WM_CAP, 1.0, "tok"),
        BenchRow.of("WM outside the default context (commits)", float(m.in_context.count(False)) or 0.0, 1.0, 0.0,
                    ""),
        BenchRow.of("archive.json, largest vs 32 KiB", max(m.archive_bytes) / 1024, ARCHIVE_JSON_CAP / 1024, 1.0,
                    "KiB"),
        BenchRow.of("completed threads kept, |kept − keep_checkpoints| + 1", float(threads_ok), 1.0, 1.0, ""),
        BenchRow("checkpoints.sqlite vs (keep + failed + 2) × largest thread + 1 MiB", size_ok, 1.0, size_ok, 1.0, ""),
        BenchRow.of("newest vs first archive.json", m.archive_bytes[-1] / 1024, m.archive_bytes[0] / 1024, None,
                    "KiB"),
    ]


def run(quick: bool = False) -> list[BenchRow]:
    """The long-session suite (600 turns with `quick`, 20 000 with WORKMEM_BENCH_LONG=1)."""
    turns = 600 if quick else 20_000 if os.environ.get("WORKMEM_BENCH_LONG") else 3_000
    with tempfile.TemporaryDirectory(prefix="workmem-bench-long-") as tmp:
        m = session_run(turns, Path(tmp) / "root")
    Console().print(growth_table(m))
    return rows_of(m)


if __name__ == "__main__":
    if "--long" in sys.argv:
        os.environ["WORKMEM_BENCH_LONG"] = "1"
    print_table(run(quick="--quick" in sys.argv), title="long session")
