"""The offline demo agent served to Studio (`studio.json` → `agent`): `DemoAgentModel` + the middleware.

Its engine is built on first use (data root: `WORKMEM_HOME` or `./.workmem`), so importing this
module writes nothing; importing the middleware never builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from langchain.agents import create_agent
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.demo.model import DemoAgentModel
from workmem.graphs.engine import WorkingMemoryEngine

DEMO_COMMIT_THRESHOLD = 2_000
DEMO_SESSION = "demo-agent"
DEMO_SYSTEM_PROMPT = (
    "You are the workmem demo agent, an offline stand-in for a real model: you answer only from the "
    "conversation and the archive, and say so when you do not know."
)


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
    """The demo agent: `DemoAgentModel` + the middleware, which brings the archive tools (session: bound, the
    run's thread, or 'demo-agent')."""
    middleware = WorkingMemoryMiddleware(engine, session_id=session_id, default_session_id=DEMO_SESSION)
    return create_agent(DemoAgentModel(), middleware=[middleware], system_prompt=DEMO_SYSTEM_PROMPT,
                        checkpointer=checkpointer, name="workmem_demo_agent")


agent = build_demo_agent()
