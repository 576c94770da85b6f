"""Scripted models and answer factories for tests: every path of the commit graph, offline."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import Field

from workmem.state.memory import SECTIONS

UPDATE = "update_working_memory"
CREATE = "create_working_memory"


class ScriptedToolModel(GenericFakeChatModel):
    """A chat model that plays a script: each call takes the next item (AIMessage, str, exception, or a
    function of the prompt returning one of these).

    Every prompt is recorded in `.prompts`, every call counted in `.calls`, and the kwargs bound by
    `bind_tools` (tools, tool_choice) in `.bound`. A call past the end of the script fails loudly.
    Exceptions in the script are raised (e.g. `transport_error()`), so retries can be exercised.
    """

    messages: Iterator[Any]
    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)
    calls: int = 0

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Keep the script: bind returns a RunnableBinding around this very instance."""
        return self.bind(tools=list(tools), tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls += 1
        self.prompts.append(list(messages))
        self.bound.append(dict(kwargs))
        try:
            item = next(self.messages)
        except StopIteration:
            raise AssertionError(
                f"ScriptedToolModel: unexpected call #{self.calls}, the script is over"
            ) from None
        if isinstance(item, BaseException):
            raise item
        if callable(item):  # a reply computed from the prompt
            item = item(list(messages))
        message = AIMessage(content=item) if isinstance(item, str) else item
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The scripted reply as one chunk (its tool calls as tool-call chunks), as a streaming provider ends."""
        message = self._generate(messages, stop, run_manager, **kwargs).generations[0].message
        calls = [{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i,
                  "type": "tool_call_chunk"} for i, c in enumerate(getattr(message, "tool_calls", None) or ())]
        chunk = ChatGenerationChunk(message=AIMessageChunk(content=message.content, id=message.id,
                                                           tool_call_chunks=calls, chunk_position="last"))
        if run_manager:
            run_manager.on_llm_new_token(message.text, chunk=chunk)
        yield chunk

    def prompt_text(self, index: int = -1) -> str:
        """All text of the prompt of one recorded call (default: the last one)."""
        return "\n\n".join(m.text for m in self.prompts[index])


def scripted(*items: Any) -> ScriptedToolModel:
    """A ScriptedToolModel playing `items` in order."""
    return ScriptedToolModel(messages=iter(items))


def keep_all() -> dict[str, dict[str, Any]]:
    """KEEP for all seven sections."""
    return {name: {"op": "KEEP"} for name in SECTIONS}


def valid_update_call(
    sections_ops: Mapping[str, Any], *, fill_keep: bool = True, call_id: str = "call_update_1"
) -> AIMessage:
    """An AIMessage with a well-formed `update_working_memory` call (missing sections → KEEP)."""
    ops = {**keep_all(), **sections_ops} if fill_keep else dict(sections_ops)
    return AIMessage(
        content="",
        tool_calls=[{"name": UPDATE, "args": {"sections": ops}, "id": call_id, "type": "tool_call"}],
    )


def create_call(sections: Mapping[str, str], *, call_id: str = "call_create_1") -> AIMessage:
    """An AIMessage with a `create_working_memory` call carrying `sections` as given (may be partial)."""
    return AIMessage(
        content="",
        tool_calls=[
            {"name": CREATE, "args": {"sections": dict(sections)}, "id": call_id, "type": "tool_call"}
        ],
    )


def invalid_call(raw_args_str: str, *, name: str = UPDATE, call_id: str = "call_bad_1") -> AIMessage:
    """An AIMessage whose tool call could not be parsed: the raw argument string is kept."""
    return AIMessage(
        content="",
        invalid_tool_calls=[
            {
                "name": name,
                "args": raw_args_str,
                "id": call_id,
                "error": "Function arguments are not valid JSON.",
                "type": "invalid_tool_call",
            }
        ],
    )


def text_reply(text: str) -> AIMessage:
    """A plain text answer without any tool call."""
    return AIMessage(content=text)


def fenced_json_reply(obj: Any, *, preface: str = "Here is the update:") -> AIMessage:
    """A text answer holding the arguments as a fenced ```json block."""
    return AIMessage(content=f"{preface}\n\n```json\n{json.dumps(obj, indent=2)}\n```\n")


def transport_error(message: str = "Connection error.") -> Exception:
    """An `openai.APIConnectionError`, as the real client raises when the server is unreachable."""
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    return openai.APIConnectionError(message=message, request=request)


def stored_messages(
    openai_messages: Sequence[Mapping[str, Any]], *, first_seq: int = 1
) -> list[dict[str, Any]]:
    """Convert OpenAI-style dicts to stored workmem dicts (seq, turn_id, parts) for formatting tests."""
    stored: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    turn = 0
    for offset, msg in enumerate(openai_messages):
        role = msg["role"]
        turn += role == "user"
        parts: list[dict[str, Any]] = []
        if role == "tool":
            call_id = str(msg.get("tool_call_id"))
            parts.append(
                {
                    "type": "tool_result",
                    "tool_call_id": call_id,
                    "name": msg.get("name") or names.get(call_id, ""),
                    "content": msg.get("content") or "",
                    "is_error": bool(msg.get("is_error")) or msg.get("status") == "error",
                }
            )
        elif msg.get("content"):
            parts.append({"type": "text", "text": msg["content"]})
        for call in msg.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
            parts.append(
                {
                    "type": "tool_call",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"] or "{}"),
                }
            )
        stored.append(
            {
                "id": f"m-{first_seq + offset}",
                "seq": first_seq + offset,
                "turn_id": f"t{turn}",
                "role": role,
                "parts": parts,
                "meta": {},
            }
        )
    return stored


def long_session(n_turns: int) -> list[dict[str, Any]]:
    """`n_turns` user/assistant pairs, each naming a file, a date and a decision (for chunking tests)."""
    out = []
    for i in range(n_turns):
        out.append({"role": "user", "content": f"Step {i}: please update module_{i}.py so the importer "
                                               f"handles supplier number {i} on 2024-05-{i % 28 + 1:02d}."})
        out.append({"role": "assistant", "content": f"Updated module_{i}.py; supplier {i} now imports cleanly, "
                                                    f"decided to keep the old delimiter because tests rely on it."})
    return out


def stored_text(seq: int, text: str, role: str = "user") -> dict[str, Any]:
    """One stored workmem message with a single text part, for index and search tests."""
    return {"id": f"m-{seq}", "seq": seq, "turn_id": f"t{seq}", "role": role, "tokens": 1,
            "created_at": "2026-01-01T00:00:00+00:00", "meta": {}, "parts": [{"type": "text", "text": text}]}
