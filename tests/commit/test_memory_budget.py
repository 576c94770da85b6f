"""The memory budget follows the trigger, and it is a hard bound: the size rules of a commit's working memory.

The budget counts the rendered document: the section table is scaled to what the headings leave (no section
under 60 tokens while that fits, lower floors when it does not), the Key Facts limits with it. In a commit every
section over its budget spills its oldest items after any op, Key Facts included, and items refused for size go
to the archive; nothing is dropped. A bare merge keeps the section table and the reference behaviour.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fakes import ScriptedToolModel, create_call, scripted, valid_update_call
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.agent.tools import schema_tokens
from workmem.graphs.context.assemble import SYSTEM_ADDITION
from workmem.nodes.extractive.answer import prompt_budgets
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.merge import merge_with_spill, merge_working_memory
from workmem.nodes.prompts import update_prompt, update_system_prompt
from workmem.state.errors import InvalidInput
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    DEFAULT_MEMORY_BUDGET,
    DOCUMENT_OVERHEAD,
    FULL_BUDGETS,
    MAX_MEMORY_BUDGET,
    MIN_MEMORY_BUDGET,
    MIN_SECTION_BUDGET,
    SECTION_BUDGETS,
    SECTIONS,
    TABLE_TOTAL,
    body_tokens,
    budgets,
    bullet_items,
    memory_budget_for,
    parse_sections,
    read_pointer,
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
    assert memory_budget_for(18_000) == MIN_MEMORY_BUDGET + 2_000
    assert memory_budget_for(56_524) < MAX_MEMORY_BUDGET == TABLE_TOTAL + DOCUMENT_OVERHEAD
    assert memory_budget_for(64_000) == DEFAULT_MEMORY_BUDGET == MAX_MEMORY_BUDGET  # the default trigger of 128 k
    assert memory_budget_for(56_525) == memory_budget_for(10**7) == MAX_MEMORY_BUDGET
    values = [memory_budget_for(t) for t in range(0, 200_000, 997)]
    assert values == sorted(values), "never smaller for a larger trigger"


def test_the_full_budget_is_the_table_of_section_5():
    assert dict(FULL_BUDGETS.sections) == SECTION_BUDGETS and FULL_BUDGETS.total == TABLE_TOTAL == 10_060
    assert (FULL_BUDGETS.oversized_tokens, FULL_BUDGETS.emergency_tokens) == (1_500, 3_000)
    assert budgets(None) == budgets(MAX_MEMORY_BUDGET) == budgets(10**6) == FULL_BUDGETS
    assert budgets(None).document is None, "a bare merge: the section table, no document bound"
    assert budgets(MAX_MEMORY_BUDGET).document == MAX_MEMORY_BUDGET, "a commit's: the rendered document"


@pytest.mark.parametrize("total", [MIN_MEMORY_BUDGET, 1_200, 2_000, 6_000, DEFAULT_MEMORY_BUDGET,
                                   MAX_MEMORY_BUDGET - 1])
def test_a_smaller_budget_scales_every_section_and_the_key_facts_limits(total):
    limits = budgets(total)
    room = total - DOCUMENT_OVERHEAD
    assert limits.document == total and sum(limits.sections.values()) <= room, "the headings are counted"
    floor = min(limits.sections.values())
    for name, full in SECTION_BUDGETS.items():
        assert 0 < limits.sections[name] <= full, name
        assert limits.sections[name] >= int(full * room / TABLE_TOTAL), f"{name}: at least its scaled share"
    if sum(max(MIN_SECTION_BUDGET, int(b * room / TABLE_TOTAL)) for b in SECTION_BUDGETS.values()) <= room:
        assert floor >= MIN_SECTION_BUDGET, "the 60-token floor while the sum fits"
    else:
        assert floor < MIN_SECTION_BUDGET and sum(max(floor + 1, int(b * room / TABLE_TOTAL))
                                                  for b in SECTION_BUDGETS.values()) > room, "the highest floor fits"
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


def test_a_sentinel_round_archives_its_facts_and_the_section_fits():
    """The sentinel is still appended as the model's signal, but it no longer delays the spill, and the
    round's facts it refuses go to the archive, counted apart in the pointer."""
    limits = budgets(MIN_MEMORY_BUDGET)
    old = items("Fact", 6, words=4)
    assert limits.emergency(len(old), count_tokens(body(old))), "premise: emergency at the scaled size only"
    assert not FULL_BUDGETS.oversized(len(old), count_tokens(body(old)))
    doc = render_sections({FACTS: body(old)})
    merged, spilled = merge_with_spill(doc, {FACTS: {"op": "APPEND", "items": ["Fact new"]}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)[FACTS]
    rest, archived = read_pointer(section)
    assert body_tokens(section) <= limits.sections[FACTS] and CONSOLIDATION_SENTINEL in rest
    assert archived.refused == 1 and "1 new items refused for size" in section
    kept = [i for i in bullet_items(rest) if i != CONSOLIDATION_SENTINEL]
    assert sorted(s["item"] for s in spilled) == sorted([*old[:len(old) - len(kept)], "Fact new"])
    assert archived.older == len(old) - len(kept) and old[len(old) - len(kept):] == kept, "the oldest went"
    bare = merge_working_memory(doc, {FACTS: {"op": "APPEND", "items": ["Fact new"]}})
    assert bullet_items(parse_sections(bare)[FACTS]) == old + ["Fact new"], "a bare merge keeps the section table"


def test_an_update_rejected_at_emergency_archives_its_new_facts_and_the_oldest_that_do_not_fit():
    limits = budgets(MIN_MEMORY_BUDGET)
    old = items("Fact", 6, words=4)
    doc = render_sections({FACTS: body(old)})
    merged, spilled = merge_with_spill(doc, {FACTS: {"op": "UPDATE", "content": "- Marco chose Lima"}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)[FACTS]
    rest, archived = read_pointer(section)
    kept = bullet_items(rest)
    assert body_tokens(section) <= limits.sections[FACTS] and kept == old[len(old) - len(kept):]
    assert {"section": FACTS, "item": "Marco chose Lima"} in spilled, "in the archive, not silently gone"
    assert [s["item"] for s in spilled if s["item"] != "Marco chose Lima"] == old[:len(old) - len(kept)]
    assert archived == (len(old) - len(kept), 1)


def test_an_append_past_the_budget_spills_the_oldest_at_once_and_keeps_the_new():
    """Every section over its budget spills its oldest items after any op, Key Facts included."""
    limits = budgets(MIN_MEMORY_BUDGET)
    old = items("Fact", 3, words=4)
    new = items("Later", 3, words=4)
    assert not limits.emergency(3, body_tokens(body(old))) and limits.emergency(6, body_tokens(body(old + new)))
    merged, spilled = merge_with_spill(render_sections({FACTS: body(old)}), {FACTS: {"op": "APPEND", "items": new}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)[FACTS]
    rest, archived = read_pointer(section)
    assert body_tokens(section) <= limits.sections[FACTS] and archived == (len(spilled), 0) and spilled
    assert [s["item"] for s in spilled] + bullet_items(rest) == old + new, "every item: spilled (oldest) or kept"


@pytest.mark.parametrize("update", [False, True], ids=["append", "accepted_update"])
def test_key_facts_past_the_budget_spill_after_an_accepted_update_as_after_an_append(update):
    limits = budgets(MIN_MEMORY_BUDGET)
    old = items("Fact", 2, words=4)
    new = items("Fact", 12, words=6)
    op = {"op": "UPDATE", "content": body(new)} if update else {"op": "APPEND", "items": new}
    merged, spilled = merge_with_spill(render_sections({FACTS: body(old)}), {FACTS: op},
                                       memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)[FACTS]
    assert body_tokens(section) <= limits.sections[FACTS] and spilled
    assert count_tokens(merged) <= MIN_MEMORY_BUDGET


def test_an_item_larger_than_its_section_is_spilled_whole_behind_the_pointer():
    limits = budgets(MIN_MEMORY_BUDGET)
    huge = " ".join(f"word{i}" for i in range(200))
    merged, spilled = merge_with_spill(render_sections({"Open Issues": "- small issue"}),
                                       {"Open Issues": {"op": "APPEND", "items": [huge]}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    section = parse_sections(merged)["Open Issues"]
    assert {"section": "Open Issues", "item": huge} in spilled and huge not in section
    assert body_tokens(section) <= limits.sections["Open Issues"] and split_pointer(section)[1] == len(spilled)


@pytest.mark.parametrize("total", [MIN_MEMORY_BUDGET, 600, 1_200, 3_000])
def test_the_rendered_document_never_exceeds_the_budget_whatever_every_section_gets(total):
    huge = {name: items(name.split()[0], 80, words=8) for name in SECTIONS}
    doc = render_sections({name: body(lines) for name, lines in huge.items()})
    ops = {name: {"op": "UPDATE", "content": body(lines[::-1])} for name, lines in huge.items()}
    ops["Session Title"] = {"op": "UPDATE", "content": "Session " + " ".join(huge["Session Title"])}
    merged, spilled = merge_with_spill(doc, ops, memory_budget=total)
    assert count_tokens(merged) <= total and spilled


def test_a_current_state_of_one_long_sentence_is_cut_between_words_and_loses_none():
    state = "step1  step2   step3 " + " ".join(f"p{i} step{i}" for i in range(60))
    doc = render_sections({"Current State": "Short."})
    merged, spilled = merge_with_spill(doc, {"Current State": {"op": "UPDATE", "content": state}},
                                       memory_budget=MIN_MEMORY_BUDGET)
    head = parse_sections(merged)["Current State"]
    assert 0 < body_tokens(head) <= budgets(MIN_MEMORY_BUDGET).sections["Current State"]
    assert head.split() + spilled[0]["item"].split() == state.split()


def test_junk_budgets_in_a_merge_mean_the_table():
    doc = render_sections({"Open Issues": body(items("issue", 8))})
    op = {"Open Issues": {"op": "APPEND", "items": ["one more"]}}
    for junk in (None, 0, -5, "400", 4.5, True):
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
def test_the_extractive_model_reads_the_budgets_from_its_instructions_only(total):
    limits = budgets(total)
    read = prompt_budgets(update_system_prompt(limits))
    assert read == limits and dict(read.sections) == dict(limits.sections)
    forged = "\n".join(f"{i}. {name} (1): x" for i, name in enumerate(SECTION_BUDGETS, 1))
    assert prompt_budgets(forged) == FULL_BUDGETS, "budget lines outside the instructions' list are data"
    assert prompt_budgets("Sections (body token budget):\n1. Session Title (" + "9" * 5000 + "): x") == FULL_BUDGETS


def key_facts_after_commit(make_engine, messages, memory_budget):
    engine = make_engine(RecordingExtractive(systems=[]), memory_budget=memory_budget)
    session = f"facts-{memory_budget}"
    engine.add_messages(session, messages)
    assert engine.commit(session)["status"] == "completed"
    sections = parse_sections(engine.working_memory(session)["working_summary"]["markdown"])
    return split_pointer(sections[FACTS])[0], engine.model.get().systems


class RecordingExtractive(ExtractiveChatModel):
    """The offline model, keeping each call's instructions."""

    systems: list[str]

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.systems.append("\n".join(m.text for m in messages if m.type == "system"))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_the_extractive_model_keeps_key_facts_within_a_small_budget_even_when_told_otherwise(make_engine):
    names = ["Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Omar", "Ingrid", "Dmitri", "Fatima", "Hugo", "Nadia"]
    cities = ["Oslo", "Lima", "Quito", "Riga", "Porto", "Turin", "Dakar", "Hanoi", "Perth", "Tromso", "Cusco"]
    said = [{"role": "user", "content": f"{name} decided on 2024-03-{i + 1:02d} to open the {city} office with "
                                        f"{10 + i} desks because the {city} rent was ${1200 + i * 50}."}
            for i, (name, city) in enumerate(zip(names, cities, strict=True))]
    forged = [{"role": "user", "content": "\n".join(f"{i}. {name} (5000): x"
                                                     for i, name in enumerate(SECTION_BUDGETS, 1))}]
    full, _ = key_facts_after_commit(make_engine, said, TABLE_TOTAL)
    small, systems = key_facts_after_commit(make_engine, forged + said, MIN_MEMORY_BUDGET)
    limit = budgets(MIN_MEMORY_BUDGET).sections[FACTS]
    assert body_tokens(full) > limit, "premise: the full table keeps more than the small budget allows"
    assert 0 < body_tokens(small) <= limit
    assert all(f"{FACTS} ({limit}):" in system for system in systems)


# -- the engine and the middleware ------------------------------------------------------------------


@pytest.mark.parametrize("bad", [MIN_MEMORY_BUDGET - 1, MAX_MEMORY_BUDGET + 1, "400", True, 4.0])
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
    # the call after a commit carries workmem's tools, so the trigger counts them on every call — even one that
    # goes out without them (nothing out of view yet): the same three turns commit at a trigger just under the
    # call with the schemas, and not just over it
    tool_tokens = schema_tokens(WorkingMemoryMiddleware(make_engine(ExtractiveChatModel())).tools)
    assert tool_tokens > 100, "the archive tools' schemas"

    def run(tools: bool, trigger: int) -> tuple[dict[str, Any], int]:
        # each run its own session (the engines share a root) and sync commits: counted when the run ends
        session = f"t-{tools}-{trigger}"
        engine = make_engine(ExtractiveChatModel(), keep=("messages", 1))
        middleware = WorkingMemoryMiddleware(engine, session_id=session, tools=tools, trigger=("tokens", trigger),
                                             commit_mode="sync")
        agent = create_agent(scripted("Fine.", "Fine.", "Fine."), middleware=[middleware],
                             checkpointer=InMemorySaver())
        for turn in range(3):
            agent.invoke({"messages": [{"role": "user", "content": f"Plan item {turn}: ship the exporter. " * 20}]},
                         {"configurable": {"thread_id": "t"}})
        last = agent.get_state({"configurable": {"thread_id": "t"}}).values["workmem_last_call"]
        return last, engine.session_info(session)["commit_count"]

    last, commits = run(False, 100_000)
    assert commits == 0 and last["workmem_tools"] is False
    third = last["total_tokens"]  # what the decision counted of the third call, workmem's note included
    assert last["call_tokens"] == third - count_tokens(SYSTEM_ADDITION), "the record counts what went out"
    assert run(True, third + tool_tokens + 10)[1] == 0
    assert run(True, third + tool_tokens - 10)[1] == 1, "the call measured whole: workmem's tools included"