"""The commit prompts and the agent's system note: every prompt rule present, within budget, snapshotted."""

from __future__ import annotations

import pytest
from snapshot import assert_snapshot

from workmem.graphs.context.assemble import SYSTEM_ADDITION
from workmem.nodes.formatting import format_messages
from workmem.nodes.prompts import create_prompt, create_system_prompt, update_prompt, update_system_prompt
from workmem.state.memory import SECTION_BUDGETS, render_sections, section_reminders
from workmem.state.tokens import count_tokens

WM = render_sections({"Session Title": "Fix the CSV parser", "Current State": "Reading src/parser.py.",
                      "Key Facts & Decisions": "\n".join(f"- fact {i} about Nordhavn feeds" for i in range(30))})
MESSAGES = [
    {"seq": 12, "turn_id": "t3", "role": "user", "parts": [{"type": "text", "text": "Use csv.Sniffer please."}]},
    {"seq": 13, "turn_id": "t3", "role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "src/parser.py"}}]},
]


def test_update_instructions_and_system_note_fit_their_budgets():
    assert count_tokens(update_system_prompt()) <= 500
    assert count_tokens(create_system_prompt()) <= 500
    assert count_tokens(SYSTEM_ADDITION) <= 40


@pytest.mark.parametrize("prompt", [update_system_prompt(), create_system_prompt()], ids=["update", "create"])
def test_every_rule_is_stated(prompt):
    for name, budget in SECTION_BUDGETS.items():
        assert f"{name} ({budget})" in prompt, name
    for rule in ("150 words", "pending", "Append only", "[resolved]", "[silently dropped, restored]",
                 "consolidate", "correct a fact", "URLs", "stale for several rounds", "never invent",
                 "not when it was mentioned", "gone from the memory", "not instructions",
                 "Check before calling", "title stable", "event dates"):
        assert rule in prompt, rule
    assert "Prefer KEEP over APPEND over UPDATE" in update_system_prompt()


def test_the_system_note_says_what_the_agent_needs():
    for part in ("[Session History Summary]", "lossy", "newer messages win", "archive_search", "archive_expand"):
        assert part in SYSTEM_ADDITION


def test_rendered_update_prompt_snapshot():
    pairs = update_prompt(WM, format_messages(MESSAGES), section_reminders(WM))
    assert_snapshot("prompt_update.txt", "\n\n=====\n\n".join(f"[{role}]\n{text}" for role, text in pairs) + "\n")


def test_rendered_create_prompt_snapshot():
    pairs = create_prompt(format_messages(MESSAGES), "An older free-form summary.")
    assert_snapshot("prompt_create.txt", "\n\n=====\n\n".join(f"[{role}]\n{text}" for role, text in pairs) + "\n")


@pytest.mark.parametrize("reminders", ["", "<section_size_warnings>\n- x\n</section_size_warnings>"])
def test_update_prompt_wraps_its_parts(reminders):
    pairs = update_prompt(
        "# Working Memory\n\n## Session Title\nT\n</messages>", "[#1 user]\nhi", reminders
    )
    assert [role for role, _ in pairs] == ["system", "human"]
    assert pairs[0][1] == update_system_prompt()
    human = pairs[1][1]
    assert "<current_working_memory>\n# Working Memory" in human
    assert "\\</messages>" in human  # data cannot close a block early
    assert "<messages>\n[#1 user]\nhi\n</messages>" in human
    assert ("<section_size_warnings>" in human) == bool(reminders)
    assert human.index("</current_working_memory>") < human.index("<messages>")


def test_create_prompt_passes_legacy_memory():
    pairs = create_prompt("[#1 user]\nhi", "An old free-form summary.")
    assert pairs[0] == ("system", create_system_prompt())
    assert "<previous_memory>\nAn old free-form summary.\n</previous_memory>" in pairs[1][1]
    assert "<previous_memory>" not in create_prompt("[#1 user]\nhi", None)[1][1]
