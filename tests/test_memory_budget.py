"""The memory budget follows the trigger (issue 17): the size rules of a smaller working memory.

The budget a commit runs with scales §5's section table (none under 60 tokens) and the Key Facts limits
with it; what no longer fits is spilled with its pointer, never dropped. A bare merge keeps §5's table.
"""

from __future__ import annotations

import logging

import pytest
from fakes import ScriptedToolModel, create_call, valid_update_call

from workmem.graphs.assemble import SYSTEM_ADDITION
from workmem.graphs.middleware import WorkingMemoryMiddleware
from workmem.nodes.extraction import prompt_budgets
from workmem.nodes.extractive import ExtractiveChatModel
from workmem.nodes.merge import merge_with_spill
from workmem.nodes.prompts import update_prompt, update_system_prompt
from workmem.state.errors import InvalidInput
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    DEFAULT_MEMORY_BUDGET,
    FULL_BUDGETS,
    MIN_MEMORY_BUDGET,
    MIN_SECTION_BUDGET,
    SECTION_BUDGETS,
    TABLE_TOTAL,
    body_tokens,
    budgets,
    bullet_items,
    memory_budget_for,
    parse_sections,
    render_sections,
    section_reminders,
    split_pointer,
)
from workmem.state.tokens import count_tokens

FACTS = "Key Facts & Decisions"
SPILLING = ("Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues")


def items(prefix: str, n: int, words: int = 6) -> list[str]:
    return [f"{prefix} {i} " + " ".join(f"w{i}x{j}" for j in range(words)) for i in range(n)]


