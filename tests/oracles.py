"""Helpers only the tests use: brute-force definitions to check the library against, and shortcuts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workmem.nodes.guards import guard_ops
from workmem.state.jsonutil import dumps
from workmem.state.memory import body_tokens, bullet_count, is_emergency, is_oversized
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, encode_body, prepare_messages


def compute_pending_tokens(messages: Sequence[dict[str, Any]], keep: Any) -> int:
    """Brute-force definition: token sum of the live messages outside the keep window (no tool-pair
    rule). An int or ("messages", k): all but the newest k. ("turns", n): before the n-th newest user
    message. ("tokens", n): before the oldest turn start whose tail holds ≤ n tokens; when even the
    newest turn holds more, before the oldest message inside it whose tail fits."""
    unit, n = ("messages", keep) if isinstance(keep, int) else tuple(keep)
    n = max(0, n)
    tail = [sum(m["tokens"] for m in messages[i:]) for i in range(len(messages) + 1)]
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if unit == "messages":
        cut = max(0, len(messages) - n)
    elif unit == "turns":
        cut = len(messages) if n == 0 else (users[-n] if n <= len(users) else 0)
    else:
        fitting = [i for i in [0, *users] if tail[i] <= n]
        inside = [i for i in range(len(messages) + 1) if i > (users[-1] if users else 0) and tail[i] <= n]
        cut = min(fitting) if fitting else min(inside)
    return sum(m["tokens"] for m in messages[:cut])


def body_is_oversized(body: str) -> bool:
    """`is_oversized` measured on a body."""
    return is_oversized(bullet_count(body), body_tokens(body))


def body_is_emergency(body: str) -> bool:
    """`is_emergency` measured on a body."""
    return is_emergency(bullet_count(body), body_tokens(body))


def guard_section(name: str, old_body: str, op: Mapping[str, Any]) -> dict[str, Any]:
    """The guard of one section applied to one op (the other six sections KEEP)."""
    return guard_ops({name: old_body}, {name: op})[0][name]


def encode_line(msg: dict[str, Any]) -> bytes:
    """One stored message as a UTF-8 JSON line ending in a newline."""
    return dumps(msg) + b"\n"


def normalize_messages(objs: Any, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[dict[str, Any]]:
    """Normalise every message of a batch; the first bad one raises InvalidInput naming `messages[i]`."""
    return [msg for msg, _body in prepare_messages(objs, max_bytes=max_bytes)]


def validate_message(msg: dict[str, Any], *, field: str = "message",
                     max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """Check a normalised message; return the size in bytes of its stored JSON body."""
    return len(encode_body(msg, field=field, max_bytes=max_bytes))


def source_turn_range(messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """`source_turn_range` of an archive object for the covered `messages` (non-empty, ordered by seq)."""
    if not messages:
        raise ValueError("a covered range holds at least one message")
    first, last = messages[0], messages[-1]
    return {"start_turn_id": first["turn_id"], "end_turn_id": last["turn_id"],
            "start_seq": first["seq"], "end_seq": last["seq"]}
