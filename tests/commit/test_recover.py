"""Recovery of ops from malformed arguments: JSON repair, then the lenient scan."""

from __future__ import annotations

import json

import pytest

from workmem.nodes.merge import merge_working_memory
from workmem.nodes.recover import recover_ops, repair_json
from workmem.state.memory import SECTIONS, parse_sections, render_sections

KEEP = {"op": "KEEP"}


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ('{"a": [1, 2,], "b": {"c": 1,},}', {"a": [1, 2], "b": {"c": 1}}),
        ('{"a": [1, 2', {"a": [1, 2]}),
        ('{"a": {"b": "x"}', {"a": {"b": "x"}}),
        ('{"a": "brackets ] } and , inside", ', {"a": "brackets ] } and , inside"}),
        ('{"a": "esc \\" quote [", ', {"a": 'esc " quote ['}),
        ('  {"a": 1}  ', {"a": 1}),
        ('"{\\"a\\": 1}"', {"a": 1}),
        ("[1, 2", [1, 2]),
    ],
    ids=[
        "valid",
        "trailing_commas",
        "unclosed_array_and_object",
        "unclosed_nested_objects",
        "brackets_inside_strings_ignored",
        "escaped_quote_inside_string",
        "surrounding_space",
        "double_encoded",
        "top_level_array",
    ],
)
def test_repair_json(raw, value):
    assert repair_json(raw) == value


@pytest.mark.parametrize(
    "raw",
    ["", "   ", '{"a": "cut off', '{"a": {"b": "x"', '{"a": }', '{"a": [1}', "not json at all", "[" * 100_000,
     None, 5],
    ids=[
        "empty",
        "blank",
        "string_cut_off",
        "ends_right_after_a_quote_that_may_be_inner_text",
        "missing_value",
        "mismatched_closer",
        "prose",
        "absurd_nesting",
        "none",
        "number",
    ],
)
def test_repair_json_gives_up_with_none(raw):
    assert repair_json(raw) is None


def _args(**sections: object) -> str:
    return json.dumps({"sections": sections})


def test_valid_json_returns_only_the_sections_present():
    raw = json.dumps({"sections": {"Current State": {"op": "update", "content": "x"}, "Open Issues": KEEP}})
    assert recover_ops(raw) == {"Current State": {"op": "UPDATE", "content": "x"}, "Open Issues": KEEP}


def test_json_repair_path_handles_trailing_commas_and_unclosed_braces():
    raw = '{"sections": {"Session Title": {"op": "KEEP"}, "Open Issues": {"op": "APPEND", "items": ["a",],},'
    assert recover_ops(raw) == {"Session Title": KEEP, "Open Issues": {"op": "APPEND", "items": ["a"]}}


def test_json_object_without_usable_ops_recovers_nothing():
    create_shaped = json.dumps({"sections": {name: "a body" for name in SECTIONS}})
    assert recover_ops(create_shaped) == {}
    assert recover_ops("{}") == {}
    assert recover_ops('{"foo": 1}') == {}


