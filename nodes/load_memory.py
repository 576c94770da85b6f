"""Node `load_memory`: the latest complete archive's WM decides between the create and update paths."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, services
from workmem.state.commit_state import CommitState
from workmem.state.memory import is_v2


def load_memory(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """A v2 WM is updated; none or a legacy free-form summary goes through the create prompt."""
    overview = services(runtime).sessions.latest_overview(state["session_id"]) or ""
    if is_v2(overview):
        return {"working_memory": overview, "previous_memory": "", "prompt_kind": "update",
                "create_retry_used": False, "route": ["load_memory"]}
    return {"working_memory": "", "previous_memory": overview, "prompt_kind": "create",
            "create_retry_used": False, "route": ["load_memory"]}
