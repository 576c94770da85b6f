"""The working-memory document and the size rules behind reminders."""

from __future__ import annotations

import time

import pytest
from oracles import body_is_emergency, body_is_oversized

from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    SECTION_KEYS,
    SECTIONS,
    body_tokens,
    bullet_count,
    bullet_items,
    clean_item,
    escape_body,
    is_emergency,
    is_oversized,
    is_v2,
    parse_sections,
    render_sections,
    section_reminders,
)
from workmem.state.tokens import count_tokens

EMPTY_DOC = (
    "# Working Memory\n\n## Session Title\n\n## Current State\n\n## Task & Goals\n\n"
    "## Key Facts & Decisions\n\n## Files & Context\n\n## Errors & Corrections\n\n## Open Issues\n"
)


def test_sections_and_keys_are_the_seven_in_order():
    assert SECTIONS == (
        "Session Title",
        "Current State",
        "Task & Goals",
        "Key Facts & Decisions",
        "Files & Context",
        "Errors & Corrections",
        "Open Issues",
    )
    assert list(SECTION_KEYS) == list(SECTIONS)
    assert list(SECTION_KEYS.values()) == [
        "session_title",
        "current_state",
        "task_and_goals",
        "key_facts_and_decisions",
        "files_and_context",
        "errors_and_corrections",
        "open_issues",
    ]


def test_render_empty_mapping_gives_the_seven_empty_headers():
    assert render_sections({}) == EMPTY_DOC


def test_render_puts_bodies_under_headers_in_canonical_order_and_drops_other_names():
    doc = render_sections({"Open Issues": "- a", "Session Title": "Trip", "Extra": "gone"})
    assert doc == EMPTY_DOC.replace("## Session Title\n", "## Session Title\nTrip\n").replace(
        "## Open Issues\n", "## Open Issues\n- a\n"
    )
    assert doc.endswith("- a\n") and not doc.endswith("\n\n")


def test_parse_render_round_trip():
    bodies = {name: f"- item of {name}\n  indented line" for name in SECTIONS}
    assert parse_sections(render_sections(bodies)) == bodies


@pytest.mark.parametrize("md", [None, "", 5, b"## Session Title\nx"], ids=["none", "empty", "int", "bytes"])
def test_parse_non_text_or_empty_is_empty(md):
    assert parse_sections(md) == {}


def test_parse_accepts_crlf_and_lone_cr():
    md = "# Working Memory\r\n\r\n## Session Title\r\nTrip\r\n## Open Issues\r- a\r- b\r\n"
    assert parse_sections(md) == {"Session Title": "Trip", "Open Issues": "- a\n- b"}


def test_parse_drops_preamble_keys_bare_names_and_later_repeat_wins():
    md = (
        "preamble\n# Working Memory\n## Custom Thing \nbody\n"
        "  ## Session Title  \nfirst\n## Session Title\nsecond\n"
    )
    assert parse_sections(md) == {"Custom Thing": "body", "Session Title": "second"}


@pytest.mark.parametrize(
    "line",
    ["### Session Title", "##Session Title", "#  Session Title", "\\## Session Title", "- ## Session Title"],
)
def test_parse_lines_that_are_not_headers_stay_in_the_body(line):
    assert parse_sections(f"## Current State\nx\n{line}") == {"Current State": f"x\n{line}"}


def test_parse_a_5_mb_body_quickly():
    body = "\n".join(f"- fact {i} " + "x" * 60 for i in range(80_000))
    assert len(body) > 5_000_000
    started = time.perf_counter()
    parsed = parse_sections(render_sections({"Key Facts & Decisions": body}))
    assert time.perf_counter() - started < 5
    assert parsed["Key Facts & Decisions"] == body


@pytest.mark.parametrize(
    ("line", "item"),
    [
        ("- foo", "foo"),
        ("* foo", "foo"),
        ("+ foo", "foo"),
        ("2) bar", "bar"),
        ("10. baz", "baz"),
        ("3.8 is required", "3.8 is required"),
        ("-foo", "-foo"),
        ("**bold** fact", "**bold** fact"),
        ("plain line", "plain line"),
        ("  -   spaced  ", "spaced"),
        ("- - double", "- double"),
        ("\\## escaped header", "\\## escaped header"),
    ],
    ids=[
        "dash",
        "star",
        "plus",
        "paren_number",
        "dot_number",
        "decimal_is_not_a_marker",
        "marker_needs_whitespace",
        "emphasis_is_not_a_marker",
        "plain_line_is_an_item",
        "surrounding_space",
        "only_one_marker_removed",
        "escaped_header_is_an_item",
    ],
)
def test_bullet_items_single_line(line, item):
    assert bullet_items(line) == [item]


@pytest.mark.parametrize("body", ["", "-", "  *  ", "1.", "# heading", "### sub", "\n\n"])
def test_bullet_items_drop_empty_and_heading_lines(body):
    assert bullet_items(body) == []


