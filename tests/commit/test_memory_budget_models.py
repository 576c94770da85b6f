"""The memory budget holds whatever the commit model writes.

Six fake commit models with the habits real ones have (`benchmarks/memory_models.py`: joins bullets when told
to consolidate, never consolidates, rewrites everything, shrinks to one bullet, junk every other call,
obedient) commit a seeded coding session through `create_agent` + `WorkingMemoryMiddleware(commit_mode="sync")`
at triggers 4 000, 8 000 and 64 000 (the last on turns padded with a bland build log, so it commits). For every
model: the rendered working memory is within its budget after every commit; commits per 100 turns stay within
1.5× `SummarizationMiddleware`'s on the same session, trigger and keep (no compaction loop); every planted fact
(ticket ids, paths, error texts, decisions) is in the memory, in the live tail or found by `archive_search`; every
message is stored once. The same table, on 600 turns, is `benchmarks/bench_memory_models.py`.
"""

from __future__ import annotations

import sys
from functools import cache

import pytest
from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from bench_tokens import coding_session  # noqa: E402
from memory_models import MODELS, padded, planted_facts, run, run_summarization  # noqa: E402

KEEP = 10
TURNS = 110
SESSIONS = {4_000: (TURNS, 0), 8_000: (TURNS, 0), 64_000: (TURNS, 60)}  # trigger → (turns, log lines per turn)
COMMIT_RATIO = 1.5


@cache
def session(trigger: int) -> tuple[str, ...]:
    turns, lines = SESSIONS[trigger]
    messages, _ = coding_session(turns)
    return tuple(padded(messages, lines) if lines else messages)


@cache
def summaries(trigger: int) -> int:
    return run_summarization(session(trigger), trigger=trigger, keep=KEEP)


@pytest.mark.slow
@pytest.mark.parametrize("trigger", list(SESSIONS))
@pytest.mark.parametrize("habit", MODELS)
def test_the_budget_holds_for_every_habit_and_nothing_is_lost(habit, trigger):
    turns = session(trigger)
    result = run(habit, turns, trigger=trigger, keep=KEEP)
    assert result.commits, "premise: the session commits at this trigger"
    over = [(i, wm, budget) for i, (wm, budget) in enumerate(result.commits, 1) if wm > budget]
    assert not over, f"{habit}: the working memory over its budget after commits {over}"
    peer = 100 * summaries(trigger) / len(turns)
    assert result.per_100 <= COMMIT_RATIO * peer, (habit, result.per_100, peer)
    assert result.missing_facts == [], f"{habit}: planted facts lost {result.missing_facts[:5]}"
    assert result.stored_once, f"{habit}: {result.fed} messages fed, not each stored once"


def test_the_session_plants_every_kind_of_fact():
    facts = planted_facts(session(4_000))
    assert any(f.startswith("OPS-") for f in facts) and any(f.endswith(".py") for f in facts)
    assert any("Error" in f for f in facts) and any(f.startswith("keep the retry limit") for f in facts)
