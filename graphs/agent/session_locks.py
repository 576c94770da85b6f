"""One lock per session for the middleware's storing steps.

An async run's steps run in worker threads (`asyncio.to_thread`), and cancelling the run (a timeout, a closed
connection) cannot stop one. Such a step goes on storing and committing; the next step on the session waits for it
instead of deciding at the same time what is new — or deleting the session under it — so nothing is stored twice
and nothing forgotten comes back.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager


class SessionLocks:
    """A re-entrant lock per session id, kept only while some step holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, threading.RLock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    @contextmanager
    def holding(self, session_id: str) -> Iterator[None]:
        """Run the block while no other step of this middleware runs on `session_id`."""
        with self._guard:
            lock = self._locks.get(session_id)
            if lock is None:
                lock = self._locks[session_id] = threading.RLock()
        with lock:
            yield
