"""When storage is down: the call goes out as the last one storage served, plus what the state added since.

Nothing is recorded as stored, so the next call that reaches storage stores everything; one WARNING per outage.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware.types import ModelRequest

from workmem.graphs.agent.call import Prepared
from workmem.graphs.agent.events import emit
from workmem.graphs.agent.session_cache import SessionCache
from workmem.graphs.agent.view import carries_content
from workmem.graphs.context.call_state import SessionCalls
from workmem.state.redact import describe_error
from workmem.state.tokens import count_tokens

log = logging.getLogger("workmem.agent")


def remember_sent(cache: SessionCache, calls: SessionCalls, request: ModelRequest, prepared: Prepared) -> None:
    """A call storage served went out and was answered: it is the view an outage falls back to."""
    if prepared.sent.get("storage_unavailable"):
        return
    messages = list(request.state.get("messages") or [])
    cache.last_good = (prepared.request.system_message, list(prepared.request.messages),
                       {m.id for m in messages if getattr(m, "id", None)}, list(prepared.request.tools))
    calls.warned.discard("storage")  # a later outage is warned about again


def last_good(request: ModelRequest, session_id: str, exc: Exception, *, cache: SessionCache, calls: SessionCalls,
              budget: int) -> Prepared:
    """The call as the last good one was sent — its system message and tools — plus the state's messages that came
    after it (or the state's own messages and tools when there was none, or when the state dropped messages since:
    a cleared conversation is never resent)."""
    if "storage" not in calls.warned:
        calls.warned.add("storage")
        log.warning("session %r: storage is unavailable (%s); the call goes out with the last good view and storing "
                    "is retried at the next call", session_id, describe_error(exc))
    events = [emit("storage_unavailable", session_id, error=describe_error(exc))]
    messages = [m for m in request.state.get("messages") or [] if carries_content(m)]
    present = {m.id for m in messages if getattr(m, "id", None)}
    good = cache.last_good
    if good is None or not good[2] <= present:
        system, shown, tools = request.system_message, messages, request.tools
    else:
        system, before, ids, tools = good  # its tools too: workmem's join or stay out as they were
        shown = [*before, *(m for m in messages if getattr(m, "id", None) not in ids)]
    tokens = sum(count_tokens(m.text) for m in shown) + (count_tokens(system.text) if system else 0)
    sent: dict[str, Any] = {"session_id": session_id, "storage_unavailable": True, "events": events,
                            "budget": budget, "call_tokens": tokens, "state_messages": len(messages),
                            "messages_shown": len(shown)}
    return Prepared(request.override(messages=shown, system_message=system, tools=tools), sent, [], {})
