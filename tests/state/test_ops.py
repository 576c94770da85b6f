"""The model output contract: exact tool schemas, op models and the tolerant parsers."""

from __future__ import annotations

import json

import pytest
from snapshot import assert_json_snapshot

from workmem.state.memory import SECTIONS
from workmem.state.ops import (
    CREATE_TOOL,
    OP_REF,
    UPDATE_TOOL,
    UPDATE_TOOL_INLINE,
    SectionOp,
    canonical_op,
    canonical_ops,
    parse_create_args,
    parse_update_args,
    resolve_section_name,
)
from workmem.state.tokens import count_tokens


def _walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


def test_update_tool_schema_is_exactly_the_hand_written_one():
    assert_json_snapshot("update_tool.json", UPDATE_TOOL)


def test_create_tool_schema_is_exactly_the_hand_written_one():
    assert_json_snapshot("create_tool.json", CREATE_TOOL)


def test_inline_update_tool_schema_is_exactly_the_hand_written_one():
    assert_json_snapshot("update_tool_inline.json", UPDATE_TOOL_INLINE)


@pytest.mark.parametrize(("tool", "limit"), [(UPDATE_TOOL, 450), (CREATE_TOOL, 300)], ids=["update", "create"])
def test_tool_schemas_fit_their_token_budget(tool, limit):
    """The schema is paid on every commit call; measured with default separators."""
    assert count_tokens(json.dumps(tool)) <= limit


def test_update_tool_defines_the_op_once_and_refers_to_it_per_section():
    parameters = UPDATE_TOOL["function"]["parameters"]
    sections = parameters["properties"]["sections"]["properties"]
    assert list(sections) == list(SECTIONS)
    assert all(value == {"$ref": OP_REF} for value in sections.values())
    assert list(parameters["$defs"]) == ["op"]
    assert parameters["$defs"]["op"]["properties"]["op"]["enum"] == ["KEEP", "UPDATE", "APPEND"]
    inline = UPDATE_TOOL_INLINE["function"]["parameters"]
    assert all(value == parameters["$defs"]["op"] for value in inline["properties"]["sections"]["properties"].values())
    assert "$defs" not in inline


@pytest.mark.parametrize("tool", [UPDATE_TOOL, UPDATE_TOOL_INLINE, CREATE_TOOL], ids=["update", "inline", "create"])
def test_schemas_close_every_object_and_avoid_pydantic_keywords(tool):
    for path, node in _walk(tool["function"]["parameters"]):
        if isinstance(node, dict):
            assert not {"const", "oneOf", "discriminator"} & set(node), path
            if "$ref" in node:  # only the op reference, and only under the section names
                assert node == {"$ref": OP_REF}, path
            if node.get("type") == "object":
                assert node.get("additionalProperties") is False, path
    json.dumps(tool)


@pytest.mark.parametrize("tool", [UPDATE_TOOL, UPDATE_TOOL_INLINE], ids=["ref", "inline"])
def test_both_update_schemas_accept_and_reject_the_same_arguments(tool):
    jsonschema = pytest.importorskip("jsonschema")
    schema = tool["function"]["parameters"]
    jsonschema.validate(VALID_UPDATE, schema)
    for bad in ({"op": "DELETE"}, {"op": "KEEP", "note": "x"}, {"op": "UPDATE", "content": 5}, {"content": "x"}):
        args = {"sections": {**VALID_UPDATE["sections"], "Open Issues": bad}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(args, schema)


def _all(op: dict) -> dict:
    return {name: dict(op) for name in SECTIONS}


VALID_UPDATE = {
    "sections": {
        "Session Title": {"op": "KEEP"},
        "Current State": {"op": "UPDATE", "content": "Now testing."},
        "Task & Goals": {"op": "APPEND", "items": ["ship it"]},
        "Key Facts & Decisions": {"op": "KEEP"},
        "Files & Context": {"op": "KEEP"},
        "Errors & Corrections": {"op": "KEEP"},
        "Open Issues": {"op": "KEEP"},
    }
}


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ({"op": "KEEP", "content": "x"}, {"op": "KEEP"}),
        ({"op": "UPDATE", "content": "x", "items": ["y"]}, {"op": "UPDATE", "content": "x"}),
        ({"op": "APPEND", "items": ["y"], "content": "x"}, {"op": "APPEND", "items": ["y"]}),
    ],
    ids=["keep_with_content", "update_with_items", "append_with_content"],
)
def test_a_field_the_op_does_not_use_is_dropped(given, canonical):
    assert SectionOp.model_validate(given).canonical() == canonical


def test_parse_update_valid_dict_and_json_string_agree():
    from_dict = parse_update_args(VALID_UPDATE)
    from_text = parse_update_args(json.dumps(VALID_UPDATE))
    assert from_dict == from_text
    assert from_dict.ok and from_dict.issues == []
    assert from_dict.ops == VALID_UPDATE["sections"]
    assert from_dict.present == SECTIONS


def test_parse_update_tolerates_missing_wrapper_lowercase_ops_and_missing_sections():
    parsed = parse_update_args(
        {"Current State": {"op": "update", "content": "x"}, "Open Issues": {"op": " Append ", "items": ["a"]}}
    )
    assert parsed.ok
    assert parsed.ops["Current State"] == {"op": "UPDATE", "content": "x"}
    assert parsed.ops["Open Issues"] == {"op": "APPEND", "items": ["a"]}
    assert parsed.ops["Session Title"] == {"op": "KEEP"}
    assert parsed.present == ("Current State", "Open Issues")
    assert "Session Title: missing -> KEEP" in parsed.issues


