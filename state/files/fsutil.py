"""File-system steps of the store: each durable write is one function (tests inject crashes here).

Every write except a live append goes temp → fsync → rename → fsync of the directory.
The store calls these through the module (`fsutil.atomic_write(...)`), so a test can patch one of
them to raise or `os._exit` right after a chosen step.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from pathlib import Path

from workmem.state.errors import DamagedFile, InvalidInput, UnsafePath

# Files under the data root are never opened through a symlink: O_NOFOLLOW makes the open fail. Nor do they
# block on what is not a regular file (a FIFO put in a file's place): O_NONBLOCK, then fstat refuses it.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
READ_FLAGS = os.O_RDONLY | NOFOLLOW | NONBLOCK | getattr(os, "O_CLOEXEC", 0)
ENV_FILE_MODE = "WORKMEM_FILE_MODE"
DEFAULT_FILE_MODE = 0o600  # the data root holds whole conversations: owner-only unless configured


_parsed_mode: tuple[str, int] = ("", DEFAULT_FILE_MODE)  # the last `WORKMEM_FILE_MODE` read, parsed (every open asks)


def file_mode() -> int:
    """The mode new files under a data root get: `WORKMEM_FILE_MODE` (octal, e.g. 640), else 600."""
    global _parsed_mode
    raw = os.environ.get(ENV_FILE_MODE, "").strip()
    if not raw:
        return DEFAULT_FILE_MODE
    if _parsed_mode[0] == raw:
        return _parsed_mode[1]
    try:
        mode = int(raw, 8)
    except ValueError:
        mode = -1
    if not 0o400 <= mode <= 0o666 or not mode & 0o200:
        raise InvalidInput(ENV_FILE_MODE, raw, "must be an octal file mode the owner can read and write, e.g. 600")
    _parsed_mode = (raw, mode)
    return mode


def dir_mode() -> int:
    """The mode new folders get: the file mode with search (x) wherever it can read (600 → 700, 640 → 750)."""
    mode = file_mode()
    return mode | ((mode & 0o444) >> 2)


def create_file(path: str | Path) -> None:
    """Create `path` empty with `file_mode()` if it does not exist (before a library such as SQLite opens it,
    so its files inherit the mode); a symlink is `UnsafePath`."""
    try:
        os.close(_open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass


def _open(path: str | Path, flags: int) -> int:
    try:
        return os.open(path, flags | NOFOLLOW | NONBLOCK, file_mode())
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(str(path)) from None
        raise


def read_file(path: str | Path, start: int = 0, size: int | None = None) -> bytes | None:
    """The bytes of a stored file (from `start`, at most `size`), or None when it does not exist. A symlink is
    `UnsafePath`; anything else that is not a regular file (a FIFO, a directory, a device) is `DamagedFile`, found
    without blocking."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePath(str(path)) from None
        raise
    try:
        check_regular(fd, path)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        if start:
            f.seek(start)
        return f.read() if size is None else f.read(size)


def check_regular(fd: int, path: str | Path, st: os.stat_result | None = None) -> os.stat_result:
    """The `fstat` of an open stored file; `DamagedFile` naming what it is when it is not a regular file."""
    st = st if st is not None else os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise DamagedFile(str(path), f"is not a regular file ({file_kind(st.st_mode)})")
    return st


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in a word."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISLNK, "a symlink"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "not a regular file"


def fsync_dir(path: str | Path) -> None:
    """fsync a directory so a rename or create inside it survives power loss (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Create (or replace in place) `path` with `data`, fsynced; for files inside a not-yet-published temp dir."""
    _write_file(path, data, durable=durable)


def _write_file(path: str | Path, data: bytes, *, durable: bool) -> None:
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` atomically: temp file → fsync → rename → fsync of the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        _write_file(tmp, data, durable=durable)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(path.parent)


def open_append(path: str | Path) -> int:
    """An `O_APPEND` descriptor of the live file (created if missing; never through a symlink, never waiting on
    a FIFO: ENXIO), checked to be a regular file."""
    fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0))
    try:
        check_regular(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_bytes(path: str | Path, data: bytes, *, durable: bool = True, fd: int | None = None) -> tuple[int, int]:
    """The live append: one `write()` to an `O_APPEND` descriptor, then one fsync; all or nothing.

    `fd`: a descriptor of `path` from `open_append` the caller keeps open between appends (it checked that it
    is still the file at `path`); else one is opened and closed here. Returns (inode, size before the write). A
    short or failed write is truncated away before raising.
    """
    own = fd is None
    fd = open_append(path) if fd is None else fd
    try:
        st = check_regular(fd, path)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.ENOSPC, f"short write to {path}")
            if durable:
                os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, st.st_size)
            raise
    finally:
        if own:
            os.close(fd)
    return st.st_ino, st.st_size


def publish_dir(tmp: str | Path, final: str | Path, *, durable: bool = True) -> None:
    """Rename a fully written temp directory to its final name and make the rename durable."""
    if Path(final).is_symlink():
        raise UnsafePath(str(final))
    os.rename(tmp, final)
    if durable:
        fsync_dir(Path(final).parent)


def remove_tree(path: str | Path) -> None:
    """Remove a directory tree if it exists (a half-written archive); a symlink is never followed."""
    if os.path.islink(path):
        raise UnsafePath(str(path))
    if os.path.lexists(path):
        shutil.rmtree(path)


def remove_file(path: str | Path, *, durable: bool = True) -> bool:
    """Unlink a file if it exists (never through a symlink's target) and make that durable; True if it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(Path(path).parent)
    return True


def make_dirs(path: str | Path, *, durable: bool = True) -> None:
    """Create `path` and missing parents; fsync each parent whose entry list changed."""
    for d in ensure_dirs(path):
        if durable:
            fsync_dir(d.parent)


def ensure_dirs(path: str | Path) -> list[Path]:
    """Create `path` and missing parents with `dir_mode()`, not synced (a lock's or a database's folder);
    returns the folders created, outermost first."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir(mode=dir_mode())
        except FileExistsError:
            continue
        created.append(d)
    return created


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
