"""Archive directories of a session: `history/archive_NNN/` with `.done` written last.

The last complete archive is found from a hint (meta.last_archive) plus `.done` checks on it and on
the next id — never by listing `history/` (only `complete_numbers` lists it, for `list_archives`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from workmem.state.archive_object import OVERVIEW
from workmem.state.errors import Anomaly, DamagedFile
from workmem.state.files import fsutil
from workmem.state.ids import archive_name
from workmem.state.lru import LRU
from workmem.state.memory import SECTIONS, bullet_items, parse_sections

log = logging.getLogger("workmem.store")

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
    """Parse a JSON file; a missing or garbled one is `DamagedFile` naming it."""
    try:
        data = fsutil.read_file(path)
        if data is None:
            raise DamagedFile(str(path), "missing")
        return json.loads(data)
    except DamagedFile:
        raise
    except (OSError, ValueError) as exc:
        raise DamagedFile(str(path), f"unreadable: {exc}") from None


def read_archive_json(folder: Path) -> dict[str, Any]:
    """An archive's `archive.json`, checked for the fields readers rely on; else `DamagedFile`."""
    obj = read_json(folder / ARCHIVE_JSON)
    try:
        start, end = seq_range(obj)
        if not 1 <= start <= end:
            raise ValueError(f"seq range {start}..{end}")
    except (TypeError, KeyError, ValueError) as exc:
        raise DamagedFile(str(folder / ARCHIVE_JSON), f"no valid source_turn_range ({exc})") from None
    return obj


def read_text(path: Path) -> str:
    """A UTF-8 text file, '' when it is missing or not a regular file; a damaged byte reads as U+FFFD
    (`check_archive_files` reports both): a memory with one bad byte is still the memory."""
    try:
        data = fsutil.read_file(path)
    except DamagedFile as exc:  # a folder or a FIFO where the file belongs: read as missing, as `check` reports it
        log.warning("%s; read as missing", exc)
        return ""
    return data.decode("utf-8", "replace") if data is not None else ""


def seq_range(archive: dict[str, Any]) -> tuple[int, int]:
    """`(start_seq, end_seq)` of an archive object."""
    rng = archive["source_turn_range"]
    return int(rng["start_seq"]), int(rng["end_seq"])


class ArchiveCache:
    """Archive objects of complete archives (immutable once `.done` exists); a bounded LRU per store."""

    def __init__(self, size: int = CACHED_ARCHIVES) -> None:
        self._objects: LRU[str, dict[str, Any]] = LRU(size)
        self._ends: LRU[str, int] = LRU(size)

    def get(self, session_dir: Path, n: int) -> dict[str, Any]:
        """archive.json of complete archive `n`."""
        key = os.path.join(session_dir, HISTORY, archive_name(n))
        obj = self._objects.get(key)
        if obj is None:
            try:
                obj = read_archive_json(Path(key))
            except DamagedFile as exc:
                obj = rebuilt_archive_json(Path(key), n, exc)
            self._objects.put(key, obj)
        return obj

    def end_seq(self, session_dir: Path, n: int) -> int:
        """Where complete archive `n` ends: its archive.json says so; when that is garbled, its `.done`,
        else its last message — a damaged archive.json must neither hide live messages nor block appends."""
        key = os.path.join(session_dir, HISTORY, archive_name(n))
        end = self._ends.get(key)
        if end is None:
            try:
                end = seq_range(self.get(session_dir, n))[1]
            except DamagedFile:
                end = _end_from_done(Path(key)) or _end_from_messages(Path(key))
            self._ends.put(key, end)
        return end

    def forget(self, session_dir: Path, n: int) -> None:
        """Drop a cached object (the archive is being rewritten)."""
        key = os.path.join(session_dir, HISTORY, archive_name(n))
        self._objects.pop(key)
        self._ends.pop(key)


