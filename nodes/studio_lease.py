"""Nodes `take_lease` and `release_lease`: what a Studio run does around the commit that the engine does itself.

`take_lease` appends the optional input messages (once per run, even if the run restarts), takes the
session's lease like any engine commit (or ends the run as busy), reserves the next archive id and
writes the task row; `release_lease` releases the lease.
"""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, services
from workmem.nodes.studio_input import studio_keep
from workmem.state.commit_state import RESET, CommitState, fresh_run
from workmem.state.memory import DEFAULT_MEMORY_BUDGET, MAX_MEMORY_BUDGET, MIN_MEMORY_BUDGET
from workmem.state.storage import STUDIO_THREAD_PREFIX
from workmem.state.validation import require_int

STUDIO_OWNER = "langgraph-studio"
RECENT_WINDOW = 10_000  # messages looked through for a re-executed step's input


def take_lease(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Add the input messages once per run, take the session lease and reserve the archive id."""
    svc = services(runtime)
    session_id = state["session_id"]
    keep = studio_keep(state)
    given = state.get("memory_budget")
    budget = DEFAULT_MEMORY_BUDGET if given is None else require_int("memory_budget", given, min=MIN_MEMORY_BUDGET,
                                                                     max=MAX_MEMORY_BUDGET)
    _add_once(svc.sessions, session_id, state.get("messages") or [], _step_key(runtime))
    run = {**fresh_run(), "route": [RESET, "take_lease"], "messages": [], **_NO_INPUT_KEEP}
    if not svc.sessions.session_exists(session_id):
        return {**run, "status": "skipped", "reason": "no_messages", "task_id": ""}
    task_id = uuid.uuid4().hex
    holder = svc.tasks.acquire_lease(session_id, task_id, STUDIO_OWNER)
    if holder is not None:
        return {**run, "status": "busy", "reason": "commit_in_progress", "task_id": holder}
    archive_id = svc.sessions.next_archive_id(session_id)
    thread = getattr(runtime.execution_info, "thread_id", None) or task_id
    svc.tasks.create_task(session_id, task_id=task_id, archive_id=archive_id, status="running",
                          thread_id=f"{STUDIO_THREAD_PREFIX}{thread}")
    return {**run, "task_id": task_id, "archive_id": archive_id, "status": "running", "keep": list(keep),
            "memory_budget": budget}


# A thread's channels outlive a run: this run's keep must not become the next run's default.
_NO_INPUT_KEEP: dict[str, Any] = {"keep": None, "keep_recent_count": None, "memory_budget": None}


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


def release_lease(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Release the lease; a skipped run marks its task skipped."""
    svc = services(runtime)
    if state.get("status") == "skipped":
        svc.tasks.update_task(state["task_id"], status="skipped", result={"reason": state.get("reason")})
    svc.tasks.release_lease(state["session_id"], state["task_id"])
    return {"route": ["release_lease"], **_NO_INPUT_KEEP}
