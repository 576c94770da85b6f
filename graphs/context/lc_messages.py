"""Stored workmem messages → LangChain messages (the inverse of `state.messages.normalize_message`).

Tool-call ids, names and arguments, and tool results (content, name, error status) survive the
round trip LangChain → normalise → store → LangChain. Arguments that were not a JSON object are kept
as raw strings in storage and come back as `invalid_tool_calls`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.state.errors import InvalidInput
from workmem.state.messages import CONTENT_LAYOUT_META, content_blocks, lc_id


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
    blocks = content_blocks(meta)
    if role == "tool":
        result = next((p for p in msg["parts"] if p.get("type") == "tool_result"), None)
        if result is None:
            raise InvalidInput("message.parts", msg["parts"], "a tool message needs a tool_result part")
        text = result.get("content", "")
        content: Any = text
        if blocks:
            content = _laid_out([text] if text else [], blocks, meta.get(CONTENT_LAYOUT_META), joined=True)
        return ToolMessage(content=content, tool_call_id=result["tool_call_id"],
                           name=result.get("name"), status="error" if result.get("is_error") else "success",
                           **common)
    if isinstance(meta.get("name"), str):
        common["name"] = meta["name"]
    content = _content(msg["parts"], blocks, meta.get(CONTENT_LAYOUT_META))
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


def _content(parts: list[dict[str, Any]], others: list[dict[str, Any]],
             layout: Any) -> str | list[str | dict[str, Any]]:
    """Text of text and context parts: one plain string, or blocks when there are several (or images…), in the
    order they came when the message kept its layout."""
    texts: list[str] = []
    for part in parts:
        if part.get("type") == "text":
            texts.append(part["text"])
        elif part.get("type") == "context":
            texts.append(f"[context] {part.get('uri', '')}\n{part.get('abstract', '')}".strip())
    if len(texts) <= 1 and not others and not layout:
        return texts[0] if texts else ""
    return _laid_out(texts, others, layout)


def _laid_out(texts: list[str], others: list[dict[str, Any]], layout: Any, *,
              joined: bool = False) -> list[str | dict[str, Any]]:
    """Text blocks and other blocks as `layout` (`state.messages`) interleaved them, each text block with the
    keys it came with; texts first when there is no layout or it no longer fits the message (a clipped copy
    dropped blocks). `joined`: a tool result's texts were joined into one, which takes the first text's place."""
    default = [*({"type": "text", "text": t} for t in texts if t or not others), *others]
    if not isinstance(layout, list) or not all(isinstance(e, dict) for e in layout):
        return default
    places = [e for e in layout if "text" in e][:1 if joined else None]
    at = [e["other"] for e in layout if "other" in e]
    others_fit = all(type(i) is int for i in at) and sorted(at) == list(range(len(others)))
    texts_fit = [e["text"] for e in places] == list(range(len(texts)))
    if not (others_fit and texts_fit):
        return default
    out: list[str | dict[str, Any]] = []
    for entry in layout:
        if "other" in entry:
            out.append(others[entry["other"]])
        elif entry in places:
            block = entry.get("block") if isinstance(entry.get("block"), dict) else {"type": "text"}
            out.append({**block, "text": texts[places.index(entry)]})
    return out

