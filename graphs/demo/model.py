"""`DemoAgentModel`: a tiny deterministic offline chat model for the demo agent. It is not a language model.

It answers a question from a visible message that contains all of its keywords, else calls
`archive_search` with those keywords and answers from the best hit; a search that finds nothing is
answered with "I don't know". A statement is acknowledged. Nothing else: it never invents.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from workmem.state.archive_object import SEARCH_TOOL_NAME

MAX_KEYWORDS = 3
MAX_ANSWER_CHARS = 400
_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*[A-Za-z0-9_]|[\u3400-\u9fff]+")
_QUESTION = re.compile(r"\?|^\s*(what|when|where|who|which|how|why|did|do|does|was|were|is|are|remind|recall)\b",
                       re.I)
_STOP = frozenset(
    "the a an and or of to in on for with by at from is are was were be been do does did what when where who which "
    "how why we you i me my our your it its that this there about again remind recall remember earlier before "
    "previously said say tell told us can could would should please know any some have has had".split()
)
_HIT = re.compile(r"^\[(archive_\d+) #(\d+) \S+ \S+\] (.*)$", re.M)


def keywords(text: str) -> list[str]:
    """Up to three distinctive words of a question, in order (stop words and 1–2 letter words dropped)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        if word.lower() not in _STOP and len(word) >= 3 and word.lower() not in (w.lower() for w in out):
            out.append(word)
    return out[:MAX_KEYWORDS]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ANSWER_CHARS else text[: MAX_ANSWER_CHARS - 1] + "…"


def _visible_answer(messages: Sequence[BaseMessage], words: list[str]) -> str | None:
    """The newest visible message (the summary included) that mentions every keyword."""
    for message in reversed(messages[:-1]):
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, HumanMessage) and "workmem" not in message.additional_kwargs \
                and _QUESTION.search(message.text):
            continue  # an earlier question is not an answer
        text = message.text
        if words and all(w.lower() in text.lower() for w in words):
            lines = [ln for ln in text.splitlines() if words[0].lower() in ln.lower()]
            return _clip(lines[0] if lines else text)
    return None


def demo_reply(messages: Sequence[BaseMessage], tool_names: set[str]) -> AIMessage:
    """The demo model's deterministic answer to a conversation."""
    last = messages[-1] if messages else HumanMessage(content="")
    if isinstance(last, ToolMessage):
        if last.name == SEARCH_TOOL_NAME:
            hit = _HIT.search(last.text)
            if hit is None:
                return AIMessage(content="I searched the archive and found nothing about that, so I don't know.")
            return AIMessage(content=f"From the archive ({hit.group(1)}, message #{hit.group(2)}): "
                                     f"{_clip(hit.group(3))}")
        return AIMessage(content=f"{last.name or 'The tool'} returned: {_clip(last.text)}")
    text = last.text
    if not _QUESTION.search(text):
        return AIMessage(content=f"Noted: {_clip(text)}")
    words = keywords(text)
    found = _visible_answer(messages, words)
    if found is not None:
        return AIMessage(content=f"From our conversation: {found}")
    if SEARCH_TOOL_NAME in tool_names and words:
        call = {"name": SEARCH_TOOL_NAME, "args": {"query": " ".join(words)},
                "id": f"call_search_{len(messages)}", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content="I don't know.")


class DemoAgentModel(BaseChatModel):
    """Deterministic offline agent model for the demo graph (see the module docstring)."""

    @property
    def _llm_type(self) -> str:
        return "workmem-demo-agent"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Remember the tools' names; tool_choice is accepted and ignored."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        names = {t.get("function", {}).get("name") for t in kwargs.get("tools") or []}
        return ChatResult(generations=[ChatGeneration(message=demo_reply(messages, names))])
