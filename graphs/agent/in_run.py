"""What the middleware decides at each model call, inside a run (SPEC §12 *Context at run time*).

Pure rules and per-session bookkeeping, no I/O: when a commit is due on the whole call about to be sent, how
much raw tail a commit keeps so the next call carries at most `low_water` × the trigger, the breaker that stops
a compaction loop, which model errors are a context overflow (`state.errors.ContextOverflow` when it happens
twice), and the events a run streams.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from workmem.graphs.context.tool_results import DEFAULT_OFFLOAD_TOKENS
from workmem.state.retention import TOKENS, Keep

DEFAULT_LOW_WATER = 0.5
INEFFECTIVE_LIMIT = 3  # ineffective commits in a row before the breaker engages
OVERFLOW_MARGIN = 0.9  # an overflowing call's size less 10 %: the session's input limit from then on
OVERFLOW_CODE = "context_length_exceeded"  # OpenAI's error code

log = logging.getLogger("workmem.agent")


@dataclass
class SessionCalls:
    """The middleware's memory of one session across its calls (in this process)."""

    ineffective: int = 0  # trigger commits in a row after which the next call was still over the trigger
    check_next: bool = False  # a trigger commit just completed: the next call says whether it helped
    breaker_at: int | None = None  # pending tokens when the breaker engaged (None: not engaged)
    background: str | None = None  # a background commit started by a call, reported at the next one
    input_limit: int | None = None  # learned from a context overflow, for the engine's life
    to_trim: set[str] = field(default_factory=set)  # LangChain ids a commit archived, to leave the state
    warned: set[str] = field(default_factory=set)  # one WARNING per cause
    # the system message and messages of the last call storage served, and the state's message ids then
    last_good: tuple[Any, list[Any], set[str]] | None = None
    offload_limit: int = DEFAULT_OFFLOAD_TOKENS  # the session's latest `offload_tokens` (the read tool's cap)


def low_water_keep(keep: Keep, window_tokens: int, allowance: int) -> tuple[Keep, bool]:
    """The keep a trigger commit uses: the configured one, or `("tokens", allowance)` when its window is
    larger than what the low-water mark allows (then True: the keep was capped)."""
    if window_tokens <= allowance:
        return keep, False
    return (TOKENS, max(allowance, 0)), True


def newest_step_tokens(live: list[dict[str, Any]]) -> int:
    """Tokens of the newest step of the live messages: the last message, or, when it answers a tool call, the
    assistant message that made the call and everything after it."""
    for i in range(len(live) - 1, -1, -1):
        if live[i]["role"] != "tool":
            return sum(m["tokens"] for m in live[i:])
    return sum(m["tokens"] for m in live)


def breaker_allows(calls: SessionCalls, pending: int, floor: int) -> bool:
    """No trigger commit while the breaker is engaged, until pending tokens grew by the floor since."""
    if calls.breaker_at is None:
        return True
    if pending >= calls.breaker_at + floor:
        calls.breaker_at, calls.ineffective = None, 0
        return True
    return False


def judge_commit(calls: SessionCalls, call_tokens: int, threshold: int, pending: int) -> bool:
    """After a trigger commit, the next call tells whether it helped; True when the breaker engages now."""
    if not calls.check_next:
        return False
    calls.check_next = False
    if call_tokens < threshold:
        calls.ineffective = 0
        return False
    calls.ineffective += 1
    if calls.ineffective >= INEFFECTIVE_LIMIT and calls.breaker_at is None:
        calls.breaker_at = pending
        return True
    return False


def is_context_overflow(exc: BaseException) -> bool:
    """LangChain's `ContextOverflowError`, or a provider error whose code is OpenAI's `context_length_exceeded`."""
    try:
        from langchain_core.exceptions import ContextOverflowError
    except ImportError:  # pragma: no cover - older langchain-core
        ContextOverflowError = ()  # type: ignore[assignment]  # noqa: N806
    if ContextOverflowError and isinstance(exc, ContextOverflowError):
        return True
    code = getattr(exc, "code", None)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        code = code or body.get("code") or (body.get("error") or {}).get("code")
    return code == OVERFLOW_CODE


def emit(event: str, session_id: str, **fields: Any) -> dict[str, Any]:
    """One workmem event: streamed as a LangGraph custom event when a stream writer is there; returned."""
    record = {"event": event, "session_id": session_id, **fields}
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except Exception:  # outside a graph run there is no writer
        writer = None
    if writer is not None:
        try:
            writer({"workmem": record})
        except Exception as exc:  # a stream consumer's failure never fails the call
            log.debug("workmem event %s not streamed: %s", event, exc)
    return record
