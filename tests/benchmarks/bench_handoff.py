"""Does the offline model's working memory read like a handoff? The replay's workmem layer, four checks.

Replays only the workmem layer of `bench_agent_replay.py` (one invoke per user turn, commit sync, keep 10) over
the dev sessions (`../shared/data/agent_sessions_dev.json`, read in place; skipped with a note when absent) at
triggers 8 000 and 32 000, with workmem's own offline commit model — the deterministic extractive model, what a
user without a configured model gets — instead of the token benchmark's extractor rule. On each session's final
working memory it runs `handoff_checks`: title names the task, Task & Goals holds the task, the share of Files &
Context entries the agent touched, probes in the memory, and every `file_edited` probe's file in Files & Context;
beside them the replay's probes lost (neither in the last call's context nor found by workmem's tools), and the
`file_edited` files still missing once `engine.compact` has committed the raw tail too (what a handoff to another
agent gets: an edit in the session's last messages is in the context, not yet in the memory).

Run: `python tests/benchmarks/bench_handoff.py [--quick] [--show SESSION_ID] [--dump DIR]` (`--show` prints that
session's final memory at 32 000, `--dump` writes every final memory) or `run.py --only handoff`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

import bench_agent_replay as replay
import handoff_checks as checks
from langchain_core.messages import AIMessage, BaseMessage
from rich.console import Console
from rich.table import Table
from token_fakes import CountingModel

from workmem.nodes.extractive.model import ExtractiveChatModel

DRIVE = replay.DRIVES[0]  # one invoke per user turn


def extractive_answer(messages: list[BaseMessage], tools: list[Any], choice: Any) -> AIMessage:
    """The extractive model's answer to a commit prompt (the product's code path, counted by the fake)."""
    return ExtractiveChatModel()._generate(messages, tools=tools, tool_choice=choice).generations[0].message


class OfflineCountingModel(CountingModel):
    """The counting fake of the extractive model, which reads for free as it does (its transcripts unclipped)."""

    reads_for_free: ClassVar[bool] = True


def extractive_commit_model() -> CountingModel:
    """workmem's offline commit model, counted like the replay's other models."""
    return OfflineCountingModel(answer=extractive_answer)


@contextmanager
def offline_commits() -> Iterator[None]:
    """The replay's workmem layer commits with the extractive model while inside."""
    before = replay.commit_model
    replay.commit_model = extractive_commit_model
    try:
        yield
    finally:
        replay.commit_model = before


@dataclass
class Outcome:
    """One session at one trigger: its checks, probes lost and the final memory."""

    id: str
    handoff: checks.Handoff
    lost: int
    commits: int
    memory: str
    edited: int = 0  # the session's `file_edited` probes
    edited_missing_after_compact: tuple[str, ...] = ()


def replay_session(record: dict[str, Any], session: replay.Replay, trigger: int) -> Outcome:
    """Replay one session through the workmem layer and check its final working memory."""
    with offline_commits():
        result = replay.run_layer("workmem", session, trigger, DRIVE, compact=True)
    edited = sum(p["kind"] == "file_edited" for p in record["probes"])
    return Outcome(session.id, checks.check(record, result.memory), result.lost, result.commits, result.memory,
                   edited, tuple(checks.edited_files_missing(record["probes"], result.compacted)))


def load() -> list[tuple[dict[str, Any], replay.Replay]] | None:
    """The session records with their replays (None when the data file is absent)."""
    sessions = replay.load_sessions()
    if sessions is None:
        return None
    records = {r["id"]: r for r in json.loads(replay.DATA.read_text(encoding="utf-8"))}
    return [(records[s.id], s) for s in sessions]


