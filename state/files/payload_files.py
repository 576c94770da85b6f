"""Payload files of a session: `sessions/<id>/payloads/<sha256>`, content-addressed.

A payload is written (temp → fsync → rename → fsync of the folder) before the message line that refers to it,
whatever `durable` says: it is the only copy of its text. A crash leaves at worst a payload no line refers to,
which a retried append reuses. Payloads go with their session's folder and never before. `FORMAT` beside the
log says the session holds payloads; a build that knows an older format refuses the session.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from workmem.state.errors import Anomaly, DamagedFile, UnsafePath, UnsupportedFormat
from workmem.state.files import fsutil, jsonl
from workmem.state.payloads import PAYLOAD_FORMAT, payload_damage

FOLDER = "payloads"
FORMAT_FILE = "FORMAT"


def folder(session_dir: Path) -> Path:
    """Where a session's payloads live."""
    return session_dir / FOLDER


def path_of(session_dir: Path, sha256: str) -> Path:
    """The file of one payload (`sha256` is 64 hex digits, checked by the caller's reference)."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise DamagedFile(str(folder(session_dir)), f"bad payload reference {sha256!r}")
    return folder(session_dir) / sha256


def write(session_dir: Path, payloads: dict[str, bytes]) -> None:
    """Store each payload not already stored whole, durably, and the session's format marker first."""
    if not payloads:
        return
    where = folder(session_dir)
    if where.is_symlink():
        raise UnsafePath(str(where))
    if not where.exists():
        fsutil.make_dirs(where, durable=True)
    marker = session_dir / FORMAT_FILE
    if not marker.exists():
        fsutil.atomic_write(marker, f"{PAYLOAD_FORMAT}\n".encode(), durable=True)
    for sha, data in payloads.items():
        path = path_of(session_dir, sha)
        if not _holds(path, sha, len(data)):  # a missing or damaged copy is replaced by the caller's
            if os.path.isdir(path) and not os.path.islink(path):
                fsutil.remove_tree(path)  # a directory in its place holds no payload; a rename cannot replace it
            fsutil.atomic_write(path, data, durable=True)
            _VERIFIED.pop(str(path), None)


# Payload files found whole, by path → (inode, mtime, size): an unchanged file is not hashed again.
_VERIFIED: dict[str, tuple[int, int, int]] = {}
_VERIFIED_MAX = 4096


def _holds(path: Path, sha: str, size: int) -> bool:
    """Whether `path` is a regular file holding exactly the payload `sha` of `size` bytes."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        return False
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    if _VERIFIED.get(str(path)) == stamp:
        return True
    try:
        data = fsutil.read_file(path)
    except OSError:  # not a regular file any more, or unreadable: the caller's copy replaces it
        return False
    if data is None or hashlib.sha256(data).hexdigest() != sha:
        return False
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED[str(path)] = stamp
    return True


def forget_verified(path: Path) -> None:
    """Drop what `_holds` remembers of a payload file (it was removed)."""
    _VERIFIED.pop(str(path), None)


def read(session_dir: Path, shas: list[str]) -> dict[str, bytes | str]:
    """sha256 → the bytes of each payload, or why it cannot be read ("is missing", "is not a regular file (a
    FIFO)", …: no path in it, a reader may show it to a model). A FIFO or a directory in a payload's place is
    found without blocking; a symlinked payload file is never followed."""
    out: dict[str, bytes | str] = {}
    for sha in shas:
        try:
            data = fsutil.read_file(path_of(session_dir, sha))
        except (DamagedFile, UnsafePath) as exc:
            out[sha] = exc.reason
            continue
        except OSError as exc:
            out[sha] = f"cannot be read ({exc.strerror or type(exc).__name__})"
            continue
        out[sha] = data if data is not None else "is missing"
    return out


def check_format(session_dir: Path) -> None:
    """`UnsupportedFormat` when the session was written in a format newer than this build's."""
    data = jsonl.read_bytes(session_dir / FORMAT_FILE)
    if data is None:
        return
    try:
        found: object = int(data.decode().strip())
    except ValueError:
        found = data[:40]
    if not isinstance(found, int) or found > PAYLOAD_FORMAT:
        raise UnsupportedFormat(str(session_dir), found, PAYLOAD_FORMAT)


def anomalies(session_dir: Path, messages: list[dict], where: str) -> list[Anomaly]:
    """A missing, unreadable or non-regular payload, or one whose bytes differ from its reference, for each stored
    message referring to one."""
    found = []
    checked: dict[str, str] = {}
    for msg in messages:
        for part in (p for p in msg.get("parts") or () if isinstance(p, dict) and "content_ref" in p):
            sha = str(part.get("sha256"))
            if sha not in checked:
                try:
                    data = read(session_dir, [sha])[sha]
                    checked[sha] = data if isinstance(data, str) else payload_damage(data, part)
                except DamagedFile as exc:  # a bad reference
                    checked[sha] = exc.reason
            if checked[sha]:
                found.append(Anomaly(where, 0, f"seq {msg.get('seq')}: payload {sha} {checked[sha]}"))
    return found
