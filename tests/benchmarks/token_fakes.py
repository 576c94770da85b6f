"""Counting fakes of the token benchmark (`bench_tokens.py`): the agent model and the one extractor.

Every count is `workmem.state.tokens.count_tokens` (cl100k) of a message's text, summed over the
messages of a call, plus `json.dumps` of each bound tool. No fake reports `usage_metadata`, so no layer
can take a provider's count for its own.

**The extractor rule** (the same for every summarising call of every layer): the call's *covered*
content is the previous memory (summary text, or the working memory's items) followed by the text of
the messages it folds in; its budget is B = min(⌊0.15 × covered tokens⌋, 800). Sentences carrying a
digit, a path or a capitalised word past the first are *informative*; newest first, each informative
sentence not already taken joins the answer while it fits in B (a sentence costs its tokens plus one for
its newline); the answer lists them oldest first. A summariser (SummarizationMiddleware, LangMem)
returns them as text, one per line. For workmem each sentence keeps the section it had, or a new one
is filed by the extractive model's cues (question or TODO → Open Issues; an error line as the extractive
model reads one — an exception or `error:` line, a pytest FAILED line — or a user correction → Errors &
Corrections; request → Task & Goals; path → Files & Context; else Key Facts & Decisions), and each section's op is
what turns its old items into its chosen ones: KEEP when equal, APPEND when it only adds, else UPDATE.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from workmem.graphs.agent.tools import schema_tokens
from workmem.nodes.extractive.artifacts import error_items, paths_in
from workmem.nodes.extractive.cues import is_correction, is_issue, is_request
from workmem.nodes.extractive.text import is_question, sentences
from workmem.nodes.extractive.transcript import Result, block, parse_transcript, untag
from workmem.state.memory import SECTIONS, bullet_items, parse_sections
from workmem.state.ops import CREATE_TOOL_NAME
from workmem.state.tokens import count_tokens

SHARE = 0.15
MAX_OUTPUT = 800
_INFORMATIVE = re.compile(r"\d|\w/\w|\s[A-Z][A-Za-z]")
_SM_MESSAGES = re.compile(r'<message type="[^"]*">(.*?)</message>', re.S)
_LANGMEM_EXISTING = re.compile(r"^This is summary of the conversation so far: (.*)\n\nExtend this summary", re.S)
# How each layer's memory message starts: workmem's summary, SummarizationMiddleware's, LangMem's.
MEMORY_PREFIXES = ("[Session History Summary]\n", "Here is a summary of the conversation to date:",
                   "Summary of the conversation so far:")
LIST_SECTIONS = ("Task & Goals", "Key Facts & Decisions", "Files & Context", "Errors & Corrections", "Open Issues")


def message_tokens(messages: Sequence[Any]) -> int:
    """The cl100k tokens of the messages' text (a tool call counts its JSON), summed: every layer's counter."""
    total = 0
    for m in messages:
        total += count_tokens(m.text if isinstance(m, BaseMessage) else str(getattr(m, "content", m)))
        for call in getattr(m, "tool_calls", None) or []:
            total += count_tokens(json.dumps({"name": call["name"], "args": call["args"]}))
    return total


def budget(covered_tokens: int) -> int:
    """B = min(⌊0.15 × covered⌋, 800)."""
    return min(int(covered_tokens * SHARE), MAX_OUTPUT)


def select(units: Sequence[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """The rule: informative sentences of `units` (origin, text — oldest first), newest first within B."""
    covered = count_tokens("\n".join(text for _, text in units))
    room = budget(covered)
    pieces = [(origin, s) for origin, text in units for s in sentences(text)]
    seen: set[str] = set()
    chosen: list[int] = []
    for i in range(len(pieces) - 1, -1, -1):
        text = pieces[i][1]
        key = " ".join(text.lower().split())
        if key in seen or not _INFORMATIVE.search(text):
            continue
        cost = count_tokens(text) + 1
        if cost <= room:
            seen.add(key)
            chosen.append(i)
            room -= cost
    return [pieces[i] for i in sorted(chosen)]


def section_of(sentence: str) -> str:
    """The extractive model's cue for a new sentence's section."""
    if is_question(sentence) or is_issue(sentence):
        return "Open Issues"
    if error_items(Result("", False, [sentence])) or is_correction(sentence, after_question=False):
        return "Errors & Corrections"
    if is_request(sentence):
        return "Task & Goals"
    if paths_in(sentence):
        return "Files & Context"
    return "Key Facts & Decisions"


def memory_ops(prompt: str, tool_name: str) -> dict[str, Any]:
    """The extractor's memory tool arguments for a commit prompt (create: bodies; update: ops)."""
    lines = prompt.replace("\r\n", "\n").split("\n")
    wm, after = block(lines, "current_working_memory")
    transcript, _ = block(lines, "messages", start=after, last_close=True)
    old = parse_sections(untag(wm or ""))
    old_items = {name: bullet_items(old.get(name, "")) for name in LIST_SECTIONS}
    units: list[tuple[Any, str]] = [(name, item) for name in LIST_SECTIONS for item in old_items[name]]
    units += [(None, "\n".join(m.text)) for m in parse_transcript(transcript or "") if m.role in ("user", "assistant")]
    chosen: dict[str, list[str]] = {name: [] for name in LIST_SECTIONS}
    for origin, text in select(units):
        chosen[origin or section_of(text)].append(text)
    if tool_name == CREATE_TOOL_NAME:
        bodies = {name: "\n".join(f"- {i}" for i in chosen.get(name, [])) for name in SECTIONS}
        if not any(bodies.values()):
            bodies["Current State"] = units[-1][1] if units else "Nothing yet."
        return {"sections": bodies}
    ops: dict[str, Any] = {name: {"op": "KEEP"} for name in SECTIONS}
    for name in LIST_SECTIONS:
        new, before = chosen[name], old_items[name]
        if new == before:
            continue
        if all(item in new for item in before):
            ops[name] = {"op": "APPEND", "items": [i for i in new if i not in before]}
        else:
            ops[name] = {"op": "UPDATE", "content": "\n".join(f"- {i}" for i in new)}
    return {"sections": ops}