def rebuilt_archive_json(folder: Path, n: int, damage: DamagedFile) -> dict[str, Any]:
    """The archive object of a complete archive whose archive.json is unreadable (a power cut, a disk error),
    rebuilt in memory from what it holds: its messages run without a gap up to the end its `.done` names.
    Read paths go on (its messages, the WM in its overview, the archives before it); `check()` still reports
    the file. When the messages do not settle the range, the original `DamagedFile` is raised."""
    seqs = archived_seqs(folder)
    done_end = _end_from_done(folder)
    if not seqs or seqs != list(range(seqs[0], seqs[-1] + 1)) or (done_end and done_end != seqs[-1]):
        raise damage
    return {"archive_id": archive_name(n), "source_turn_range": {"start_seq": seqs[0], "end_seq": seqs[-1]},
            "rebuilt": f"archive.json {damage.reason}: range rebuilt from the archive's messages"}


def _end_from_done(folder: Path) -> int:
    try:
        end = json.loads(fsutil.read_file(folder / DONE) or b"").get("end_seq")
    except (OSError, ValueError, AttributeError):
        return 0
    return end if isinstance(end, int) and not isinstance(end, bool) and end > 0 else 0


def archived_seqs(folder: Path) -> list[int]:
    """The seqs an archive folder's messages.jsonl holds, in the readers' order (damaged lines left out)."""
    from workmem.state.files.jsonl import ordered, parse, read_bytes

    path = folder / MESSAGES
    parsed = parse(read_bytes(path) or b"", str(path))
    picked, _ = ordered(parsed, str(path))
    return [parsed.messages[i]["seq"] for i in picked]


def _end_from_messages(folder: Path) -> int:
    return max(archived_seqs(folder), default=0)


def last_complete(session_dir: Path, cache: ArchiveCache, hint_n: int = 0) -> tuple[int, int]:
    """`(number, end_seq)` of the last complete archive, `(0, 0)` when there is none.

    `hint_n` (a meta's last archive) only says where to start looking: `.done` markers decide which
    archive is complete and the archive itself where it ends; a hint ahead of the files is dropped.
    """
    n = hint_n if hint_n > 0 and is_complete(session_dir, hint_n) else 0
    if hint_n > 0 and n == 0:
        n = max(complete_numbers(session_dir), default=0)  # the hint lies: list history/ once
    while is_complete(session_dir, n + 1):
        n += 1
    return (n, cache.end_seq(session_dir, n)) if n else (0, 0)


def settle_incomplete(session_dir: Path, cache: ArchiveCache, n: int, end: int, live_seqs: set[int], *,
                      durable: bool) -> list[Anomaly]:
    """Decide what an archive directory `n + 1` without `.done` is; the caller holds the session lock.

    When every seq it holds is still live, a commit crashed before `.done`: it stays, and that commit's
    resume (or the next commit) rewrites it. Otherwise its messages may exist nowhere else: a valid
    archive (ids, range and messages agree, continuing archive `n`) gets its `.done` written; an invalid
    one is reported and left as it is — never deleted.
    """
    folder = archive_dir(session_dir, n + 1)
    if not folder.is_dir() or is_complete(session_dir, n + 1):
        return []
    seqs = archived_seqs(folder)
    if seqs and set(seqs) <= live_seqs:
        return []
    try:
        obj = read_archive_json(folder)
        start, stop = seq_range(obj)
        valid = (obj.get("archive_id") == archive_name(n + 1) and start == end + 1
                 and seqs == list(range(start, stop + 1)) and (folder / OVERVIEW).is_file())
    except DamagedFile:
        valid = False
    if not valid:
        return [Anomaly(str(folder), 0, "an archive without .done whose messages are not live any more and that "
                                        "does not check out: left as it is (workmem check, then repair by hand)")]
    try:
        fsutil.atomic_write(folder / DONE, _json_bytes({"archive_id": archive_name(n + 1), "end_seq": stop}),
                            durable=durable)
    except OSError as exc:  # a read-only root: reported, completed by a later writer
        return [Anomaly(str(folder / DONE), 0, f"missing and could not be written ({exc.strerror})")]
    return [Anomaly(str(folder / DONE), 0, "was missing though the archive is complete (its messages are not "
                                           "live any more): written")]


