"""Node `extractive_fallback`: the deterministic offline model produces this chunk's ops (degraded)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, services
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.generate import answer_of, build_prompt
from workmem.nodes.models import bind_commit_tool
from workmem.nodes.validate import classify_answer
from workmem.state.commit_state import CommitState
from workmem.state.memory import is_v2

_EXTRACTIVE = ExtractiveChatModel()


def extractive_fallback(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Last resort: never fails; the archive is flagged degraded, and a model call that raised on the way here is
    named as the commit's error."""
    kind = "update" if is_v2(state.get("working_memory", "")) else "create"
    prompt, tool = build_prompt({**state, "prompt_kind": kind}, services(runtime))
    reply = bind_commit_tool(_EXTRACTIVE, tool).invoke(prompt)
    verdict = classify_answer(answer_of(reply), creating=kind == "create")
    # a call that raised (a body the client could not read, a client's TypeError) is why it fell back: said so
    raised = [state["call_error"]] if state.get("call_error") and not state.get("model_error") else []
    return {"ops": verdict["ops"], "degraded": True, "attempt": 0, "transport_error": "",
            "route": ["extractive_fallback"], "model_errors": raised}
