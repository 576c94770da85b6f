"""Stored workmem messages → LangChain messages (the inverse of `state.messages.normalize_message`).

Tool-call ids, names and arguments, and tool results (content, name, error status) survive the
round trip LangChain → normalise → store → LangChain. Arguments that were not a JSON object are kept
as raw strings in storage and come back as `invalid_tool_calls`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.state.errors import InvalidInput
from workmem.state.messages import lc_id


def to_langchain_messages(messages: list[dict[str, Any]]) -> list[BaseMessage]:
    """Convert stored (or normalised) workmem messages to LangChain messages, in order."""
    return [to_langchain_message(m) for m in messages]


def to_langchain_message(msg: dict[str, Any]) -> BaseMessage:
    """One stored workmem message as a LangChain message."""
    if not isinstance(msg, dict) or not isinstance(msg.get("parts"), list):
        raise InvalidInput("message", msg, "must be a workmem message with parts")
    meta = msg.get("meta") or {}
    common: dict[str, Any] = {}
    msg_id = lc_id(msg) or msg.get("id")
    if msg_id is not None:
        common["id"] = msg_id
    if isinstance(meta.get("additional_kwargs"), dict):
        common["additional_kwargs"] = dict(meta["additional_kwargs"])
    role = msg.get("role")
    if role == "tool":
        result = next((p for p in msg["parts"] if p.get("type") == "tool_result"), None)
        if result is None:
            raise InvalidInput("message.parts", msg["parts"], "a tool message needs a tool_result part")
        return ToolMessage(content=result.get("content", ""), tool_call_id=result["tool_call_id"],
                           name=result.get("name"), status="error" if result.get("is_error") else "success",
                           **common)
    if isinstance(meta.get("name"), str):
        common["name"] = meta["name"]
    content = _content(msg["parts"], meta.get("content_blocks"))
    if role == "user":
        return HumanMessage(content=content, **common)
    if role == "system":
        return SystemMessage(content=content, **common)
    if role == "assistant":
        calls, invalid = [], []
        for part in msg["parts"]:
            if part.get("type") != "tool_call":
                continue
            args = part.get("arguments")
            if isinstance(args, dict):
                calls.append({"id": part.get("id"), "name": part["name"], "args": args, "type": "tool_call"})
            else:
                invalid.append({"id": part.get("id"), "name": part["name"], "args": args,
                                "error": "arguments are not a JSON object", "type": "invalid_tool_call"})
        return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, **common)
    raise InvalidInput("message.role", role, "must be one of user, assistant, tool, system")


def _content(parts: list[dict[str, Any]], extra: Any) -> str | list[str | dict[str, Any]]:
    """Text of text and context parts: one plain string, or blocks when there are several (or images…)."""
    blocks: list[str] = []
    for part in parts:
        if part.get("type") == "text":
            blocks.append(part["text"])
        elif part.get("type") == "context":
            blocks.append(f"[context] {part.get('uri', '')}\n{part.get('abstract', '')}".strip())
    others = [b for b in extra if isinstance(b, dict)] if isinstance(extra, list) else []
    if len(blocks) <= 1 and not others:
        return blocks[0] if blocks else ""
    return [*({"type": "text", "text": b} for b in blocks if b or not others), *others]

