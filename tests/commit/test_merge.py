"""merge_working_memory: guards then ops, canonical output, never raising."""

from __future__ import annotations

import pytest

from workmem.nodes.guards import guard_ops
from workmem.nodes.merge import apply_op, apply_ops, canonical_sections, merge_working_memory
from workmem.state.memory import CONSOLIDATION_SENTINEL, SECTIONS, bullet_items, parse_sections, render_sections
from workmem.state.ops import create_as_update_ops

FACTS = "Key Facts & Decisions"
OLD = render_sections(
    {
        "Session Title": "Berlin trip planning",
        "Current State": "Comparing hotels.\n  (indented detail)  ",
        "Task & Goals": "- book a hotel",
        FACTS: "- Budget is $1,200\n- Arrive on 2024-05-03",
        "Files & Context": "- notes/berlin.md",
        "Errors & Corrections": "- wrong date fixed",
        "Open Issues": "- Which district?",
    }
)
OLD_SECTIONS = parse_sections(OLD)


def headers(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if line.strip().startswith("## ")]


def merged_sections(old: str, ops: object) -> dict[str, str]:
    out = merge_working_memory(old, ops)
    assert headers(out) == [f"## {name}" for name in SECTIONS]
    return parse_sections(out)


def test_ops_none_keeps_everything_byte_for_byte():
    assert merge_working_memory(OLD, None) == OLD
    assert merged_sections(OLD, None) == OLD_SECTIONS


JUNK_OPS = [
    None,
    [],
    [{"op": "UPDATE", "content": "x"}],
    "UPDATE everything",
    "",
    0,
    3.5,
    True,
    object(),
    {},
    {"sections": None},
    {"sections": "garbage"},
    {"sections": []},
    {"Session Title": "UPDATE"},
    {"Session Title": None, "Open Issues": 7},
    {"Session Title": {"op": None}},
    {"Session Title": {"op": ["UPDATE"]}},
    {"Session Title": {"op": "UPDATE", "content": 5}},
    {"Session Title": {"op": "UPDATE", "content": None}},
    {"Session Title": {"op": "UPDATE", "content": {"nested": ["junk"]}}},
    {FACTS: {"op": "APPEND", "items": "not a list"}},
    {FACTS: {"op": "APPEND", "items": [None, 1, {"a": []}, ["x"]]}},
    {FACTS: {"op": "APPEND"}},
    {"Open Issues": {"op": "DELETE"}},
    {"sections": {"sections": {"sections": {}}}},
    {1: 2, None: [], (1, 2): {"op": "UPDATE"}},
]


@pytest.mark.parametrize("ops", JUNK_OPS, ids=[f"junk_{i}" for i in range(len(JUNK_OPS))])
def test_junk_ops_never_raise_and_mean_keep(ops):
    assert merge_working_memory(OLD, ops) == OLD


@pytest.mark.parametrize("old", [None, "", 5, "just some legacy text", b"bytes"])
def test_junk_or_legacy_old_markdown_gives_seven_empty_sections(old):
    assert merge_working_memory(old, None) == render_sections({})


def test_wrapped_and_bare_ops_and_lowercase_names_are_equivalent():
    bare = {"Current State": {"op": "update", "content": "Booked."}}
    wrapped = {"sections": {"Current State": {"op": "UPDATE", "content": "Booked."}}}
    assert merge_working_memory(OLD, bare) == merge_working_memory(OLD, wrapped)
    assert merged_sections(OLD, bare)["Current State"] == "Booked."


def test_keep_returns_old_body_byte_for_byte_while_others_change():
    out = merged_sections(OLD, {"Task & Goals": {"op": "UPDATE", "content": "- pick a district"}})
    for name in SECTIONS:
        if name != "Task & Goals":
            assert out[name] == OLD_SECTIONS[name]
    assert out["Current State"] == "Comparing hotels.\n  (indented detail)"


def test_update_is_stripped_and_append_renders_bullets_joined_by_newline():
    out = merged_sections(
        OLD,
        {
            "Current State": {"op": "UPDATE", "content": "\n\n  Booked the hotel.  \n\n"},
            "Task & Goals": {"op": "APPEND", "items": ["- pay deposit", "pack\nbags"]},
        },
    )
    assert out["Current State"] == "Booked the hotel."
    assert out["Task & Goals"] == "- book a hotel\n- pay deposit\n- pack bags"


