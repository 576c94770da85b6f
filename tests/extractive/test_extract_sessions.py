"""Long offline sessions: the extractive model alone keeps every section it owns bounded, commit after commit.

Both sessions run the real prompt → extractive tool call → guards → merge loop (no engine, so 200
commits take seconds). Files & Context and Errors & Corrections are append-only by design and are
bounded by merge's spill, not by the model, so they are not checked here.
"""

from __future__ import annotations

from typing import Any

import pytest
from fakes import long_session, stored_messages

from workmem.nodes.extractive.facts import target_tokens
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.extractive.tracking import GOAL_TOKENS, MAX_GOALS
from workmem.nodes.formatting import format_messages
from workmem.nodes.guards import guard_ops
from workmem.nodes.merge import merge_working_memory
from workmem.nodes.models import bind_commit_tool
from workmem.nodes.prompts import create_prompt, update_prompt
from workmem.state.memory import FULL_BUDGETS, MAX_BULLETS, SECTIONS, bullet_items, parse_sections, section_reminders
from workmem.state.ops import CREATE_TOOL, UPDATE_TOOL
from workmem.state.tokens import count_tokens

TARGET_TOKENS = target_tokens(FULL_BUDGETS)  # 3 000: Key Facts as the extractive model aims it

OWNED = ("Task & Goals", "Key Facts & Decisions", "Open Issues", "Current State", "Session Title")


def busy_coding_session(n_turns: int) -> list[dict[str, Any]]:
    """`long_session`, plus questions, TODOs, goals left open and user corrections now and then."""
    base = long_session(n_turns)
    out = []
    for i in range(n_turns):
        user, reply = base[2 * i]["content"], base[2 * i + 1]["content"]
        if i % 5 == 0:
            user += f" Which encoding does supplier {i} use?"
            reply += f" Supplier {i} sends UTF-8."
        if i % 11 == 0:
            user += f" TODO: check the import logs of supplier {i} tomorrow."
        if i % 11 == 3 and i > 3:
            reply += f" Checked the import logs of supplier {i - 3}: they are clean."
        if i % 7 == 0:
            reply = f"Let me look at module_{i}.py first."
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        if i % 13 == 0:
            out += [{"role": "user", "content": f"No, supplier {i} uses semicolons, not tabs."},
                    {"role": "assistant", "content": f"Understood, semicolons for supplier {i}."}]
    return out


PLACES = ["Harrow Bay", "Tern Island", "Mossgiel", "Caer Vell", "Oakhurst", "Lindfield", "Port Aven"]
THINGS = ["tomato seedlings", "birdhouses", "watercolours", "sourdough loaves", "kites", "candles"]
PEOPLE = ["Oskar", "Wren", "Talia", "Magnus", "Ines"]
SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vo", "bel", "dun"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]


