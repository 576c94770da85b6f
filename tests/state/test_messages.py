"""Message normalisation, validation, text, and the LangChain round trip."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from oracles import normalize_messages, validate_message

from workmem.graphs.context.lc_messages import to_langchain_message, to_langchain_messages
from workmem.graphs.context.tool_results import Synopses, offloaded
from workmem.state.errors import InvalidInput
from workmem.state.files.store import SessionStore
from workmem.state.messages import (
    IMAGE_TOKENS,
    fingerprint,
    indexed_text,
    message_text,
    message_tokens,
    normalize_message,
    prepare_messages,
)
from workmem.state.tokens import count_tokens


def test_langchain_messages_by_duck_typing():
    ai = AIMessage(content="let me look", tool_calls=[{"id": "c1", "name": "read_file", "args": {"path": "a.py"}}])
    tool = ToolMessage(content="print(1)", tool_call_id="c1", name="read_file")
    assert normalize_message(HumanMessage(content="hi", name="ann", id="h1")) == {
        "role": "user", "parts": [{"type": "text", "text": "hi"}],
        "meta": {"name": "ann", "lc_id": "h1",
                 "fp": fingerprint({"role": "user", "parts": [{"type": "text", "text": "hi"}]})}}
    assert normalize_message(ai)["parts"] == [
        {"type": "text", "text": "let me look"},
        {"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}]
    assert normalize_message(tool)["parts"] == [
        {"type": "tool_result", "tool_call_id": "c1", "name": "read_file", "content": "print(1)", "is_error": False}]
    assert normalize_message(SystemMessage(content="be brief"))["role"] == "system"
    assert normalize_message(ChatMessage(role="assistant", content="x"))["role"] == "assistant"


def test_tool_error_status_and_block_content():
    tool = ToolMessage(content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                       tool_call_id="c9", status="error")
    part = normalize_message(tool)["parts"][0]
    assert part["content"] == "a\nb" and part["is_error"] is True and part["name"] is None


def test_ai_message_with_empty_content_and_tool_call_only():
    msg = normalize_message(AIMessage(content="", tool_calls=[{"id": "c1", "name": "f", "args": {}}]))
    assert [p["type"] for p in msg["parts"]] == ["tool_call"]


def test_anthropic_style_tool_use_blocks_become_calls_when_tool_calls_is_empty():
    msg = AIMessage(content=[{"type": "text", "text": "ok"},
                             {"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "x"}}])
    parts = normalize_message(msg)["parts"]
    assert parts[1] == {"type": "tool_call", "id": "t1", "name": "grep", "arguments": {"q": "x"}}


def test_a_responses_api_function_call_block_is_its_call_id_and_one_call_with_its_invalid_twin():
    """langchain-openai's Responses output for a call whose arguments are not JSON: a `function_call` block (item
    id fc_…, call id call_…) beside the `invalid_tool_calls` entry; it was stored as two calls, one under fc_…."""
    block = {"type": "function_call", "id": "fc_x", "call_id": "call_x", "name": "lookup",
             "arguments": '{"q": "unterminated'}
    msg = AIMessage(content=[{"type": "text", "text": "Let me look."}, block], invalid_tool_calls=[
        {"type": "invalid_tool_call", "id": "call_x", "name": "lookup", "args": '{"q": "unterminated', "error": "x"}])
    calls = [p for p in normalize_message(msg)["parts"] if p["type"] == "tool_call"]
    assert [c["id"] for c in calls] == ["call_x"]
    parsed = normalize_message(AIMessage(content=[{**block, "arguments": '{"q": "x"}'}]))["parts"]
    assert parsed == [{"type": "tool_call", "id": "call_x", "name": "lookup", "arguments": {"q": "x"}}]


def test_non_text_blocks_are_kept_in_meta():
    img = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
    msg = normalize_message(HumanMessage(content=[{"type": "text", "text": "look"}, img]))
    assert msg["parts"] == [{"type": "text", "text": "look"}] and msg["meta"]["content_blocks"] == [img]


def test_openai_dicts():
    call = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"k": [1, 2]}'}}
    assistant = normalize_message({"role": "assistant", "content": None, "tool_calls": [call]})
    assert assistant["parts"] == [{"type": "tool_call", "id": "call_1", "name": "get", "arguments": {"k": [1, 2]}}]
    tool = normalize_message({"role": "tool", "tool_call_id": "call_1", "name": "get", "content": "42"})
    assert tool["parts"][0]["content"] == "42" and tool["parts"][0]["tool_call_id"] == "call_1"
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    user = normalize_message({"role": "user", "content": blocks})
    assert [p["text"] for p in user["parts"]] == ["a", "b"]
    assert normalize_message({"role": "developer", "content": "rules"})["role"] == "system"


def test_malformed_openai_arguments_are_kept_raw():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}}
    part = normalize_message({"role": "assistant", "tool_calls": [call]})["parts"][0]
    assert part["arguments"] == '{"a": 1'
    lc = to_langchain_message({"role": "assistant", "parts": [part], "meta": {}})
    assert lc.tool_calls == [] and lc.invalid_tool_calls[0]["args"] == '{"a": 1'


def test_workmem_dicts_pass_through_and_drop_store_fields():
    stored = {"id": "m-1", "seq": 4, "turn_id": "t2", "tokens": 3, "created_at": "x", "role": "user",
              "parts": [{"type": "text", "text": "hi"}, {"type": "context", "uri": "wm://a", "abstract": "note"}],
              "meta": {"k": 1}}
    assert normalize_message(stored) == {"role": "user", "parts": stored["parts"],
                                         "meta": {"k": 1, "fp": fingerprint(stored)}}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "wizard", "content": "x"}, "messages[1].role"),
        ({"content": "x"}, "messages[1].role"),
        ({"role": "user", "content": ""}, "messages[1].parts"),
        ({"role": "assistant", "content": None}, "messages[1].parts"),
        ({"role": "user", "parts": []}, "messages[1].parts"),
        ({"role": "user", "content": b"bytes"}, "messages[1].content"),
        ({"role": "user", "content": "bad \ud800 surrogate"}, "messages[1].parts[0].text"),
        ({"role": "user", "content": "x", "meta": {"k": b"\xff"}}, "messages[1].meta.k"),
        ({"role": "user", "content": "x", "meta": {"k": object()}}, "messages[1].meta.k"),
        ({"role": "user", "parts": [{"type": "video"}]}, "messages[1].parts[0].type"),
        ({"role": "user", "parts": [{"type": "tool_call", "id": "a", "name": "f", "arguments": {}}]},
         "messages[1].parts[0].type"),
        ({"role": "tool", "content": "r"}, "messages[1].parts[0].tool_call_id"),
        ({"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "", "arguments": "{}"}}]},
         "messages[1].parts[0].name"),
        (42, "messages[1]"),
    ],
)
def test_bad_messages_name_the_field(message, field):
    with pytest.raises(InvalidInput) as err:
        normalize_messages([{"role": "user", "content": "fine"}, message])
    assert err.value.field == field


def test_unknown_langchain_type_is_rejected():
    class Weird:
        type = "function"
        content = "x"

    with pytest.raises(InvalidInput) as err:
        normalize_message(Weird(), field="messages[0]")
    assert err.value.field == "messages[0].type"


def test_size_cap_is_configurable():
    big = {"role": "user", "content": "é" * 600}  # 1 200 bytes of UTF-8
    normalize_message(big, max_bytes=2000)
    with pytest.raises(InvalidInput, match="cap of 1000 bytes"):
        normalize_message(big, max_bytes=1000)
    msg = normalize_message({"role": "user", "content": "x" * 100})
    assert validate_message(msg) > 100


def test_oversized_message_is_rejected_before_anything_is_written(root):
    store = SessionStore(root, durable=False, max_message_bytes=1 << 10)
    with pytest.raises(InvalidInput) as err:
        store.append("s", [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 2000}])
    assert err.value.field == "messages[1]"
    assert not store.session_exists("s") and not (root / "sessions").exists()


def test_message_text_is_deterministic():
    msg = {"parts": [{"type": "text", "text": "see"},
                     {"type": "tool_call", "id": "1", "name": "grep", "arguments": {"q": "é", "n": 2}},
                     {"type": "tool_result", "tool_call_id": "1", "name": "grep", "content": "hit", "is_error": False},
                     {"type": "context", "uri": "wm://x", "abstract": "abs"}]}
    assert message_text(msg) == 'see\ngrep({"q": "é", "n": 2})\nhit\nwm://x abs'


def _conversation():
    return [
        SystemMessage(content="You are terse."),
        HumanMessage(content="Read a.py and b.py", id="h1"),
        AIMessage(content="", id="a1", tool_calls=[
            {"id": "call_a", "name": "read_file", "args": {"path": "a.py"}},
            {"id": "call_b", "name": "read_file", "args": {"path": "b.py", "opts": {"lines": [1, 2]}}}]),
        ToolMessage(content="print('a')", tool_call_id="call_a", name="read_file"),
        ToolMessage(content="No such file", tool_call_id="call_b", name="read_file", status="error"),
        AIMessage(content=[{"type": "text", "text": "a.py prints a;"}, {"type": "text", "text": "b.py is missing"}]),
    ]


def test_langchain_round_trip_through_the_store(root):
    original = _conversation()
    store = SessionStore(root, durable=False)
    store.append("rt", original)
    back = to_langchain_messages(SessionStore(root).live_messages("rt"))
    assert [type(m) for m in back] == [type(m) for m in original]
    assert back[1].content == "Read a.py and b.py" and back[1].id == "h1"
    assert back[2].tool_calls == original[2].tool_calls
    for got, want in zip(back[3:5], original[3:5], strict=True):
        assert (got.tool_call_id, got.name, got.content, got.status) == (
            want.tool_call_id, want.name, want.content, want.status)
    assert back[5].content == original[5].content
    def shape(m):
        n = normalize_message(m)
        return n["role"], n["parts"]

    assert [shape(m) for m in back] == [shape(m) for m in original]


def test_round_trip_keeps_additional_kwargs_and_json_args():
    ai = AIMessage(content="x", additional_kwargs={"refusal": None, "tool_calls": ["dup"]},
                   tool_calls=[{"id": "c", "name": "f", "args": {"s": "ü", "n": None}}])
    stored = normalize_message(ai)
    assert stored["meta"]["additional_kwargs"] == {"refusal": None}
    json.dumps(stored)
    back = to_langchain_message(stored)
    assert back.additional_kwargs == {"refusal": None} and back.tool_calls == ai.tool_calls


@pytest.mark.parametrize("original", [
    AIMessage(content=[{"type": "thinking", "thinking": "Check the log.", "signature": "sig-1"},
                       {"type": "text", "text": "Let me look."}], id="anthropic"),
    AIMessage(content=[{"type": "reasoning", "id": "rs_1", "summary": []},
                       {"type": "text", "text": "Done.", "id": "msg_1", "annotations": [{"type": "url_citation"}]}],
              id="responses"),
    ToolMessage(content=[{"type": "text", "text": "the screen"},
                         {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}],
                tool_call_id="c1", id="screenshot"),
    HumanMessage(content=[{"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                          {"type": "text", "text": "what is this?"}], id="image-first"),
], ids=lambda m: m.id)
def test_content_blocks_come_back_from_the_store_as_they_were_sent(root, original):
    """A message rebuilt from the store (a new thread of the session, a client sending only new messages) put its
    texts first and dropped a tool result's image: Anthropic refuses thinking after text, the Responses API a
    reasoning item its message does not follow."""
    SessionStore(root, durable=False).append("blocks", [original])
    back = to_langchain_message(SessionStore(root).live_messages("blocks")[0])
    assert back.content == original.content and type(back) is type(original)
    assert fingerprint(normalize_message(back)) == fingerprint(normalize_message(original))


def test_an_image_counts_as_a_provider_bills_it_not_as_nothing(root):
    """20 screenshots went out in one call counted as 262 tokens: a computer-use agent's trigger never fired."""
    shot = {"type": "image", "base64": "iVBORw0KGgo=" * 1000, "mime_type": "image/png"}
    store = SessionStore(root, durable=False)
    store.append("shots", [ToolMessage(content=[{"type": "text", "text": "the screen"}, shot, shot], tool_call_id="c"),
                           HumanMessage(content="the screen")])
    with_images, text_only = store.live_messages("shots")
    assert with_images["tokens"] == text_only["tokens"] + 2 * IMAGE_TOKENS
    assert message_tokens(normalize_message(HumanMessage(content=[shot]))) == IMAGE_TOKENS


