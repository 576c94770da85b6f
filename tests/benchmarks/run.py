"""Run every benchmark suite (`bench_*.py` next to this file), print one table, write `bench.json`.

Each suite module exposes `run(quick: bool = False) -> list[BenchRow]`. A module that fails to import
(a missing optional dependency, a suite still being written) is skipped with a note; one whose `run`
raises is reported as failed and makes the exit code 1. Ratios over target are shown as `fail` and
only change the exit code with `--strict` (timings on a shared CI box are noisy).

Usage: `python tests/benchmarks/run.py [--quick] [--out bench.json] [--only store engine] [--strict]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (str(REPO / "tests"), str(HERE)):  # the suites import `common` and the test helpers bare
    if _path not in sys.path:
        sys.path.insert(0, _path)

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

Suite = tuple[str, ModuleType]


def discover(bench_dir: Path = HERE, only: Sequence[str] = ()) -> tuple[list[Suite], list[dict[str, str]]]:
    """Import every `bench_*.py` of `bench_dir` (sorted) → (suites with a `run`, skipped with the reason)."""
    wanted = {name.removeprefix("bench_") for name in only}
    suites: list[Suite] = []
    skipped: list[dict[str, str]] = []
    for path in sorted(bench_dir.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        try:
            module = _import(path)
        except Exception as exc:  # any import failure means "skip this suite"
            skipped.append({"suite": name, "reason": f"import failed: {type(exc).__name__}: {exc}"})
            continue
        if not callable(getattr(module, "run", None)):
            skipped.append({"suite": name, "reason": "no run(quick) function"})
            continue
        suites.append((name, module))
    return suites, skipped


def _import(path: Path) -> ModuleType:
    name = f"workmem_bench_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    added = str(path.parent) not in sys.path
    if added:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added:
            sys.path.remove(str(path.parent))
    return module


def run_suites(suites: Sequence[Suite], quick: bool, console: Console | None = None) -> dict[str, Any]:
    """Run each suite → {rows, failed, seconds}; one suite's exception does not stop the others."""
    rows: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    seconds: dict[str, float] = {}
    for name, module in suites:
        if console is not None:
            console.print(f"[dim]running {name}{' (quick)' if quick else ''}…[/]")
        start = time.perf_counter()
        try:
            produced = list(module.run(quick=quick))
        except Exception as exc:  # reported; the exit code says so
            failed.append({"suite": name, "reason": f"{type(exc).__name__}: {exc}",
                           "traceback": traceback.format_exc(limit=5)})
            continue
        finally:
            seconds[name] = round(time.perf_counter() - start, 3)
        rows += [row_dict(name, row) for row in produced]
    return {"rows": rows, "failed": failed, "seconds": seconds}


def row_dict(suite: str, row: Any) -> dict[str, Any]:
    """A BenchRow (or anything with its fields) as JSON-safe data with a pass verdict."""
    target = getattr(row, "target", None)
    ratio = _finite(getattr(row, "ratio", None))
    passed = None if target is None else (ratio is not None and ratio <= target)
    return {"suite": suite, "metric": str(row.metric), "workmem": _finite(row.workmem),
            "baseline": _finite(row.baseline), "ratio": ratio, "target": target,
            "unit": getattr(row, "unit", ""), "pass": passed}


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def print_rows(rows: Sequence[dict[str, Any]], console: Console, title: str) -> None:
    """One table: suite, metric, workmem, baseline, ratio, target, pass/fail."""
    table = Table(title=title)
    for name, justify in (("suite", "left"), ("metric", "left"), ("workmem", "right"), ("baseline", "right"),
                          ("ratio", "right"), ("target", "right"), ("pass/fail", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "metric")  # type: ignore[arg-type]

    def num(value: float | None, unit: str) -> str:
        return "–" if value is None else f"{value:.1f} {unit}".strip()

    for r in rows:
        verdict = {True: "[green]pass[/]", False: "[red]fail[/]", None: ""}[r["pass"]]
        table.add_row(r["suite"], r["metric"], num(r["workmem"], r["unit"]), num(r["baseline"], r["unit"]),
                      "–" if r["ratio"] is None else f"{r['ratio']:.2f}×",
                      "" if r["target"] is None else f"≤ {r['target']:g}×", verdict)
    console.print(table)


def main(argv: Sequence[str] | None = None, *, bench_dir: Path = HERE, console: Console | None = None) -> int:
    """Discover, run, print and write the results; exit 1 if a suite crashed (or, with --strict, missed a target)."""
    parser = argparse.ArgumentParser(prog="tests/benchmarks/run.py", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer rounds (CI smoke)")
    parser.add_argument("--out", default="bench.json", help="results JSON (default: bench.json)")
    parser.add_argument("--only", nargs="+", default=[], help="suite names, e.g. store engine")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a ratio misses its target")
    parser.add_argument("--long", action="store_true", help="the long-session suite at 20 000 turns")
    args = parser.parse_args(argv)
    if args.long:
        os.environ["WORKMEM_BENCH_LONG"] = "1"
    console = console or Console(width=None if sys.stdout.isatty() else 160)  # a log file gets the wide table
    suites, skipped = discover(bench_dir, args.only)
    for note in skipped:
        console.print(f"[yellow]skipped {note['suite']}[/]: {note['reason']}")
    outcome = run_suites(suites, args.quick, console)
    print_rows(outcome["rows"], console, title="workmem benchmarks" + (" (quick)" if args.quick else ""))
    for note in outcome["failed"]:
        console.print(f"[red]failed {note['suite']}[/]: {note['reason']}")
    report = {"created_at": datetime.now(UTC).isoformat(timespec="seconds"), "quick": args.quick,
              "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
              "suites": [name for name, _ in suites], "skipped": skipped, **outcome}
    Path(args.out).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    console.print(f"wrote {args.out}")
    missed = any(r["pass"] is False for r in outcome["rows"])
    return 1 if outcome["failed"] or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
