"""`storable_form`: what cannot be stored as it is (deep nesting, lone surrogates, values JSON cannot hold) becomes
a form storage accepts, of the caller's kind, recording what changed; anything else comes back untouched."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from workmem.state.errors import InvalidInput
from workmem.state.messages import MAX_NESTING, NO_BYTE_CAP, normalize_message
from workmem.state.safe_form import FLAT_DEPTH, SAFE_FORM_META, json_text, storable_form


def nested(levels: int, leaf: object = "bottom") -> dict:
    node: object = leaf
    for i in range(levels - 1):
        node = {"k": node, "i": i} if i % 2 else [node]
    return {"type": "data", "value": node}


def storable(message: object) -> dict:
    return normalize_message(message, max_bytes=NO_BYTE_CAP)


@pytest.mark.parametrize("message", [
    HumanMessage("plain", id="h"), AIMessage("", tool_calls=[{"id": "c", "name": "f", "args": {"a": [1, {"b": 2}]}}]),
    ToolMessage([nested(MAX_NESTING - 2)], tool_call_id="c"), {"role": "user", "content": "hi"},
    {"role": "tool", "parts": [{"type": "tool_result", "tool_call_id": "c", "content": "é", "is_error": False}]},
])
def test_a_storable_message_comes_back_as_it_is(message):
    assert storable_form(message) == (message, None)


@pytest.mark.parametrize("levels", [MAX_NESTING + 16, 5_000])
def test_deep_blocks_are_stored_with_their_deepest_part_as_json_text(levels):
    message = ToolMessage(content=[{"type": "text", "text": "listing"}, nested(levels)], tool_call_id="c1", id="t1")
    with pytest.raises(InvalidInput):
        storable(message)
    safe, note = storable_form(message)
    msg = storable(safe)
    assert isinstance(safe, ToolMessage) and safe.id == "t1" and safe.tool_call_id == "c1"
    assert msg["parts"][0]["content"] == "listing"
    assert "nested" in note and str(MAX_NESTING) in note
    record = msg["meta"]["additional_kwargs"][SAFE_FORM_META]
    assert record == {"flattened": 1, "depth": levels + 1}
    block = msg["meta"]["content_blocks"][0]
    node, depth = block, 2
    while not isinstance(node, str):
        node = node["value"] if "value" in node else node[0] if isinstance(node, list) else node["k"]
        depth += 1
    assert depth == FLAT_DEPTH + 1, "the structure is kept down to FLAT_DEPTH, its rest is one JSON string"
    assert node[0] in "[{" and "bottom" in node
    if levels < 500:
        assert json.loads(node) is not None
    assert message.content[1]["value"] is not None and isinstance(message.content[1], dict), "original untouched"


def test_lone_surrogates_are_escaped_in_content_arguments_names_and_keys():
    name = b"report-\xff.txt".decode("utf-8", "surrogateescape")
    reply = AIMessage(f"reading {name}", id="a1", tool_calls=[{"id": "c1", "name": "read", "args": {"path": name,
                                                                                                   name: [name]}}])
    result = ToolMessage(f"{name}: 3 lines", tool_call_id="c1", name="read", id="t1")
    for message in (reply, result):
        with pytest.raises(InvalidInput):
            storable(message)
    safe_reply, note = storable_form(reply)
    msg = storable(safe_reply)
    assert msg["parts"][0]["text"] == "reading report-\\udcff.txt" and "4 lone surrogate(s)" in note
    assert safe_reply.tool_calls[0]["args"] == {"path": "report-\\udcff.txt", "report-\\udcff.txt": [
        "report-\\udcff.txt"]}
    safe_result, _ = storable_form(result)
    assert storable(safe_result)["parts"][0]["content"] == "report-\\udcff.txt: 3 lines"
    assert storable(safe_result)["meta"]["additional_kwargs"][SAFE_FORM_META] == {"surrogates": 1}


def test_dicts_stay_dicts_with_the_record_in_their_meta():
    message = {"role": "tool", "tool_call_id": "c", "content": "bad \udc80", "meta": {"lc_id": "x"}}
    safe, note = storable_form(message)
    msg = storable(safe)
    assert msg["meta"]["lc_id"] == "x" and msg["meta"][SAFE_FORM_META] == {"surrogates": 1}
    assert message["content"] == "bad \udc80" and "meta" in message and SAFE_FORM_META not in message["meta"]
    lc_dict = {"type": "human", "data": {"content": [nested(MAX_NESTING + 1)], "id": "h"}}
    safe, _ = storable_form(lc_dict)
    assert storable(safe)["meta"]["additional_kwargs"][SAFE_FORM_META]["flattened"] == 1
    assert "additional_kwargs" not in lc_dict["data"]


def test_values_json_cannot_hold_become_text():
    message = {"role": "user", "content": "hi", "meta": {"score": float("nan"), 3: b"raw\xff"}}
    with pytest.raises(InvalidInput):
        storable(message)
    safe, note = storable_form(message)
    assert storable(safe)["meta"]["3"] == "raw\\xff" and storable(safe)["meta"]["score"] == "nan"
    assert "JSON cannot hold" in note and "bytes" in note


def test_the_same_message_gives_the_same_form():
    message = ToolMessage([nested(100)], tool_call_id="c", id="t")
    assert storable(storable_form(message)[0]) == storable(storable_form(message)[0])


def test_json_text_writes_any_depth_iteratively():
    value = nested(20_000)
    text = json_text(value)
    assert text.startswith('{"type":"data","value":') and text.count("bottom") == 1
    assert json_text({"a": [1, 2.5, None, True, "é"], "b": {}}) == '{"a":[1,2.5,null,true,"é"],"b":{}}'
