"""Power-loss replay (issue 26): every cut point of a longer workload, both disk models, both `durable` settings.

The workload (`tests/power_child.py`) runs once per `durable` setting under the LD_PRELOAD shim
(`tests/power_shim.c`); `tests/power_model.py` rebuilds the disk just before each sync step under the
strict POSIX model and the ext4-like one, and each image is opened, resumed, checked and committed.
"Confirmed" is: returned (durable=True), or followed by an `os.sync()` (durable=False); archives of
completed commits are confirmed on both settings.

Printed: images, cut points, confirmed-message checks, and what broke (lost, duplicated, out of order,
confirmed archives lost, archived messages search missed, live ones it found, deleted sessions back,
images that would not commit). Each row's ratio is broken / checked, target 0.

Run: `python tests/benchmarks/bench_power_loss.py [--quick] [--rounds N] [--durable true|false]
[--keep-failed DIR]` (the last copies every image where something broke, before it is opened).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test helpers, when run on its own
import power_child  # noqa: E402
import power_model  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
BROKEN = ("lost", "duplicated", "disorder", "archives_lost", "search_missed", "search_live", "deleted_back",
          "commit_failed")


def replay_all(shim: Path, tmp: Path, durable: bool, rounds: int, every: int,
               keep_failed: Path | None = None) -> dict[str, dict[str, int]]:
    """Run the workload once, then check every `every`-th cut point under each model → counts per model
    (an image where anything broke is copied, unopened, to `keep_failed` when given)."""
    base = tmp / ("durable" if durable else "not-durable")
    (base / "fs").mkdir(parents=True)
    power_model.run_logged(shim, base / "fs", base / "log", base / "marks",
                           [str(TESTS / "power_child.py"), str(base / "fs" / "data"), "1" if durable else "0",
                            str(base / "marks"), str(rounds)], timeout=1800)
    ops = power_model.parse_log(base / "log")
    out = {}
    for model in power_model.MODELS:
        replay = power_model.Replay(ops, model)
        cuts = replay.cut_points()
        chosen = cuts[::every] if cuts[-1] in cuts[::every] else [*cuts[::every], cuts[-1]]
        totals = dict.fromkeys(("images", "cuts", "confirmed", "archives", *BROKEN), 0)
        totals["cuts"] = len(cuts)
        for j in chosen:
            replay.advance(j)
            tree, marks = replay.image()
            image = base / f"image-{model}"
            power_model.materialize(tree, image)
            misses: list[str] = []
            counts = power_child.verify(image / "data", marks, durable, misses)
            shutil.rmtree(image)
            for miss in misses:
                print(f"durable={durable} {model} cut {j}/{len(ops)}: search missed {miss}", flush=True)
            if keep_failed is not None and any(counts.get(k) for k in BROKEN):
                power_model.materialize(tree, keep_failed / f"durable-{durable}-{model}-cut-{j}")
            totals["images"] += 1
            for key, value in counts.items():
                totals[key] += value
        out[model] = totals
    return out


def run(quick: bool = False, rounds: int | None = None, settings: tuple[bool, ...] = (True, False),
        keep_failed: Path | None = None) -> list[BenchRow]:
    """Replay both settings (or the given ones); one row per setting and model (broken / confirmed checks,
    target 0)."""
    rounds = rounds or (8 if quick else 40)
    with tempfile.TemporaryDirectory(prefix="wm-bench-power-") as name:
        tmp = Path(name)
        shim = power_model.build_shim(tmp)
        if shim is None:
            raise RuntimeError("no C compiler (cc): the power-loss shim cannot be built")
        started = time.perf_counter()
        results = {durable: replay_all(shim, tmp, durable, rounds, every=4 if quick else 1, keep_failed=keep_failed)
                   for durable in settings}
        seconds = time.perf_counter() - started
    table = Table(title=f"power-loss replay: {rounds} rounds, {seconds:.0f} s")
    for column in ("durable", "model", "cut points", "images", "confirmed checks", "archives checked", *BROKEN):
        table.add_column(column, justify="right")
    rows = []
    for durable, per_model in results.items():
        for model, t in per_model.items():
            table.add_row(str(durable), model, str(t["cuts"]), str(t["images"]), str(t["confirmed"]),
                          str(t["archives"]), *(str(t[k]) for k in BROKEN))
            broken = sum(t[k] for k in BROKEN)
            rows.append(BenchRow.of(f"power loss, durable={durable}, {model}: broken / checked", broken,
                                    t["confirmed"] + t["archives"], 0.0, "checks"))
    Console(width=200).print(table)
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = int(args[args.index("--rounds") + 1]) if "--rounds" in args else None
    only = (args[args.index("--durable") + 1].lower() == "true",) if "--durable" in args else (True, False)
    kept = Path(args[args.index("--keep-failed") + 1]) if "--keep-failed" in args else None
    print_table(run(quick="--quick" in args, rounds=chosen, settings=only, keep_failed=kept),
                title="workmem power loss (issue 26)")
