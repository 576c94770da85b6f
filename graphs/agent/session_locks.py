"""One lock per session for the middleware's storing steps, shared by every middleware on an engine.

An async run's steps run in worker threads (`asyncio.to_thread`), and cancelling the run (a timeout, a closed
connection) cannot stop one. Such a step goes on storing and committing; the next step on the session waits for it
instead of deciding at the same time what is new — or deleting the session under it — so nothing is stored twice
and nothing forgotten comes back. An async step waits in the event loop, never in a worker thread: one session's
long commit must not use up the thread pool every session's steps share.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

POLL_SECONDS = 0.02  # how often an async step waiting for its session looks again

T = TypeVar("T")


class SessionLocks:
    """A re-entrant lock per session id, kept only while some step holds or waits for it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def _lock(self, session_id: str) -> Any:
        with self._guard:
            lock = self._locks.get(session_id)
            if lock is None:
                lock = self._locks[session_id] = threading.RLock()
            return lock

    @contextmanager
    def holding(self, session_id: str) -> Iterator[None]:
        """Run the block while no other step runs on `session_id` (waiting for it in this thread)."""
        with self._lock(session_id):
            yield

    def run_if_free(self, session_id: str, step: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """(True, `step(*args)`) when no other step runs on the session, else (False, None) at once."""
        lock = self._lock(session_id)
        if not lock.acquire(blocking=False):
            return False, None
        try:
            return True, step(*args)
        finally:
            lock.release()


_by_engine: weakref.WeakKeyDictionary[Any, SessionLocks] = weakref.WeakKeyDictionary()
_by_engine_guard = threading.Lock()


def session_locks(engine: Any) -> SessionLocks:
    """The session locks of `engine`, shared by every middleware on it (one rebuilt per request, another's `forget`)."""
    with _by_engine_guard:
        locks = _by_engine.get(engine)
        if locks is None:
            locks = _by_engine[engine] = SessionLocks()
        return locks


async def in_turn(locks: SessionLocks, session_id: str, step: Callable[..., T], *args: Any) -> T:
    """`step(*args)` in a worker thread once no other step runs on the session, waiting in the event loop."""
    while True:
        done, result = await asyncio.to_thread(locks.run_if_free, session_id, step, *args)
        if done:
            return result  # type: ignore[return-value]
        await asyncio.sleep(POLL_SECONDS)
