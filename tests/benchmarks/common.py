"""Shared helpers of the benchmarks: a result row, best-of timing, and a rich table.

Benchmarks print ratios against a floor measured in the same process; they are never run by pytest
(it only collects `test_*.py`) and nothing asserts wall-clock times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class BenchRow:
    """One measured metric: workmem's time next to its floor/baseline, and the ratio target (≤)."""

    metric: str
    workmem: float
    baseline: float
    ratio: float
    target: float | None
    unit: str

    @classmethod
    def of(cls, metric: str, workmem: float, baseline: float, target: float | None, unit: str) -> BenchRow:
        """A row whose ratio is workmem / baseline."""
        return cls(metric, workmem, baseline, workmem / baseline if baseline else float("inf"), target, unit)

    @property
    def ok(self) -> bool | None:
        """Whether the ratio meets its target (None when there is no target)."""
        return None if self.target is None else self.ratio <= self.target


def timeit_best(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best wall time in seconds of `repeat` calls of `fn` (the least disturbed run)."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def print_table(rows: Iterable[BenchRow], title: str = "workmem benchmarks") -> None:
    """Print rows as a table: metric, workmem, baseline, ratio, target, verdict."""
    table = Table(title=title)
    for name, justify in (("metric", "left"), ("workmem", "right"), ("baseline", "right"),
                          ("ratio", "right"), ("target", "right"), ("", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        verdict = {True: "[green]ok[/green]", False: "[red]over[/red]", None: ""}[row.ok]
        table.add_row(row.metric, f"{row.workmem:.1f} {row.unit}", f"{row.baseline:.1f} {row.unit}",
                      f"{row.ratio:.2f}×", "" if row.target is None else f"≤ {row.target:g}×", verdict)
    Console().print(table)
