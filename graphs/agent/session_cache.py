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
    # ((incarnation, newest archive), the archives read, their keys so far, the keys (None: a read failed))
    archived: tuple[tuple[Any, str], frozenset[str], Keys, Keys | None] | None = None

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


    def archived_keys(self, key: tuple[Any, str], archive_ids: Callable[[], list[str]],
                      read: Callable[[str], Keys]) -> tuple[Keys | None, Exception | None]:
        """(each archived message's LangChain id with its fingerprints, over the archives `archive_ids()` lists,
        or None when one cannot be read; the error when it was just met). `key`: the session's incarnation and
        newest archive — listed again only when it changed; each archive is read once (archives never change),
        and a damaged one is tried again only after `key` changed."""
        if self.archived is not None and self.archived[0] == key:
            return self.archived[3], None
        same = self.archived is not None and self.archived[0][0] == key[0]
        done, keys = (self.archived[1], self.archived[2]) if same and self.archived else (frozenset(), {})
        try:
            for archive_id in archive_ids():
                if archive_id not in done:
                    keys = _merged(keys, read(archive_id))
                    done = done | {archive_id}
        except (DamagedFile, ArchiveNotFound) as exc:
            self.archived = (key, done, keys, None)
            return None, exc
        self.archived = (key, done, keys, keys)
        return keys, None


def _merged(keys: Keys, more: Keys) -> Keys:
    return {**keys, **{k: keys.get(k, frozenset()) | prints for k, prints in more.items()}}


def session_caches() -> BoundedSessions[SessionCache]:
    """A middleware's bounded registry of `SessionCache`s (least recently used evicted first)."""
    return BoundedSessions(SessionCache)
