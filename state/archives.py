"""Archive directories of a session: `history/archive_NNN/` with `.done` written last (SPEC §2).

The last complete archive is found from a hint (meta.last_archive) plus `.done` checks on it and on
the next id — never by listing `history/` (only `complete_numbers` lists it, for `list_archives`).
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

from workmem.state import fsutil
from workmem.state.archive_object import ABSTRACT_CHARS, OVERVIEW, with_working_summary  # noqa: F401
from workmem.state.errors import InvalidInput
from workmem.state.ids import archive_name, archive_number
from workmem.state.jsonl import check_stored
from workmem.state.memory import SECTIONS, bullet_items, parse_sections

HISTORY = "history"
DONE = ".done"
MESSAGES = "messages.jsonl"
ABSTRACT = ".abstract.md"
ARCHIVE_JSON = "archive.json"
SPILLED = "spilled.md"
CACHED_ARCHIVES = 512  # archive objects an ArchiveCache keeps (least recently used go first)
_DIR_NAME = re.compile(r"archive_([0-9]{3,9})")


def archive_dir(session_dir: Path, n: int) -> Path:
    """Directory of archive number `n`."""
    return session_dir / HISTORY / archive_name(n)


def is_complete(session_dir: Path, n: int) -> bool:
    """True when archive `n` has its `.done` marker."""
    return n >= 1 and os.path.exists(os.path.join(session_dir, HISTORY, archive_name(n), DONE))


def read_json(path: Path) -> Any:
    """Parse a JSON file."""
    with open(path, "rb") as f:
        return json.loads(f.read())


def read_text(path: Path) -> str:
    """A UTF-8 text file, '' when it is missing."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def seq_range(archive: dict[str, Any]) -> tuple[int, int]:
    """`(start_seq, end_seq)` of an archive object."""
    rng = archive["source_turn_range"]
    return int(rng["start_seq"]), int(rng["end_seq"])


class ArchiveCache:
    """Archive objects of complete archives (immutable once `.done` exists); a bounded LRU per store."""

    def __init__(self, size: int = CACHED_ARCHIVES) -> None:
        self._objects: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._size = size

    def get(self, session_dir: Path, n: int) -> dict[str, Any]:
        """archive.json of complete archive `n`."""
        key = os.path.join(session_dir, HISTORY, archive_name(n))
        obj = self._objects.get(key)
        if obj is None:
            obj = read_json(Path(key) / ARCHIVE_JSON)
            self._objects[key] = obj
            if len(self._objects) > self._size:
                self._objects.popitem(last=False)
        else:
            self._objects.move_to_end(key)
        return obj

    def forget(self, session_dir: Path, n: int) -> None:
        """Drop a cached object (the archive is being rewritten)."""
        self._objects.pop(os.path.join(session_dir, HISTORY, archive_name(n)), None)


def last_complete(session_dir: Path, cache: ArchiveCache, hint_n: int = 0,
                  hint_end: int | None = None) -> tuple[int, int]:
    """`(number, end_seq)` of the last complete archive, `(0, 0)` when there is none."""
    n = hint_n
    while n > 0 and not is_complete(session_dir, n):
        n -= 1  # the hint is ahead of the files (meta from a lost future): walk back
    end = hint_end if n == hint_n else None
    while is_complete(session_dir, n + 1):
        n += 1
        end = None
    if n == 0:
        return 0, 0
    if end is None:
        end = seq_range(cache.get(session_dir, n))[1]
    return n, end


def complete_numbers(session_dir: Path) -> list[int]:
    """Numbers of every complete archive, ascending (lists `history/`: not for hot paths)."""
    try:
        names = os.listdir(session_dir / HISTORY)
    except FileNotFoundError:
        return []
    numbers = []
    for name in names:
        match = _DIR_NAME.fullmatch(name)
        if match and archive_name(int(match.group(1))) == name and is_complete(session_dir, int(match.group(1))):
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def find_containing(session_dir: Path, cache: ArchiveCache, last_n: int, seq: int) -> int:
    """Smallest complete archive number (≤ last_n) whose end_seq ≥ seq, by binary search; 0 if none."""
    lo, hi, found = 1, last_n, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if seq_range(cache.get(session_dir, mid))[1] >= seq:
            found, hi = mid, mid - 1
        else:
            lo = mid + 1
    return found


def render_spilled(archive_id: str, spilled: list[dict[str, str]]) -> str:
    """`spilled.md`: the WM items a commit moved out of the working memory, by section, oldest first."""
    lines = [f"# Moved out of the working memory by {archive_id}"]
    for name in SECTIONS:
        items = [s["item"] for s in spilled if s["section"] == name]
        if items:
            lines += ["", f"## {name}", *(f"- {' '.join(item.split())}" for item in items)]
    return "\n".join(lines) + "\n"


def parse_spilled(text: str) -> list[dict[str, str]]:
    """The `{section, item}` entries of a `spilled.md`."""
    return [{"section": name, "item": item} for name, body in parse_sections(text).items()
            if name in SECTIONS for item in bullet_items(body)]


def write_archive_dir(session_dir: Path, n: int, lines: bytes, overview: str, abstract: str,
                      archive: dict[str, Any], *, durable: bool, spilled: list[dict[str, str]] | None = None) -> Path:
    """Write archive `n` in a temp dir, rename it into place, then write `.done` (each step one fsutil call)."""
    history = session_dir / HISTORY
    final = history / archive_name(n)
    tmp = history / f".{archive_name(n)}.tmp"
    fsutil.remove_tree(tmp)  # a half-written temp dir of an earlier attempt
    fsutil.remove_tree(final)  # a final dir without .done (crash between rename and .done)
    fsutil.make_dirs(tmp, durable=durable)
    fsutil.write_file(tmp / MESSAGES, lines, durable=durable)
    fsutil.write_file(tmp / OVERVIEW, overview.encode("utf-8"), durable=durable)
    fsutil.write_file(tmp / ABSTRACT, (abstract + "\n").encode("utf-8"), durable=durable)
    fsutil.write_file(tmp / ARCHIVE_JSON, _json_bytes(archive), durable=durable)
    if spilled:
        fsutil.write_file(tmp / SPILLED, render_spilled(archive_name(n), spilled).encode("utf-8"), durable=durable)
    if durable:
        fsutil.fsync_dir(tmp)
    fsutil.publish_dir(tmp, final, durable=durable)
    done = {"archive_id": archive_name(n), "end_seq": seq_range(archive)[1]}
    fsutil.atomic_write(final / DONE, _json_bytes(done), durable=durable)
    return final


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


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
        _json_bytes(archive)
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
