"""clip_to_cap: a message over max_message_bytes becomes a copy that fits, with a visible marker."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import validate_message

from workmem.state.errors import InvalidInput
from workmem.state.messages import (
    CLIPPED_BYTES_META,
    DROPPED_BLOCKS_META,
    DROPPED_BLOCKS_NOTE,
    NO_BYTE_CAP,
    clip_to_cap,
    encode_body,
    normalize_message,
)

CAP = 4_096
MARKER = "…[workmem: clipped "


def size(msg: dict) -> int:
    return validate_message(msg, max_bytes=1 << 40)


def tool_result(content: str, call_id: str = "call_1") -> dict:
    return normalize_message({"role": "tool", "tool_call_id": call_id, "name": "dump", "content": content},
                             max_bytes=1 << 40)


def test_a_message_that_fits_is_returned_as_is():
    msg = tool_result("short")
    assert clip_to_cap(msg, CAP) is msg
    exact = tool_result("x" * (CAP - size(tool_result(""))))
    assert size(exact) == CAP and clip_to_cap(exact, CAP) is exact


def test_a_huge_tool_result_keeps_head_tail_ids_and_records_its_size():
    content = "HEAD " + "0123456789" * 1_000 + " TAIL"
    msg = tool_result(content)
    before = copy.deepcopy(msg)
    out = clip_to_cap(msg, CAP)
    assert msg == before, "the input is not modified"
    assert size(out) <= CAP and size(out) > CAP - 200, "clipped no more than needed"
    part = out["parts"][0]
    assert (out["role"], part["tool_call_id"], part["name"], part["is_error"]) == ("tool", "call_1", "dump", False)
    assert part["content"].startswith("HEAD 0123") and part["content"].endswith("789 TAIL")
    removed = len(content) - len(part["content"].split(MARKER)[0]) - len(part["content"].split("]…")[-1])
    assert f"{MARKER}{removed} bytes — the message exceeded max_message_bytes]…" in part["content"]
    assert out["meta"][CLIPPED_BYTES_META] == size(msg)


def test_multibyte_and_escaped_text_still_fits():
    content = ("é\"\\\n\x01日本🙂" * 2_000)
    out = clip_to_cap(tool_result(content), CAP)
    assert size(out) <= CAP and MARKER in out["parts"][0]["content"]


def test_the_largest_piece_goes_first_and_small_ones_are_untouched():
    msg = normalize_message({"role": "assistant", "content": "I will write the file now.", "tool_calls": [
        {"id": "call_w", "type": "function",
         "function": {"name": "write_file", "arguments": '{"path": "big.txt", "content": "' + "y" * 20_000 + '"}'}},
        {"id": "call_r", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
    ]}, max_bytes=1 << 40)
    out = clip_to_cap(msg, CAP)
    assert size(out) <= CAP
    text, write, read = out["parts"]
    assert text == {"type": "text", "text": "I will write the file now."}
    assert (write["id"], write["name"], write["arguments"]["path"]) == ("call_w", "write_file", "big.txt")
    assert MARKER in write["arguments"]["content"]
    assert read == msg["parts"][2]


def test_an_oversized_content_block_is_dropped_whole_and_noted():
    image = {"type": "image", "source_type": "base64", "mime_type": "image/png", "data": "A" * 10_000}
    small = {"type": "image", "source_type": "url", "url": "https://example.com/a.png"}
    msg = normalize_message({"role": "user", "content": [{"type": "text", "text": "What is on it?"}, image, small]},
                            max_bytes=1 << 40)
    out = clip_to_cap(msg, CAP)
    assert size(out) <= CAP
    assert out["meta"]["content_blocks"] == [small] and out["meta"][DROPPED_BLOCKS_META] == 1
    assert [p["text"] for p in out["parts"]] == ["What is on it?", DROPPED_BLOCKS_NOTE]


def test_a_message_whose_structure_alone_is_too_large_is_a_typed_error():
    calls = [{"id": f"call_{i:05d}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
             for i in range(500)]
    msg = normalize_message({"role": "assistant", "content": "", "tool_calls": calls}, max_bytes=1 << 40)
    with pytest.raises(InvalidInput):
        clip_to_cap(msg, CAP)


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=0, max_size=30_000), st.integers(1_000, 20_000))
def test_the_result_always_fits_and_is_marked_when_clipped(text, cap):
    msg = normalize_message({"role": "user", "content": [{"type": "text", "text": "question"},
                                                         {"type": "text", "text": text or "x"}]},
                            max_bytes=1 << 40)
    out = clip_to_cap(msg, cap)
    assert size(out) <= cap
    if size(msg) <= cap:
        assert out is msg
    else:
        assert out["meta"][CLIPPED_BYTES_META] == size(msg) and MARKER in out["parts"][1]["text"]
        assert out["parts"][0]["text"] == "question"
        assert clip_to_cap(out, cap) is out


def test_a_quote_heavy_result_keeps_all_the_cap_allows():
    # JSON escapes each quote with a backslash: the clip is chosen by stored bytes, not characters, so a 3.8 MB
    # JSON result clipped to 1 MiB keeps close to 1 MiB (an earlier count kept about a third of that)
    big = json.dumps([{"id": i, "name": f'item "{i}"', "tags": ['a"b', "c"]} for i in range(60_000)])
    msg = normalize_message({"role": "tool", "tool_call_id": "c", "name": "api", "content": big},
                            max_bytes=NO_BYTE_CAP)
    clipped = clip_to_cap(msg, 1 << 20)
    stored = len(encode_body(clipped, max_bytes=NO_BYTE_CAP))
    assert 0.95 * (1 << 20) <= stored <= 1 << 20
    content = clipped["parts"][0]["content"]
    assert content.startswith(big[:1000]) and content.endswith(big[-1000:]) and "…[workmem: clipped " in content
