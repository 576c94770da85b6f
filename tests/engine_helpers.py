"""Shared helpers of the engine / agent tests: a commit model held open by an Event, message shapes, pairing."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool as lc_tool

import workmem.graphs.commit
from workmem.nodes.extractive.model import ExtractiveChatModel

GATE_TIMEOUT_S = 20.0


class GatedModel(ExtractiveChatModel):
    """The extractive commit model, but every call waits for `gate` (set `entered` first).

    If the gate is never opened the call goes on after GATE_TIMEOUT_S and records `timed_out`, so a
    test whose code under test wrongly waits for the commit fails instead of hanging.
    """

    gate: Any = None
    entered: Any = None
    timed_out: bool = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        self.entered.set()
        if not self.gate.wait(GATE_TIMEOUT_S):
            self.timed_out = True
        return super()._generate(messages, stop, run_manager, **kwargs)


def shape(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """A compact, exact description of a message list: role, content and the tool-call wiring."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append(("system", m.content, m.additional_kwargs.get("workmem")))
        elif isinstance(m, HumanMessage):
            out.append(("human", m.content, m.additional_kwargs.get("workmem")))
        elif isinstance(m, AIMessage):
            out.append(("ai", m.content, [(c["id"], c["name"], c["args"]) for c in m.tool_calls]))
        elif isinstance(m, ToolMessage):
            out.append(("tool", m.content, m.tool_call_id))
        else:
            raise AssertionError(f"unexpected message type {type(m).__name__}")
    return out


def pairing_problems(messages: list[BaseMessage]) -> list[str]:
    """Every tool result must follow its call, and every call must be answered before the next non-tool message."""
    problems: list[str] = []
    open_calls: set[str] = set()
    seen_calls: set[str] = set()
    for i, m in enumerate(messages):
        if isinstance(m, ToolMessage):
            if m.tool_call_id not in seen_calls:
                problems.append(f"#{i}: tool result {m.tool_call_id} has no call before it")
            open_calls.discard(m.tool_call_id)
            continue
        if open_calls:
            problems.append(f"#{i}: calls {sorted(open_calls)} were never answered")
            open_calls = set()
        if isinstance(m, AIMessage):
            ids = {c["id"] for c in m.tool_calls}
            open_calls |= ids
            seen_calls |= ids
    return problems


def stored_pairing_problems(messages: list[dict[str, Any]]) -> list[str]:
    """The same check over stored workmem messages (parts)."""
    seen: set[str] = set()
    problems = []
    for m in messages:
        for p in m["parts"]:
            if p["type"] == "tool_call":
                seen.add(p["id"])
            elif p["type"] == "tool_result" and p["tool_call_id"] not in seen:
                problems.append(f"seq {m['seq']}: result {p['tool_call_id']} without its call")
    return problems


def user(text: str) -> dict[str, Any]:
    """An OpenAI-style user message."""
    return {"role": "user", "content": text}


def assistant(text: str = "", calls: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    """An OpenAI-style assistant message; `calls` are (id, name, JSON arguments)."""
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                             for i, n, a in calls]
    return msg


def tool(call_id: str, content: str, name: str = "") -> dict[str, Any]:
    """An OpenAI-style tool result."""
    return {"role": "tool", "tool_call_id": call_id, "content": content, "name": name or None}


def tool_turn(question: str, name: str, result: str, call_id: str = "c1") -> list[dict[str, Any]]:
    """A user question, the assistant's one call of tool `name`, and its result."""
    return [user(question), assistant(calls=[(call_id, name, "{}")]), tool(call_id, result, name)]


def talk(turns: int, size: int = 40, tag: str = "") -> list[dict[str, Any]]:
    """`turns` user/assistant pairs of about `size` words each ("Question 0: topic0 …" / "Answer 0: detail0 …");
    a `tag` marks every question and its words ("db question 0: db0 …")."""
    ask, answer, word = (f"{tag} question", f"{tag} answer", tag) if tag else ("Question", "Answer", "topic")
    out = []
    for t in range(turns):
        out.append(user(f"{ask} {t}: " + " ".join(f"{word}{t}" for _ in range(size))))
        out.append(assistant(f"{answer} {t}: " + " ".join(f"detail{t}" for _ in range(size))))
    return out


def stored(engine: Any, session: str) -> list[dict[str, Any]]:
    """Every stored message of the session, archived and live, in seq order."""
    total = engine.session_info(session)["total_message_count"]
    return engine.storage.sessions.messages_in_range(session, 1, total)


def prompt_texts(model: Any, index: int = -1) -> list[str]:
    """Texts of one recorded prompt after its system message (workmem's note, once something is out of view)."""
    return [m.text for m in after_system(model.prompts[index])]


def after_system(prompt: list[Any]) -> list[Any]:
    """A prompt's messages after its system message, if it has one."""
    return prompt[1:] if prompt and prompt[0].type == "system" else list(prompt)


def thread(name: str) -> dict[str, Any]:
    """A run config bound to one LangGraph thread."""
    return {"configurable": {"thread_id": name}}


def ask(text: str) -> dict[str, Any]:
    """An agent input holding one user message."""
    return {"messages": [HumanMessage(content=text)]}


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each stored message (a tool call shown as its name, a result as its content)."""
    out = []
    for m in messages:
        part = m["parts"][0]
        out.append(part.get("text") or part.get("content") or part.get("name"))
    return out


def call(tool_name: str, args: dict[str, Any], call_id: str = "call_0", *, msg_id: str | None = None) -> AIMessage:
    """An assistant message making one tool call (`msg_id`: its LangChain id)."""
    return AIMessage(content="", id=msg_id,
                     tool_calls=[{"name": tool_name, "args": args, "id": call_id, "type": "tool_call"}])


@lc_tool
def read_file(path: str) -> str:
    """Read a project file."""
    return f"{path}: code {path.upper()}"


class FailingPersist:
    """`persist` of the commit graph failing its first `times` calls (patched in before a runner compiles)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
        self.times, self.calls = times, 0
        real = workmem.graphs.commit.persist

        @functools.wraps(real)  # keeps the signature LangGraph reads to inject `runtime`
        def persist(state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls <= self.times:
                raise RuntimeError("persist failed on purpose")
            return real(state, *args, **kwargs)

        monkeypatch.setattr(workmem.graphs.commit, "persist", persist)