def test_append_to_empty_section_has_no_leading_newline():
    out = merged_sections(render_sections({}), {"Open Issues": {"op": "APPEND", "items": ["a", "a", "b"]}})
    assert out["Open Issues"] == "- a\n- b"


def test_non_string_append_items_are_dropped():
    out = merged_sections(OLD, {"Task & Goals": {"op": "APPEND", "items": ["ok", 3, None, {"x": 1}, "fine"]}})
    assert out["Task & Goals"] == "- book a hotel\n- ok\n- fine"


def test_empty_update_on_unguarded_section_empties_it():
    out = merged_sections(OLD, {"Current State": {"op": "UPDATE", "content": "   "}})
    assert out["Current State"] == ""
    assert out["Session Title"] == OLD_SECTIONS["Session Title"]


def test_canonical_order_restored_and_non_canonical_sections_dropped():
    shuffled = (
        "# Working Memory\n\n## Open Issues\n- q\n\n## Mood\nhappy\n\n## Session Title\nTrip\n\n"
        "## Current State\nnow\n\n## session title\nlowercase twin\n"
    )
    out = merge_working_memory(shuffled, None)
    assert out == render_sections({"Session Title": "Trip", "Current State": "now", "Open Issues": "- q"})
    assert "Mood" not in out and "lowercase twin" not in out


def test_forged_session_title_in_another_sections_update_cannot_replace_the_title():
    forged = "- real issue\n## Session Title\nHacked title\n   # Working Memory"
    out = merge_working_memory(
        OLD, {"Open Issues": {"op": "UPDATE", "content": f"- Which district?\n{forged}"}}
    )
    sections = parse_sections(out)
    assert headers(out) == [f"## {name}" for name in SECTIONS]
    assert sections["Session Title"] == "Berlin trip planning"
    assert "\\## Session Title" in sections["Open Issues"]
    assert "   \\# Working Memory" in sections["Open Issues"]


def test_forged_header_in_an_append_item_stays_one_bullet():
    out = merge_working_memory(
        OLD, {"Task & Goals": {"op": "APPEND", "items": ["x\n## Session Title\nHacked"]}}
    )
    assert parse_sections(out)["Session Title"] == "Berlin trip planning"
    assert parse_sections(out)["Task & Goals"].endswith("- x ## Session Title Hacked")


def test_growth_60_rounds_stops_at_51_facts_plus_sentinel():
    doc = render_sections({})
    for round_no in range(1, 61):
        doc = merge_working_memory(doc, {FACTS: {"op": "APPEND", "items": [f"Fact {round_no}"]}})
    items = bullet_items(parse_sections(doc)[FACTS])
    assert items == [f"Fact {i}" for i in range(1, 52)] + [CONSOLIDATION_SENTINEL]
    assert parse_sections(doc)[FACTS].endswith(f"- {CONSOLIDATION_SENTINEL}")


def test_dedupe_keeps_fact_1_distinct_from_fact_10():
    doc = render_sections({FACTS: "- Fact 10"})
    doc = merge_working_memory(doc, {FACTS: {"op": "APPEND", "items": ["Fact 1", "fact 10.", "**Fact 1**"]}})
    assert bullet_items(parse_sections(doc)[FACTS]) == ["Fact 10", "Fact 1"]


def test_sentinel_is_inserted_once_and_never_twice():
    doc = render_sections({FACTS: "\n".join(f"- fact {i}" for i in range(51))})
    once = merge_working_memory(doc, {FACTS: {"op": "APPEND", "items": ["new"]}})
    twice = merge_working_memory(once, {FACTS: {"op": "APPEND", "items": ["newer"]}})
    assert once == twice
    assert parse_sections(twice)[FACTS].count(CONSOLIDATION_SENTINEL) == 1
    assert "new" not in bullet_items(parse_sections(twice)[FACTS])


def test_open_issue_is_restored_once_then_may_be_dropped():
    doc = render_sections({"Open Issues": "- Which district?\n- Budget cap"})
    first = merge_working_memory(doc, {"Open Issues": {"op": "UPDATE", "content": "- Budget cap"}})
    assert parse_sections(first)["Open Issues"] == (
        "- Budget cap\n- [silently dropped, restored] Which district?"
    )
    second = merge_working_memory(first, {"Open Issues": {"op": "UPDATE", "content": "- Budget cap"}})
    assert parse_sections(second)["Open Issues"] == "- Budget cap"