def summary_units(messages: Sequence[BaseMessage]) -> list[tuple[Any, str]]:
    """What a summariser's prompt covers: SummarizationMiddleware's XML block, or LangMem's messages and
    existing summary."""
    if len(messages) == 1 and "Messages to summarize:" in messages[0].text:  # SummarizationMiddleware
        body = messages[0].text.split("Messages to summarize:", 1)[1]
        return [(None, html.unescape(m)) for m in _SM_MESSAGES.findall(body)]
    *folded, ask = messages  # LangMem: the messages, then the instruction (with the summary so far)
    existing = _LANGMEM_EXISTING.match(ask.text)
    return ([(None, existing.group(1))] if existing else []) + [(None, m.text) for m in folded]


class CountingModel(BaseChatModel):
    """A fake chat model that counts what it is sent and answers by `answer(messages, tools, tool_choice)`.

    `calls` holds (input tokens, output tokens) per call; `seconds` the time spent answering, so the
    benchmark can leave the fakes' own time out of a layer's.
    """

    answer: Callable[[list[BaseMessage], list[Any], Any], AIMessage]
    calls: list[tuple[int, int]] = Field(default_factory=list)
    parts: list[tuple[int, int]] = Field(default_factory=list)  # (memory message, tool schema) tokens per call
    seconds: float = 0.0
    last_prompt: list[BaseMessage] = Field(default_factory=list)
    prompts_seen: list[list[BaseMessage]] = Field(default_factory=list)  # every call's messages
    last_answer: Any = None
    last_tools: list[str] = Field(default_factory=list)  # the names of the tools bound to the last call
    clock: ClassVar[Callable[[], float]] = time.perf_counter  # what `seconds` is measured with

    @property
    def _llm_type(self) -> str:
        return "workmem-bench-counting"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Bind tools as given; they are counted per call."""
        return self.bind(tools=list(tools), tool_choice=tool_choice, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        start = self.clock()
        tools = list(kwargs.get("tools") or [])
        reply = self.answer(list(messages), tools, kwargs.get("tool_choice"))
        schemas = schema_tokens(tools)
        sent = message_tokens(messages) + schemas
        out = message_tokens([reply])
        self.calls.append((sent, out))
        self.parts.append((message_tokens([m for m in messages if m.text.startswith(MEMORY_PREFIXES)]), schemas))
        self.last_prompt = list(messages)
        self.last_tools = [tool_name(t) for t in tools]
        self.prompts_seen.append(self.last_prompt)
        self.last_answer = reply
        self.seconds += self.clock() - start
        return ChatResult(generations=[ChatGeneration(message=reply)])


def tool_name(tool: Any) -> str:
    """The name of a bound tool: a tool object, or its OpenAI or plain dict form."""
    if isinstance(tool, dict):
        return str(tool.get("function", tool).get("name", ""))
    return str(getattr(tool, "name", ""))


def fixed_reply(tokens: int = 60) -> str:
    """A reply of exactly `tokens` cl100k tokens that carries no informative sentence."""
    words = ("Understood. I will look into this, work through it step by step, run the checks, and "
             "report back on what changed and what is still open once everything is done and reviewed "
             "carefully with the rest of the work that is pending here and there and everywhere else too "
             "so that nothing is missed along the way and all of it is clear. ").split() * 3
    text = ""
    for word in words:
        candidate = f"{text} {word}".strip()
        if count_tokens(candidate) > tokens:
            break
        text = candidate
    while count_tokens(text) < tokens:
        text += " ok"
    return text


def agent_model(reply: str) -> CountingModel:
    """The agent fake: the fixed reply, whatever it is sent."""
    return CountingModel(answer=lambda messages, tools, choice: AIMessage(content=reply))


def summary_model() -> CountingModel:
    """The extractor as a summariser (SummarizationMiddleware, LangMem): selected sentences as text."""
    return CountingModel(answer=lambda messages, tools, choice: AIMessage(
        content="\n".join(text for _, text in select(summary_units(messages)))))


def _tool_answer(messages: list[BaseMessage], tools: list[Any], choice: Any) -> AIMessage:
    name = choice if isinstance(choice, str) else (tools[0].get("function") or tools[0])["name"]
    prompt = "\n\n".join(m.text for m in messages if m.type != "system")
    args = memory_ops(prompt, name)
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call_bench", "type": "tool_call"}])


def commit_model() -> CountingModel:
    """The extractor as workmem's commit model: the forced memory tool call."""
    return CountingModel(answer=_tool_answer)
