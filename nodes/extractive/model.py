"""The deterministic offline model: a heuristic extractor that answers the commit prompt with a tool call.

It is not a language model. It parses the transcript written by `nodes.formatting` out of the
prompt and copies sentences into the seven sections by surface cues (request wording, dates,
numbers, names, decision words, paths, tracebacks, correction words, question marks). It never
paraphrases, so it cannot invent, but it also misses anything said without those cues and may file
a sentence under the wrong section. It reads no clock and no random state: the same prompt always
yields the same tool call, which makes it the offline default and the graph's last fallback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from workmem.nodes.extractive.answer import EXTRACTIVE_MODEL_NAME, memory_tool_call
from workmem.nodes.extractive.transcript import prompt_text


class ExtractiveChatModel(BaseChatModel):
    """Heuristic, deterministic stand-in for a model: extracts sentences into a valid memory tool call.

    Offline default and the commit graph's last fallback. Honest limits: it copies text by surface
    cues, never understands it; expect misses and misfiled sentences, never invented content.
    """

    model_name: str = EXTRACTIVE_MODEL_NAME
    reads_for_free: ClassVar[bool] = True  # no provider bills its input: a commit need not clip what it reads

    @property
    def _llm_type(self) -> str:
        return EXTRACTIVE_MODEL_NAME

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tool definitions (OpenAI format after conversion) and the forced tool choice."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        return super().bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        """Answer the commit prompt with one deterministic memory tool call."""
        text = prompt_text(messages)
        system = "\n\n".join(m.text for m in messages if m.type == "system")
        name, args = memory_tool_call(text, kwargs.get("tools") or [], kwargs.get("tool_choice"), system=system)
        digest = hashlib.sha256(f"{name}\n{text}".encode()).hexdigest()[:24]
        call = {"name": name, "args": args, "id": f"call_{digest}", "type": "tool_call"}
        message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])
