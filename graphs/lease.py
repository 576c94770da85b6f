"""The session lease held while a commit runs, renewed by a heartbeat thread (SPEC §6)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from state.index import Index

LEASE_TTL_SECONDS = 60.0
HEARTBEAT_SECONDS = 20.0


class Heartbeat:
    """Renews a held lease every `interval` seconds until stopped."""

    def __init__(self, index: Index, session_id: str, task_id: str, *, ttl: float, interval: float) -> None:
        self._index, self._session_id, self._task_id = index, session_id, task_id
        self._ttl, self._interval = ttl, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"workmem-lease-{task_id}", daemon=True)

    def start(self) -> Heartbeat:
        """Start renewing in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (the caller releases the lease)."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._index.renew_lease(self._session_id, self._task_id, ttl=self._ttl)


@contextmanager
def heartbeat(
    index: Index, session_id: str, task_id: str, *,
    ttl: float = LEASE_TTL_SECONDS, interval: float = HEARTBEAT_SECONDS,
) -> Iterator[None]:
    """Keep an already-acquired lease alive for the duration of the block, then release it."""
    beat = Heartbeat(index, session_id, task_id, ttl=ttl, interval=interval).start()
    try:
        yield
    finally:
        beat.stop()
        index.release_lease(session_id, task_id)
