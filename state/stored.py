"""A stored message record (SPEC §1 *Message*): built from a validated batch, and the shape check every reader
of stored messages applies, whichever backend holds them."""

from __future__ import annotations

import os
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.messages import ROLES, message_text, prepare_messages
from workmem.state.tokens import count_tokens_each


def prepared_batch(messages: list[Any], durable: bool | None,
                   max_bytes: int) -> tuple[list[tuple[dict[str, Any], bytes | None]], list[int]]:
    """An append's messages validated and normalised (§10), with their token counts; `durable` must be a bool
    or None. Every backend's `append` starts here, before it touches storage."""
    if durable is not None and not isinstance(durable, bool):
        raise InvalidInput("durable", durable, "must be a bool or None")
    prepared = prepare_messages(messages, max_bytes=max_bytes)
    return prepared, count_tokens_each([message_text(m) for m, _body in prepared]) if prepared else []


def stored_records(prepared: list[tuple[dict[str, Any], bytes | None]], counts: list[int], first_seq: int, turn: int,
                   now: str) -> tuple[list[dict[str, Any]], int]:
    """Stored messages of a validated batch and the turn number after them.

    ids are 128 random bits (like uuid4) drawn in one call. `turn_id` is `t<n>`, n growing at each
    user message. Keys are in the order a stored line is written.
    """
    ids = os.urandom(16 * len(prepared)).hex()
    stored = []
    for i, ((msg, _body), tokens) in enumerate(zip(prepared, counts, strict=True)):
        role = msg["role"]
        if role == "user":
            turn += 1
        stored.append({"id": f"m-{ids[32 * i:32 * i + 32]}", "seq": first_seq + i, "turn_id": f"t{turn}",
                       "role": role, "created_at": now, "tokens": tokens, "meta": msg["meta"], "parts": msg["parts"]})
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
    return ""
