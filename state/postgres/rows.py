"""A `messages` row as a stored message, or why it cannot be one.

A row is written whole by one transaction, so a row that is not a stored message was changed by hand (or by a
damaged restore): `parts` that is no list, a `meta` that is no object, an `exact_body` without its keys. Readers
leave such a row out, as the files backend leaves out a damaged line, and `check` names it by table and key.
"""

from __future__ import annotations

from typing import Any

from workmem.state.stored import check_stored

MESSAGE_COLUMNS = "id, seq, turn_id, role, created_at, tokens, meta, parts, exact_body"


def message_of_row(row: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(the stored message of a `messages` row — keys in the order the files backend writes them — or None, and
    why not: '' for a row that is one)."""
    exact = row["exact_body"]
    if exact is not None and not (isinstance(exact, dict) and isinstance(exact.get("meta"), dict)
                                  and isinstance(exact.get("parts"), list)):
        return None, "exact_body is not an object with meta and parts"
    msg = {**_head(row), "tokens": row["tokens"], "meta": exact["meta"] if exact else row["meta"],
           "parts": exact["parts"] if exact else row["parts"]}
    if not isinstance(msg["meta"], dict):  # `check_stored` lets a missing meta by; a row always has one
        return None, "meta is not a JSON object"
    reason = check_stored(msg)
    return (None, reason) if reason else (msg, "")


def messages_of_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored messages of `rows`, damaged rows left out (`check` reports them)."""
    return [msg for msg, _why in map(message_of_row, rows) if msg is not None]


def row_as_found(row: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(a `messages` row as a message whatever its shape — parts not a list read as none, meta not an object as
    empty —, whether the row is damaged): what a forget rewrites, so a damaged row's text goes too."""
    msg, _why = message_of_row(row)
    if msg is not None:
        return msg, False
    return {**_head(row), "tokens": 0, "meta": row["meta"] if isinstance(row["meta"], dict) else {},
            "parts": row["parts"] if isinstance(row["parts"], list) else []}, True


def _head(row: dict[str, Any]) -> dict[str, Any]:
    created = row["created_at"]
    return {"id": row["id"], "seq": row["seq"], "turn_id": row["turn_id"], "role": row["role"],
            "created_at": created.isoformat() if hasattr(created, "isoformat") else created}
