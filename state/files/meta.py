"""Session meta (`.meta.json`): a cache of what the files imply, recomputed from them here.

On disk the meta carries, besides the public fields, `last_turn` and `live_file {ino, size}` — the state
of `messages.jsonl` it describes. `LiveState` is this process's copy, kept current in O(1) per
appended message and checked against the files with a few stats before each locked operation.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from workmem.state.errors import Anomaly, DamagedFile, InvalidInput
from workmem.state.files import archives, fsutil, jsonl
from workmem.state.ids import archive_name, archive_number
from workmem.state.retention import MESSAGES, Keep, covered_tokens, keep_value
from workmem.state.session_meta import now_iso, public
from workmem.state.turns import DEFAULT_KEEP_RECENT, turn_number

log = logging.getLogger("workmem.store")

META_FILE = ".meta.json"
MESSAGES_FILE = "messages.jsonl"
LOCK_FILE = ".lock"
HIDDEN_FILE = "hidden.json"
META_VERSION = 1
# Meta fields a count refresh never changes; another value on disk means a commit or a keep change.
_DECIDED_FIELDS = ("session_id", "created_at", "commit_count", "last_commit_at", "keep", "last_archive")


class SessionPaths(NamedTuple):
    """Where one session lives; built only from a validated id (see `SessionStore._paths`)."""

    session_id: str
    safe_id: str
    dir: Path
    messages: Path
    meta: Path
    lock: Path

    @classmethod
    def of(cls, sessions_dir: Path, session_id: str, safe_id: str) -> SessionPaths:
        """Paths of session `session_id` whose directory name is `safe_id`."""
        folder = sessions_dir / safe_id
        return cls(session_id, safe_id, folder, folder / MESSAGES_FILE, folder / META_FILE, folder / LOCK_FILE)


def file_key(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    """(inode, mtime_ns, size) of a file, None when missing: changes whenever the file is replaced."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def live_file_stamp(path: Path) -> tuple[int, int] | None:
    """(inode, size) of `messages.jsonl`, None when missing (a symlink put in its place has another inode: the
    state is then stale, and reading it again refuses the link)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size


def read_meta(path: Path) -> dict[str, Any] | None:
    """The stored meta, or None when missing or unreadable (it is recomputed from the files then)."""
    try:
        obj = json.loads(fsutil.read_file(path) or b"")
    except (OSError, ValueError):  # missing, garbled, or not a regular file (a symlink is refused elsewhere)
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get("session_id"), str) else None


def read_hidden(path: Path) -> set[int]:
    """Seqs recorded in `hidden.json`; missing or unreadable → none hidden (the log is the truth)."""
    try:
        data = fsutil.read_file(path)
        if data is None:
            return set()
        obj = json.loads(data)
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return set()
    seqs = obj.get("hidden") if isinstance(obj, dict) else None
    return {s for s in seqs if isinstance(s, int) and not isinstance(s, bool)} if isinstance(seqs, list) else set()


def encode_hidden(seqs: set[int]) -> bytes:
    """`hidden.json` for these seqs."""
    return json.dumps({"hidden": sorted(seqs)}).encode() + b"\n"


def check_owner(p: SessionPaths, disk: dict[str, Any] | None) -> None:
    """The stored original id must be the one we were asked for."""
    if disk is not None and disk["session_id"] != p.session_id:
        raise InvalidInput("session_id", p.session_id,
                           f"directory {p.safe_id} belongs to session {disk['session_id']!r}")


def encode_meta(meta: dict[str, Any]) -> bytes:
    """`.meta.json` bytes."""
    return (json.dumps(meta, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def archive_hint(last_archive: Any) -> tuple[int, int | None]:
    """(number, end_seq) of a meta's `last_archive`, (0, None) when absent or malformed."""
    if not isinstance(last_archive, dict):
        return 0, None
    try:
        n = archive_number(last_archive.get("id"))
    except InvalidInput:
        return 0, None
    end = last_archive.get("end_seq")
    return n, end if isinstance(end, int) and not isinstance(end, bool) else None


