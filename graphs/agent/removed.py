"""What the agent's state dropped: hidden from the view (shown again when it comes back), or, with
`forget_on_remove`, forgotten — only what the state itself held and removed, never another branch's messages.

The state records what it holds (`workmem_held`, with the session's incarnation `workmem_held_in`) and the
removals a running commit held back (`workmem_to_forget`); docs/view.md, *Which messages*.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from workmem.graphs.agent.session_cache import SessionCache
from workmem.graphs.agent.view import StateView
from workmem.state.errors import CommitInProgress
from workmem.state.forget import is_forgotten

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

log = logging.getLogger("workmem.agent")


def hide_dropped(engine: WorkingMemoryEngine, session_id: str, view: StateView, stored_seqs: list[int],
                 state: dict[str, Any], *, forget: bool, cache: SessionCache) -> dict[str, Any]:
    """Hide the live messages the state no longer holds (show those back in it); with `forget`, forget the ones
    it removed → the state's record of what it holds now (empty without forgetting)."""
    hide, shown = view.hidden_changes(stored_seqs)
    if hide or shown:
        hidden = engine.hidden(session_id)
        if hide - hidden or shown & hidden:
            engine.set_hidden(session_id, hide, shown)
    if not forget:
        return {}
    incarnation = str(engine.memory_of(session_id).created_at)
    if state.get("workmem_held_in") != incarnation:  # recorded of a session since deleted: its seqs mean nothing
        state = {**state, "workmem_held": None, "workmem_to_forget": None}
    held = set(view.shown_seqs()) | set(stored_seqs)
    to_forget = _forget_removed(engine, session_id, view, hide, state, cache)
    return {"workmem_held": sorted(held), "workmem_to_forget": to_forget or None, "workmem_held_in": incarnation}


def _forget_removed(engine: WorkingMemoryEngine, session_id: str, view: StateView, hide: set[int],
                    state: dict[str, Any], cache: SessionCache) -> list[int]:
    """Forget the hidden live messages the state held at its last call or run end (a fork leaves another
    branch's messages behind: hidden, never forgotten), and the removals a running commit held back → those
    still to forget (while a commit holds the session's lease; archived meanwhile or not)."""
    held = set(state.get("workmem_held") or ())  # none recorded yet (a thread's first call): nothing removed
    pending = set(state.get("workmem_to_forget") or ())
    removed = {m["seq"] for m in view.live if m["seq"] in hide & held and not is_forgotten(m)}
    seqs = sorted(removed | pending)
    if not seqs:
        return []
    try:
        engine.forget_messages(session_id, seqs)
    except CommitInProgress as exc:
        log.info("session %r: forgetting removed messages waits for commit %s", session_id, exc.task_id)
        return seqs
    cache.archive_tail = None
    return []