def coined(k: int) -> str:
    """A made-up proper name, different for every k below 512."""
    return (SYLLABLES[k % 8] + SYLLABLES[k // 8 % 8] + SYLLABLES[k // 64 % 8]).capitalize()


def dialogue_session(sessions: int, turns: int = 30) -> list[dict[str, Any]]:
    """Two friends chatting over dated sessions: events with names and numbers, plans, questions, chatter."""
    out = []
    for s in range(sessions):
        out.append({"role": "user", "content": f"[session {s + 1} — 10:00 am on {s % 27 + 1} {MONTHS[s % 10]}, 2031]"})
        for t in range(turns):
            k = s * turns + t
            who = ("Ada", "Bram")[t % 2]
            line = (
                f"I made {k % 9 + 2} {THINGS[k % 6]} with my friend {coined(k)} at {PLACES[k % 7]} last week.",
                "That sounds wonderful, you must be so happy!",
                f"I'm planning to visit {PLACES[(k + 3) % 7]} with {PEOPLE[(k + 1) % 5]} next month.",
                f"How did the {THINGS[(k + 2) % 6]} turn out?",
                f"My cousin {PEOPLE[(k + 2) % 5]} moved to {coined(k + 7)} and paid ${k % 50 + 300} a month.",
                "Haha, yes!",
            )[k % 6]
            out.append({"role": "user", "content": f"{who}: {line}"})
    return out


def run_commits(messages: list[dict[str, Any]], per_commit: int) -> tuple[list[dict[str, str]], list[str]]:
    """Commit every `per_commit` messages; returns the sections after each commit and every guard note."""
    stored = stored_messages(messages)
    create = bind_commit_tool(ExtractiveChatModel(), CREATE_TOOL)
    update = bind_commit_tool(ExtractiveChatModel(), UPDATE_TOOL)
    wm, history, notes = "", [], []
    for start in range(0, len(stored), per_commit):
        transcript = format_messages(stored[start : start + per_commit])
        if not wm:
            sections = create.invoke(create_prompt(transcript)).tool_calls[0]["args"]["sections"]
            ops = {name: {"op": "UPDATE", "content": body} for name, body in sections.items()}
        else:
            ops = update.invoke(update_prompt(wm, transcript, section_reminders(wm))).tool_calls[0]["args"]
            ops = ops["sections"]
            notes += guard_ops(parse_sections(wm), ops)[1]
        wm = merge_working_memory(wm, ops)
        history.append(parse_sections(wm))
    return history, notes


def sizes(history: list[dict[str, str]], name: str) -> list[tuple[int, int]]:
    return [(len(bullet_items(s.get(name, ""))), count_tokens(s.get(name, ""))) for s in history]


@pytest.fixture(scope="module")
def coding() -> tuple[list[dict[str, str]], list[str]]:
    return run_commits(busy_coding_session(3000), per_commit=30)  # ~3 000 turns, a commit every 15


@pytest.fixture(scope="module")
def dialogue() -> tuple[list[dict[str, str]], list[str]]:
    return run_commits(dialogue_session(40), per_commit=60)


def test_a_long_coding_session_keeps_goals_issues_and_facts_bounded(coding):
    history, notes = coding
    assert len(history) >= 200
    assert [n for n in notes if n.split(":")[0] in OWNED] == []  # no guard had to step in
    goals, issues, facts = (sizes(history, n) for n in ("Task & Goals", "Open Issues", "Key Facts & Decisions"))
    assert max(n for n, _ in goals) <= MAX_GOALS and max(t for _, t in goals) <= GOAL_TOKENS
    assert max(n for n, _ in issues) <= 6
    assert max(n for n, _ in facts) <= MAX_BULLETS and max(t for _, t in facts) <= TARGET_TOKENS
    # not growing with the session: the second half is no bigger than the first
    half = len(history) // 2
    for series in (goals, issues, facts):
        assert max(t for _, t in series[half:]) <= max(t for _, t in series[:half])


def test_a_long_coding_session_ends_with_a_useful_memory(coding):
    last = coding[0][-1]
    assert last["Current State"].startswith("Working on: Update module_2999.py")
    assert "module_2996.py" in last["Task & Goals"]  # left open ("Let me look at …") and recent
    assert "User correction: No, supplier 2990 uses semicolons, not tabs." in last["Errors & Corrections"]
    assert all(count_tokens(last[name]) <= 500 for name in ("Session Title", "Current State"))


def test_a_long_dialogue_keeps_a_dated_memory_that_fits_a_small_context(dialogue):
    history, notes = dialogue
    assert [n for n in notes if n.split(":")[0] in OWNED] == []
    last = history[-1]
    assert last["Session Title"] == "Conversation between Ada and Bram"
    assert "the latest session is dated 13 October, 2031" in last["Current State"]
    facts = bullet_items(last["Key Facts & Decisions"])
    assert 0 < len(facts) <= MAX_BULLETS and count_tokens(last["Key Facts & Decisions"]) <= TARGET_TOKENS
    assert any(f.startswith("13 October, 2031 — ") for f in facts)  # the newest session is in
    assert len({f.split(" — ")[0] for f in facts}) >= 10  # facts of many sessions, not only the last ones
    assert count_tokens(last["Task & Goals"]) <= GOAL_TOKENS
    assert len(bullet_items(last["Open Issues"])) <= 4
    total = sum(count_tokens(last.get(name, "")) for name in SECTIONS)
    assert total <= 4500
