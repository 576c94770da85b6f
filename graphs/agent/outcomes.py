"""A commit's outcome as the agent hears it: an event per task (finished, degraded, skipped, failed), the messages
it archived marked to leave the agent's state, a background commit remembered until it ended."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workmem.graphs.agent.events import emit
from workmem.graphs.agent.session_cache import SessionCache
from workmem.state.messages import lc_id

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine


def report(engine: WorkingMemoryEngine, session_id: str, result: dict[str, Any], cache: SessionCache,
           events: list[dict[str, Any]]) -> None:
    """Record a commit's result: a background one is remembered; an ended one gives its event (with its task)."""
    status = result.get("status")
    if status == "pending":
        engine.call_state(session_id).background = result.get("task_id")
        return
    if status == "completed":
        task = engine.task(result["task_id"]) or {}
        degraded = bool((task.get("result") or {}).get("degraded"))
        events.append(emit("commit_degraded" if degraded else "commit_finished", session_id,
                           task_id=result["task_id"], archive_id=result.get("archive_id")))
        if result.get("archive_id"):
            cache.to_trim |= {i for m in engine.archive_messages(session_id, result["archive_id"]) if (i := lc_id(m))}
    elif status == "skipped":
        events.append(emit("commit_skipped", session_id, task_id=result.get("task_id"), reason=result.get("reason")))
    elif status != "busy":
        events.append(emit("commit_failed", session_id, task_id=result.get("task_id"), reason=result.get("reason")))


def report_background(engine: WorkingMemoryEngine, session_id: str, cache: SessionCache,
                      events: list[dict[str, Any]]) -> bool:
    """Report a background commit a call started, once it ended; True when it completed."""
    calls = engine.call_state(session_id)
    if calls.background is None:
        return False
    task = engine.task(calls.background) or {}
    if task.get("status") in ("pending", "running"):
        return False
    calls.background = None
    result = {"status": task.get("status"), "task_id": task.get("task_id"), "archive_id": task.get("archive_id"),
              "reason": task.get("error")}
    report(engine, session_id, result, cache, events)
    return task.get("status") == "completed"