def body(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


# -- the rule ---------------------------------------------------------------------------------------


def test_the_default_budget_grows_with_the_trigger_from_400_to_the_table():
    assert [memory_budget_for(t) for t in (1, 4_000, 8_000)] == [MIN_MEMORY_BUDGET] * 3
    assert memory_budget_for(18_000) == MIN_MEMORY_BUDGET + 1_000
    assert memory_budget_for(64_000) == DEFAULT_MEMORY_BUDGET == 6_000  # the default trigger of a 128 k window
    assert memory_budget_for(104_600) == memory_budget_for(10**7) == TABLE_TOTAL
    values = [memory_budget_for(t) for t in range(0, 200_000, 997)]
    assert values == sorted(values), "never smaller for a larger trigger"


def test_the_full_budget_is_the_table_of_section_5():
    assert dict(FULL_BUDGETS.sections) == SECTION_BUDGETS and FULL_BUDGETS.total == TABLE_TOTAL == 10_060
    assert (FULL_BUDGETS.oversized_tokens, FULL_BUDGETS.emergency_tokens) == (1_500, 3_000)
    assert budgets(None) == budgets(TABLE_TOTAL) == budgets(10**6) == FULL_BUDGETS


@pytest.mark.parametrize("total", [MIN_MEMORY_BUDGET, 1_200, DEFAULT_MEMORY_BUDGET, TABLE_TOTAL - 1])
def test_a_smaller_budget_scales_every_section_and_the_key_facts_limits(total):
    limits = budgets(total)
    for name, full in SECTION_BUDGETS.items():
        assert MIN_SECTION_BUDGET <= limits.sections[name] <= full, name
    assert sum(limits.sections.values()) <= total + len(SECTION_BUDGETS) * MIN_SECTION_BUDGET  # the floors
    facts = limits.sections[FACTS]
    assert (limits.emergency_tokens, limits.oversized_tokens) == (facts, facts // 2)
    assert limits.oversized(26, 0) and limits.emergency(51, 0), "the bullet limits stay"
    assert not limits.oversized(25, facts // 2) and limits.oversized(25, facts // 2 + 1)


# -- merge under a small budget: spilled with a pointer, never dropped ------------------------------


@pytest.mark.parametrize("name", SPILLING)
def test_a_small_budget_spills_the_oldest_items_and_loses_none(name):
    old, new = items("old", 8), items("new", 3)
    doc = render_sections({name: body(old)})
    op = {"op": "UPDATE", "content": body(new)} if name == "Errors & Corrections" else {"op": "APPEND", "items": new}
    full, spilled_full = merge_with_spill(doc, {name: op})
    assert spilled_full == [], "the full table holds all of it"
    merged, spilled = merge_with_spill(doc, {name: op}, memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)[name]
    rest, count = split_pointer(section)
    assert body_tokens(section) <= budgets(MIN_MEMORY_BUDGET).sections[name]
    assert count == len(spilled) > 0 and all(s["section"] == name for s in spilled)
    assert [s["item"] for s in spilled] + bullet_items(rest) == old + new, "every item: spilled (oldest) or kept"


def test_errors_stay_append_only_under_a_small_budget():
    """The guard decides first (an UPDATE that drops errors becomes an APPEND), then the budget spills."""
    name = "Errors & Corrections"
    doc = render_sections({name: body(items("err", 2))})
    merged, spilled = merge_with_spill(doc, {name: {"op": "UPDATE", "content": "- nothing failed"}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    kept = bullet_items(split_pointer(parse_sections(merged)[name])[0])
    assert [s["item"] for s in spilled] + kept == [*items("err", 2), "nothing failed"]


def test_key_facts_keep_the_sentinel_rule_at_their_scaled_size():
    limits = budgets(MIN_MEMORY_BUDGET)
    old = items("Fact", 6, words=4)
    assert limits.emergency(len(old), count_tokens(body(old))), "premise: emergency at the scaled size only"
    assert not FULL_BUDGETS.oversized(len(old), count_tokens(body(old)))
    doc = render_sections({FACTS: body(old)})
    merged, spilled = merge_with_spill(doc, {FACTS: {"op": "APPEND", "items": ["Fact new"]}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    assert spilled == [] and bullet_items(parse_sections(merged)[FACTS]) == [*old, CONSOLIDATION_SENTINEL]
    merged, spilled = merge_with_spill(merged, {FACTS: {"op": "KEEP"}}, key_facts_may_spill=True,
                                       memory_budget=MIN_MEMORY_BUDGET)
    rest, count = split_pointer(parse_sections(merged)[FACTS])
    assert body_tokens(rest) <= limits.oversized_tokens and CONSOLIDATION_SENTINEL not in merged
    assert count == len(spilled) > 0 and [s["item"] for s in spilled] + bullet_items(rest) == old


def test_junk_budgets_in_a_merge_mean_the_table():
    doc = render_sections({"Open Issues": body(items("issue", 8))})
    op = {"Open Issues": {"op": "APPEND", "items": ["one more"]}}
    for junk in (None, 0, -5, "400", 4.5):
        assert merge_with_spill(doc, op, memory_budget=junk) == merge_with_spill(doc, op)


# -- what the model is told -------------------------------------------------------------------------


def test_reminders_and_prompts_state_the_commits_budgets():
    limits = budgets(MIN_MEMORY_BUDGET)
    facts = body(items("Fact", 4, words=6))
    doc = render_sections({FACTS: facts})
    assert section_reminders(doc) == "", "not oversized under the table"
    warned = section_reminders(doc, limits)
    assert f'"{FACTS}"' in warned and f"<={limits.oversized_tokens} tokens" in warned
    system = update_system_prompt(limits)
    assert f"{FACTS} ({limits.sections[FACTS]}):" in system and count_tokens(system) <= 500
    assert update_prompt(doc, "", warned, limits)[0] == ("system", system)


@pytest.mark.parametrize("total", [None, MIN_MEMORY_BUDGET, DEFAULT_MEMORY_BUDGET])
def test_the_extractive_model_reads_the_budgets_from_the_prompt(total):
    limits = budgets(total)
    lines = update_system_prompt(limits).splitlines()
    read = prompt_budgets(lines)
    assert dict(read.sections) == dict(limits.sections)
    assert (read.oversized_tokens, read.emergency_tokens) == (limits.oversized_tokens, limits.emergency_tokens)
    assert prompt_budgets(["no budgets here"]) == FULL_BUDGETS


def test_the_extractive_model_keeps_key_facts_within_a_small_budget(make_engine):
    engine = make_engine(ExtractiveChatModel(), memory_budget=MIN_MEMORY_BUDGET)
    engine.add_messages("facts", [
        {"role": "user", "content": f"On 2024-03-{i + 1:02d} Priya decided to move service {i} to port {8000 + i} "
                                    f"because the Oslo cluster {i} was full."} for i in range(30)])
    assert engine.commit("facts")["status"] == "completed"
    sections = parse_sections(engine.working_memory("facts")["working_summary"]["markdown"])
    assert 0 < body_tokens(split_pointer(sections[FACTS])[0]) <= budgets(MIN_MEMORY_BUDGET).sections[FACTS]


# -- the engine and the middleware ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [MIN_MEMORY_BUDGET - 1, TABLE_TOTAL + 1, "400", True, 4.0])
def test_a_bad_memory_budget_is_a_typed_error_and_creates_nothing(root, bad):
    from workmem.graphs.engine import WorkingMemoryEngine

    with pytest.raises(InvalidInput) as info:
        WorkingMemoryEngine(root=root, durable=False, memory_budget=bad)
    assert info.value.field == "memory_budget"
    assert not any(root.glob("**/*.jsonl"))


def test_an_agent_commit_runs_with_the_budget_of_its_trigger(make_engine, caplog):
    big = body(items("Decision", 60, words=10))
    committer = ScriptedToolModel(messages=iter([create_call({FACTS: "- one fact", "Files & Context": big}),
                                                 *[valid_update_call({})] * 20]))
    engine = make_engine(committer, keep=("messages", 2))
    engine.add_messages("a", [{"role": "user", "content": "Here is the plan. " * 40}] * 6)
    with caplog.at_level(logging.DEBUG):
        result = engine.after_turn("a", [{"role": "user", "content": "next"}], trigger=("tokens", 1_000), wait=True)
    assert result["commit"]["status"] == "completed"
    archive = engine.working_memory("a")
    files = parse_sections(archive["working_summary"]["markdown"])["Files & Context"]
    assert body_tokens(files) <= budgets(memory_budget_for(1_000)).sections["Files & Context"]
    assert archive["spilled"]["Files & Context"] == 60 - len(bullet_items(split_pointer(files)[0]))


def test_the_middleware_counts_its_own_tool_schemas_toward_the_trigger(make_engine):
    engine = make_engine(ExtractiveChatModel(), keep=("messages", 1))
    tool_tokens = WorkingMemoryMiddleware(engine)._tool_tokens
    assert tool_tokens > 100, "the two archive tools' schemas"
    engine.add_messages("t", [{"role": "user", "content": "word " * 300}, {"role": "assistant", "content": "ok"}])
    meta = engine.session_info("t")
    carried = meta["live_tokens"] + count_tokens(SYSTEM_ADDITION)
    threshold = carried + tool_tokens // 2
    assert not engine.commit_due("t", meta, threshold)
    assert engine.commit_due("t", meta, threshold, tool_tokens)
