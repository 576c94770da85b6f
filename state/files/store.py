"""`SessionStore`: the session files — append under lock, meta, the live rule, archives, GC.

Files are the truth. A message is live iff its seq > the last complete archive's end_seq; every
reader applies that rule, so a crash anywhere between writing an archive and rewriting
`messages.jsonl` shows no duplicate and loses nothing. `.meta.json` is a cache: appends keep it in
memory (O(1) per message) and refresh the file at most every `meta_refresh_seconds`; whoever finds
it stale recomputes it from the files under the session lock.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path
from typing import Any

from workmem.state.archive_checks import check_archive_write
from workmem.state.archive_object import OVERVIEW, with_working_summary
from workmem.state.errors import (
    Anomaly,
    ArchiveNotFound,
    DamagedFile,
    InvalidInput,
    SessionNotFound,
    StorageError,
    UnsafePath,
    WorkmemError,
)
from workmem.state.files import archives, forgetting, fsutil, jsonl, payload_files
from workmem.state.files.appenders import Appenders
from workmem.state.files.locks import DEFAULT_TIMEOUT, FileMutex, session_lock
from workmem.state.files.meta import (
    HIDDEN_FILE,
    MESSAGES_FILE,
    META_FILE,
    LiveState,
    SessionPaths,
    archive_hint,
    catch_up,
    check_owner,
    encode_hidden,
    encode_meta,
    file_key,
    freshness,
    load,
    read_hidden,
    read_meta,
)
from workmem.state.ids import archive_name, archive_number, check_seq_range, safe_session_id
from workmem.state.lru import LRU
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.payloads import DEFAULT_LIMITS, PayloadCache, PayloadLimits, payloads_of, resolve, with_given_texts
from workmem.state.retention import Keep, as_keep
from workmem.state.session_meta import now_iso, public
from workmem.state.stored import has_ids, has_payloads, merge_repeats, prepared_batch, repeats, to_write

log = logging.getLogger("workmem.store")
SESSIONS_DIR = "sessions"  # under the data root: one folder per session
TOMBSTONE_PREFIX = ".deleted-"
TOMBSTONE_MARKER = ".tombstone.json"
_WARNED_ROOTS: set[Path] = set()
NEWEST_ARCHIVES_CACHED = 64  # sessions whose newest archive an append can check repeats against without a read


def _folder_stamp(paths: tuple[str, str]) -> tuple[int, ...] | None:
    """What changes when a link is planted in, or a folder moved into or out of, a session's folder, or its
    format marker is written (`paths`: those two): the folder's inode, mtime, ctime and link count, the marker's
    inode, mtime and size (None while the folder is missing or a link)."""
    session_dir, format_file = paths
    try:
        folder = os.lstat(session_dir)
    except OSError:
        return None
    if not stat.S_ISDIR(folder.st_mode):
        return None
    written: tuple[int, ...] = ()
    if os.access(format_file, os.F_OK, follow_symlinks=False):  # most sessions have none: no exception then
        try:
            marker = os.lstat(format_file)
            written = (marker.st_ino, marker.st_mtime_ns, marker.st_size)
        except OSError:
            written = (-1,)
    return folder.st_ino, folder.st_mtime_ns, folder.st_ctime_ns, folder.st_nlink, *written


def _gaps(path: str, seqs: list[int], archive_end: int, newest: int) -> list[Anomaly]:
    """Seqs no line holds between the live messages, or after them up to the newest seq the session gave out
    (lines lost from the live file: a bad copy, a truncation by hand)."""
    found = [Anomaly(path, 0, f"seqs {a + 1}..{b - 1} are in no line between seq {a} and seq {b}: lost")
             for a, b in zip(seqs, seqs[1:], strict=False) if b > a + 1]
    last = seqs[-1] if seqs else archive_end
    if newest > last:
        found.append(Anomaly(path, 0, f"seqs {last + 1}..{newest} were stored but no line holds them: lost "
                                      "from the end of the live file"))
    return found


class SessionStore:
    """Session files under `<root>/sessions/`; safe for many threads and processes at once."""

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, meta_refresh_seconds: float = 1.0,
                 lock_timeout: float = DEFAULT_TIMEOUT, payload_limits: PayloadLimits = DEFAULT_LIMITS) -> None:
        if not isinstance(root, (str, os.PathLike)) or not str(root):
            raise InvalidInput("root", root, "must be a non-empty path")
        if not isinstance(durable, bool):
            raise InvalidInput("durable", durable, "must be a bool")
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1:
            raise InvalidInput("max_message_bytes", max_message_bytes, "must be a positive integer")
        self.root = Path(root).absolute()
        self.sessions_dir = self.root / SESSIONS_DIR
        self.durable = durable
        self.max_message_bytes = max_message_bytes
        if not isinstance(payload_limits, PayloadLimits):
            raise InvalidInput("payload_limits", payload_limits, "must be a PayloadLimits")
        self.payload_limits = payload_limits
        self._payload_texts = PayloadCache()
        self.meta_refresh_seconds = float(meta_refresh_seconds)
        self.lock_timeout = float(lock_timeout)
        self._paths_by_id: dict[str, SessionPaths] = {}
        self._safe: dict[Path, tuple[int, ...]] = {}  # session folder → its folders' stamp when last found safe
        self._mutexes: dict[Path, FileMutex] = {}
        self._appenders = Appenders()
        self._watched: dict[Path, tuple[str, str]] = {}  # what `_check_safe` stamps, as strings, per session
        self._live: dict[Path, LiveState] = {}
        self._archives = archives.ArchiveCache()
        # the newest archive's messages per session, for idempotent appends (a retried batch a commit took)
        self._newest: LRU[Path, tuple[tuple[Any, ...], list[dict[str, Any]]]] = LRU(NEWEST_ARCHIVES_CACHED)
        self._problems = jsonl.Problems()
        self._live_parses = jsonl.ParseCache()  # each live file's parse: a read parses only what was appended

    # -- sessions -----------------------------------------------------------------------------------

    def session_dir(self, session_id: str) -> Path:
        """Directory of a session (it may not exist yet); never outside `<root>/sessions/`."""
        return self._paths(session_id).dir

    def location(self, session_id: str) -> str:
        """The session's directory, for people."""
        return str(self._paths(session_id).dir)

    def session_exists(self, session_id: str) -> bool:
        """True once the session has been written to."""
        p = self._paths(session_id)
        return os.path.exists(p.meta) or os.path.exists(p.messages)

    def list_sessions(self) -> list[str]:
        """Original ids of every session (lists `sessions/`; not a hot path): from its meta, or — the meta garbled or
        naming another session — from its folder's name when that is the id itself (the meta is derived from the
        files on access; one naming another session makes the session a typed error there, listed as damaged)."""
        try:
            names = sorted(os.listdir(self.sessions_dir))
        except FileNotFoundError:
            return []
        ids = []
        for name in names:
            folder = self.sessions_dir / name
            disk = read_meta(folder / META_FILE)
            session_id = disk["session_id"] if disk is not None and _maps_to(disk["session_id"], name) else None
            session_id = session_id or _plain_name_of_a_session(folder)
            if session_id is not None:
                ids.append(session_id)
        return ids

    def entomb(self, session_id: str, marker: dict[str, Any]) -> Path:
        """The crash-safe first step of deleting a session: under its lock, write `marker` into its
        directory and rename the directory to a tombstone (`sessions/.deleted-<safe_id>-<random>`).

        From then on the session does not exist: the next append starts it again at seq 1. Returns the
        tombstone; `remove_tombstone` deletes it once the rows and threads elsewhere are gone.
        """
        p = self._existing(session_id, derive=False)  # a session whose files cannot be read can still go
        with self._lock(p):
            fsutil.atomic_write(p.dir / TOMBSTONE_MARKER, encode_meta(marker), durable=True)
            tombstone = self.sessions_dir / f"{TOMBSTONE_PREFIX}{p.safe_id}-{os.urandom(4).hex()}"
            fsutil.publish_dir(p.dir, tombstone, durable=True)
            self._live.pop(p.dir, None)
            self._live_parses.forget(str(p.messages))
            self._problems.forget(p.dir)
            self._payload_texts.forget(p.safe_id)
        return tombstone

    def tombstones(self) -> list[tuple[dict[str, Any], Path]]:
        """(marker, path) of every tombstone left by a delete that did not finish (lists `sessions/`)."""
        try:
            names = sorted(os.listdir(self.sessions_dir))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith(TOMBSTONE_PREFIX):
                marker = read_meta(self.sessions_dir / name / TOMBSTONE_MARKER) or {}
                found.append((marker, self.sessions_dir / name))
        return found

    def remove_tombstone(self, tombstone: Path) -> None:
        """The last step of a delete: the tombstone's files go."""
        if tombstone.parent != self.sessions_dir or not tombstone.name.startswith(TOMBSTONE_PREFIX):
            raise InvalidInput("tombstone", str(tombstone), "is not a tombstone of this root")
        fsutil.remove_tree(tombstone)

    def meta(self, session_id: str) -> dict[str, Any]:
        """Session meta; O(1) unless another process changed the files since we last looked."""
        p = self._existing(session_id)
        with self._lock(p):
            return public(self._sync(p).meta)

    def set_keep(self, session_id: str, keep: Keep) -> dict[str, Any]:
        """Set the keep window pending_tokens is computed with (`(unit, n)`, see `keep_value`); returns the meta."""
        keep = as_keep(keep)
        p = self._existing(session_id)
        with self._lock(p):
            live = self._sync(p)
            live.set_keep(keep)
            self._save_meta(p, live, durable=self.durable)
            return public(live.meta)

    def flush(self) -> None:
        """Write every meta this store changed in memory but not yet on disk."""
        for p in list(self._paths_by_id.values()):
            live = self._live.get(p.dir)
            if live is not None and live.dirty:
                try:
                    with self._lock(p):
                        self._save_meta(p, self._sync(p), durable=False)
                except OSError as exc:  # a damaged session: its meta is a cache the next reader recomputes
                    log.warning("could not refresh %s: %s", p.meta, exc)

    def close(self) -> None:
        """Flush stale metas and close the live files kept open between appends; the store stays usable."""
        self.flush()
        for p in list(self._paths_by_id.values()):
            live = self._live.get(p.dir)
            if live is not None and live.appender is not None:
                with self._lock(p):
                    self._appenders.drop(live)

    # -- appending ----------------------------------------------------------------------------------

    def append(self, session_id: str, messages: list[Any], *, durable: bool | None = None) -> list[dict[str, Any]]:
        """Validate every message, then append the batch with one write and one fsync; returns the stored messages."""
        p = self._paths(session_id)
        prepared, counts = prepared_batch(messages, durable, self.max_message_bytes, self.payload_limits)
        if not prepared:
            return []
        sync = self.durable if durable is None else durable
        try:
            self._check_safe(p)  # at every access: a link planted since the last call is refused too
            if p.dir not in self._live:
                if not p.dir.exists():
                    fsutil.make_dirs(p.dir, durable=self.durable)
            with self._lock(p):
                return self._append_locked(p, prepared, counts, sync)
        except OSError as exc:  # nothing was written: the file was truncated back to where it was
            self._live.pop(p.dir, None)  # unknown state: the next operation reloads from the files
            if isinstance(exc, WorkmemError):
                raise
            raise StorageError(str(p.messages), exc) from exc

    def _append_locked(self, p: SessionPaths, prepared: list[tuple[dict[str, Any], bytes]], counts: list[int],
                       sync: bool) -> list[dict[str, Any]]:
        now = now_iso()
        if p.dir not in self._live and not p.meta.exists():
            self._create(p, now)
        live = self._sync(p)
        given = [msg for msg, _body in prepared]
        found = repeats(prepared, self._recent(p, live)) if has_ids(prepared) else None
        if has_payloads(prepared):  # always durable, before the line that refers to them; a repeat's too (it heals
            payload_files.write(p.dir, payloads_of(to_write(given, found)))  # a damaged stored copy)
        if found is not None and any(copy is not None for copy in found):
            fresh = [i for i, copy in enumerate(found) if copy is None]
            prepared, counts = [prepared[i] for i in fresh], [counts[i] for i in fresh]
            if not prepared:
                return with_given_texts(merge_repeats(found, []), given)
        seq = live.meta["next_seq"]
        stored, data, turn = jsonl.stored_lines(prepared, counts, seq, live.last_turn, now)
        if live.unterminated:  # the last line's newline could not be written when it was found: it goes first
            data = b"\n" + data
        fd = self._appenders.descriptor(live, p.messages)
        ino, start = (fsutil.append_bytes(p.messages, data, durable=sync, fd=fd) if fd is not None
                      else fsutil.append_bytes(p.messages, data, durable=sync))
        # The batch is stored: what follows only refreshes caches, and never fails the append (a retry by
        # the caller would store the batch twice). A failed refresh is logged and redone later.
        live.push(list(range(seq, seq + len(stored))), counts, [m["role"] == "user" for m in stored], turn, now)
        live.lines += len(stored)
        live.file_stamp = (ino, start + len(data))
        live.unterminated = False
        if time.monotonic() - live.saved_at >= self.meta_refresh_seconds:
            self._refresh_meta(p, live)
        return with_given_texts(merge_repeats(found, stored), given) if found is not None else stored

    def _recent(self, p: SessionPaths, live: LiveState) -> list[dict[str, Any]]:
        """The newest archive's messages (cached per archive), the placeholders of forgotten messages of older ones
        and the live messages: what an append may repeat."""
        if not live.archive_n:
            return self._live_snapshot(p, strict=False)[0]
        # a re-created session has other archives; a forget rewrites the archive's file (another inode)
        forgotten = p.dir / forgetting.FORGOTTEN
        recorded = file_key(forgotten)
        if live.archive_n > 1 and recorded is None:  # once: a session older builds forgot in, or none did
            self._write_placeholders(p, live.archive_n)
            recorded = file_key(forgotten)
        key = (live.archive_n, str(live.meta.get("created_at")),
               file_key(archives.archive_dir(p.dir, live.archive_n) / archives.MESSAGES), recorded)
        cached = self._newest.get(p.dir)
        if cached is None or cached[0] != key:
            newest = self._archive_messages(p, live.archive_n)  # unreadable: the append fails, never duplicates
            start = newest[0]["seq"] if newest else live.meta["next_seq"]
            older = [m for m in forgetting.forgotten_placeholders(p.dir) if m["seq"] < start]  # any archive's
            cached = (key, [*older, *newest])
            self._newest.put(p.dir, cached)
        newest = cached[1]
        return [*newest, *self._live_snapshot(p, strict=False)[0]]

    def _write_placeholders(self, p: SessionPaths, newest: int) -> None:
        """`forgotten.jsonl` from the archives before the newest; not while one of them cannot be read (its
        placeholders are unknown: the next append looks again; `check` reports the damage)."""
        try:
            older = [self._archive_messages(p, n) for n in range(1, newest) if archives.is_complete(p.dir, n)]
        except (WorkmemError, OSError) as exc:
            log.debug("forgotten placeholders of %s not recorded: %s", p.dir, exc)
            return
        forgetting.write_placeholders(p.dir, older)

    # -- reading ------------------------------------------------------------------------------------

    def live_messages(self, session_id: str, *, strict: bool = False, texts: bool = True) -> list[dict[str, Any]]:
        """Messages not yet archived, oldest first (bad lines skipped and recorded; strict → CorruptLine;
        `texts=False`: payload parts as stored)."""
        p = self._existing(session_id)
        live = self._live_snapshot(p, strict)[0]
        return self._resolved(p, live) if texts else live

    def messages_in_range(self, session_id: str, start_seq: int, end_seq: int, *,
                          texts: bool = True) -> list[dict[str, Any]]:
        """Messages with start_seq ≤ seq ≤ end_seq, from the archives and/or the live file (`texts=False`: payload
        parts as stored, their payloads not read)."""
        check_seq_range(start_seq, end_seq)
        p = self._existing(session_id)
        live, n, end = self._live_snapshot(p, strict=False)
        out: list[dict[str, Any]] = []
        k = archives.find_containing(p.dir, self._archives, n, start_seq) if start_seq <= end else 0
        while 0 < k <= n and archives.seq_range(self._archives.get(p.dir, k))[0] <= end_seq:
            out.extend(m for m in self._archive_messages(p, k) if start_seq <= m["seq"] <= end_seq)
            k += 1
        out.extend(m for m in live if start_seq <= m["seq"] <= end_seq)
        return self._resolved(p, out) if texts else out

    def problems(self, session_id: str) -> list[Anomaly]:
        """What the latest reads of the session's files found wrong (corrupt, repeated or out-of-order lines,
        a meta that disagreed with the files, an archive left without `.done`), with file and line."""
        return self._problems.of(self._existing(session_id).dir)

    def check(self, session_id: str) -> list[Anomaly]:
        """Every anomaly of the session's files, with file and line: the live file, the meta, each archive
        (its `.done`, archive.json, messages, range) and the chain of archives (a missing or overlapping
        one). Reads everything: O(archives), never on a hot path."""
        p = self._existing(session_id, derive=False)
        self._warn_if_exposed()
        try:
            with self._lock(p):
                live, parsed, _, found = load(p, self._archives, durable=self.durable)
                self._live[p.dir] = live
        except DamagedFile as exc:  # the live file or the meta cannot be read at all: that is the finding
            return [Anomaly(exc.path, 0, exc.reason)]
        picked, disorder = jsonl.ordered(parsed, str(p.messages), after=live.archive_end)
        found = [*parsed.problems, *disorder, *found]
        found += payload_files.anomalies(p.dir, [parsed.messages[i] for i in picked], str(p.messages))
        previous_end = 0
        numbers = archives.archive_numbers(p.dir)
        history = p.dir / archives.HISTORY
        if history.exists() and not history.is_dir():
            found.append(Anomaly(str(history), 0, "is not a folder: its archives cannot be read"))
        for n in numbers:
            folder = archives.archive_dir(p.dir, n)
            if not archives.is_complete(p.dir, n):
                if n <= live.archive_n:
                    found.append(Anomaly(str(folder), 0, "has no .done although later archives are complete"))
                continue
            found += archives.check_archive_files(folder, n, previous_end)
            try:
                found += payload_files.anomalies(p.dir, self._archive_messages(p, n), str(folder / archives.MESSAGES))
            except (DamagedFile, Anomaly):
                pass  # the archive's own findings above say why its messages cannot be read
            try:
                previous_end = archives.seq_range(self._archives.get(p.dir, n))[1]
            except DamagedFile:
                previous_end = self._archives.end_seq(p.dir, n)
        for n in sorted(set(range(1, live.archive_n + 1)) - set(numbers)):
            found.append(Anomaly(str(archives.archive_dir(p.dir, n)), 0, "missing: its messages are in no archive"))
        if live.seqs and live.seqs[0] != live.archive_end + 1:
            found.append(Anomaly(str(p.messages), 0, f"the live messages start at seq {live.seqs[0]}, "
                                                     f"not {live.archive_end + 1}: seqs in between are nowhere"))
        found += _gaps(str(p.messages), live.seqs, live.archive_end, live.meta["next_seq"] - 1)
        return found

    def _warn_if_exposed(self) -> None:
        """One WARNING when the data root is open to group or others (new roots are owner-only); its mode is
        never changed behind the owner's back."""
        try:
            mode = os.stat(self.root).st_mode & 0o777
        except OSError:
            return
        if mode & 0o077 and self.root not in _WARNED_ROOTS:
            _WARNED_ROOTS.add(self.root)
            log.warning("the data root %s is open to group or others (mode %o) and holds whole conversations; "
                        "`chmod 700` it unless it is meant to be shared", self.root, mode)

    # -- hidden messages ----------------------------------------------------------------------------

    def hidden(self, session_id: str) -> set[int]:
        """Seqs of live messages the agent's state no longer holds: left out of assemble and of commit
        transcripts, still in the log and searchable once archived. Kept in `hidden.json` beside the log."""
        p = self._existing(session_id)
        with self._lock(p):
            return self._hidden(p, self._sync(p))

    def set_hidden(self, session_id: str, hide: set[int], unhide: set[int]) -> set[int]:
        """Mark live seqs hidden / shown again; archived seqs are forgotten (the file stays small)."""
        p = self._existing(session_id)
        with self._lock(p):
            live = self._sync(p)
            before = self._hidden(p, live)
            live_seqs = set(live.seqs)
            after = {s for s in (before | set(hide)) - set(unhide) if s in live_seqs}
            if after != before:
                fsutil.atomic_write(p.dir / HIDDEN_FILE, encode_hidden(after), durable=self.durable)
            return after

    def _hidden(self, p: SessionPaths, live: LiveState) -> set[int]:
        seqs = read_hidden(p.dir / HIDDEN_FILE)
        return {s for s in seqs if s > live.archive_end}

    # -- archives -----------------------------------------------------------------------------------

    def last_complete_archive(self, session_id: str) -> dict[str, Any] | None:
        """archive.json of the newest complete archive, or None before the first commit."""
        p = self._existing(session_id)
        n, _ = self._last_complete(p)
        if not n:
            return None
        overview = archives.read_text(archives.archive_dir(p.dir, n) / OVERVIEW)
        return with_working_summary(self._archives.get(p.dir, n), overview)

    def next_archive_id(self, session_id: str) -> str:
        """Id the next commit writes: last complete + 1."""
        return archive_name(self._last_complete(self._existing(session_id))[0] + 1)

    def list_archives(self, session_id: str) -> list[dict[str, Any]]:
        """`{archive_id, abstract, start_seq, end_seq}` of every complete archive, oldest first."""
        p = self._existing(session_id)
        out = []
        for n in archives.complete_numbers(p.dir):
            start, end = archives.seq_range(self._archives.get(p.dir, n))
            abstract = archives.read_text(archives.archive_dir(p.dir, n) / archives.ABSTRACT).strip()
            out.append({"archive_id": archive_name(n), "abstract": abstract, "start_seq": start, "end_seq": end})
        return out

    def read_archive(self, session_id: str, archive_id: str) -> dict[str, Any]:
        """The archive object plus `overview` (the WM) and `abstract`; unknown id → ArchiveNotFound."""
        p, n = self._complete(session_id, archive_id)
        folder = archives.archive_dir(p.dir, n)
        overview = archives.read_text(folder / OVERVIEW)
        return {**with_working_summary(self._archives.get(p.dir, n), overview), "overview": overview,
                "abstract": archives.read_text(folder / archives.ABSTRACT).strip()}

    def spilled_items(self, session_id: str, archive_id: str) -> list[dict[str, str]]:
        """The WM items an archive's commit moved out of the working memory (`spilled.md`)."""
        p, n = self._complete(session_id, archive_id)
        return archives.parse_spilled(archives.read_text(archives.archive_dir(p.dir, n) / archives.SPILLED))

    def archive_messages(self, session_id: str, archive_id: str, *, strict: bool = False,
                         texts: bool = True) -> list[dict[str, Any]]:
        """The messages one complete archive covers (a damaged payload reads as its placeholder; `check()`
        reports it; `texts=False`: payload parts as stored)."""
        p, n = self._complete(session_id, archive_id)
        messages = self._archive_messages(p, n, strict)
        return self._resolved(p, messages) if texts else messages

    def latest_overview(self, session_id: str) -> str | None:
        """The working-memory document of the newest complete archive, or None."""
        p = self._existing(session_id)
        n, _ = self._last_complete(p)
        return archives.read_text(archives.archive_dir(p.dir, n) / OVERVIEW) if n else None

    def write_archive(self, session_id: str, archive: dict[str, Any], messages: list[dict[str, Any]],
                      overview: str, abstract: str, spilled: list[dict[str, str]] | None = None) -> Path:
        """Write `history/<archive_id>/` (temp dir → rename → `.done`); a no-op when already complete.

        The archive's messages.jsonl holds the live file's own lines for the covered seqs (verbatim);
        `messages` must be exactly the oldest live messages up to end_seq.
        """
        p = self._existing(session_id)
        n, seqs, abstract = check_archive_write(session_id, archive, messages, overview, abstract)
        end = seqs[-1]
        folder = archives.archive_dir(p.dir, n)
        with self._lock(p):
            if archives.is_complete(p.dir, n):
                return folder
            live = self._sync(p)
            if n != live.archive_n + 1:
                raise InvalidInput("archive.archive_id", archive["archive_id"],
                                   f"the next archive of this session is {archive_name(live.archive_n + 1)}")
            parsed, picked = self._parsed(p, p.messages, jsonl.read_bytes(p.messages) or b"", False,
                                          after=live.archive_end)
            covered = [(parsed.messages[i]["seq"], parsed.raw[i]) for i in picked if parsed.messages[i]["seq"] <= end]
            # Every live seq counts, not only the covered ones: a resumed run whose checkpoints a power cut lost
            # slices again and may cover less than the archive its first run left without `.done`.
            archives.check_rewritable(folder, {parsed.messages[i]["seq"] for i in picked})
            if [s for s, _ in covered] != seqs:
                raise InvalidInput("messages", f"seqs {seqs[0]}..{seqs[-1]}",
                                   f"must be exactly the oldest live messages up to end_seq {end}")
            self._archives.forget(p.dir, n)
            self._live.pop(p.dir, None)  # the live set changes (or may have): reload next time
            archives.write_archive_dir(p.dir, n, b"".join(raw + b"\n" for _, raw in covered), overview,
                                       abstract, archive, durable=True, spilled=spilled)
        return folder

    def drop_covered(self, session_id: str, end_seq: int) -> int:
        """GC: rewrite `messages.jsonl` without seqs ≤ end_seq (already archived); returns lines dropped."""
        if isinstance(end_seq, bool) or not isinstance(end_seq, int) or end_seq < 0:
            raise InvalidInput("end_seq", end_seq, "must be an integer >= 0")
        p = self._existing(session_id)
        with self._lock(p):
            live = self._sync(p)
            if end_seq > live.archive_end:
                raise InvalidInput("end_seq", end_seq,
                                   f"not archived: the last complete archive ends at seq {live.archive_end}")
            parsed, picked = self._parsed(p, p.messages, jsonl.read_bytes(p.messages) or b"", False, after=end_seq)
            kept = [parsed.raw[i] for i in picked]  # each live seq once, in seq order: the readers' view
            dropped = len(parsed.messages) - len(kept)
            if dropped:
                kept += parsed.bad_lines  # never delete what we cannot read; it stays reported
                self._live.pop(p.dir, None)
                # durable whatever `durable` says: this replaces the only copy of the live messages
                fsutil.atomic_write(p.messages, b"".join(raw + b"\n" for raw in kept), durable=True)
            return dropped

    def record_commit(self, session_id: str, archive: dict[str, Any], keep: Keep) -> dict[str, Any]:
        """After a commit: meta gets the new last archive, commit count, keep and pending tokens."""
        keep = as_keep(keep)
        if not isinstance(archive, dict):
            raise InvalidInput("archive", archive, "must be the archive object (a dict)")
        p, n = self._complete(session_id, archive.get("archive_id"))
        with self._lock(p):
            live = self._reload(p, save_stale=False)  # saved below
            if n == live.archive_n:
                live.meta["last_commit_at"] = self._archives.get(p.dir, n).get("created_at") or now_iso()
                live.set_keep(keep)
            self._save_meta(p, live, durable=self.durable)
            return public(live.meta)

    # -- forgetting (privacy) -----------------------------------------------------------------------

    def begin_forget(self, intent: dict[str, Any]) -> None:
        """Record a forget of `intent["session_id"]` durably before any file of it changes (`forgetting`)."""
        p = self._existing(intent["session_id"])
        forgetting.write_intent(forgetting.intent_path(self.sessions_dir, p.safe_id), intent)

    def forget_intents(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The intents of forgets that did not finish, of every session or of one (lists `sessions/`)."""
        found = forgetting.read_intents(self.sessions_dir)
        return found if session_id is None else [i for i in found if i["session_id"] == session_id]

    def end_forget(self, session_id: str) -> None:
        """The last step of a forget: its intent goes."""
        fsutil.remove_file(forgetting.intent_path(self.sessions_dir, self._paths(session_id).safe_id))

    def forget(self, session_id: str, seqs: list[int], at: str) -> dict[str, Any]:
        """Under the session lock, replace every stored copy of `seqs` (live and archived lines) by its
        placeholder (`state.forget`), remove the payloads no line refers to any more, and drop what this store
        cached of the session (payload texts, the newest archive's messages); the meta is recomputed from the
        files (tokens). Idempotent: → {forgotten, archives, payloads_removed} of what this call changed."""
        p = self._existing(session_id)
        with self._lock(p):
            done = forgetting.forget_in_folder(p.dir, p.messages, set(seqs), at)
            for n in done["archives"]:
                self._archives.forget(p.dir, n)
            self._newest.pop(p.dir)
            self._payload_texts.forget(p.safe_id)
            self._live.pop(p.dir, None)
            self._reload(p)
        return done

    # -- internals ----------------------------------------------------------------------------------

    def _paths(self, session_id: str) -> SessionPaths:
        p = self._paths_by_id.get(session_id) if isinstance(session_id, str) else None
        if p is None:
            safe = safe_session_id(session_id)
            p = SessionPaths.of(self.sessions_dir, session_id, safe)
            if p.dir.parent != self.sessions_dir or p.dir.name != safe:
                raise InvalidInput("session_id", session_id, "does not map inside the data root")
            if len(self._paths_by_id) > 10_000:
                self._paths_by_id.clear()
            self._paths_by_id[session_id] = p
        return p

    def _existing(self, session_id: str, *, derive: bool = True) -> SessionPaths:
        """The paths of a session that exists; the first access of this store derives its state from the
        files under the lock (`meta.load`), which settles what a crash or a damaged file left behind (not with
        `derive=False`: a check or a delete must reach a session whose live file cannot be read)."""
        p = self._paths(session_id)
        self._check_safe(p)  # at every access: a link planted since the last call is refused too
        if not derive:
            if not (p.meta.exists() or p.messages.exists()):
                raise SessionNotFound(session_id)
            return p
        if p.dir not in self._live:
            if not (p.meta.exists() or p.messages.exists()):
                raise SessionNotFound(session_id)
            check_owner(p, read_meta(p.meta))
            with self._lock(p):
                self._sync(p)
        return p

    def _check_safe(self, p: SessionPaths) -> None:
        """No folder of the session may be a symlink: the sessions folder, the session's folder, its history and
        payloads (files below are opened with O_NOFOLLOW, archive folders checked when read); a session a newer
        build wrote is refused.

        Checked in full once per open session, and again whenever the session's folder or its format marker
        changed since (two `lstat`s per access): planting a link or moving a folder in or out changes the folder's
        inode, mtime, ctime or link count; the session's folder replaced by a link (or reached through a sessions
        folder replaced by one) is another inode unless it is the session's own folder moved, whose files are
        then all the link reaches."""
        watched = self._watched.get(p.dir)
        if watched is None:
            if len(self._watched) > 10_000:
                self._watched.clear()
            watched = self._watched[p.dir] = (str(p.dir), str(p.dir / payload_files.FORMAT_FILE))
        stamp = _folder_stamp(watched)
        if stamp is not None and self._safe.get(p.dir) == stamp:
            return
        for path in (self.sessions_dir, p.dir, p.dir / archives.HISTORY, payload_files.folder(p.dir)):
            if os.path.islink(path):
                raise UnsafePath(str(path))
        payload_files.check_format(p.dir)
        if stamp is not None:
            if len(self._safe) > 10_000:
                self._safe.clear()
            self._safe[p.dir] = stamp

    def _complete(self, session_id: str, archive_id: Any) -> tuple[SessionPaths, int]:
        p = self._existing(session_id)
        if not isinstance(archive_id, str):
            raise InvalidInput("archive_id", archive_id, "must be a string like 'archive_001'")
        try:
            n = archive_number(archive_id)
        except InvalidInput:
            raise ArchiveNotFound(session_id, archive_id) from None
        if not archives.is_complete(p.dir, n):
            raise ArchiveNotFound(session_id, archive_id)
        return p, n

    def _lock(self, p: SessionPaths) -> FileMutex:
        mutex = self._mutexes.get(p.lock)  # the process-wide mutex of the path, looked up once per session
        if mutex is None:
            if len(self._mutexes) > 10_000:
                self._mutexes.clear()
            mutex = self._mutexes[p.lock] = session_lock(p.lock, self.lock_timeout)
        return mutex

    def _last_complete(self, p: SessionPaths) -> tuple[int, int]:
        """Last complete archive: hint from our state or the stored meta, checked with two `.done` stats."""
        live = self._live.get(p.dir)
        hint = live.archive_n if live is not None else archive_hint((read_meta(p.meta) or {}).get("last_archive"))[0]
        return archives.last_complete(p.dir, self._archives, hint)

    def _live_snapshot(self, p: SessionPaths, strict: bool) -> tuple[list[dict[str, Any]], int, int]:
        """Live messages without taking the lock: read the file first, then find the last complete archive.

        GC only removes seqs of an archive whose `.done` exists before the rewrite, so the archive found
        after reading covers everything the file we read may lack; older lines it still holds are filtered.
        """
        data = jsonl.read_bytes(p.messages) or b""
        n, end = self._last_complete(p)
        parsed = self._live_parses.parse(data, str(p.messages))
        picked = self._picked(p, p.messages, parsed, strict, after=end)
        return [parsed.messages[i] for i in picked], n, end

    def _parsed(self, p: SessionPaths, path: Path, data: bytes, strict: bool, *,
                after: int = 0) -> tuple[jsonl.Parsed, list[int]]:
        """Parse a messages file with the readers' rules; record what they found; strict → raise it."""
        parsed = jsonl.parse(data, str(path))
        return parsed, self._picked(p, path, parsed, strict, after=after)

    def _picked(self, p: SessionPaths, path: Path, parsed: jsonl.Parsed, strict: bool, *, after: int) -> list[int]:
        """The readers' rule over a parsed file (`jsonl.ordered`); what it found is recorded; strict → raised."""
        picked, found = jsonl.ordered(parsed, str(path), after=after)
        found = [*parsed.problems, *found]
        if strict and found:
            raise found[0]
        self._problems.note(p.dir, path, found, replace=True)
        return picked

    def _resolved(self, p: SessionPaths, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Stored messages with their payloads' texts (a damaged payload reads as its placeholder, `resolve`)."""
        return resolve(messages, lambda shas: payload_files.read(p.dir, shas), p.safe_id, self._payload_texts)

    def _archive_messages(self, p: SessionPaths, n: int, strict: bool = False) -> list[dict[str, Any]]:
        """The messages of archive `n` by the readers' rules; a seq of its range that is missing is reported."""
        folder = archives.archive_dir(p.dir, n)
        if os.path.islink(folder):
            raise UnsafePath(str(folder))
        path = folder / archives.MESSAGES
        data = jsonl.read_bytes(path)
        if data is None:
            raise DamagedFile(str(path), "missing")
        parsed, picked = self._parsed(p, path, data, strict)
        messages = [parsed.messages[i] for i in picked]
        start, end = archives.seq_range(self._archives.get(p.dir, n))
        if [m["seq"] for m in messages] != list(range(start, end + 1)):
            missing = sorted(set(range(start, end + 1)) - {m["seq"] for m in messages})
            found = Anomaly(str(path), 0, f"{len(missing)} seq(s) of {start}..{end} missing: {missing[:10]}")
            if strict:
                raise found
            self._problems.note(p.dir, path, [found], replace=False)
        return messages

    def _create(self, p: SessionPaths, now: str) -> None:
        """First write of a session (or of a lost meta): directory, empty live file, durable meta."""
        fsutil.make_dirs(p.dir, durable=self.durable)
        fsutil.create_file(p.messages)
        live, parsed, _, found = load(p, self._archives, durable=self.durable)
        self._problems.note(p.dir, p.messages, parsed.problems, replace=True)
        self._problems.note(p.dir, p.dir, found, replace=True)
        if not parsed.messages and not live.archive_n:
            live.meta["created_at"] = live.meta["updated_at"] = now  # the first message's time
        self._live[p.dir] = live
        self._save_meta(p, live, durable=self.durable)

    def _save_meta(self, p: SessionPaths, live: LiveState, *, durable: bool) -> None:
        fsutil.atomic_write(p.meta, encode_meta(live.disk_form()), durable=durable)
        live.meta_stamp = file_key(p.meta)
        live.saved_at = time.monotonic()
        live.dirty = False

    def _sync(self, p: SessionPaths) -> LiveState:
        """Our state of the session, brought up to date with the files (the caller holds the lock)."""
        live = self._live.get(p.dir)
        if live is not None:
            state = freshness(p, live)
            if state == "fresh":
                return live
            if state == "grown":
                parsed = catch_up(p, live)
                if parsed is not None:
                    self._problems.note(p.dir, p.messages, parsed.problems, replace=False)
                    return live
        return self._reload(p)

    def _reload(self, p: SessionPaths, *, save_stale: bool = True) -> LiveState:
        live, parsed, stale, found = load(p, self._archives, durable=self.durable)
        self._problems.note(p.dir, p.messages, parsed.problems, replace=True)
        self._problems.note(p.dir, p.dir, found, replace=True)  # what deriving the session's state found
        self._live[p.dir] = live
        if stale and save_stale:
            self._refresh_meta(p, live)  # the cache on disk disagreed with the files
        return live

    def _refresh_meta(self, p: SessionPaths, live: LiveState) -> None:
        """Rewrite `.meta.json` from our state; a failure (disk full, read-only root) is logged, not raised:
        the meta is a cache the next writer refreshes."""
        try:
            self._save_meta(p, live, durable=False)
        except OSError as exc:
            live.dirty = True
            log.warning("could not refresh %s: %s", p.meta, exc)


def _maps_to(session_id: str, name: str) -> bool:
    """Whether `session_id` is the session of the folder `name` (an id no session may have maps to none)."""
    try:
        return safe_session_id(session_id) == name
    except InvalidInput:
        return False


def _plain_name_of_a_session(folder: Path) -> str | None:
    """A session folder's name when its meta cannot be read or names another session, and the folder holds a
    session's files: a plain id is its own folder's name (a hashed one cannot be told from it)."""
    plain = _maps_to(folder.name, folder.name)  # a plain id is its own folder's name; tombstones are not plain
    if not plain or not any((folder / f).exists() for f in (MESSAGES_FILE, archives.HISTORY)):
        return None
    return folder.name
