"""Descriptors of live files kept open between appends.

Opening and closing a file that was just fsynced costs a durable append about as much as all the rest of its own
work, so each session's `LiveState` keeps its live file open while it describes it. The descriptor is used only
for the file the state was checked against (the same inode the state's stamp holds: a file replaced by a GC, a
forget or another process, or a symlink put in its place, makes the state stale and is opened anew), only while
the session's folders were found safe (`SessionStore._check_safe` runs first), and it is closed with the state.
At most `MAX_OPEN` are open per store; past that an append opens and closes its file as before.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import Any

from workmem.state.files import fsutil

MAX_OPEN = 64


class Appenders:
    """The open live-file descriptors of one store's session states, at most `limit` of them."""

    def __init__(self, limit: int = MAX_OPEN) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    def descriptor(self, live: Any, path: Path) -> int | None:
        """A descriptor of the live file `live` describes (`live.file_stamp`'s inode), open for appends; None when
        the file is missing or the limit is reached (the caller then opens it itself). The caller holds the
        session's lock."""
        inode = live.file_stamp[0] if live.file_stamp else None
        held = live.appender
        if held is not None:
            if held[1] == inode:
                return held[0]
            self.drop(live)  # the file was replaced: close the old descriptor now
        if inode is None or not self._reserve():
            return None
        try:
            fd = fsutil.open_append(path)
            same = os.fstat(fd).st_ino == inode
        except OSError:
            self._release()
            return None  # the caller's own open reports what is wrong
        if not same:
            os.close(fd)
            self._release()
            return None
        live.appender = (fd, inode, weakref.finalize(live, self._close, fd))
        return fd

    def drop(self, live: Any) -> None:
        """Close the descriptor `live` keeps, if any (the caller holds the session's lock)."""
        held, live.appender = live.appender, None
        if held is not None:
            held[2]()  # the finalizer: closes once, whoever calls it first

    def _reserve(self) -> bool:
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def _release(self) -> None:
        with self._lock:
            self._open -= 1

    def _close(self, fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass
        self._release()