def totals(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The checks pooled over the sessions of one trigger."""
    touched = sum(o.handoff.files.touched for o in outcomes)
    entries = sum(o.handoff.files.entries for o in outcomes)
    return {"sessions": len(outcomes), "title": sum(o.handoff.title for o in outcomes),
            "goals": sum(o.handoff.goals for o in outcomes), "touched": touched, "entries": entries,
            "share": touched / entries if entries else 1.0, "probes": sum(o.handoff.probes for o in outcomes),
            "edited": sum(o.edited for o in outcomes),
            "edited_missing": sum(len(o.handoff.edited_missing) for o in outcomes),
            "edited_missing_after_compact": sum(len(o.edited_missing_after_compact) for o in outcomes),
            "lost": sum(o.lost for o in outcomes)}


def table(trigger: int, outcomes: Sequence[Outcome]) -> Table:
    """Per session: the checks, probes lost and commits; a last row with the totals."""
    out = Table(title=f"handoff checks, trigger {trigger:,}, keep {replay.KEEP}, one invoke {DRIVE}")
    for head in ("session", "title", "task", "files touched", "probes in memory", "edited missing",
                 "after compact", "lost", "commits"):
        out.add_column(head, justify="left" if head == "session" else "right")
    for o in outcomes:
        h = o.handoff
        out.add_row(o.id[:48], "yes" if h.title else "no", "yes" if h.goals else "no",
                    f"{h.files.touched}/{h.files.entries}", str(h.probes), str(len(h.edited_missing)),
                    str(len(o.edited_missing_after_compact)), str(o.lost), str(o.commits))
    t = totals(outcomes)
    out.add_row("total", f"{t['title']}/{t['sessions']}", f"{t['goals']}/{t['sessions']}",
                f"{t['touched']}/{t['entries']} ({100 * t['share']:.0f}%)", str(t["probes"]),
                str(t["edited_missing"]), str(t["edited_missing_after_compact"]), str(t["lost"]), "")
    return out


def rows(trigger: int, outcomes: Sequence[Outcome], probes: int) -> list[BenchRow]:
    """The totals as benchmark rows (informative: the done-when lives in the issue, not a ratio target)."""
    t = totals(outcomes)
    n = t["sessions"]
    return [BenchRow.of(f"handoff @{trigger}: titles naming the task", t["title"], n, None, "sessions"),
            BenchRow.of(f"handoff @{trigger}: Task & Goals holding the task", t["goals"], n, None, "sessions"),
            BenchRow.of(f"handoff @{trigger}: Files & Context entries touched", t["touched"], t["entries"], None,
                        "entries"),
            BenchRow.of(f"handoff @{trigger}: probes in the memory", t["probes"], probes, None, "probes"),
            BenchRow.of(f"handoff @{trigger}: probes lost", t["lost"], probes, None, "probes"),
            BenchRow.of(f"handoff @{trigger}: edited files missing", t["edited_missing"], t["edited"], None,
                        "files"),
            BenchRow.of(f"handoff @{trigger}: the same after compact", t["edited_missing_after_compact"],
                        t["edited"], None, "files")]


def run(quick: bool = False, show: str | None = None, dump: str | None = None) -> list[BenchRow]:
    """Both triggers over the dev sessions (`quick`: three sessions at 8 000; `dump`: a folder that gets each
    final memory as `<trigger>-<session>.md`)."""
    console = Console(width=None if sys.stdout.isatty() else 200)
    loaded = load()
    if loaded is None:
        console.print(f"[yellow]handoff skipped[/]: {replay.DATA} not found")
        return []
    if quick:
        loaded = loaded[1:4]
    probes = sum(len(record["probes"]) for record, _ in loaded)
    out: list[BenchRow] = []
    for trigger in replay.TRIGGERS[:1] if quick else replay.TRIGGERS:
        outcomes = [replay_session(record, session, trigger) for record, session in loaded]
        console.print(table(trigger, outcomes))
        out += rows(trigger, outcomes, probes)
        for o in outcomes:
            if dump:
                Path(dump).mkdir(parents=True, exist_ok=True)
                (Path(dump) / f"{trigger}-{o.id}.md").write_text(o.memory, encoding="utf-8")
            if show and o.id.startswith(show) and trigger == replay.TRIGGERS[-1]:
                console.print(f"[bold]{o.id} @{trigger}: final working memory[/]")
                console.print(o.memory, markup=False, highlight=False)
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    shown = argv[argv.index("--show") + 1] if "--show" in argv else None
    folder = argv[argv.index("--dump") + 1] if "--dump" in argv else None
    print_table(run(quick="--quick" in argv, show=shown, dump=folder), title="handoff")
