"""A stored message record: built from a validated batch, and the shape check every reader
of stored messages applies, whichever backend holds them."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.messages import (
    ALLOWED_PARTS,
    CLIPPED_BYTES_META,
    FINGERPRINT_META,
    FORGOTTEN_META,
    LC_ID_META,
    ROLES,
    image_tokens,
    lc_id,
    message_text,
    prepare_messages,
    same_blocks,
)
from workmem.state.payloads import DEFAULT_LIMITS, PayloadLimits
from workmem.state.tokens import count_tokens_each

log = logging.getLogger("workmem.store")
Prepared = list[tuple[dict[str, Any], bytes | None]]


def prepared_batch(messages: list[Any], durable: bool | None, max_bytes: int,
                   limits: PayloadLimits = DEFAULT_LIMITS) -> tuple[Prepared, list[int]]:
    """An append's messages validated and normalised, large tool results made payloads, with their
    token counts (a payload's counted once, by `externalize`); `durable` must be a bool or None. Every
    backend's `append` starts here, before it touches storage."""
    if durable is not None and not isinstance(durable, bool):
        raise InvalidInput("durable", durable, "must be a bool or None")
    prepared = prepare_messages(messages, max_bytes=max_bytes, payloads=limits)
    if not prepared:
        return prepared, []
    images = [image_tokens(msg) for msg, _body in prepared]
    if not any("content_ref" in msg["parts"][0] for msg, _body in prepared):  # the usual batch: no payload
        counts = count_tokens_each([message_text(msg) for msg, _body in prepared])
        return prepared, [c + i for c, i in zip(counts, images, strict=True)]
    counted = [_payload_tokens(msg, limits) for msg, _body in prepared]  # a payload's, counted by `externalize`
    counts = count_tokens_each(["" if n is not None else message_text(m)
                                for n, (m, _body) in zip(counted, prepared, strict=True)])
    return prepared, [(c if n is None else n) + i for c, n, i in zip(counts, counted, images, strict=True)]


def _payload_tokens(msg: dict[str, Any], limits: PayloadLimits) -> int | None:
    """The token count a payload part carries (a tool message has one part), else None; one WARNING for a result
    stored clipped."""
    part = msg["parts"][0]
    if "content_ref" not in part:  # `payloads.is_payload`, inlined: this runs for every message of every append
        return None
    if part.get("clipped"):
        log.warning("a tool result of %d bytes exceeds max_payload_bytes (%d): its head and tail are stored",
                    msg["meta"][CLIPPED_BYTES_META], limits.max_payload_bytes)
    return part["tokens"]


def stored_records(prepared: list[tuple[dict[str, Any], bytes | None]], counts: list[int], first_seq: int, turn: int,
                   now: str) -> tuple[list[dict[str, Any]], int]:
    """Stored messages of a validated batch and the turn number after them.

    ids are 128 random bits (like uuid4) drawn in one call. `turn_id` is `t<n>`, n growing at each
    user message. Keys are in the order a stored line is written.
    """
    ids = os.urandom(16 * len(prepared)).hex()
    turn_ids = []
    for msg, _body in prepared:
        if msg["role"] == "user":
            turn += 1
        turn_ids.append(f"t{turn}")
    stored = [{"id": f"m-{ids[k:k + 32]}", "seq": seq, "turn_id": turn_id, "role": msg["role"], "created_at": now,
               "tokens": tokens, "meta": msg["meta"], "parts": msg["parts"]}
              for k, seq, turn_id, (msg, _body), tokens in zip(range(0, 32 * len(prepared), 32),
                                                               range(first_seq, first_seq + len(prepared)), turn_ids,
                                                               prepared, counts, strict=True)]
    return stored, turn


def check_stored(obj: Any) -> str:
    """Why `obj` is not a stored message ('' when it looks like one); a cheap shape check per line."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    seq = obj.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return f"bad seq {seq!r}"
    if obj.get("role") not in ROLES:
        return f"bad role {obj.get('role')!r}"
    if not isinstance(obj.get("parts"), list):
        return "parts is not a list"
    tokens = obj.get("tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return f"bad tokens {tokens!r}"
    if not isinstance(obj.get("meta", {}), dict):
        return "meta is not a JSON object"
    role = obj["role"]
    for part in obj["parts"]:  # every read checks every line: the two common parts first, inline
        if type(part) is dict and ((role == "tool" and part.get("type") == "tool_result"
                                    and type(part.get("tool_call_id")) is str and type(part.get("content")) is str)
                                   or (role != "tool" and part.get("type") == "text"
                                       and type(part.get("text")) is str)):
            continue
        if reason := _part_problem(part, role):
            return reason
    return ""


_PART_STRINGS = {"text": ("text",), "tool_call": ("name",), "tool_result": ("tool_call_id",),
                 "context": ("uri", "abstract")}  # what every reader of a part takes for granted


def _part_problem(part: Any, role: str) -> str:
    """Why a stored part is not one ('' when it looks like one): a damaged key would fail every later reader."""
    if not isinstance(part, dict):
        return "a part is not a JSON object"
    kind = part.get("type")
    if kind not in ALLOWED_PARTS[role]:
        return f"bad part type {kind!r} in a {role} message"
    missing = next((key for key in _PART_STRINGS[kind] if not isinstance(part.get(key), str)), None)
    if missing is None and kind == "tool_result" and not isinstance(part.get("content", part.get("content_ref")), str):
        missing = "content"
    if missing is None and kind == "tool_call" and not isinstance(part.get("arguments"), (dict, str)):
        missing = "arguments"
    return f"a {kind} part without its {missing}" if missing else ""


def batch_ids(prepared: list[tuple[dict[str, Any], bytes | None]]) -> list[str]:
    """The LangChain ids a batch carries (what an append must look up to stay idempotent)."""
    return [i for msg, _body in prepared if (i := lc_id(msg))]


def has_ids(prepared: list[tuple[dict[str, Any], bytes | None]]) -> bool:
    """Whether a batch carries a LangChain id (`batch_ids` non-empty; checked on every append, so inlined)."""
    return any((meta := msg["meta"]).get(LC_ID_META) or meta.get("source_id") for msg, _body in prepared)


def has_payloads(prepared: list[tuple[dict[str, Any], bytes | None]]) -> bool:
    """Whether a batch holds a payload (`payloads.is_payload` of a tool message's one part)."""
    return any("content_ref" in msg["parts"][0] for msg, _body in prepared)


def repeats(prepared: list[tuple[dict[str, Any], bytes | None]], known: list[dict[str, Any]]) -> list[Any]:
    """For each message of a batch, the stored message it repeats — the same LangChain id and the same
    fingerprint, among `known` (the live messages and the newest archive's) — else None. The same id with another
    content is an edit, stored anew; a message without an id is never a repeat. Within one batch a repeated
    message is stored once too.

    A forgotten message (`forget.is_forgotten`) keeps its id but nothing derived from its text, so any message
    with its id repeats it while it is the newest stored message of that id: a re-sent copy, or a changed one
    (the synopsis an agent's state holds of a forgotten result), never brings the text back."""
    wanted = {i for msg, _body in prepared if (i := lc_id(msg))}
    by_id: dict[tuple[str, str], dict[str, Any]] = {}
    newest: dict[str, dict[str, Any]] = {}
    for msg in known:  # `lc_id` inlined, the batch's ids only: every append looks at every live message
        meta = msg.get("meta") or {}
        ident = meta.get(LC_ID_META) or meta.get("source_id")
        if type(ident) is not str or ident not in wanted:
            continue
        newest[ident] = msg
        if isinstance(meta.get(FINGERPRINT_META), str):
            by_id[(ident, meta[FINGERPRINT_META])] = msg
    forgotten = {key: msg for key, msg in newest.items() if FORGOTTEN_META in (msg.get("meta") or {})}
    out: list[Any] = []
    seen: dict[tuple[str, str, str], int] = {}
    for i, (msg, _body) in enumerate(prepared):
        key = (lc_id(msg), msg["meta"].get(FINGERPRINT_META))
        other = msg["meta"].get("content_blocks")
        in_batch = (*key, json.dumps(other, sort_keys=True, default=str) if other else "")
        if not key[0]:
            out.append(None)
        elif key in by_id and same_blocks(by_id[key], msg):
            out.append(by_id[key])
        elif key[0] in forgotten:
            out.append(forgotten[key[0]])
        elif in_batch in seen:
            out.append(seen[in_batch])  # a position of this batch: filled with its stored copy by `merge_repeats`
        else:
            seen[in_batch] = i
            out.append(None)
    return out


def to_write(given: list[dict[str, Any]], found: list[Any] | None) -> list[dict[str, Any]]:
    """The batch's messages whose payloads an append writes: all of them (a repeat's payload heals a damaged
    stored copy) but those repeating a forgotten message, whose text must not come back."""
    if found is None:
        return given
    return [msg for msg, copy in zip(given, found, strict=True)
            if not (isinstance(copy, dict) and FORGOTTEN_META in (copy.get("meta") or {}))]


def merge_repeats(found: list[Any], stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The batch's result in its order: stored copies where `repeats` found one, the newly stored ones
    elsewhere (`stored` holds exactly the messages `found` marks None, in order)."""
    fresh = iter(stored)
    out: list[dict[str, Any]] = []
    for copy in found:
        if copy is None:
            out.append(next(fresh))
        elif isinstance(copy, int):
            out.append(out[copy])
        else:
            out.append(copy)
    return out