def test_bullet_items_many_lines_and_none():
    assert bullet_items("- a\n\n# h\n2. b\r\nc") == ["a", "b", "c"]
    assert bullet_items(None) == []


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        (None, False),
        ("", False),
        ("A free-form summary of the chat.", False),
        ("## Session Title", True),
        ("  ## Open Issues  \r\n", True),
        ("## Session title", False),
        ("### Session Title", False),
        ("## Custom Section", False),
        ("text\r\n## Key Facts & Decisions\r\n- x", True),
    ],
    ids=[
        "none",
        "empty",
        "legacy_text",
        "one_header",
        "stripped_header_crlf",
        "names_are_case_sensitive",
        "h3_is_not_a_header",
        "non_canonical_only",
        "crlf_document",
    ],
)
def test_is_v2(md, expected):
    assert is_v2(md) is expected


@pytest.mark.parametrize(
    ("content", "escaped"),
    [
        ("## Session Title", "\\## Session Title"),
        ("  # Working Memory", "  \\# Working Memory"),
        ("#tag", "\\#tag"),
        ("a # b", "a # b"),
        ("x\r\n## Open Issues\ry", "x\n\\## Open Issues\ny"),
        ("x\x0c## Open Issues\u2028# y", "x\n\\## Open Issues\n\\# y"),
    ],
    ids=[
        "section_header",
        "indented_h1",
        "hash_word",
        "inner_hash_untouched",
        "crlf_and_cr_lines",
        "every_splitlines_separator",
    ],
)
def test_escape_body(content, escaped):
    assert escape_body(content) == escaped
    assert parse_sections(f"## Current State\n{escaped}") == {"Current State": escaped.strip()}


@pytest.mark.parametrize(
    ("item", "cleaned"),
    [
        ("- foo", "foo"),
        ("* foo", "foo"),
        ("- - foo", "foo"),
        ("line one\nline two\r\n  three", "line one line two three"),
        ("1. step", "1. step"),
        ("**bold**", "**bold**"),
        ("-5 degrees", "-5 degrees"),
        ("  -  ", ""),
        ("## Session Title\nEvil", "## Session Title Evil"),
    ],
    ids=[
        "dash_marker",
        "star_marker",
        "stacked_markers",
        "newlines_to_spaces",
        "numbers_kept",
        "emphasis_kept",
        "negative_number_kept",
        "marker_only_is_empty",
        "header_collapsed_into_one_line",
    ],
)
def test_clean_item(item, cleaned):
    assert clean_item(item) == cleaned
    assert clean_item(cleaned) == cleaned


def test_lone_surrogates_are_scrubbed_before_storage():
    assert "\ud800" not in escape_body("a\ud800b")
    assert "\ud800" not in clean_item("a\ud800b")
    escape_body("a\ud800b").encode("utf-8")


@pytest.mark.parametrize(
    ("n", "t", "oversized", "emergency"),
    [
        (25, 1500, False, False),
        (26, 0, True, False),
        (0, 1501, True, False),
        (50, 3000, True, False),
        (51, 0, True, True),
        (0, 3001, True, True),
    ],
    ids=[
        "25_bullets_1500_tokens",
        "26_bullets",
        "1501_tokens",
        "50_bullets_3000_tokens",
        "51_bullets",
        "3001_tokens",
    ],
)
def test_size_boundaries(n, t, oversized, emergency):
    assert is_oversized(n, t) is oversized
    assert is_emergency(n, t) is emergency


def test_body_size_measures():
    body = "\n".join(f"- fact {i}" for i in range(26))
    assert bullet_count(body) == 26
    assert body_tokens(body) == count_tokens(body)
    assert body_is_oversized(body) and not body_is_emergency(body)
    assert body_is_emergency(body + "\n" + "\n".join(f"- more {i}" for i in range(25)))


def _facts(n: int) -> str:
    return "\n".join(f"- fact number {i}" for i in range(1, n + 1))


def test_reminders_empty_when_nothing_is_oversized():
    assert section_reminders(None) == ""
    assert section_reminders(render_sections({"Key Facts & Decisions": _facts(25)})) == ""


def test_reminders_exact_line_for_each_oversized_section_except_errors():
    facts, issues = _facts(26), _facts(30)
    md = render_sections(
        {"Key Facts & Decisions": facts, "Errors & Corrections": _facts(80), "Open Issues": issues}
    )
    assert section_reminders(md) == (
        "<section_size_warnings>\n"
        f'- "Key Facts & Decisions" has 26 bullets (~{count_tokens(facts)} tokens): it MUST be consolidated '
        "via UPDATE — group related facts by topic, keep names, dates and exact values. "
        "Target: <=25 bullets, <=1500 tokens.\n"
        f'- "Open Issues" has 30 bullets (~{count_tokens(issues)} tokens): it MUST be consolidated '
        "via UPDATE — group related facts by topic, keep names, dates and exact values. "
        "Target: <=25 bullets, <=1500 tokens.\n"
        "</section_size_warnings>"
    )


def test_reminders_count_tokens_too():
    body = "- " + "word " * 1600
    reminder = section_reminders(render_sections({"Current State": body}))
    assert reminder.startswith('<section_size_warnings>\n- "Current State" has 1 bullets (~')
    assert reminder.endswith("</section_size_warnings>")


def test_sentinel_text():
    assert CONSOLIDATION_SENTINEL == (
        "[⚠ CONSOLIDATION REQUIRED: Key Facts exceeds size limit. "
        "You MUST use UPDATE to merge and compress existing bullets before adding new facts.]"
    )
