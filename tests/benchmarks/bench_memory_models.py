"""The memory budget holds whatever the commit model writes: six habits, three triggers, one session.

Setup: the token benchmark's seeded 600-turn coding session (one user message and one 60-token agent reply per
turn; at 64 000 each turn carries 60 more lines of a bland build log, so the trigger is reached), through
`create_agent` + `WorkingMemoryMiddleware(commit_mode="sync")` with keep 10 messages, one commit model per habit
(`memory_models.py`: joins, never, rewrites, shrinks, junk, obedient), beside `SummarizationMiddleware` on the
same session, trigger and keep (its summaries by the token benchmark's one extractor rule).

Printed per trigger and habit: commits, commits per 100 turns and their ratio to the summariser's summaries per
100 turns, the largest rendered working memory ÷ its budget over all commits, planted facts lost (a ticket id,
path, error text or decision found neither in the memory, the live tail nor by `archive_search`) and whether every
message was stored once. Checked rows: the worst WM ÷ budget ≤ 1 and commits ≤ 1.5× the summariser's.
Run: `python tests/benchmarks/bench_memory_models.py [--quick]` or `run.py --only memory_models`.
"""

from __future__ import annotations

import sys

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

from bench_tokens import coding_session
from memory_models import MODELS, padded, planted_facts, run_summarization
from memory_models import run as run_habit
from rich.console import Console
from rich.table import Table

TRIGGERS = (4_000, 8_000, 64_000)
KEEP = 10
TURNS = 600
LOG_LINES = {64_000: 60}
COMMIT_RATIO = 1.5


def measure(trigger: int, turns: int) -> tuple[Table, list[BenchRow]]:
    """Every habit at one trigger → the printed table and the checked rows."""
    messages, _ = coding_session(turns)
    messages = padded(messages, LOG_LINES[trigger]) if trigger in LOG_LINES else messages
    summaries = run_summarization(messages, trigger=trigger, keep=KEEP)
    peer = 100 * summaries / turns
    table = Table(title=f"trigger {trigger:,}, keep {KEEP} messages, {turns} turns, {len(planted_facts(messages))} "
                        f"planted facts; SummarizationMiddleware: {summaries} summaries ({peer:.1f} per 100 turns)")
    for head in ("commit model", "commits", "per 100 turns", "× summariser", "worst WM ÷ budget", "budget",
                 "facts lost", "stored once"):
        table.add_column(head, justify="left" if head == "commit model" else "right")
    rows = []
    for habit in MODELS:
        result = run_habit(habit, messages, trigger=trigger, keep=KEEP)
        ratio = result.per_100 / peer if peer else float("inf")
        budget = result.commits[0][1] if result.commits else 0
        table.add_row(habit, str(len(result.commits)), f"{result.per_100:.1f}", f"{ratio:.2f}", f"{result.worst:.2f}",
                      f"{budget:,}", str(len(result.missing_facts)), "yes" if result.stored_once else "NO")
        rows.append(BenchRow.of(f"@{trigger}: {habit}: worst WM vs its budget", result.worst, 1.0, 1.0, "×"))
        rows.append(BenchRow.of(f"@{trigger}: {habit}: commits vs SummarizationMiddleware's summaries",
                                result.per_100, peer, COMMIT_RATIO, "/100 turns"))
    return table, rows


def run(quick: bool = False) -> list[BenchRow]:
    """Every trigger (`quick`: 150 turns at 4 000 only)."""
    console = Console(width=None if sys.stdout.isatty() else 200)
    rows: list[BenchRow] = []
    for trigger in TRIGGERS[:1] if quick else TRIGGERS:
        table, checked = measure(trigger, 150 if quick else TURNS)
        console.print(table)
        rows += checked
    return rows


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv), title="memory budget under six commit models")
