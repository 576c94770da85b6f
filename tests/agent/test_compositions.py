"""workmem with the middleware LangChain users already run: `TodoListMiddleware` (its newest list survives every
commit), `AnthropicPromptCachingMiddleware` (the breakpoint on a prefix that stays stable between commits) and
Anthropic thinking blocks with signatures (they reach `ChatAnthropic`'s request payload in order after a commit).

No request leaves the machine: an innermost middleware answers each model call with the script's next message and
records the request it was given (`ChatAnthropic` is only asked for its payload, offline).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, TodoListMiddleware
from langchain.agents.middleware.types import ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine

anthropic = pytest.importorskip("langchain_anthropic")


class Script(AgentMiddleware):
    """The innermost middleware: answers each model call with the next scripted message, records the request."""

    def __init__(self, replies: list[AIMessage]) -> None:
        super().__init__()
        self.replies, self.requests = iter(replies), []

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Record the request; answer without calling the model."""
        self.requests.append(request)
        return ModelResponse(result=[next(self.replies)])


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"# {path}\n" + "\n".join(f"line {i}: value_{i} = compute({i})" for i in range(120))


def call(name: str, args: dict[str, Any], i: int, content: Any = "") -> AIMessage:
    return AIMessage(content=content, tool_calls=[{"name": name, "args": args, "id": f"c{i}", "type": "tool_call"}])


def model() -> Any:
    return anthropic.ChatAnthropic(model="claude-sonnet-4-5", api_key="offline-test-key", max_retries=0)


TODOS = [{"content": "Find the slow query", "status": "in_progress"}, {"content": "Add an index", "status": "pending"}]


def test_the_newest_todo_list_stays_in_view_after_commits(root):
    replies = [call("write_todos", {"todos": TODOS}, 0),
               *(call("read_file", {"path": f"app/db_{i}.py"}, i + 1) for i in range(8)),
               AIMessage(content="Done.")]
    script = Script(replies)
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 2)) as engine:
        workmem = WorkingMemoryMiddleware(engine, trigger=("tokens", 3_000), commit_mode="sync")
        agent = create_agent(model(), tools=[read_file], checkpointer=InMemorySaver(),
                             middleware=[workmem, TodoListMiddleware(), script])
        agent.invoke({"messages": [HumanMessage("The report page is slow; fix it.", id="task")]},
                     {"configurable": {"thread_id": "todo"}})
        assert engine.session_info("todo")["commit_count"] >= 2, "the premise: commits archived the todo call"
        archived = engine.archive_messages("todo", "archive_001")
        assert any(p.get("name") == "write_todos" for m in archived for p in m["parts"]), "the call is archived"
        for request in script.requests[1:]:
            calls = [c for m in request.messages for c in getattr(m, "tool_calls", []) if c["name"] == "write_todos"]
            results = [m for m in request.messages if isinstance(m, ToolMessage) and m.tool_call_id == "c0"]
            assert calls and calls[-1]["args"]["todos"] == TODOS and len(results) == 1, "the list stays in view"
        state = agent.get_state({"configurable": {"thread_id": "todo"}}).values
        assert state["todos"] == TODOS


def test_the_cache_breakpoint_sits_on_a_prefix_that_stays_stable_between_commits(root):
    from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware

    replies = [*(call("read_file", {"path": f"src/mod_{i}.py"}, i) for i in range(10)), AIMessage(content="Done.")]
    script = Script(replies)
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 2)) as engine:
        workmem = WorkingMemoryMiddleware(engine, trigger=("tokens", 4_000), commit_mode="sync",
                                          memory_message="system")
        agent = create_agent(model(), tools=[read_file], checkpointer=InMemorySaver(),
                             middleware=[workmem, AnthropicPromptCachingMiddleware(ttl="5m"), script])
        agent.invoke({"messages": [HumanMessage("Audit the modules.", id="task")]},
                     {"configurable": {"thread_id": "cache"}})
        commits = engine.session_info("cache")["commit_count"]
        assert commits >= 1, "the premise: a commit ran"
        systems = [r.system_message for r in script.requests]
        assert systems[0] is None and systems[-1] is not None, "workmem's note (and memory) join at the first commit"
        for request, system in zip(script.requests, systems, strict=True):
            assert request.model_settings.get("cache_control") == {"type": "ephemeral", "ttl": "5m"}
            if system is not None:
                assert isinstance(system.content, list) and system.content[-1].get("cache_control"), "breakpoint"
        texts = [s.text if s is not None else None for s in systems]
        stable = 0
        for i, (before, after) in enumerate(zip(script.requests, script.requests[1:], strict=False)):
            memory_changed, steps_archived = texts[i] != texts[i + 1], len(after.messages) < len(before.messages)
            if memory_changed or steps_archived:
                continue  # a commit ran: a new prefix starts here
            previous = [(type(m), m.text) for m in before.messages]
            assert [(type(m), m.text) for m in after.messages[:len(previous)]] == previous, "append-only prefix"
            stable += 1
        assert stable >= len(script.requests) - 1 - commits


def test_thinking_blocks_with_signatures_reach_the_anthropic_payload_in_order_after_a_commit(root):
    def thinking_call(i: int) -> AIMessage:
        content = [{"type": "thinking", "thinking": f"Plan {i}: read the next file.", "signature": f"sig-{i}"},
                   {"type": "text", "text": f"Reading file {i}."}]
        return call("read_file", {"path": f"lib/part_{i}.py"}, i, content)

    script = Script([*(thinking_call(i) for i in range(8)), AIMessage(content="Done.")])
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 4)) as engine:
        workmem = WorkingMemoryMiddleware(engine, trigger=("tokens", 3_000), commit_mode="sync")
        agent = create_agent(model(), tools=[read_file], checkpointer=InMemorySaver(), middleware=[workmem, script])
        agent.invoke({"messages": [HumanMessage("Read the library.", id="task")]},
                     {"configurable": {"thread_id": "think"}})
        assert engine.session_info("think")["commit_count"] >= 1, "the premise: a commit ran"
        last = script.requests[-1]
        payload = last.model._get_request_payload([last.system_message or SystemMessage("x"), *last.messages])
        assistant = [m for m in payload["messages"] if m["role"] == "assistant"]
        assert assistant, "the kept tail holds assistant steps"
        for message in assistant:
            kinds = [block["type"] for block in message["content"]]
            assert kinds == ["thinking", "text", "tool_use"], kinds
            thinking = message["content"][0]
            number = thinking["thinking"].split()[1].rstrip(":")
            assert thinking["signature"] == f"sig-{number}", "each block keeps its own signature"
