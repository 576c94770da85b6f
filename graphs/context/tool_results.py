"""Large tool results seen through their synopsis, and read back by reference.

A result whose tokens exceed `offload_tokens` is shown to the model as its synopsis (`state.synopsis`), the
same bytes on every call; at a commit boundary the kept tail's older results are shown so too. The reference
of a stored result is its message's seq (`seq:12`); `read_window`, `find_in` and `listing` are what the read
tool answers with, on the stored messages of the live log and the archives alike.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage

from workmem.graphs.context.lc_messages import to_langchain_message
from workmem.state.archive_object import OWN_TOOLS, READ_TOOL_NAME
from workmem.state.errors import InvalidInput
from workmem.state.lru import LRU
from workmem.state.messages import (
    CONTENT_LAYOUT_META,
    DROPPED_BLOCKS_META,
    FINGERPRINT_META,
    IMAGE_TOKENS,
    INTERNAL_FLAG,
    content_blocks,
    is_image,
)
from workmem.state.payloads import is_payload
from workmem.state.synopsis import kind_of, synopsis
from workmem.state.tokens import count_tokens, token_head
from workmem.state.validation import require_int, require_text

REF_PREFIX = "seq:"
MAX_READ_TOKENS = 3_000  # the most one read of `read_tool_result` returns
# A tool result is shown whole on every call until a commit unless it alone is too large for the call: over a 16th of
# the model's input limit (8 000 tokens at 128k), at most 20 000. Chosen on the replay of the real coding sessions
# (docs/benchmarks.md): 8 000 kept 99.7-100 % of the recent grounds in view, 4 000 99.5-99.9 % for about the same
# tokens, 16 000 no more seen for more tokens; 2 000 hid 6 %.
OFFLOAD_SHARE_OF_LIMIT = 16
MAX_OFFLOAD_TOKENS = 20_000
# One read returns at most (trigger - READ_OVERHEAD) / READ_SHARE tokens, at least MIN_READ_TOKENS, at most
# MAX_READ_TOKENS: 160 at an 8 000-token trigger, 800 at 32 000, 3 000 from 114 500 on — a read must not fill the
# room a commit just made.
READ_OVERHEAD = 2_000
READ_SHARE = 37.5
MIN_READ_TOKENS = 128
DEFAULT_KEEP_TOOL_RESULTS = 3
MATCH_WINDOW = 400  # characters shown around a match
MAX_MATCHES = 8
SYNOPSIS_CACHE_SIZE = 4_096


def read_tokens_for(threshold: int) -> int:
    """The size of a synopsis, and the most one read of the read tool returns, at a trigger of `threshold` tokens."""
    return max(MIN_READ_TOKENS, min(MAX_READ_TOKENS, int((threshold - READ_OVERHEAD) / READ_SHARE)))


def offload_tokens_for(threshold: int, input_limit: int, line: Any = None) -> int:
    """The line past which a tool result is shown as its synopsis instead of whole — the setting `offload_tokens`,
    else a 16th of the model's input limit, at most 20 000 tokens (8 000 at a 128k limit)."""
    if line is not None:
        return line
    return max(read_tokens_for(threshold), min(MAX_OFFLOAD_TOKENS, input_limit // OFFLOAD_SHARE_OF_LIMIT))


def ref_of(seq: int) -> str:
    """The reference of the stored message `seq`."""
    return f"{REF_PREFIX}{seq}"


def parse_ref(ref: Any) -> int:
    """The seq a reference names (`seq:12`, or `12`); else `InvalidInput` naming `ref`."""
    if isinstance(ref, int) and not isinstance(ref, bool) and ref >= 1:
        return ref
    text = ref.strip() if isinstance(ref, str) else ""
    digits = text.removeprefix(REF_PREFIX).removeprefix("#")
    if not re.fullmatch(r"[0-9]{1,18}", digits) or int(digits) < 1:
        raise InvalidInput("ref", ref, f"must be a tool result's reference, like '{REF_PREFIX}12'")
    return int(digits)


def result_part(msg: dict[str, Any]) -> dict[str, Any] | None:
    """The `tool_result` part of a stored tool message (None for any other message)."""
    if msg.get("role") != "tool":
        return None
    return next((p for p in msg.get("parts") or [] if p.get("type") == "tool_result"), None)


class Synopses:
    """Synopses of stored tool results, computed once per (seq, fingerprint, limit) and reused on every call."""

    def __init__(self, size: int = SYNOPSIS_CACHE_SIZE) -> None:
        self._cache: LRU[tuple[Any, ...], tuple[str, int]] = LRU(size)
        self._messages: LRU[tuple[Any, ...], BaseMessage] = LRU(size)

    def message_of(self, shown: dict[str, Any], limit_tokens: int) -> BaseMessage:
        """The LangChain message of a stored tool message shown as its synopsis (`shown`: as `offloaded` made it)."""
        key = (shown["seq"], (shown.get("meta") or {}).get(FINGERPRINT_META), shown["tokens"], limit_tokens,
               shown.get("id"))
        message = self._messages.get(key)
        if message is None:
            message = to_langchain_message(shown)
            self._messages.put(key, message)
        return message

    def of(self, msg: dict[str, Any], limit_tokens: int) -> tuple[str, int]:
        """(synopsis text, its tokens) of the stored tool message `msg`."""
        key = (msg["seq"], (msg.get("meta") or {}).get(FINGERPRINT_META), msg.get("tokens"), limit_tokens)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        part = result_part(msg) or {}
        text = synopsis(part.get("content") or "", tool=part.get("name"), ref=ref_of(msg["seq"]),
                        limit_tokens=limit_tokens, tokens=msg.get("tokens"))
        value = (text, count_tokens(text))
        self._cache.put(key, value)
        return value


def shown_as_synopsis(entry: dict[str, Any], line: int, size: int, shrunk: set[int]) -> bool:
    """Whether a stored context entry goes out as its synopsis (of `size` tokens): a tool result over the `line`,
    or one over `size` a commit boundary shrank (its seq in `shrunk`)."""
    if "lc" in entry or entry.get("role") != "tool" or result_part(entry) is None:
        return False
    if entry["tokens"] > line:
        return True
    return entry["tokens"] > size and entry["seq"] in shrunk


def offloaded(entry: dict[str, Any], synopses: Synopses, limit_tokens: int) -> dict[str, Any]:
    """The stored entry with its result replaced by its synopsis (the stored message itself is unchanged) and, of
    its content blocks, its first image only (a screenshot is what the agent looks at, and no read brings an image
    back; a dozen would not fit where the text does not); its `original` is the LangChain message that carries the
    synopsis (built once)."""
    blocks = _blocks_of(entry)
    images = IMAGE_TOKENS * sum(1 for b in blocks if is_image(b))
    text, tokens = synopses.of({**entry, "tokens": max(entry["tokens"] - images, 0)}, limit_tokens)  # its text's size
    parts = [{**p, "content": text} if p.get("type") == "tool_result" else p for p in entry["parts"]]
    meta = {k: v for k, v in (entry.get("meta") or {}).items() if k not in ("content_blocks", CONTENT_LAYOUT_META)}
    first = next((b for b in blocks if is_image(b)), None)
    if first is not None:
        meta["content_blocks"] = [first]
    out = {**{k: v for k, v in entry.items() if k != "original"}, "parts": parts, "meta": meta,
           "tokens": tokens + (IMAGE_TOKENS if first is not None else 0), "synopsis": True}
    return {**out, "original": synopses.message_of(out, limit_tokens)}


def _blocks_of(entry: dict[str, Any]) -> list[Any]:
    """A stored result's content blocks — or, when its stored copy dropped them (over `max_message_bytes`), those of
    the agent state's own copy it is shown for (`original`)."""
    meta = entry.get("meta") or {}
    if DROPPED_BLOCKS_META in meta and isinstance(getattr(entry.get("original"), "content", None), list):
        return [b for b in entry["original"].content if isinstance(b, dict) and b.get("type") != "text"]
    return content_blocks(meta)


def read_window(msg: dict[str, Any], offset: Any, limit: Any, max_tokens: int) -> dict[str, Any]:
    """Characters `offset`…`offset + limit` of a stored tool result, at most `max_tokens` tokens."""
    text = (result_part(msg) or {}).get("content") or ""
    offset = require_int("offset", 0 if offset is None else offset, min=0)
    limit = require_int("limit", max_tokens * 4 if limit is None else limit, min=1)
    if offset and offset >= len(text):
        raise InvalidInput("offset", offset, f"past the end of the result ({len(text):,} characters)")
    piece = _within(text[offset:offset + min(limit, max_tokens * 4)], max_tokens)
    return {"ref": ref_of(msg["seq"]), **_about(msg, text), "offset": offset, "end": offset + len(piece),
            "text": piece}


def _within(piece: str, max_tokens: int) -> str:
    """The head of `piece` its first `max_tokens` tokens spell (one encode; re-encoding a token prefix never
    takes more tokens) — at least its first character, so a read always moves on (an emoji takes several
    tokens: a cap of one or two would spell none of it)."""
    head = token_head(piece, max_tokens)
    return head or piece[:1]


def find_in(msg: dict[str, Any], query: Any) -> list[dict[str, Any]]:
    """Windows of a stored tool result around each match of `query` (literal, case-insensitive)."""
    needle = require_text("query", query).strip()
    text = (result_part(msg) or {}).get("content") or ""
    out = []
    for match in re.finditer(re.escape(needle), text, re.I):
        start = max(0, match.start() - MATCH_WINDOW // 2)
        if out and start < out[-1]["end"]:
            continue  # inside the previous window
        end = min(len(text), match.end() + MATCH_WINDOW // 2)
        out.append({"ref": ref_of(msg["seq"]), "offset": start, "end": end, "text": text[start:end]})
        if len(out) == MAX_MATCHES:
            break
    return out


def within_read_cap(matches: list[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """The windows around matches that one read may return: in order while their tokens fit `max_tokens`, the one
    that crosses it cut to what is left (a long query makes long windows; a read keeps its cap)."""
    out, left = [], max_tokens
    for match in matches:
        if left <= 0:
            break
        piece = _within(match["text"], left)
        out.append({**match, "end": match["offset"] + len(piece), "text": piece} if piece != match["text"] else match)
        left -= count_tokens(piece)
    return out


def listing(messages: list[dict[str, Any]], min_tokens: int) -> list[dict[str, Any]]:
    """The session's tool results over `min_tokens`, oldest first, but workmem's own tools' answers: reference,
    tool, kind, size (from the stored record of a payload when its text was not read:
    `messages_in_range(texts=False)`)."""
    return [{"ref": ref_of(m["seq"]), **_about(m, (result_part(m) or {}).get("content") or "")}
            for m in messages if agent_result(m) and m["tokens"] > min_tokens]


def agent_result(msg: dict[str, Any]) -> bool:
    """A stored result of one of the agent's own tools (not of workmem's: a read, a search, an expand)."""
    part = result_part(msg)
    return part is not None and not part.get(INTERNAL_FLAG) and part.get("name") not in OWN_TOOLS


def with_preview(msg: dict[str, Any]) -> dict[str, Any]:
    """A stored message whose payload was not read (`texts=False`) with its stored preview in the payload's place
    and how to read the whole result (any other message as it is)."""
    part = result_part(msg)
    if part is None or not is_payload(part) or "content" in part:
        return msg
    ref = ref_of(msg["seq"])
    note = (f"…[the whole result: {part.get('chars', 0):,} characters — {READ_TOOL_NAME}(ref=\"{ref}\", offset=0) "
            f"reads it by windows]")
    return {**msg, "parts": [{**part, "content": f"{part.get('preview') or ''}\n{note}"}]}


def _about(msg: dict[str, Any], text: str) -> dict[str, Any]:
    part = result_part(msg) or {}
    if is_payload(part) and "content" not in part:  # the stored record: its size and preview, the payload unread
        text = part.get("preview") or ""
        chars = part.get("chars") if isinstance(part.get("chars"), int) else len(text)
    else:
        chars = len(text)
    about = {"tool": part.get("name"), "kind": kind_of(text), "chars": chars, "tokens": msg["tokens"],
             "archive_id": msg.get("archive_id")}
    if "sha256" in part:  # stored as a payload
        about["sha256"] = part["sha256"]
    return about
