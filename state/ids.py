"""Safe names derived from untrusted ids: session directories and archive ids."""

from __future__ import annotations

import hashlib
import re

from workmem.state.errors import InvalidInput

PLAIN_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
HASH_PREFIX = "~"
MAX_SESSION_ID_CHARS = 1024
_ARCHIVE = re.compile(r"archive_([0-9]{1,9})")
MAX_ARCHIVE_NUMBER = 999_999_999


def check_session_id(session_id: object, field: str = "session_id") -> str:
    """Return `session_id` if it is a non-empty, UTF-8-encodable str of sane length, else InvalidInput."""
    if not isinstance(session_id, str):
        raise InvalidInput(field, session_id, "must be a string")
    if not session_id:
        raise InvalidInput(field, session_id, "must not be empty")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidInput(field, session_id, f"longer than {MAX_SESSION_ID_CHARS} characters")
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(field, session_id, "not valid UTF-8 (lone surrogate)") from exc
    return session_id


def safe_session_id(session_id: str) -> str:
    """Directory name of a session: plain ids as is, anything else `~` + sha256 hex of the UTF-8 id."""
    check_session_id(session_id)
    if PLAIN_ID.fullmatch(session_id) and session_id not in (".", ".."):
        return session_id
    return HASH_PREFIX + hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def archive_name(n: int) -> str:
    """`archive_NNN` for archive number `n` (1-based, at least 3 digits)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ARCHIVE_NUMBER:
        raise InvalidInput("archive_number", n, f"must be an integer between 1 and {MAX_ARCHIVE_NUMBER}")
    return f"archive_{n:03d}"


def archive_number(name: object) -> int:
    """Number of an archive id such as `archive_007`; InvalidInput for anything else.

    Zero padding is not enforced (`archive_7` → 7) so a model typing the id loosely still finds it;
    callers use `archive_name(archive_number(x))` as the canonical form.
    """
    if not isinstance(name, str):
        raise InvalidInput("archive_id", name, "must be a string like 'archive_001'")
    match = _ARCHIVE.fullmatch(name)
    if match is None or int(match.group(1)) < 1:
        raise InvalidInput("archive_id", name, "must look like 'archive_001'")
    return int(match.group(1))


def canonical_archive_id(name: object) -> str:
    """The canonical spelling (`archive_007`) of an archive id, validating it."""
    return archive_name(archive_number(name))


def check_seq_range(start_seq: object, end_seq: object) -> tuple[int, int]:
    """`(start_seq, end_seq)` as checked ints ≥ 1 with end ≥ start, or InvalidInput naming the bad one."""
    for field, value in (("start_seq", start_seq), ("end_seq", end_seq)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(field, value, "must be an integer >= 1")
    if end_seq < start_seq:  # type: ignore[operator]
        raise InvalidInput("end_seq", end_seq, f"must be >= start_seq ({start_seq})")
    return start_seq, end_seq  # type: ignore[return-value]
