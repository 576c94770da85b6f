"""The session lease held while a commit runs, renewed by a heartbeat thread."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from workmem.state.redact import describe_error
from workmem.state.storage import TaskStorage

LEASE_TTL_SECONDS = 60.0
HEARTBEAT_SECONDS = 20.0

log = logging.getLogger("workmem.lease")


def holder_alive(row: dict | None) -> bool:
    """Whether a lease row's holder may still be running: False only when it provably died (its
    process is gone on this very host); leases of other hosts are trusted until they expire."""
    if row is None:
        return False
    if row.get("host") != socket.gethostname() or row.get("pid") in (None, os.getpid()):
        return True
    try:
        os.kill(int(row["pid"]), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True  # e.g. PermissionError: the pid exists under another user
    return True


def acquire(tasks: TaskStorage, session_id: str, task_id: str, owner: str, *,
            ttl: float = LEASE_TTL_SECONDS) -> str | None:
    """Take the session's lease for `task_id` (None) or return the live holder's task id.

    A lease left by a process of this host that died (SIGKILL, power loss of a container) is broken at
    once instead of blocking the session until its TTL runs out.
    """
    try:
        holder = tasks.acquire_lease(session_id, task_id, owner, ttl=ttl)
        if holder is None:
            return None
        row = tasks.lease_holder(session_id)
        if row is not None and not holder_alive(row):
            tasks.release_lease(session_id, row["task_id"])
            return tasks.acquire_lease(session_id, task_id, owner, ttl=ttl)
        return holder
    except BaseException:
        give_up(tasks, session_id, task_id, owner)  # an interrupt (Ctrl-C) may land once the row is written
        raise


def give_up(tasks: TaskStorage, session_id: str, task_id: str, owner: str) -> None:
    """Release the lease `owner` holds for `task_id`, if it holds one, as an interrupt propagates: a lease left
    behind by this live process blocks the session's commits until it expires (a resumed task's id may be
    another engine's lease: that one is left alone). Its own failure is left to that expiry."""
    with contextlib.suppress(Exception):
        row = tasks.lease_holder(session_id)
        if row is not None and row.get("task_id") == task_id and row.get("owner") == str(owner):
            tasks.release_lease(session_id, task_id)


class Heartbeat:
    """Renews a held lease every `interval` seconds until stopped."""

    def __init__(self, tasks: TaskStorage, session_id: str, task_id: str, *, ttl: float, interval: float) -> None:
        self._tasks, self._session_id, self._task_id = tasks, session_id, task_id
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
        if self._thread.is_alive():
            self._thread.join()

    def release(self) -> None:
        """Stop renewing and give the lease up (also when an interrupt lands while the renewals stop)."""
        try:
            self.stop()
        finally:
            try:
                self._tasks.release_lease(self._session_id, self._task_id)
            except BaseException:
                with contextlib.suppress(Exception):  # once more: it was the release that was cut
                    self._tasks.release_lease(self._session_id, self._task_id)
                raise

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._tasks.renew_lease(self._session_id, self._task_id, ttl=self._ttl)
            except Exception as exc:  # a busy, full or failed-over database must not end the renewals for good
                log.warning("could not renew the lease of %s: %s", self._task_id, describe_error(exc))


def hold(tasks: TaskStorage, session_id: str, task_id: str, *, ttl: float = LEASE_TTL_SECONDS) -> Heartbeat:
    """Start renewing a just-acquired lease (every ttl/3 at most); `release()` it when the commit ends."""
    return Heartbeat(tasks, session_id, task_id, ttl=ttl, interval=min(HEARTBEAT_SECONDS, ttl / 3)).start()


@contextmanager
def heartbeat(
    tasks: TaskStorage, session_id: str, task_id: str, *,
    ttl: float = LEASE_TTL_SECONDS, interval: float = HEARTBEAT_SECONDS,
) -> Iterator[None]:
    """Keep an already-acquired lease alive for the duration of the block, then release it."""
    beat = Heartbeat(tasks, session_id, task_id, ttl=ttl, interval=min(interval, ttl / 3)).start()
    try:
        yield
    finally:
        beat.release()
