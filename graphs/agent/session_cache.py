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
from workmem.state.messages import lc_id

ARCHIVE_TAIL = 64  # newest archived messages a stateless client's history is compared with
Keys = tuple[frozenset[str], frozenset[str]]  # LangChain ids and fingerprints of archived messages
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
    # (incarnation, the archives read, the LangChain ids and fingerprints of their messages)
    archived: tuple[Any, frozenset[str], frozenset[str], frozenset[str]] | None = None

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


    def archived_keys(self, incarnation: Any, archive_ids: list[str], read: Callable[[str], Keys]) -> Keys:
        """The LangChain ids and fingerprints of the messages of `archive_ids`, this incarnation of the session's
        archives (`read(archive_id)` those of one archive; each is read once: archives never change)."""
        if self.archived is None or self.archived[0] != incarnation:
            self.archived = (incarnation, frozenset(), frozenset(), frozenset())
        _incarnation, done, ids, prints = self.archived
        for archive_id in archive_ids:
            if archive_id not in done:
                more_ids, more_prints = read(archive_id)
                ids, prints, done = ids | more_ids, prints | more_prints, done | {archive_id}
        self.archived = (incarnation, done, ids, prints)
        return ids, prints


def session_caches() -> BoundedSessions[SessionCache]:
    """A middleware's bounded registry of `SessionCache`s (least recently used evicted first)."""
    return BoundedSessions(SessionCache)
