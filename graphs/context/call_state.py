"""What an engine remembers of each session's model calls, bounded however many sessions pass through it.

`SessionCalls` holds what must survive between two calls of a session: the loop breaker's counters, the input
limit a context-length refusal taught, a background commit a call started and has not reported yet, and the
warnings already given. `BoundedSessions` keeps such records per session in least-recently-used order and
evicts only records with nothing to remember (`at_rest`), so eviction never forgets a lowered input limit, an
engaged breaker or a commit whose outcome is owed to the next call.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from workmem.graphs.context.decision import Counters, KeepChoice
from workmem.state.retention import Keep

log = logging.getLogger("workmem.agent")
SESSIONS_REMEMBERED = 1_024  # records kept per registry besides those that must not be forgotten

T = TypeVar("T")


@dataclass
class SessionCalls:
    """One session's call state (see the module docstring)."""

    counters: Counters = field(default_factory=Counters)
    input_limit: int | None = None  # learned from a context overflow, for the engine's life
    background: str | None = None  # a background commit a call started, reported at a later call
    warned: set[str] = field(default_factory=set)  # one WARNING per cause

    @property
    def at_rest(self) -> bool:
        """True when evicting this record loses nothing but repeated warnings."""
        return self.counters.at_rest and self.input_limit is None and self.background is None


class BoundedSessions(Generic[T]):
    """Per-session records, created on first use, at most `size` of them evictable (least recently used first).

    `evictable(record)` says whether a record may go; records that may not are kept whatever the size."""

    def __init__(self, factory: Callable[[], T], *, size: int = SESSIONS_REMEMBERED,
                 evictable: Callable[[T], bool] = lambda _record: True) -> None:
        self.size = size
        self._factory = factory
        self._evictable = evictable
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, session_id: str) -> T:
        """The session's record (a new one on first use, or after it was evicted)."""
        with self._lock:
            record = self._items.get(session_id)
            if record is not None:
                self._items.move_to_end(session_id)
                return record
            record = self._items[session_id] = self._factory()
            if len(self._items) > self.size:
                self._evict()
            return record

    def peek(self, session_id: str) -> T | None:
        """The session's record if there is one (never creates one)."""
        with self._lock:
            return self._items.get(session_id)

    def drop(self, session_id: str) -> None:
        """Forget the session (it was deleted)."""
        with self._lock:
            self._items.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._items)

    def _evict(self) -> None:
        """Drop the oldest evictable records until `size` remain (the one just created always stays)."""
        excess, victims = len(self._items) - self.size, []
        newest = next(reversed(self._items))
        for key, record in self._items.items():
            if len(victims) == excess:
                break
            if key != newest and self._evictable(record):
                victims.append(key)
        for key in victims:
            del self._items[key]


def warn_capped_keep(session_id: str, calls: SessionCalls, configured: Keep, choice: KeepChoice) -> None:
    """One WARNING per session when the low-water mark caps the configured keep (commits keep less)."""
    if choice.capped and "keep" not in calls.warned:
        calls.warned.add("keep")
        log.warning("session %r: the keep window %s (%d tokens) is larger than the low-water mark allows (%d tokens); "
                    "this commit keeps %s (each commit sizes its own)", session_id, list(configured), choice.window,
                    choice.allowance, list(choice.keep))


def call_states() -> BoundedSessions[SessionCalls]:
    """An engine's registry of `SessionCalls`."""
    return BoundedSessions(SessionCalls, evictable=lambda calls: calls.at_rest)
