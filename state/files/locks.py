"""The per-session lock: exclusive across processes and threads, reentrant within a thread.

Built on `filelock`'s descriptor primitive (`lock_descriptor`, the same flock / LockFileEx that
`filelock.FileLock` takes, so a `FileLock` on the same path excludes and is excluded). The lock
file's descriptor is opened once per process and path and kept: a `FileLock` object reopens,
re-resolves and re-stats its file on every acquire (≈ 65 µs here, half the cost of a durable append
itself), which the append benchmark cannot afford.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from filelock import Timeout, lock_descriptor, unlock_descriptor

from workmem.state.files import fsutil

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

DEFAULT_TIMEOUT = 60.0
_registry: dict[str, FileMutex] = {}
_registry_lock = threading.Lock()


class FileMutex:
    """One lock file shared by every thread of this process; use `session_lock(path)` to get it."""

    def __init__(self, path: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._reset()

    def _reset(self) -> None:
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self._ino = 0
        self._pid = os.getpid()

    def acquire(self) -> None:
        """Block until this thread holds the lock (reentrant).

        Waiting for another thread raises `filelock.Timeout` after `timeout` s; waiting for another
        process sleeps in the kernel (flock) until the holder releases or dies (Windows: polls until
        `timeout`).
        """
        if self._pid != os.getpid():  # inherited through fork: start over with our own descriptor
            self._reset()
        try:
            if not self._thread_lock.acquire(timeout=self.timeout):
                raise Timeout(self.path)
            if self._depth == 0:
                self._lock_file()
            self._depth += 1
        except BaseException:
            # A Ctrl-C too, even as a lock is taken: held at no level, this thread would keep the lock and this
            # process the file, for good.
            if self._depth == 0 and self._thread_lock._is_owned():
                if self._fd is not None:
                    with contextlib.suppress(OSError):
                        unlock_descriptor(self._fd)
                self._thread_lock.release()
            raise

    def release(self) -> None:
        """Release one level; the file lock is dropped when the outermost level is released."""
        self._depth -= 1
        try:
            if self._depth == 0 and self._fd is not None:
                unlock_descriptor(self._fd)
        finally:
            self._thread_lock.release()

    def __enter__(self) -> FileMutex:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def _lock_file(self) -> None:
        deadline = time.monotonic() + self.timeout
        delay = 0.0002
        while True:
            fd = self._open()
            if fd is None:  # a read-only file system: nobody can write, readers need no lock
                return
            if lock_descriptor(fd, blocking=False) or self._wait(fd, deadline):
                if self._still_current():
                    return
                unlock_descriptor(fd)  # the lock file was replaced: lock the new one
                self._close()
                continue
            if time.monotonic() >= deadline:
                raise Timeout(self.path)
            time.sleep(delay)
            delay = min(delay * 2, 0.005)

    @staticmethod
    def _wait(fd: int, deadline: float) -> bool:
        """Contended: sleep in the kernel until the holder releases (POSIX), so waiters are not starved by
        a busy appender the way short polling sleeps are. The lock is released when its holder dies."""
        if fcntl is None:
            return False  # Windows: poll with backoff until the deadline
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True

    def _open(self) -> int | None:
        """The lock file's descriptor (opened once); None on a read-only file system without one."""
        if self._fd is None:
            nofollow = getattr(os, "O_NOFOLLOW", 0) | fsutil.NONBLOCK  # never through a link, never waiting on a FIFO
            try:
                fsutil.ensure_dirs(Path(self.path).parent)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | nofollow, fsutil.file_mode())
            except OSError as exc:
                if exc.errno != errno.EROFS:
                    raise
                try:  # flock works on a read-only descriptor: other readers of a read-only root still exclude
                    fd = os.open(self.path, os.O_RDONLY | nofollow)
                except FileNotFoundError:
                    return None
            self._fd, self._ino = fd, os.fstat(fd).st_ino
        return self._fd

    def _still_current(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self._ino
        except FileNotFoundError:
            return False

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def session_lock(path: str | Path, timeout: float = DEFAULT_TIMEOUT) -> FileMutex:
    """The process-wide mutex of lock file `path` (one per path, so threads exclude each other too)."""
    key = os.fspath(path) if os.path.isabs(path) else os.path.abspath(path)
    with _registry_lock:
        mutex = _registry.get(key)
        if mutex is None:
            mutex = _registry[key] = FileMutex(key, timeout)
        return mutex


def _reset_after_fork() -> None:
    # A forked child must not share descriptors (and thus flocks) or thread-lock state with its parent.
    global _registry_lock
    _registry.clear()
    _registry_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