@dataclass
class LiveState:
    """What this process knows of one session's files; valid while the stamps still match them."""

    meta: dict[str, Any]
    meta_stamp: tuple[int, int, int] | None  # file_key of .meta.json as last read or written by us
    file_stamp: tuple[int, int] | None  # (inode, size) of messages.jsonl this state describes
    lines: int  # complete lines in messages.jsonl (for line numbers of appended segments)
    archive_n: int  # last complete archive number (0: none)
    archive_end: int  # its end_seq (0: none)
    last_turn: int
    seqs: list[int] = field(default_factory=list)  # live seqs, oldest first
    tokens: list[int] = field(default_factory=list)  # their stored `tokens`
    starts: list[bool] = field(default_factory=list)  # does each open a turn (a user message)?
    saved_at: float = 0.0  # time.monotonic() of our last meta write
    dirty: bool = False  # appends not yet reflected in .meta.json
    next_done: str = ""  # the `.done` path of archive archive_n + 1 (made once: it is looked for at every access)
    appender: Any = None  # the live file's descriptor kept open between appends (`appenders.Appenders`)
    unterminated: bool = False  # the file ends with a whole message whose newline could not be written yet

    @property
    def keep(self) -> Keep:
        """The keep window pending_tokens is computed with."""
        unit, n = self.meta["keep"]
        return unit, n

    def set_keep(self, keep: Keep) -> None:
        """Use `keep` from now on (`keep_recent_count` mirrors it for the messages unit) and recount."""
        self.meta["keep"] = [keep[0], keep[1]]
        self.meta["keep_recent_count"] = keep[1] if keep[0] == MESSAGES else None
        self.recompute_pending()

    def push(self, seqs: list[int], tokens: list[int], starts: list[bool], turn: int, created_at: str) -> None:
        """Account appended live messages. For the messages unit O(1) each: each one pushes the (k+1)-th
        newest out of the keep window, so the batch adds the tokens between the old and new window edge;
        the turns and tokens units recount the live list (integers only)."""
        unit, k = self.keep
        old_n = len(self.tokens)
        self.seqs.extend(seqs)
        self.tokens.extend(tokens)
        self.starts.extend(starts)
        n = len(self.tokens)
        meta = self.meta
        if unit == MESSAGES:
            meta["pending_tokens"] += sum(self.tokens[max(0, old_n - k):max(0, n - k)])
        else:
            meta["pending_tokens"] = covered_tokens(self.tokens, self.starts, (unit, k))
        meta["live_tokens"] += sum(tokens)
        meta["message_count"] = n
        if seqs:
            meta["next_seq"] = max(meta["next_seq"], seqs[-1] + 1)
        meta["total_message_count"] = meta["next_seq"] - 1
        if created_at > meta["updated_at"]:
            meta["updated_at"] = created_at
        self.last_turn = max(self.last_turn, turn)
        self.dirty = True

    def recompute_pending(self) -> None:
        """pending_tokens and live_tokens from scratch (on load, after a commit or a keep change)."""
        self.meta["pending_tokens"] = covered_tokens(self.tokens, self.starts, self.keep)
        self.meta["live_tokens"] = sum(self.tokens)

    def disk_form(self) -> dict[str, Any]:
        """The meta as written to `.meta.json`: the public fields plus the internal stamps."""
        out = public(self.meta)
        out["last_turn"] = self.last_turn
        out["live_file"] = {"ino": self.file_stamp[0], "size": self.file_stamp[1]} if self.file_stamp else None
        out["version"] = META_VERSION
        return out


