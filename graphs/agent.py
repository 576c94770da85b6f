"""LangChain / LangGraph integration of workmem (SPEC §7): tools, middleware, a commit node, a demo agent.

- `make_archive_tools(engine, session_id)` → the `archive_search` / `archive_expand` tools;
- `WorkingMemoryMiddleware(engine, session_id=…)` for `langchain.agents.create_agent`;
- `commit_node(engine)` → a plain node function for any LangGraph graph (`engine.commit(wait=True)`);
- `agent`: the offline demo agent (`DemoAgentModel`), exported for `langgraph dev` / Studio. Its engine
  is built on first use (data root: `WORKMEM_HOME` or `./.workmem`), so importing this module writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from langchain.agents import create_agent
from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from graphs.agent_tools import make_archive_tools
from graphs.binding import resolve_engine, session_from_run
from graphs.demo_model import DemoAgentModel
from graphs.engine import WorkingMemoryEngine
from graphs.middleware import WorkingMemoryMiddleware, WorkmemAgentState
from state.errors import SessionNotFound

__all__ = ["DemoAgentModel", "WorkingMemoryMiddleware", "WorkmemAgentState", "agent", "build_demo_agent",
           "commit_node", "demo_engine", "make_archive_tools"]

DEMO_COMMIT_THRESHOLD = 2_000
DEMO_SESSION = "demo-agent"
DEMO_SYSTEM_PROMPT = (
    "You are the workmem demo agent, an offline stand-in for a real model: you answer only from the "
    "conversation and the archive, and say so when you do not know."
)


def commit_node(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
    *,
    keep_recent_count: int | None = None,
    session_key: str = "session_id",
    result_key: str = "workmem_commit",
) -> Callable[[Any, RunnableConfig], dict[str, Any]]:
    """A node that commits the session synchronously → `{result_key: {status, task_id, archive_id, reason}}`.

    The session id is read from the state's `session_key`, else from the run (see `session_from_run`);
    `keep_recent_count` defaults to the engine's. A session with nothing stored yet is `skipped`.
    """

    def workmem_commit(state: Any, config: RunnableConfig) -> dict[str, Any]:
        eng = resolve_engine(engine)
        value = state.get(session_key) if isinstance(state, Mapping) else getattr(state, session_key, None)
        session_id = session_from_run(value if isinstance(value, str) and value else None, config=config)
        keep = eng.keep_recent_count if keep_recent_count is None else keep_recent_count
        try:
            result = eng.commit(session_id, keep_recent_count=keep, wait=True)
        except SessionNotFound:
            result = {"status": "skipped", "task_id": None, "archive_id": None, "reason": "no_messages"}
        return {result_key: result}

    return workmem_commit


@lru_cache(maxsize=1)
def demo_engine() -> WorkingMemoryEngine:
    """The demo agent's engine (built once, on first use), committing past 2 000 pending tokens."""
    return WorkingMemoryEngine(commit_token_threshold=DEMO_COMMIT_THRESHOLD)


def build_demo_agent(
    engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine] = demo_engine,
    *,
    session_id: str | None = None,
    checkpointer: Checkpointer = None,
) -> CompiledStateGraph:
    """The demo agent: `DemoAgentModel` + the archive tools + the middleware (session: bound, run, or 'demo-agent')."""
    middleware = WorkingMemoryMiddleware(engine, session_id=session_id, default_session_id=DEMO_SESSION)
    tools = make_archive_tools(engine, session_id, default_session_id=DEMO_SESSION)
    return create_agent(DemoAgentModel(), tools=tools, middleware=[middleware], system_prompt=DEMO_SYSTEM_PROMPT,
                        checkpointer=checkpointer, name="workmem_demo_agent")


agent = build_demo_agent()