def test_a_cache_breakpoint_is_not_kept_for_a_rebuilt_message():
    """A client marking each new turn with `cache_control`: every older turn rebuilt from the store carried its
    breakpoint again (8 in one call; Anthropic allows 4)."""
    marked = normalize_message(HumanMessage(content=[{"type": "text", "text": "Q", "cache_control": {"type": "x"}}]))
    assert "content_layout" not in marked["meta"] and to_langchain_message(marked).content == "Q"


@pytest.mark.parametrize("images", [1, 12])
def test_a_result_shown_as_its_synopsis_keeps_its_first_image(images):
    """A synopsis that dropped every image hid a screenshot at a small input limit (no read brings an image back);
    one that kept a dozen did not fit where the text did not, and the run overflowed."""
    shots = [{"type": "image", "base64": f"img{i}"} for i in range(images)]
    text = "\n".join(f"line {i}: pixel row" for i in range(400))
    stored = normalize_message(ToolMessage(content=[{"type": "text", "text": text}, *shots], tool_call_id="c1"))
    entry = {**stored, "seq": 5, "tokens": count_tokens(text) + images * IMAGE_TOKENS}
    shown = offloaded(entry, Synopses(), 200)
    assert shown["original"].content[1:] == [shots[0]] and shown["original"].content[0]["type"] == "text"
    assert shown["tokens"] == count_tokens(shown["parts"][0]["content"]) + IMAGE_TOKENS
    assert f"{count_tokens(text):,} tokens" in shown["parts"][0]["content"], "the marker counts the text"


