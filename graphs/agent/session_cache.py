"""What one middleware caches per session between model calls: all of it may be dropped and rebuilt.

The durable part of a session's call state (the breaker, a learned input limit, a commit to report) is the
engine's (`graphs.context.call_state`); this is only what makes the next call cheaper or lets it fall back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workmem.graphs.context.call_state import BoundedSessions
from workmem.graphs.context.tool_results import MAX_READ_TOKENS
from workmem.state.errors import ArchiveNotFound, DamagedFile
from workmem.state.messages import lc_id

ARCHIVE_TAIL = 64  # newest archived messages a stateless client's history is compared with
Keys = dict[str | None, frozenset[str]]  # archived LangChain id → its fingerprints (None → every one)
ARCHIVE_IDS_CACHED = 8  # archives per session whose LangChain ids are kept (trimming reads the newest few)


@dataclass
class SessionCache:
    """One session's cached call facts."""

    to_trim: set[str] = field(default_factory=set)  # LangChain ids a commit archived, to leave the agent's state
    # the system message, messages and tools of the last call storage served, and the state's message ids then
    last_good: tuple[Any, list[Any], set[str], list[Any]] | None = None
    read_limit: int = MAX_READ_TOKENS  # the most one read of the read tool returns (from the trigger)
    archive_tail: tuple[tuple[Any, ...], list[dict[str, Any]]] | None = None  # (memory key, newest archived)
    archive_ids: dict[tuple[Any, str], frozenset[str]] = field(default_factory=dict)  # LangChain ids per archive
    tools_joined: bool = False  # workmem's note and tools went out on a call: they stay (`call.out_of_view`)
    archived: ArchivedRead | None = None  # how far the archives were read for their ids and fingerprints

    def ids_of(self, incarnation: Any, archive_id: str, read: Callable[[], list[dict[str, Any]]]) -> frozenset[str]:
        """The LangChain ids archive `archive_id` of this incarnation of the session holds (`read()` its messages
        once; archives never change their ids; the newest few are kept)."""
        key = (incarnation, archive_id)
        ids = self.archive_ids.get(key)
        if ids is None:
            ids = frozenset(i for m in read() if (i := lc_id(m)))
            self.archive_ids[key] = ids
            while len(self.archive_ids) > ARCHIVE_IDS_CACHED:
                del self.archive_ids[next(iter(self.archive_ids))]
        return ids

    def archived_keys(self, incarnation: Any, newest: int,
                      read: Callable[[int], Keys]) -> tuple[Keys | None, Exception | None]:
        """(each archived message's LangChain id with its fingerprints over archives 1…`newest` of this incarnation
        of the session — None when one cannot be read —, and the error when it was just met). `read(n)`: archive
        n's; each is read once (archives never change), one that does not exist counts as empty, and a damaged one
        is tried again only once a commit archived more."""
        state = self.archived
        if state is None or state.incarnation != incarnation or state.read_upto > newest:
            state = ArchivedRead(incarnation)
        if state.newest == newest and (state.read_upto == newest or state.damaged):
            return (None if state.damaged else state.keys), None
        state.newest, state.damaged = newest, False
        self.archived = state
        for n in range(state.read_upto + 1, newest + 1):
            try:
                more = read(n)
            except ArchiveNotFound:
                more = {}
            except DamagedFile as exc:
                state.damaged = True
                return None, exc
            state.keys = {**state.keys, **{k: state.keys.get(k, frozenset()) | p for k, p in more.items()}}
            state.read_upto = n
        return state.keys, None


@dataclass
class ArchivedRead:
    """How far a session's archives were read for their keys."""

    incarnation: Any
    read_upto: int = 0  # archives 1…read_upto are in `keys`
    keys: Keys = field(default_factory=dict)
    newest: int = 0  # the newest archive when last asked
    damaged: bool = False  # an archive up to `newest` could not be read


def session_caches() -> BoundedSessions[SessionCache]:
    """A middleware's bounded registry of `SessionCache`s (least recently used evicted first)."""
    return BoundedSessions(SessionCache)
