"""What every backend checks before it persists an archive: the object, its covered messages,
its texts — all before anything is written."""

from __future__ import annotations

import json
from typing import Any

from workmem.state.archive_object import ABSTRACT_CHARS
from workmem.state.errors import InvalidInput
from workmem.state.ids import archive_name, archive_number
from workmem.state.stored import check_stored


def check_archive_write(session_id: str, archive: Any, messages: Any, overview: Any,
                        abstract: Any) -> tuple[int, list[int], str]:
    """Validate a `write_archive` call: (archive number, covered seqs, the abstract as stored: one line, capped)."""
    n, start, end = check_archive(archive, session_id)
    seqs = check_covered(messages, start, end)
    check_text(overview, "overview")
    return n, seqs, " ".join(check_text(abstract, "abstract").split())[:ABSTRACT_CHARS]


def check_archive(archive: Any, session_id: str) -> tuple[int, int, int]:
    """Validate an archive object before anything is written; returns (number, start_seq, end_seq)."""
    if not isinstance(archive, dict):
        raise InvalidInput("archive", archive, "must be the archive object (a dict)")
    n = archive_number(archive.get("archive_id"))
    if archive["archive_id"] != archive_name(n):
        raise InvalidInput("archive.archive_id", archive["archive_id"], f"write it as {archive_name(n)}")
    if archive.get("session_id", session_id) != session_id:
        raise InvalidInput("archive.session_id", archive.get("session_id"), f"must be {session_id!r}")
    rng = archive.get("source_turn_range")
    if not isinstance(rng, dict):
        raise InvalidInput("archive.source_turn_range", rng, "must hold start_seq and end_seq")
    for key in ("start_seq", "end_seq"):
        value = rng.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"archive.source_turn_range.{key}", value, "must be an integer >= 1")
    try:
        json.dumps(archive, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInput("archive", archive, f"not JSON-serializable UTF-8: {exc}") from exc
    return n, rng["start_seq"], rng["end_seq"]


def check_covered(messages: Any, start: int, end: int) -> list[int]:
    """Covered messages must be stored messages with ascending seqs from start_seq to end_seq."""
    if not isinstance(messages, list) or not messages:
        raise InvalidInput("messages", messages, "must be the non-empty list of covered messages")
    seqs: list[int] = []
    for i, msg in enumerate(messages):
        reason = check_stored(msg)
        if reason:
            raise InvalidInput(f"messages[{i}]", msg, reason)
        if seqs and msg["seq"] <= seqs[-1]:
            raise InvalidInput(f"messages[{i}].seq", msg["seq"], "seqs must be ascending")
        seqs.append(msg["seq"])
    if seqs[0] != start or seqs[-1] != end:
        raise InvalidInput("archive.source_turn_range", f"{start}..{end}",
                           f"does not match the messages' seqs {seqs[0]}..{seqs[-1]}")
    return seqs


def check_text(value: Any, field: str) -> str:
    """A str that encodes to UTF-8 (overview, abstract)."""
    if not isinstance(value, str):
        raise InvalidInput(field, value, "must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(field, value, "not valid UTF-8 (lone surrogate)") from exc
    return value