def check_rewritable(folder: Path, live_seqs: set[int]) -> None:
    """An archive directory without `.done` may be removed and written again only while every seq it holds
    is still live (a commit crashed before `.done`); otherwise it may hold the only copy: `DamagedFile`."""
    if not folder.is_dir() or (folder / DONE).exists():
        return
    from workmem.state.files.jsonl import parse, read_bytes

    held = {m["seq"] for m in parse(read_bytes(folder / MESSAGES) or b"", str(folder / MESSAGES)).messages}
    if not held <= live_seqs:
        raise DamagedFile(str(folder), f"an archive without .done holds {len(held - live_seqs)} message(s) that are "
                                       "not live any more: it is not overwritten (see workmem check)")


def archive_numbers(session_dir: Path) -> list[int]:
    """Numbers of every archive directory, complete or not, ascending (lists `history/`)."""
    try:
        names = os.listdir(session_dir / HISTORY)
    except (FileNotFoundError, NotADirectoryError):  # not a folder: `check` reports the archives it lost
        return []
    return sorted(int(m.group(1)) for name in names if (m := _DIR_NAME.fullmatch(name))
                  and archive_name(int(m.group(1))) == name)


def check_archive_files(folder: Path, n: int, previous_end: int) -> list[Anomaly]:
    """What is wrong with one complete archive's files: `.done`, archive.json, the messages and their range."""
    from workmem.state.files.jsonl import ordered, parse, read_bytes

    found: list[Anomaly] = []
    try:
        obj = read_archive_json(folder)
        start, end = seq_range(obj)
        if obj.get("archive_id") != archive_name(n):
            found.append(Anomaly(str(folder / ARCHIVE_JSON), 0, f"archive_id {obj.get('archive_id')!r} in "
                                                                 f"{archive_name(n)}"))
    except DamagedFile as exc:
        found.append(Anomaly(exc.path, 0, exc.reason))
        start, end = previous_end + 1, _end_from_done(folder) or _end_from_messages(folder)
    done_end = _end_from_done(folder)
    if done_end and done_end != end:
        found.append(Anomaly(str(folder / DONE), 0, f"says end_seq {done_end}, archive.json {end}"))
    if start != previous_end + 1:
        found.append(Anomaly(str(folder), 0, f"starts at seq {start}; the archive before ends at {previous_end}"))
    try:
        data = read_bytes(folder / MESSAGES)
    except DamagedFile as exc:  # not a regular file
        return [*found, Anomaly(exc.path, 0, exc.reason)]
    if data is None:
        return [*found, Anomaly(str(folder / MESSAGES), 0, "missing")]
    parsed = parse(data, str(folder / MESSAGES))
    picked, disorder = ordered(parsed, str(folder / MESSAGES))
    found += parsed.problems + disorder
    seqs = [parsed.messages[i]["seq"] for i in picked]
    missing = sorted(set(range(start, end + 1)) - set(seqs))
    extra = sorted(set(seqs) - set(range(start, end + 1)))
    if missing:
        found.append(Anomaly(str(folder / MESSAGES), 0, f"{len(missing)} seq(s) of {start}..{end} missing: "
                                                        f"{missing[:10]}"))
    if extra:
        found.append(Anomaly(str(folder / MESSAGES), 0, f"seqs outside {start}..{end}: {extra[:10]}"))
    if not (folder / OVERVIEW).is_file():
        found.append(Anomaly(str(folder / OVERVIEW), 0, "is not a regular file: read as missing"
                             if os.path.lexists(folder / OVERVIEW) else "missing"))
    for name in (OVERVIEW, ABSTRACT, SPILLED):
        data = read_bytes(folder / name) if (folder / name).is_file() else None
        if data is not None and not _utf8(data):
            found.append(Anomaly(str(folder / name), 0, "not UTF-8: its damaged bytes read as U+FFFD"))
    return found


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def complete_numbers(session_dir: Path) -> list[int]:
    """Numbers of every complete archive, ascending (lists `history/`: not for hot paths)."""
    try:
        names = os.listdir(session_dir / HISTORY)
    except (FileNotFoundError, NotADirectoryError):  # not a folder: `check` reports the archives it lost
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
