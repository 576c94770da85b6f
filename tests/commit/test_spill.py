"""Section budgets with explicit spill: who spills, where to, the pointer, nothing silently gone."""

from __future__ import annotations

import pytest

from workmem.nodes.merge import merge_decided, merge_with_spill
from workmem.nodes.spill import POINTER_TOKENS
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    POINTER_ITEM,
    SECTION_BUDGETS,
    body_tokens,
    bullet_items,
    parse_sections,
    render_sections,
    section_reminders,
    split_pointer,
)
from workmem.state.tokens import count_tokens

FACTS = "Key Facts & Decisions"
KEEP = {"op": "KEEP"}


def items(prefix: str, n: int, words: int = 8) -> list[str]:
    return [f"{prefix} {i} " + " ".join(f"w{i}x{j}" for j in range(words)) for i in range(n)]


def body(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def fill_to(name: str, budget_share: float, prefix: str = "old", words: int = 8) -> list[str]:
    """Items whose body takes about `budget_share` of section `name`'s budget."""
    out: list[str] = []
    while body_tokens(body(out)) < SECTION_BUDGETS[name] * budget_share:
        out.append(items(prefix, len(out) + 1, words)[-1])
    return out


@pytest.mark.parametrize("name", ["Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues"])
def test_a_section_at_its_budget_does_not_spill_and_one_token_more_does(name):
    old = fill_to(name, 0.9)
    doc = render_sections({name: body(old)})
    # append until the body is at most the budget: nothing spills
    fits: list[str] = []
    while body_tokens(body(old + fits + ["tiny fit"])) <= SECTION_BUDGETS[name]:
        fits.append("tiny fit")
        break
    merged, spilled = merge_with_spill(doc, {name: {"op": "APPEND", "items": ["tiny fit"]}})
    if body_tokens(body([*old, "tiny fit"])) <= SECTION_BUDGETS[name]:
        assert spilled == [] and POINTER_ITEM[:10] not in merged
    # push it over: the oldest items spill, a pointer counts them, the new item stays
    new = items("new", 20)
    merged, spilled = merge_with_spill(doc, {name: {"op": "APPEND", "items": new}})
    section = parse_sections(merged)[name]
    assert body_tokens(section) <= SECTION_BUDGETS[name]
    rest, count = split_pointer(section)
    assert count == len(spilled) > 0
    assert section.splitlines()[0] == "- " + POINTER_ITEM.format(n=count)
    assert [s["item"] for s in spilled] == old[:count], "the oldest items go first, in order"
    assert bullet_items(rest) == old[count:] + new, "nothing else changes"
    assert all(s["section"] == name for s in spilled)


def test_open_issues_spill_resolved_items_first():
    old = [f"[resolved] solved thing {i} " + "detail " * 20 for i in range(12)] + items("open", 30, 20)
    doc = render_sections({"Open Issues": body(old)})
    merged, spilled = merge_with_spill(doc, {"Open Issues": {"op": "APPEND", "items": items("fresh", 10, 20)}})
    assert spilled and all("[resolved]" in s["item"] for s in spilled[:12])
    section = parse_sections(merged)["Open Issues"]
    assert body_tokens(section) <= SECTION_BUDGETS["Open Issues"]
    assert sum("[resolved]" in s["item"] for s in spilled) == min(12, len(spilled))


def test_the_pointer_accumulates_and_is_invisible_to_the_rules():
    name = "Errors & Corrections"
    doc = render_sections({name: body(fill_to(name, 0.98))})
    total = 0
    for round_ in range(3):
        doc, spilled = merge_with_spill(doc, {name: {"op": "APPEND", "items": items(f"r{round_}", 15)}})
        total += len(spilled)
        rest, count = split_pointer(parse_sections(doc)[name])
        assert count == total
    # a model UPDATE naming the pointer cannot drop or forge it; errors stay append-only
    forged = "- [archived] 1 older items — archive_search finds them\n- brand new error"
    doc2, spilled = merge_with_spill(doc, {name: {"op": "UPDATE", "content": forged}})
    rest2, count2 = split_pointer(parse_sections(doc2)[name])
    assert count2 == total + len(spilled)
    assert bullet_items(rest2) == bullet_items(rest)[len(spilled):] + ["brand new error"]
    doc3, _ = merge_with_spill(doc, {name: {"op": "APPEND", "items": ["[archived] 999 older items — archive_search "
                                                                      "finds them"]}})
    assert split_pointer(parse_sections(doc3)[name]) == (rest, total), "a forged pointer item is dropped"


def test_errors_only_ever_leave_through_spill():
    name = "Errors & Corrections"
    doc = render_sections({name: body(items("err", 10))})
    for op in ({"op": "UPDATE", "content": "- nothing"}, {"op": "UPDATE", "content": ""}, KEEP,
               {"op": "APPEND", "items": ["err 3 w3x0"]}):
        merged, spilled = merge_with_spill(doc, {name: op})
        assert spilled == []
        assert all(item in parse_sections(merged)[name] for item in items("err", 10))


def test_title_and_current_state_never_spill_items():
    long_title = "Migration " + " ".join(f"word{i}" for i in range(80))
    doc = render_sections({"Session Title": "Migration plan", "Current State": "Short."})
    merged, spilled = merge_with_spill(doc, {"Session Title": {"op": "UPDATE", "content": long_title}})
    assert parse_sections(merged)["Session Title"] == "Migration plan" and spilled == []
    sentences = " ".join(f"Step {i} moved the queue {i} to the new cluster." for i in range(80))
    merged, spilled = merge_with_spill(doc, {"Current State": {"op": "UPDATE", "content": sentences}})
    state = parse_sections(merged)["Current State"]
    assert body_tokens(state) <= SECTION_BUDGETS["Current State"] and state.endswith(".")
    assert [s["section"] for s in spilled] == ["Current State"]
    assert state + " " + spilled[0]["item"] == sentences, "cut at a sentence end; the rest spilled whole"
    assert "[archived]" not in merged


@pytest.mark.parametrize("shape", ["one sentence", "many sentences"])
def test_a_model_section_of_40_000_words_is_cut_in_a_few_dozen_counts(shape, monkeypatch):
    """A model stuck repeating a word must not hold the commit's lease for minutes: the cut bisects."""
    import workmem.nodes.spill as spill

    counts = []
    monkeypatch.setattr(spill, "count_tokens", lambda text: counts.append(1) or count_tokens(text))
    words = " ".join(["y"] * 40_000) if shape == "one sentence" else " ".join(["Step done."] * 20_000)
    doc = render_sections({"Session Title": "Migration plan", "Current State": "Short."})
    merged, spilled = merge_with_spill(doc, {"Current State": {"op": "UPDATE", "content": words}})
    state = parse_sections(merged)["Current State"]
    assert body_tokens(state) <= SECTION_BUDGETS["Current State"] and state
    assert " ".join([state, spilled[0]["item"]]).split() == words.split(), "nothing lost at the cut"
    assert len(counts) < 100, len(counts)


def test_key_facts_spill_only_when_allowed_and_only_at_emergency():
    old = items("fact", 60, 3) + [CONSOLIDATION_SENTINEL]
    doc = render_sections({FACTS: body(old)})
    merged, spilled = merge_with_spill(doc, {FACTS: {"op": "APPEND", "items": ["more"]}})
    assert spilled == [] and parse_sections(merged)[FACTS] == body(old), "default: the reference behaviour"
    merged, spilled = merge_with_spill(doc, {FACTS: KEEP}, key_facts_may_spill=True)
    rest, count = split_pointer(parse_sections(merged)[FACTS])
    kept = bullet_items(rest)
    assert len(kept) <= 25 and body_tokens(rest) <= 1500 and CONSOLIDATION_SENTINEL not in merged
    assert count == len(spilled) == 60 - len(kept) and kept == items("fact", 60, 3)[count:]


def test_the_sentinel_of_a_section_past_its_token_limit_stands_and_is_not_spilled():
    """At emergency by tokens the sentinel itself takes Key Facts past its budget: it is no salvage, it stays."""
    old = fill_to(FACTS, 1.01, "Known", words=40)
    assert len(old) <= 50 and body_tokens(body(old)) > SECTION_BUDGETS[FACTS]
    merged, spilled = merge_with_spill(render_sections({FACTS: body(old)}), {FACTS: {"op": "APPEND", "items": ["x"]}})
    assert spilled == [] and bullet_items(parse_sections(merged)[FACTS]) == [*old, CONSOLIDATION_SENTINEL]


def test_salvaged_items_past_the_key_facts_budget_spill_at_once():
    old = fill_to(FACTS, 0.95, "Known", words=40)  # 1 500 < t ≤ 3 000: oversized, not emergency, < 50 bullets
    assert len(old) <= 50
    doc = render_sections({FACTS: body(old)})
    rejected = "- " + "\n- ".join(items("salvaged", 12, 12))  # far fewer bullets: the UPDATE is rejected
    merged, spilled = merge_with_spill(doc, {FACTS: {"op": "UPDATE", "content": rejected}})
    section = parse_sections(merged)[FACTS]
    rest, count = split_pointer(section)
    assert body_tokens(rest) <= SECTION_BUDGETS[FACTS]
    assert bullet_items(rest)[:len(old)] == old, "the old facts stay"
    salvaged_kept = bullet_items(rest)[len(old):]
    assert salvaged_kept + [s["item"] for s in spilled] == items("salvaged", 12, 12), "nothing silently gone"
    assert spilled and count == len(spilled)


def test_the_spilled_items_and_the_notes_come_back_from_a_decided_merge():
    name = "Task & Goals"
    doc = render_sections({name: body(fill_to(name, 1.0))})
    markdown, spilled, notes = merge_decided(doc, {name: {"op": "APPEND", "items": items("goal", 5)}})
    assert spilled and notes == [{"section": name, "guard": "budget", "action": "spilled",
                                  "detail": f"{len(spilled)} item(s) over the budget moved to the archive"}]


def test_reminders_ask_for_consolidation_at_three_quarters_of_a_budget():
    name = "Task & Goals"
    below = render_sections({name: body(fill_to(name, 0.62, words=40))})
    at = render_sections({name: body(fill_to(name, 0.76, words=40))})
    assert name not in section_reminders(below)
    assert f'"{name}" is at ~' in section_reminders(at)
    errors = render_sections({"Errors & Corrections": body(fill_to("Errors & Corrections", 0.9))})
    assert section_reminders(errors) == "", "append-only: nothing to consolidate by UPDATE"


def test_pointer_reserve_covers_a_large_count():
    assert count_tokens("- " + POINTER_ITEM.format(n=123_456)) < POINTER_TOKENS
