"""Node `load_memory`: the latest complete archive's WM decides between the create and update paths."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, services
from workmem.nodes.persist import previous_sentinel_commits
from workmem.state.commit_state import CommitState
from workmem.state.memory import is_v2

# Key Facts may spill once the consolidation sentinel stood through two commits: the previous archive
# counts three commits in a row ending with it (the one that added it and two more).
SENTINEL_COMMITS_BEFORE_SPILL = 3


def load_memory(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """A v2 WM is updated; none or a legacy free-form summary goes through the create prompt."""
    previous = services(runtime).sessions.last_complete_archive(state["session_id"])
    overview = (previous or {}).get("working_summary", {}).get("markdown") or ""
    may_spill = previous_sentinel_commits(previous) >= SENTINEL_COMMITS_BEFORE_SPILL
    if is_v2(overview):
        return {"working_memory": overview, "previous_memory": "", "prompt_kind": "update",
                "create_retry_used": False, "key_facts_may_spill": may_spill, "route": ["load_memory"]}
    return {"working_memory": "", "previous_memory": overview, "prompt_kind": "create",
            "create_retry_used": False, "key_facts_may_spill": False, "route": ["load_memory"]}
