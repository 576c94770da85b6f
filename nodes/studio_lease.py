"""Nodes `prepare` and `finish`: what a Studio run does around the commit that the engine does itself.

`prepare` appends the optional input messages (once per run, even if the run restarts), takes the
session's lease like any engine commit (or ends the run as busy), reserves the next archive id and
writes the task row; `finish` releases the lease.
"""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.runtime import Runtime

from nodes.context import CommitContext, services
from state.commit_state import CommitState
from state.ids import safe_session_id
from state.turns import validate_keep

STUDIO_OWNER = "langgraph-studio"
RECENT_WINDOW = 10_000  # messages looked through for a re-executed step's input


def prepare(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Add the input messages once per run, take the session lease and reserve the archive id."""
    svc = services(runtime)
    session_id = state["session_id"]
    keep = validate_keep(state.get("keep_recent_count", 0))
    _add_once(svc.store, session_id, state.get("messages") or [], _step_key(runtime))
    if not svc.store.session_exists(session_id):
        return {"status": "skipped", "reason": "no_messages", "route": ["prepare"]}
    task_id = uuid.uuid4().hex
    holder = svc.index.acquire_lease(session_id, task_id, STUDIO_OWNER)
    if holder is not None:
        return {"status": "busy", "reason": "commit_in_progress", "task_id": holder, "route": ["prepare"]}
    archive_id = svc.store.next_archive_id(session_id)
    svc.index.create_task(session_id, task_id=task_id, archive_id=archive_id, status="running",
                          thread_id=f"{safe_session_id(session_id)}/studio/{task_id}")
    return {"task_id": task_id, "archive_id": archive_id, "status": "running", "messages": [],
            "keep_recent_count": keep, "route": ["prepare"]}


def _step_key(runtime: Runtime[CommitContext]) -> str:
    """What stays the same when this step is re-executed (a retried or resumed run) and differs for any
    other run: LangGraph derives the task id from the checkpoint the step starts from."""
    info = runtime.execution_info
    task_id = getattr(info, "task_id", None)
    return f"{getattr(info, 'thread_id', None)}:{task_id}" if task_id else uuid.uuid4().hex


def _add_once(store: Any, session_id: str, messages: list[dict[str, Any]], step_key: str) -> None:
    if not messages:
        return
    tags = [f"{step_key}:{i}" for i in range(len(messages))]
    if store.session_exists(session_id):
        total = store.meta(session_id)["total_message_count"]
        recent = store.messages_in_range(session_id, max(1, total - RECENT_WINDOW), max(total, 1))
        if any(m["meta"].get("studio_input") == tags[0] for m in recent):
            return  # this step already appended them before it was re-executed (live or since archived)
    tagged = [{**m, "meta": {**(m.get("meta") or {}), "studio_input": tag}}
              for m, tag in zip(messages, tags, strict=True)]
    store.append(session_id, tagged)


def finish(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Release the lease; a skipped run marks its task skipped."""
    svc = services(runtime)
    if state.get("status") == "skipped":
        svc.index.update_task(state["task_id"], status="skipped", result={"reason": state.get("reason")})
    svc.index.release_lease(state["session_id"], state["task_id"])
    return {"route": ["finish"]}
