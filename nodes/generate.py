"""Node `generate`: one model call with the update or create prompt for the current chunk.

Transport errors propagate so the node's RetryPolicy retries them; once retries are exhausted the
node's error handler (`generate_failed`) records a redacted `model_error` and goes on to `validate`.
Any other exception from the client (e.g. arguments that parse to a non-object) is malformed output.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.errors import NodeError
from langgraph.runtime import Runtime
from langgraph.types import Command

from workmem.nodes.context import CommitContext, Services, services
from workmem.nodes.formatting import format_messages
from workmem.nodes.models import bind_commit_tool, is_api_refusal, is_transport_error, model_name
from workmem.nodes.prompts import create_prompt, update_prompt
from workmem.state.commit_state import CommitState
from workmem.state.memory import section_reminders
from workmem.state.ops import CREATE_TOOL, UPDATE_TOOL
from workmem.state.redact import describe_error


def build_prompt(state: CommitState, svc: Services) -> tuple[list[BaseMessage], dict[str, Any]]:
    """The chat messages and the forced tool for the current chunk and prompt kind."""
    start_seq, end_seq = state["chunks"][state["chunk_index"]]
    messages = svc.sessions.messages_in_range(state["session_id"], start_seq, end_seq)
    transcript = format_messages(messages, clip_tokens=svc.clip_tokens)
    if state.get("prompt_kind") == "update":
        wm = state.get("working_memory", "")
        pairs, tool = update_prompt(wm, transcript, section_reminders(wm)), UPDATE_TOOL
    else:
        # A create retry over an existing v2 WM hands that WM over too, so the model can carry it forward.
        previous = state.get("previous_memory") or state.get("working_memory") or None
        pairs, tool = create_prompt(transcript, previous), CREATE_TOOL
    roles = {"system": SystemMessage, "human": HumanMessage, "user": HumanMessage}
    return [roles[role](content=text) for role, text in pairs], tool


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


def _text_blocks(content: list[Any]) -> str:
    return "\n".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)


def generate(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Ask the model for a tool call; its answer is data for `validate`, never an exception."""
    svc = services(runtime)
    prompt, tool = build_prompt(state, svc)
    bound = bind_commit_tool(svc.model, tool)
    try:
        reply = bound.invoke(prompt)
    except Exception as exc:
        if is_transport_error(exc):
            raise
        if is_api_refusal(exc):
            return {"answer": {}, "model_error": describe_error(exc), "model_name": model_name(svc.model),
                    "route": ["generate"]}
        reply = AIMessage(content="", invalid_tool_calls=[
            {"name": tool["function"]["name"], "args": describe_error(exc), "id": None,
             "error": type(exc).__name__, "type": "invalid_tool_call"}])
    return {"answer": answer_of(reply), "model_error": "", "model_name": model_name(svc.model),
            "route": ["generate"]}


def generate_failed(state: CommitState, error: NodeError) -> Command[Literal["validate"]]:
    """Retries exhausted: record the redacted transport error and let `validate` route to fallback."""
    return Command(
        goto="validate",
        update={"answer": {}, "model_error": describe_error(error.error), "route": ["generate_failed"]},
    )