@pytest.mark.parametrize("batch", [
    [{"role": "user", "content": "plain ascii"}, {"role": "assistant", "content": 'quotes " and \\ and \x1f'}],
    [{"role": "user", "content": "plain"}, {"role": "assistant", "content": "non-ascii é ✓ \u2028"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "print(1)"}],
], ids=["all_plain_fast_path", "mixed"])
def test_stored_lines_are_the_compact_json_of_the_stored_dicts(batch):
    """Whichever path validated a message (plain fast path or general), its line is the same bytes."""
    from workmem.state.files.jsonl import stored_lines
    from workmem.state.jsonutil import dumps
    from workmem.state.messages import prepare_messages

    prepared = prepare_messages(batch)
    stored, data, _turn = stored_lines(prepared, [3] * len(batch), 1, 0, "2026-01-01T00:00:00+00:00")
    assert data == b"".join(dumps(m) + b"\n" for m in stored)
    assert [json.loads(line) for line in data.splitlines()] == stored


def test_a_fingerprint_ignores_shape_ids_and_metadata_but_not_content():
    """A stateless client re-sends a message as a dict; the stored one came as a LangChain message."""
    call = {"id": "call_0", "name": "read_file", "args": {"path": "a.py", "n": 1}}
    as_langchain = normalize_message(AIMessage(content="looking", tool_calls=[call], id="run-1",
                                               response_metadata={"model": "x"}))
    as_openai = normalize_message({"role": "assistant", "content": "looking", "tool_calls": [
        {"id": "call_0", "type": "function",
         "function": {"name": "read_file", "arguments": '{"n": 1, "path": "a.py"}'}}]})
    assert as_langchain["meta"]["fp"] == as_openai["meta"]["fp"]
    changed = [
        AIMessage(content="looking!", tool_calls=[call]),
        AIMessage(content="looking", tool_calls=[{**call, "id": "call_1"}]),
        AIMessage(content="looking", tool_calls=[{**call, "args": {"path": "b.py", "n": 1}}]),
        HumanMessage(content="looking"),
    ]
    assert len({as_langchain["meta"]["fp"], *(normalize_message(m)["meta"]["fp"] for m in changed)}) == 5
    result = ToolMessage(content="x = 1", tool_call_id="call_0")
    other_call = ToolMessage(content="x = 1", tool_call_id="c9")
    assert normalize_message(result)["meta"]["fp"] != normalize_message(other_call)["meta"]["fp"]
    plain = prepare_messages([{"role": "user", "content": "hello"}])[0][0]
    assert "fp" not in plain["meta"], "an id-less plain message can repeat nothing: no fingerprint is stored"
    assert fingerprint(plain) == normalize_message(HumanMessage(content="hello", id="z"))["meta"]["fp"]
    assert fingerprint({"role": "user", "parts": [None]}) == fingerprint({"role": "user", "parts": []})  # skipped


def test_own_tool_traffic_is_flagged_per_part_and_left_out_of_the_index():
    """A call to archive_search beside a user tool call: only the search part is flagged."""
    batch = [
        {"role": "assistant", "content": "checking", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "archive_search", "arguments": '{"query": "port"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 archived message(s) match 'port'"},  # no name
        {"role": "tool", "tool_call_id": "c2", "content": "PORT = 8080"},
    ]
    (call, _), (ours, _), (theirs, _) = prepare_messages(batch)
    assert [p.get("internal", False) for p in call["parts"]] == [False, True, False]
    assert ours["parts"][0]["internal"] is True and "internal" not in theirs["parts"][0]
    assert "archive_search" not in indexed_text(call) and "read_file" in indexed_text(call)
    assert indexed_text(ours) == "" and indexed_text(theirs) == "PORT = 8080"
    assert message_text(ours) != ""  # still stored and counted