# Every raw text below stays broken after JSON repair, so the regex scan is what recovers.
SCAN_CASES = [
    (
        "keep",
        '{"sections": {"Session Title": {"op": "KEEP"}, "Current State": {"op": "UPDATE", "content": "cut',
        {"Session Title": KEEP},
    ),
    (
        "update_op_first",
        '{"sections": {"Current State": {"op": "UPDATE", "content": "Booked."}, "Open Issues": {"op": "APP',
        {"Current State": {"op": "UPDATE", "content": "Booked."}},
    ),
    (
        "update_op_last",
        '{"Current State": {"content": "Booked.", "op": "update"}, '
        '"Open Issues": {"op": "APPEND", "items": [',
        {"Current State": {"op": "UPDATE", "content": "Booked."}},
    ),
    (
        "append_op_first",
        '{"Task & Goals": {"op": "APPEND", "items": ["a", "b"]}, '
        '"Open Issues": {"op": "UPDATE", "content": "x',
        {"Task & Goals": {"op": "APPEND", "items": ["a", "b"]}},
    ),
    (
        "append_op_last",
        '{"Task & Goals": {"items": ["a", "b"], "op": "APPEND"}} trailing {{{ garbage "',
        {"Task & Goals": {"op": "APPEND", "items": ["a", "b"]}},
    ),
    (
        "mixed_ops",
        '{"sections": {"Session Title": {"op": "KEEP"}, '
        '"Current State": {"op": "UPDATE", "content": "Now."}, '
        '"Task & Goals": {"op": "APPEND", "items": ["ship"]}, "Key Facts & Decisions": {"op": "KEEP"}, '
        '"Files & Context": {"op": "KEEP"}, "Errors & Corrections": {"op": "APPEND", "items": ["e1", "e2"]}, '
        '"Open Issues": {"op": "UPDATE", "content": "- q"}}}} oops',
        {
            "Session Title": KEEP,
            "Current State": {"op": "UPDATE", "content": "Now."},
            "Task & Goals": {"op": "APPEND", "items": ["ship"]},
            "Key Facts & Decisions": KEEP,
            "Files & Context": KEEP,
            "Errors & Corrections": {"op": "APPEND", "items": ["e1", "e2"]},
            "Open Issues": {"op": "UPDATE", "content": "- q"},
        },
    ),
    (
        "truncated_update_content_not_recovered",
        '{"sections": {"Current State": {"op": "UPDATE", "content": "half a sent',
        {},
    ),
    (
        "escaped_quotes_and_newlines_unescaped",
        '{"Current State": {"op": "UPDATE", '
        '"content": "He said \\"go\\".\\nNext line\\ttab \\u00e9 \\\\ done"}, x',
        {"Current State": {"op": "UPDATE", "content": 'He said "go".\nNext line\ttab é \\ done'}},
    ),
    (
        "escaped_quote_does_not_end_the_content",
        '{"Current State": {"op": "UPDATE", "content": "cut after \\"quoted\\" words',
        {},
    ),
    (
        "json_escaped_section_names_decoded",
        '{"Task \\u0026 Goals": {"op": "KEEP"}, '
        '"Key Facts \\u0026 Decisions": {"op": "APPEND", "items": ["f"]} ,,',
        {"Task & Goals": KEEP, "Key Facts & Decisions": {"op": "APPEND", "items": ["f"]}},
    ),
    (
        "cut_off_append_keeps_complete_items",
        '{"Open Issues": {"op": "APPEND", "items": ["a", "b',
        {"Open Issues": {"op": "APPEND", "items": ["a"]}},
    ),
    (
        "cut_off_append_after_comma",
        '{"Open Issues": {"op": "APPEND", "items": ["a", "b", ',
        {"Open Issues": {"op": "APPEND", "items": ["a", "b"]}},
    ),
    (
        "cut_off_append_with_no_complete_item_not_recovered",
        '{"Open Issues": {"op": "APPEND", "items": ["a',
        {},
    ),
    (
        "cut_off_items_before_op_not_recovered",
        '{"Open Issues": {"items": ["a", "b',
        {},
    ),
    (
        "non_string_items_skipped",
        '{"Open Issues": {"op": "APPEND", "items": ["a", 3, null, "b"]}, "x": [',
        {"Open Issues": {"op": "APPEND", "items": ["a", "b"]}},
    ),
    (
        "first_match_per_section_wins",
        '{"Current State": {"op": "UPDATE", "content": "first"}, "Current State": {"op": "KEEP"}, "z": "',
        {"Current State": {"op": "UPDATE", "content": "first"}},
    ),
    (
        "later_complete_match_wins_over_earlier_damaged_one",
        '{"Current State": {"op": "UPDATE"}, "Current State": {"op": "UPDATE", "content": "second"}, "z": "',
        {"Current State": {"op": "UPDATE", "content": "second"}},
    ),
    (
        "garbage_after_valid_parts",
        '{"sections": {"Session Title": {"op": "keep"}, "Open Issues": {"op": "append", "items": ["q"]}}} '
        "<<<< the model kept talking } ] \" ' {",
        {"Session Title": KEEP, "Open Issues": {"op": "APPEND", "items": ["q"]}},
    ),
    (
        "extra_fields_tolerated",
        '{"Current State": {"op": "UPDATE", "reason": "new info", "n": 3, "content": "Now."}, "z": [',
        {"Current State": {"op": "UPDATE", "content": "Now."}},
    ),
    (
        "unknown_sections_and_ops_ignored",
        '{"Mood": {"op": "UPDATE", "content": "happy"}, "Open Issues": {"op": "DELETE"}, "z": [',
        {},
    ),
    (
        "section_names_inside_content_are_not_ops",
        '{"Current State": {"op": "UPDATE", '
        '"content": "see \\"Open Issues\\": {\\"op\\": \\"KEEP\\"}"}, "z": [',
        {"Current State": {"op": "UPDATE", "content": 'see "Open Issues": {"op": "KEEP"}'}},
    ),
    (
        "unescaped_quotes_inside_update_content",
        '{"Current State": {"op": "UPDATE", "content": "User said "ship it" at 10:05"}, "z": [',
        {"Current State": {"op": "UPDATE", "content": 'User said "ship it" at 10:05'}},
    ),
    (
        "unescaped_quotes_inside_append_items",
        '{"Open Issues": {"op": "APPEND", "items": ["Profile the "hot" loop", "Rotate certs"]}, "z": [',
        {"Open Issues": {"op": "APPEND", "items": ['Profile the "hot" loop', "Rotate certs"]}},
    ),
    (
        "op_after_content_with_unescaped_quotes",
        '{"Current State": {"content": "Ran "make test" twice", "op": "UPDATE"}, "z": [',
        {"Current State": {"op": "UPDATE", "content": 'Ran "make test" twice'}},
    ),
    (
        "value_cut_after_an_inner_quote_is_not_recovered",
        '{"Current State": {"op": "UPDATE", "content": "User said "ship it',
        {},
    ),
    (
        "value_ending_in_a_bare_quote_at_the_end_is_not_recovered",
        '{"Current State": {"op": "UPDATE", "content": "User said "',
        {},
    ),
    (
        "append_cut_off_keeps_complete_items_with_quotes",
        '{"Open Issues": {"op": "APPEND", "items": ["Check the "slow" query", "Verify back',
        {"Open Issues": {"op": "APPEND", "items": ['Check the "slow" query']}},
    ),
    (
        "append_cut_after_a_complete_item",
        '{"Open Issues": {"op": "APPEND", "items": ["a", "b',
        {"Open Issues": {"op": "APPEND", "items": ["a"]}},
    ),
    (
        "fenced_text_with_broken_json",
        'Here you go:\n```json\n{"sections": {"Open Issues": {"op": "APPEND", "items": ["a"]},\n```',
        {"Open Issues": {"op": "APPEND", "items": ["a"]}},
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [case[1:] for case in SCAN_CASES], ids=[case[0] for case in SCAN_CASES]
)
def test_scan_recovery(raw, expected):
    assert recover_ops(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "null", "[]", "garbage", '{"', "}", None, 42, ["x"]])
def test_empty_or_hopeless_input_recovers_nothing(raw):
    assert recover_ops(raw) == {}


def test_recovered_ops_merge_cleanly():
    old = render_sections({"Current State": "Before.", "Open Issues": "- q1"})
    ops = recover_ops(
        '{"Current State": {"op": "UPDATE", "content": "After."}, '
        '"Open Issues": {"op": "APPEND", "items": ["q2", "q'
    )
    merged = parse_sections(merge_working_memory(old, ops))
    assert merged["Current State"] == "After."
    assert merged["Open Issues"] == "- q1\n- q2"


def test_scan_is_fast_on_large_damaged_input():
    filler = '"k": "' + "x" * 200 + '", ' * 1
    raw = '{"sections": {' + filler * 5000 + '"Open Issues": {"op": "APPEND", "items": ["a", "b'
    assert recover_ops(raw) == {"Open Issues": {"op": "APPEND", "items": ["a"]}}