@pytest.mark.parametrize(
    ("value", "op", "issue"),
    [
        ({"op": "DELETE"}, {"op": "KEEP"}, "Open Issues: unknown op 'DELETE' -> KEEP"),
        ({"content": "x"}, {"op": "KEEP"}, "Open Issues: unknown op None -> KEEP"),
        ("KEEP", {"op": "KEEP"}, "Open Issues: not an object ('KEEP') -> KEEP"),
        (
            {"op": "UPDATE", "content": 5},
            {"op": "KEEP"},
            "Open Issues: UPDATE content: input should be a valid string -> KEEP",
        ),
        (
            {"op": "UPDATE"},
            {"op": "KEEP"},
            "Open Issues: UPDATE content: input should be a valid string -> KEEP",
        ),
        (
            {"op": "APPEND", "items": "a"},
            {"op": "KEEP"},
            "Open Issues: APPEND items: input should be a valid list -> KEEP",
        ),
        (
            {"op": "APPEND", "items": [1, None]},
            {"op": "KEEP"},
            "Open Issues: APPEND has no string items -> KEEP",
        ),
        (
            {"op": "APPEND", "items": ["a", 1, {"x": 1}, "b"]},
            {"op": "APPEND", "items": ["a", "b"]},
            "Open Issues: 2 non-string APPEND item(s) dropped",
        ),
    ],
    ids=[
        "unknown_op",
        "missing_op",
        "bare_string",
        "non_string_content",
        "missing_content",
        "items_not_a_list",
        "only_non_string_items",
        "non_string_items_dropped",
    ],
)
def test_parse_update_problem_ops_are_data(value, op, issue):
    parsed = parse_update_args({"sections": {"Session Title": {"op": "KEEP"}, "Open Issues": value}})
    assert parsed.ok
    assert parsed.ops["Open Issues"] == op
    assert issue in parsed.issues


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "null",
        "",
        "not json",
        "{}",
        {},
        [],
        "[1, 2]",
        5,
        '"text"',
        {"sections": {}},
        {"foo": 1},
        {"Session Title": "x", "Open Issues": 3},
    ],
    ids=[
        "none",
        "json_null",
        "empty_string",
        "not_json",
        "empty_object_text",
        "empty_dict",
        "list",
        "json_list",
        "number",
        "json_string",
        "empty_sections",
        "no_known_section",
        "only_junk_values",
    ],
)
def test_parse_update_unusable_arguments_are_not_ok(raw):
    parsed = parse_update_args(raw)
    assert not parsed.ok
    assert parsed.issues
    assert parsed.ops == _all({"op": "KEEP"})
    assert parsed.present == ()


def test_parse_update_reads_aliases_and_double_encoded_arguments():
    parsed = parse_update_args(json.dumps(json.dumps({"sections": {"task_and_goals": {"op": "KEEP"}}})))
    assert parsed.ok and parsed.present == ("Task & Goals",)
    assert "section 'task_and_goals' read as 'Task & Goals'" in parsed.issues
    sections_as_text = parse_update_args({"sections": json.dumps({"Open Issues": {"op": "KEEP"}})})
    assert sections_as_text.ok and sections_as_text.present == ("Open Issues",)


def test_parse_update_reports_unknown_sections():
    parsed = parse_update_args({"Session Title": {"op": "KEEP"}, "Mood": {"op": "UPDATE", "content": "x"}})
    assert parsed.ok
    assert "unknown section 'Mood' ignored" in parsed.issues
    assert "Mood" not in parsed.ops


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("Task & Goals", "Task & Goals"),
        ("task & goals", "Task & Goals"),
        ("task_and_goals", "Task & Goals"),
        ("KEY FACTS AND DECISIONS", "Key Facts & Decisions"),
        ("Goals", None),
        (3, None),
    ],
)
def test_resolve_section_name(key, name):
    assert resolve_section_name(key) == name


def test_canonical_op_and_ops():
    assert canonical_op({"op": "keep", "extra": 1}) == ({"op": "KEEP"}, None)
    assert canonical_ops(None) == _all({"op": "KEEP"})
    assert canonical_ops({"sections": {"Open Issues": {"op": "APPEND", "items": ["a"]}}})["Open Issues"] == {
        "op": "APPEND",
        "items": ["a"],
    }


def test_parse_create_valid():
    sections = {name: f"body {i}" for i, name in enumerate(SECTIONS)}
    parsed = parse_create_args(json.dumps({"sections": sections}))
    assert parsed.ok and parsed.issues == [] and parsed.sections == sections


def test_parse_create_missing_and_non_string_sections_are_empty_and_reported():
    parsed = parse_create_args({"Session Title": "Trip", "Open Issues": ["a"]})
    assert parsed.ok
    assert parsed.sections == {name: "Trip" if name == "Session Title" else "" for name in SECTIONS}
    assert "Current State: missing -> empty" in parsed.issues
    assert "Open Issues: not a string (['a']) -> empty" in parsed.issues


@pytest.mark.parametrize(
    "raw",
    [None, "null", "{}", {}, "[]", "oops", {"sections": {}}, {"Session Title": "  ", "Open Issues": 4}],
    ids=[
        "none",
        "json_null",
        "empty_object_text",
        "empty_dict",
        "list",
        "not_json",
        "empty_sections",
        "no_body",
    ],
)
def test_parse_create_unusable_arguments_are_not_ok(raw):
    parsed = parse_create_args(raw)
    assert not parsed.ok and parsed.sections is None and parsed.issues