def freshness(p: SessionPaths, live: LiveState) -> Literal["fresh", "grown", "stale"]:
    """Does `live` still describe the files? `grown`: only appends by others since (same inode).

    A `.meta.json` rewritten by another process only to refresh counts is accepted without a reload
    (otherwise concurrent appenders would make each other reload on every refresh).
    """
    if not live.next_done:
        live.next_done = os.path.join(archives.archive_dir(p.dir, live.archive_n + 1), archives.DONE)
    if os.access(live.next_done, os.F_OK):  # another process completed an archive (no exception when not)
        return "stale"
    key = file_key(p.meta)
    if key != live.meta_stamp:
        disk = read_meta(p.meta)
        if disk is None or any(disk.get(f) != live.meta.get(f) for f in _DECIDED_FIELDS):
            return "stale"
        live.meta_stamp = key
    stamp = live_file_stamp(p.messages)
    if stamp == live.file_stamp:
        return "fresh"
    if stamp and live.file_stamp and stamp[0] == live.file_stamp[0] and stamp[1] > live.file_stamp[1]:
        return "grown"
    return "stale"


def catch_up(p: SessionPaths, live: LiveState) -> jsonl.Parsed | None:
    """Account the lines other processes appended since `live.file_stamp`; the caller holds the lock.

    None when the new lines are not simply newer seqs (a repeated or out-of-order line): the caller
    then reloads the whole file, which reports them."""
    stamp = live_file_stamp(p.messages)
    assert stamp is not None and live.file_stamp is not None
    start = live.file_stamp[1]
    data = fsutil.read_file(p.messages, start, stamp[1] - start) or b""
    parsed = jsonl.parse(data, str(p.messages), first_line=live.lines + 1)
    last = live.seqs[-1] if live.seqs else live.archive_end
    seqs = [m["seq"] for m in parsed.messages]
    if any(a >= b for a, b in zip([last, *seqs], seqs, strict=False)):
        return None
    if parsed.end < len(data):
        _truncate(p.messages, start + parsed.end)  # a torn tail left by a crashed writer
    ended = _terminate(p.messages, parsed)
    end = start + parsed.end + ended
    live.unterminated = parsed.unterminated and not ended
    fresh = parsed.messages
    if fresh:
        live.push(seqs, [m["tokens"] for m in fresh], [m.get("role") == "user" for m in fresh],
                  max(turn_number(m.get("turn_id")) for m in fresh),
                  str(fresh[-1].get("created_at") or ""))
    live.lines += parsed.lines
    live.file_stamp = (stamp[0], end)
    return parsed


def _terminate(path: Path, parsed: jsonl.Parsed) -> int:
    """End a whole last message that lacks its newline (so the next append starts a line of its own) → the
    bytes added; best effort, like `_truncate`."""
    if not parsed.unterminated:
        return 0
    try:
        fsutil.append_bytes(path, b"\n", durable=True)
    except OSError as exc:
        log.warning("could not end the last line of %s: %s", path, exc)
        return 0
    return 1


def _truncate(path: Path, size: int) -> None:
    """Cut a torn tail so the next append does not write after it; best effort (a read-only root reads on)."""
    try:
        os.truncate(path, size)
    except OSError as exc:
        log.warning("could not cut the torn tail of %s: %s", path, exc)