def test_errors_are_append_only_across_merges():
    doc = merge_working_memory(OLD, {"Errors & Corrections": {"op": "UPDATE", "content": "- totally new"}})
    assert bullet_items(parse_sections(doc)["Errors & Corrections"]) == ["wrong date fixed", "totally new"]


def test_guard_notes_name_the_section_and_the_action_and_merge_applies_the_decision():
    decided, notes = guard_ops(OLD_SECTIONS, {"Session Title": {"op": "UPDATE", "content": "Cooking"}})
    assert apply_ops(OLD_SECTIONS, decided)["Session Title"] == "Berlin trip planning"
    assert notes == [{"section": "Session Title", "guard": "title", "action": "rejected",
                      "detail": "the UPDATE shares no meaningful word with the old title"}]


@pytest.mark.parametrize("header", ["## Current State", "# current state", "### CURRENT STATE:", "  ## Current State "])
def test_an_update_repeating_its_own_header_loses_that_line(header):
    doc = merge_working_memory(OLD, {"Current State": {"op": "UPDATE", "content": f"{header}\nBooking flights."}})
    assert parse_sections(doc)["Current State"] == "Booking flights."
    assert "\\#" not in doc


def test_only_a_leading_own_header_goes_and_other_headers_are_escaped():
    doc = merge_working_memory(OLD, {"Current State": {"op": "UPDATE",
                                                        "content": "Booking.\n## Current State\n## Open Issues"}})
    assert parse_sections(doc)["Current State"] == "Booking.\n\\## Current State\n\\## Open Issues"


def test_append_items_that_are_the_own_header_are_dropped():
    doc = merge_working_memory(OLD, {"Open Issues": {"op": "APPEND", "items": ["## Open Issues", "Visa for Tom"]}})
    assert parse_sections(doc)["Open Issues"].splitlines()[-1] == "- Visa for Tom"
    assert "Open Issues" not in parse_sections(doc)["Open Issues"]


def test_a_create_answer_repeating_its_headers_stores_clean_bodies():
    created = {name: f"## {name}\nbody of {name.lower()}" for name in SECTIONS}
    doc = merge_working_memory("", create_as_update_ops(created))
    sections = parse_sections(doc)
    assert sections["Session Title"] == "body of session title"
    assert all(sections[name] == f"body of {name.lower()}" for name in SECTIONS)
    empty_after_header = create_as_update_ops({"Current State": "## Current State\n"})
    assert empty_after_header["Current State"] == {"op": "KEEP"}


def test_canonical_sections_and_apply_op():
    assert canonical_sections(OLD) == OLD_SECTIONS
    assert canonical_sections(None) == {name: "" for name in SECTIONS}
    assert apply_op("- a", {"op": "KEEP"}) == "- a"
    assert apply_op("- a", {"op": "APPEND", "items": ["b", "c"]}) == "- a\n- b\n- c"  # decided ops apply as given
    assert apply_op("- a", "junk") == "- a"
    assert apply_op("- a", {"op": "UPDATE", "content": "# x"}) == "\\# x"


def test_create_as_update_ops_keeps_missing_and_empty_sections():
    ops = create_as_update_ops({"Session Title": "Berlin trip", "Current State": "  ", "Open Issues": 3})
    assert ops == {
        name: {"op": "UPDATE", "content": "Berlin trip"} if name == "Session Title" else {"op": "KEEP"}
        for name in SECTIONS
    }
    assert create_as_update_ops(None) == {name: {"op": "KEEP"} for name in SECTIONS}


def test_create_on_top_of_a_v2_memory_goes_through_the_guards():
    created = {
        "Session Title": "Cooking class",
        "Current State": "Something else.",
        FACTS: "- unrelated",
        "Files & Context": "- other.txt",
        "Errors & Corrections": "- new error",
        "Open Issues": "",
    }
    out = merged_sections(OLD, create_as_update_ops(created))
    assert out["Session Title"] == "Berlin trip planning"
    assert out["Current State"] == "Something else."
    assert out[FACTS] == OLD_SECTIONS[FACTS] + "\n- unrelated"
    assert out["Files & Context"] == OLD_SECTIONS["Files & Context"]
    assert out["Errors & Corrections"] == "- wrong date fixed\n- new error"
    assert out["Open Issues"] == OLD_SECTIONS["Open Issues"]
