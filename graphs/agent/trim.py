"""What leaves the agent's state: the messages a commit archived, and large results replaced by their synopsis.

The log and the archives keep everything; the state only stays bounded (`trim_state`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage, RemoveMessage, ToolMessage

from workmem.graphs.agent.alignment import fingerprint_of
from workmem.graphs.agent.view import StateView
from workmem.graphs.context.tool_results import Synopses
from workmem.state.ids import archive_name, archive_number
from workmem.state.messages import (
    CLIPPED_BYTES_META,
    SYNOPSIS_FP,
    SYNOPSIS_HASH,
    lc_id,
    synopsis_hash,
)

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine


def trimmed(messages: list[Any], to_trim: set[str], keep: set[str]) -> list[RemoveMessage]:
    """`RemoveMessage`s for the state's messages a commit archived, but those that stay in view (`keep`: the
    running turn's user message, a pinned tool's newest step)."""
    if not to_trim:
        return []
    return [RemoveMessage(id=m.id) for m in messages
            if getattr(m, "id", None) and m.id in to_trim and m.id not in keep]


def pinned_step_ids(messages: list[Any], tools: frozenset[str]) -> set[str]:
    """Ids of the newest call of one of `tools` in the state and of its results (they stay in the state)."""
    for index in range(len(messages) - 1, -1, -1):
        calls = {c.get("id") for c in getattr(messages[index], "tool_calls", None) or [] if c.get("name") in tools}
        if calls:
            results = {m.id for m in messages[index + 1:] if isinstance(m, ToolMessage) and m.tool_call_id in calls}
            return {i for i in (messages[index].id, *results) if i}
    return set()


def state_synopses(view: StateView, limit: int, size: int, synopses: Synopses,
                   shrinkable: Any) -> list[ToolMessage]:
    """The state's stored large tool results as their synopsis (same id: the reducer replaces them), so the
    agent's checkpoints do not carry megabytes; the log keeps each whole (never one it stored clipped), and the
    copy's mark makes it align as the stored result while unedited."""
    out = []
    for pos, stored in view.alignment.stored.items():
        message = view.messages[view.indexes[pos]]
        if (not isinstance(message, ToolMessage) or not isinstance(message.content, str)
                or SYNOPSIS_FP in message.additional_kwargs or stored["tokens"] <= limit
                or not shrinkable(stored) or CLIPPED_BYTES_META in (stored.get("meta") or {})):
            continue
        text, _tokens = synopses.of(stored, size)
        mark = {SYNOPSIS_FP: fingerprint_of(stored), SYNOPSIS_HASH: synopsis_hash(text)}
        out.append(message.model_copy(update={"content": text,
                                              "additional_kwargs": {**message.additional_kwargs, **mark}}))
    return out


def archived_in_state(engine: WorkingMemoryEngine, session_id: str, messages: list[BaseMessage],
                      ids_of: Callable[[str], set[str]] | None = None) -> list[RemoveMessage]:
    """`RemoveMessage`s for the state's messages a commit has archived, found by LangChain id in the archives from
    the newest back to the first that holds none of them (older ones were trimmed). `ids_of(archive_id)`: the
    LangChain ids an archive holds (default: read from the archive)."""
    if not engine.session_exists(session_id):
        return []
    live_ids = {lc_id(m) for m in engine.live_messages(session_id)}
    wanted = {m.id for m in messages if m.id and m.id not in live_ids}
    newest = engine.memory_of(session_id).archive_id if wanted else None
    if ids_of is None:
        ids_of = lambda archive_id: {lc_id(m) for m in engine.archive_messages(session_id, archive_id)}  # noqa: E731
    found: set[str] = set()
    n = archive_number(newest) if newest else 0
    while wanted and n >= 1:
        ids = ids_of(archive_name(n)) & wanted
        if not ids:
            break
        found |= ids
        wanted -= ids
        n -= 1
    return [RemoveMessage(id=m.id) for m in messages if m.id in found]