def load(p: SessionPaths, cache: archives.ArchiveCache, *,
         durable: bool = True) -> tuple[LiveState, jsonl.Parsed, bool, list[Anomaly]]:
    """Derive the session's state from its files; the caller holds the lock. The one place that decides
    which archive is the last complete one (from `.done` markers and the archives, never the meta's
    word), settles an archive left without `.done`, and applies the readers' rule to the live file.

    Returns the state, the parsed live file, whether `.meta.json` disagrees with the files (a stale
    cache, rewritten by the caller), and the anomalies found.
    """
    raw = read_meta(p.meta)
    check_owner(p, raw)
    disk = raw or {}
    hint_n, hint_end = archive_hint(disk.get("last_archive"))
    data = jsonl.read_bytes(p.messages) or b""
    parsed = jsonl.parse(data, str(p.messages))
    if parsed.end < len(data):
        _truncate(p.messages, parsed.end)
    unterminated = parsed.unterminated and not _terminate(p.messages, parsed)
    n, end = archives.last_complete(p.dir, cache, hint_n)
    found = archives.settle_incomplete(p.dir, cache, n, end, {m["seq"] for m in parsed.messages}, durable=durable)
    if archives.is_complete(p.dir, n + 1):
        n, end = archives.last_complete(p.dir, cache, n)
    if hint_n > n or (hint_n == n > 0 and hint_end != end):  # a meta behind the files is only a stale cache
        found.append(Anomaly(str(p.meta), 0, f"last_archive says {disk.get('last_archive')} but the archives end "
                                             f"at {archive_name(n) if n else 'none'} (seq {end}): recomputed"))
    if raw is None and os.path.lexists(p.meta):  # a cache, so only said: every field is derived below
        found.append(Anomaly(str(p.meta), 0, "unreadable (not a JSON object naming its session): recomputed from "
                                             "the files"))
    picked, disorder = jsonl.ordered(parsed, str(p.messages), after=end)
    found += disorder
    msgs = [parsed.messages[i] for i in picked]
    archive = _archive_object(p, cache, n)
    top = max([end, _int(disk.get("next_seq"), 1) - 1, *(m["seq"] for m in parsed.messages)])
    end_turn = (archive.get("source_turn_range") or {}).get("end_turn_id")
    turns = [_int(disk.get("last_turn"), 0), turn_number(end_turn), *(turn_number(m.get("turn_id")) for m in msgs)]
    same_archive = n == hint_n and n > 0
    last_time = str(msgs[-1].get("created_at") or "") if msgs else ""
    keep = _keep(disk, archive)
    meta = {
        "session_id": p.session_id,
        "created_at": disk.get("created_at") or _first_created_at(p, msgs) or now_iso(),
        "updated_at": max(str(disk.get("updated_at") or ""), last_time) or now_iso(),
        "next_seq": top + 1,
        "message_count": len(msgs),
        "total_message_count": top,
        "commit_count": n,
        "last_commit_at": (disk.get("last_commit_at") if same_archive else None) or archive.get("created_at"),
        "keep": list(keep),
        "keep_recent_count": keep[1] if keep[0] == MESSAGES else None,
        "pending_tokens": 0,
        "live_tokens": 0,
        "last_archive": {"id": archive_name(n), "end_seq": end} if n else None,
    }
    live = LiveState(meta=meta, meta_stamp=file_key(p.meta), file_stamp=live_file_stamp(p.messages),
                     lines=parsed.lines, archive_n=n, archive_end=end, last_turn=max(turns))
    live.unterminated = unterminated  # the next append writes the newline first, in its own write
    live.seqs = [m["seq"] for m in msgs]
    live.tokens = [m["tokens"] for m in msgs]
    live.starts = [m.get("role") == "user" for m in msgs]
    live.recompute_pending()
    return live, parsed, live.disk_form() != raw, found


def _archive_object(p: SessionPaths, cache: archives.ArchiveCache, n: int) -> dict[str, Any]:
    """The last complete archive's object, {} when there is none or it is garbled (reported elsewhere)."""
    try:
        return cache.get(p.dir, n) if n else {}
    except DamagedFile:
        return {}


def _first_created_at(p: SessionPaths, live: list[dict[str, Any]]) -> str:
    """When the meta is lost: the creation time of the session's first message (archive_001 or live)."""
    try:
        data = fsutil.read_file(archives.archive_dir(p.dir, 1) / archives.MESSAGES, 0, 1 << 22) or b""
        first = json.loads(data.split(b"\n", 1)[0])
        return str(first.get("created_at") or "")
    except (OSError, ValueError, AttributeError):
        return str(live[0].get("created_at") or "") if live else ""


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _keep(disk: dict[str, Any], archive: dict[str, Any]) -> Keep:
    """The session's keep: the meta's, else the last commit's (meta lost: the best evidence left)."""
    tail = archive.get("preserved_tail") or {}
    for value in (disk.get("keep"), ("messages", disk.get("keep_recent_count")), tail.get("keep"),
                  ("messages", tail.get("message_count"))):
        try:
            return keep_value(value)
        except InvalidInput:
            continue
    return MESSAGES, DEFAULT_KEEP_RECENT
