"""Node `generate`: one model call with the update or create prompt for the current chunk.

Transport errors (connection, timeout, rate limit, 5xx) never leave this node as exceptions: it
returns their redacted text and the attempt number, and `route_after_generate` sends the run around
the drawn retry loop (backoff happens here, before the next attempt) or, after the last attempt, to
`extractive_fallback`. An API refusal (bad key, unknown model) is a `model_error`; any other
exception of the client (e.g. arguments that parse to a non-object) is malformed output. A refusal
that a known fix cures (`nodes/model_fixes.py`: `$ref` in the schema, a sampling parameter) is retried
once with the fix, which the engine then keeps; the fixes in effect are recorded in state (`model_fixes`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, Services, clip_tokens_of, context_of, services
from workmem.nodes.formatting import format_messages
from workmem.nodes.models import bind_commit_tool, is_api_refusal, is_transport_error, model_name
from workmem.nodes.prompts import create_prompt, update_prompt
from workmem.nodes.routing import MAX_MODEL_ATTEMPTS
from workmem.state.commit_state import CommitState, memory_budget_of
from workmem.state.memory import budgets, section_reminders
from workmem.state.ops import CREATE_TOOL, update_tool
from workmem.state.redact import clean_error, describe_error

log = logging.getLogger("workmem.generate")


def build_prompt(state: CommitState, svc: Services) -> tuple[list[BaseMessage], dict[str, Any]]:
    """The chat messages and the forced tool for the current chunk and prompt kind."""
    start_seq, end_seq = state["chunks"][state["chunk_index"]]
    messages = svc.sessions.messages_in_range(state["session_id"], start_seq, end_seq)
    transcript = format_messages(messages, clip_tokens=clip_tokens_of(state, svc),
                                 hidden=set(state.get("hidden") or ()))
    limits = budgets(memory_budget_of(state))
    if state.get("prompt_kind") == "update":
        wm = state.get("working_memory", "")
        pairs = update_prompt(wm, transcript, section_reminders(wm, limits), limits)
    else:
        # A create retry over an existing v2 WM hands that WM over too, so the model can carry it forward.
        previous = state.get("previous_memory") or state.get("working_memory") or None
        pairs = create_prompt(transcript, previous, limits)
    roles = {"system": SystemMessage, "human": HumanMessage, "user": HumanMessage}
    return [roles[role](content=text) for role, text in pairs], commit_tool(state, svc)


def commit_tool(state: CommitState, svc: Services) -> dict[str, Any]:
    """The forced tool of the current prompt kind: the update tool in the schema in effect, or the create tool."""
    if state.get("prompt_kind") == "update":
        return update_tool(svc.fixes.tool_schema(svc.tool_schema) == "inline")
    return CREATE_TOOL


def answer_of(reply: Any) -> dict[str, Any]:
    """The parts of a model reply that validation reads, as plain data for the checkpoint."""
    if not isinstance(reply, AIMessage):
        return {"tool_calls": [], "invalid_tool_calls": [], "text": str(getattr(reply, "content", reply))}
    text = reply.content if isinstance(reply.content, str) else _text_blocks(reply.content)
    return {
        "tool_calls": [{"name": c.get("name"), "args": c.get("args")} for c in reply.tool_calls],
        "invalid_tool_calls": [
            {"name": c.get("name"), "args": c.get("args")} for c in reply.invalid_tool_calls
        ],
        "text": text,
    }


def usage_of(reply: Any) -> dict[str, int]:
    """One answered call's usage: its `usage_metadata` tokens (0 when the model reports none)."""
    meta = getattr(reply, "usage_metadata", None) or {}
    return {"input_tokens": int(meta.get("input_tokens") or 0), "output_tokens": int(meta.get("output_tokens") or 0),
            "calls": 1}


def _text_blocks(content: list[Any]) -> str:
    return "\n".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)


def retry_delay(backoff_s: float, attempt: int) -> float:
    """Seconds to wait before attempt `attempt` (2, 3, …): backoff_s, then doubling."""
    return backoff_s * 2 ** (attempt - 2) if attempt > 1 else 0.0


def generate(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Ask the model for a tool call; its answer, or its redacted failure, is data in state."""
    svc = services(runtime)
    attempt = state.get("attempt", 0) + 1
    time.sleep(retry_delay(context_of(runtime).retry_backoff_s, attempt))
    common: dict[str, Any] = {"model_name": clean_error(model_name(svc.model)), "route": ["generate"]}
    fix: str | None = None  # a fix this call learnt (taken back when its retry is refused too)
    retried = False  # at most one fix-retry per call
    prompt, tool = build_prompt(state, svc)
    while True:
        sent = svc.fixes.names()  # read before `apply`: a fix learnt in between is at worst retried once more
        try:
            reply = bind_commit_tool(svc.fixes.apply(svc.model), tool).invoke(prompt)
            break
        except Exception as exc:
            error = describe_error(exc)
            if is_transport_error(exc):
                failed = {**common, "attempt": attempt, "transport_error": error, "answer": {},
                          "usage": {"failed_attempts": 1}, "model_fixes": svc.fixes.names()}
                if attempt >= MAX_MODEL_ATTEMPTS:
                    failed |= {"model_error": error, "model_errors": [error]}
                return failed
            if is_api_refusal(exc):
                if retried:
                    if fix is not None:  # refused again: the fix did not cure it, nothing of it is kept
                        svc.fixes.forget(fix)
                elif (fix := svc.fixes.learn(error, svc.model, svc.tool_schema, getattr(exc, "param", None))) \
                        or (newer := svc.fixes.since(sent)):
                    retried = True
                    log.warning("%s refused the request (%s); retrying once with the fix %r (%s)",
                                common["model_name"], error, fix or newer,
                                "kept if it helps" if fix else "learnt meanwhile by another commit")
                    tool = commit_tool(state, svc)  # the transcript stays; only the tool's schema may change
                    continue
                return {**common, "attempt": 0, "transport_error": "", "answer": {}, "model_error": error,
                        "model_errors": [error], "model_fixes": svc.fixes.names()}
            # any other failure — a body the client could not read (an OpenAI-compatible server's reply without
            # `choices`), a client's own TypeError — is an unusable answer, asked again with the create prompt;
            # its error is kept, so a fallback it leads to names it rather than "no usable tool call"
            reply = AIMessage(content="", invalid_tool_calls=[
                {"name": tool["function"]["name"], "args": error, "id": None,
                 "error": type(exc).__name__, "type": "invalid_tool_call"}])
            return {**common, "attempt": 0, "transport_error": "", "answer": answer_of(reply), "model_error": "",
                    "call_error": error, "usage": {"failed_attempts": 1}, "model_fixes": svc.fixes.names()}
    return {**common, "attempt": 0, "transport_error": "", "answer": answer_of(reply), "model_error": "",
            "call_error": "", "usage": usage_of(reply), "model_fixes": svc.fixes.names()}
