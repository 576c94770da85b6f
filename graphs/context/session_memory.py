"""The working memory a session's next model call carries, read once per archive and cached (bounded)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workmem.graphs.context.assemble import SUMMARY_PREFIX
from workmem.graphs.context.call_state import SESSIONS_REMEMBERED
from workmem.state.ids import archive_number
from workmem.state.lru import LRU
from workmem.state.tokens import count_tokens


@dataclass(frozen=True)
class SessionMemory:
    """The newest archive's working memory as a call shows it."""

    markdown: str = ""  # the working memory ('' before the first commit)
    archives_total: int = 0  # complete archives (the newest one's number)
    tokens: int = 0  # tokens of the summary message that carries it (0 when empty)
    tail_end: int = 0  # seq of the last message the newest commit kept live: its boundary
    archive_id: str | None = None  # the newest archive
    end_seq: int | None = None  # the newest archive's last seq
    created_at: str | None = None  # the session's creation (a deleted and re-created session starts over)

    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies this memory: the session's incarnation and its newest archive."""
        return self.created_at, self.archive_id, self.end_seq


NO_MEMORY = SessionMemory()


def memory_from(meta: dict[str, Any], archive: dict[str, Any] | None) -> SessionMemory:
    """The memory of `archive` (the newest complete archive object), for a session whose meta is `meta`."""
    last = meta.get("last_archive") or {}
    if archive is None:
        return SessionMemory(created_at=meta.get("created_at"))
    markdown = (archive.get("working_summary") or {}).get("markdown", "")
    return SessionMemory(
        markdown=markdown, archives_total=archive_number(archive["archive_id"]),
        tokens=count_tokens(SUMMARY_PREFIX + markdown) if markdown.strip() else 0,
        tail_end=int((archive.get("preserved_tail") or {}).get("tail_seq") or 0),
        archive_id=last.get("id"), end_seq=last.get("end_seq"), created_at=meta.get("created_at"))


class MemoryCache:
    """`SessionMemory` per session, read again only when the meta names another newest archive (LRU-bounded)."""

    def __init__(self, size: int = SESSIONS_REMEMBERED) -> None:
        self._items: LRU[str, SessionMemory] = LRU(size)

    def get(self, session_id: str, meta: dict[str, Any],
            read: Callable[[], dict[str, Any] | None]) -> SessionMemory:
        """The session's memory for `meta`; `read()` returns the newest archive object when it must be read."""
        last = meta.get("last_archive") or {}
        key = (meta.get("created_at"), last.get("id"), last.get("end_seq"))
        cached = self._items.get(session_id)
        if cached is not None and cached.key == key:
            return cached
        memory = memory_from(meta, read() if last else None)
        self._items.put(session_id, memory)
        return memory

    def drop(self, session_id: str) -> None:
        """Forget the session's entry (it was deleted)."""
        self._items.pop(session_id)
