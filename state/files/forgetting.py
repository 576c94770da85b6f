"""Forgetting in the files backend: the intent a forget writes first, and the rewrites of one session's files.

A forget is crash-safe through its intent, `sessions/.forget-<safe_id>.json` (the session id and its
`created_at`, the seqs, the time): written durably before anything changes, removed when every step is done,
and finished by the next engine that finds it (`FileStorage.finish_forget`). Every step is idempotent — a line
already forgotten is rewritten to itself — so finishing an interrupted forget repeats what was done and does
the rest. The caller holds the session lock: no append, archive write or GC runs meanwhile.

In the session folder every line of a forgotten seq is replaced by its placeholder (`state.forget`), in the
live file and in every archive folder (complete or not), each file rewritten atomically (temp → fsync →
rename); a commit's half-written temp folder and the temp files crashed writers left are removed, and so is
every payload no line refers to any more. A line that cannot be parsed is kept as it is (its seq is unknown).
The placeholders that carry a LangChain id are listed in `forgotten.jsonl`, so an append finds a re-sent copy
of a forgotten message in whatever archive holds it (it looks in the newest archive and the live file only).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workmem.state.files import archives, fsutil, jsonl, payload_files
from workmem.state.forget import forgotten_copy, is_forgotten
from workmem.state.jsonutil import dumps
from workmem.state.messages import lc_id
from workmem.state.payloads import refs_of
from workmem.state.stored import check_stored

log = logging.getLogger("workmem.store")
INTENT_PREFIX = ".forget-"
INTENT_SUFFIX = ".json"
_TEMP_FILE = re.compile(r"\..+\.tmp-.+")  # what `fsutil.atomic_write` names its temp files
_TEMP_ARCHIVE = re.compile(r"\.archive_[0-9]{3,9}\.tmp")  # what `archives.write_archive_dir` writes first
_SHA = re.compile(r"[0-9a-f]{64}")
FORGOTTEN = "forgotten.jsonl"  # the placeholders with a LangChain id, for appends to find in any archive


def intent_path(sessions_dir: Path, safe_id: str) -> Path:
    """Where the intent of a forget of session `safe_id` lives."""
    return sessions_dir / f"{INTENT_PREFIX}{safe_id}{INTENT_SUFFIX}"


def write_intent(path: Path, intent: dict[str, Any]) -> None:
    """Record a forget durably before it changes anything."""
    fsutil.atomic_write(path, (json.dumps(intent, ensure_ascii=False) + "\n").encode("utf-8"), durable=True)


def read_intents(sessions_dir: Path) -> list[dict[str, Any]]:
    """Every intent left by a forget that did not finish (lists `sessions/`); an unreadable one is logged."""
    try:
        names = sorted(os.listdir(sessions_dir))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not (name.startswith(INTENT_PREFIX) and name.endswith(INTENT_SUFFIX)):
            continue
        try:
            intent = json.loads(jsonl.read_bytes(sessions_dir / name) or b"")
            if not isinstance(intent, dict) or not isinstance(intent.get("session_id"), str):
                raise ValueError("not a forget intent")
        except (OSError, ValueError) as exc:
            log.warning("cannot finish the forget recorded in %s: %s", sessions_dir / name, exc)
            continue
        found.append(intent)
    return found


def forget_in_folder(session_dir: Path, live_path: Path, seqs: set[int], at: str) -> dict[str, Any]:
    """Replace every line of `seqs` under `session_dir` by its placeholder, then remove temp leftovers and the
    payloads no line refers to → {forgotten: seqs whose text a file still held, archives: numbers rewritten,
    payloads_removed}."""
    changed: set[int] = set()
    rewritten = []
    referenced: set[str] = set()
    placeholders: dict[int, dict[str, Any]] = {}
    history = session_dir / archives.HISTORY
    for name in _listing(history):
        folder = history / name
        if _TEMP_ARCHIVE.fullmatch(name):
            fsutil.remove_tree(folder)  # a commit that crashed before publishing it; it writes it again
        elif (n := _archive_number(name)) and folder.is_dir() and not folder.is_symlink():
            done = _rewrite(folder / archives.MESSAGES, seqs, at, referenced, placeholders)
            if done:
                changed |= set(done)
                rewritten.append(n)
            _remove_temp_files(folder)
    changed |= set(_rewrite(live_path, seqs, at, referenced, placeholders))
    _record_forgotten(session_dir, placeholders)  # a live one is archived by a later commit
    _remove_temp_files(session_dir)
    return {"forgotten": sorted(changed), "archives": rewritten,
            "payloads_removed": _remove_unreferenced(session_dir, referenced)}


def forgotten_placeholders(session_dir: Path) -> list[dict[str, Any]]:
    """The placeholders of the messages forgets replaced that carry a LangChain id (`FORGOTTEN`), oldest first: an
    append finds a re-sent copy of one there, whatever archive holds it by then (a damaged line is skipped)."""
    data = jsonl.read_bytes(session_dir / FORGOTTEN) or b""
    return [msg for line in jsonl.complete_lines(data).split(b"\n")[:-1] if (msg := _parsed(line)) is not None]


def write_placeholders(session_dir: Path, archived: Iterable[list[dict[str, Any]]]) -> None:
    """Write `FORGOTTEN` from the placeholders the `archived` messages hold (empty when none: the archives were
    looked at); for a session without the file, which builds before it forgot in. A cache of the archives:
    written without fsync, found again when lost."""
    _write_forgotten(session_dir, {m["seq"]: m for messages in archived for m in messages
                                   if is_forgotten(m) and lc_id(m)}, durable=False)


def _record_forgotten(session_dir: Path, placeholders: dict[int, dict[str, Any]]) -> None:
    """Add the placeholders that carry a LangChain id to `FORGOTTEN` (durably; a forget finished again writes the
    same)."""
    new = {seq: msg for seq, msg in placeholders.items() if lc_id(msg)}
    if not new:
        return
    known = {msg["seq"]: msg for msg in forgotten_placeholders(session_dir)}
    if all(known.get(seq) == msg for seq, msg in new.items()):
        return
    _write_forgotten(session_dir, {**known, **new}, durable=True)


def _write_forgotten(session_dir: Path, placeholders: dict[int, dict[str, Any]], *, durable: bool) -> None:
    """`FORGOTTEN` holding `placeholders`, one line each in seq order, replaced atomically."""
    data = b"".join(dumps(placeholders[seq]) + b"\n" for seq in sorted(placeholders))
    fsutil.atomic_write(session_dir / FORGOTTEN, data, durable=durable)


def _rewrite(path: Path, seqs: set[int], at: str, referenced: set[str],
             placeholders: dict[int, dict[str, Any]]) -> list[int]:
    """Rewrite one messages file with the placeholders of `seqs` (atomically, durably: it may be the only copy of
    the others); adds the payloads its lines refer to afterwards to `referenced` and every placeholder it holds
    afterwards to `placeholders`; returns the seqs replaced."""
    data = jsonl.read_bytes(path)
    if data is None:
        return []
    lines, replaced = [], []
    for line in jsonl.complete_lines(data).split(b"\n")[:-1]:  # a torn tail (a crashed append's) was never stored
        msg = _parsed(line)
        if msg is not None and msg["seq"] in seqs:
            copy = forgotten_copy(msg, at)
            if copy != msg:
                replaced.append(msg["seq"])
                line, msg = dumps(copy), copy
        if msg is not None:
            referenced.update(refs_of(msg))
            if msg["seq"] in seqs or is_forgotten(msg):  # an older forget's too (a build before the record's)
                placeholders[msg["seq"]] = msg
        lines.append(line + b"\n")
    if replaced:
        fsutil.atomic_write(path, b"".join(lines), durable=True)
    return replaced


def _parsed(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj if not check_stored(obj) else None


def _listing(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except FileNotFoundError:
        return []


def _archive_number(name: str) -> int:
    match = re.fullmatch(r"archive_([0-9]{3,9})", name)
    return int(match.group(1)) if match else 0


def _remove_temp_files(folder: Path) -> None:
    """Temp files of writes a crash interrupted (`.<name>.tmp-…`): garbage, and they may hold older text."""
    for name in _listing(folder):
        if _TEMP_FILE.fullmatch(name) and not (folder / name).is_dir():
            fsutil.remove_file(folder / name)


def _remove_unreferenced(session_dir: Path, referenced: set[str]) -> int:
    """Remove every payload no line of the session refers to (a reference count of zero), and temp files."""
    where = payload_files.folder(session_dir)
    if where.is_symlink():
        return 0
    removed = 0
    for name in _listing(where):
        if _SHA.fullmatch(name) and name not in referenced:
            removed += fsutil.remove_file(where / name)
            payload_files.forget_verified(where / name)
    _remove_temp_files(where)
    return removed
