"""`commit_node(engine)`: workmem's commit as a plain node of any LangGraph graph.

A compiled subgraph added as a node would run on its parent's checkpointer; this wrapper calls
`engine.commit(wait=True)` instead, so the commit keeps its own checkpoints. The other integration
pieces live in `middleware.py` (for `create_agent`) and `tools.py` (the archive tools).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

from workmem.graphs.agent.binding import readable_session, resolve_engine
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import SessionNotFound
from workmem.state.retention import keep_from_args


def commit_node(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
    *,
    keep_recent_count: int | None = None,
    keep: tuple[str, int] | None = None,
    session_key: str = "session_id",
    result_key: str = "workmem_commit",
) -> Callable[[Any, RunnableConfig], dict[str, Any]]:
    """A node that commits the session synchronously → `{result_key: {status, task_id, archive_id, reason}}`.

    The session id is read from the state's `session_key`, else from the run (see `readable_session`);
    the tail kept is `keep` (or `keep_recent_count` messages), default the engine's `keep`. A session with
    nothing stored yet is `skipped`.
    """

    def workmem_commit(state: Any, config: RunnableConfig) -> dict[str, Any]:
        eng = resolve_engine(engine)
        value = state.get(session_key) if isinstance(state, Mapping) else getattr(state, session_key, None)
        session_id = readable_session(eng, value if isinstance(value, str) and value else None, config=config)
        chosen = keep_from_args(keep, keep_recent_count, default=eng.keep, input_limit=eng.context_window)
        try:
            result = eng.commit(session_id, keep=chosen, wait=True)
        except SessionNotFound:
            result = {"status": "skipped", "task_id": None, "archive_id": None, "reason": "no_messages"}
        return {result_key: result}

    return workmem_commit
