"""What stays pinned after a commit obeys the same lines as the live tail: a pinned tool's large result is shown as its
first lines (as a live one is shown as its synopsis), a task sent as content blocks is held to `pinned_tokens` as a
string is, nothing pinned crowds the run out of the window or makes every call commit — and an agent whose system
prompt alone fills the window is told so by name."""

from __future__ import annotations

import base64

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.call import within_window
from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.tokens import count_tokens

BUDGET = 8_000
TODO_LINES = 900


@tool
def write_todos(todos: str) -> str:
    """Write the todo list."""
    return "todo list:\n" + "\n".join(f"- [ ] item {i}: {todos} then check module_{i}" for i in range(TODO_LINES))


@tool
def look(x: str) -> str:
    """Look at x."""
    return f"looked {x} " + "data " * 300


def calls_of(name: str, n: int, first: int = 0) -> list[AIMessage]:
    return [AIMessage("", id=f"a{i}", tool_calls=[{"name": name, "args": {"x": str(i)}, "id": f"c{i}",
                                                   "type": "tool_call"}]) for i in range(first, first + n)]


def sent_tokens(prompt: list) -> int:
    return sum(count_tokens(m.text) for m in prompt)


def stored_once(engine: WorkingMemoryEngine, session: str) -> list[int]:
    seqs = [m["seq"] for a in engine.list_archives(session) for m in engine.archive_messages(session, a["archive_id"])]
    return sorted(seqs + [m["seq"] for m in engine.live_messages(session)])


def text_of(message) -> str:
    """A message's text, whatever its text blocks are called (`m.text` reads only `text` blocks)."""
    if isinstance(message.content, str):
        return message.content
    return "".join(b.get("text", "") for b in message.content if isinstance(b, dict))


def images_in(prompt: list) -> int:
    return sum(1 for m in prompt if isinstance(m.content, list)
               for b in m.content if isinstance(b, dict) and b.get("type") == "image_url")


@pytest.mark.parametrize("mode", ["sync", "background"])
def test_a_large_pinned_tool_result_is_shown_as_its_first_lines_and_the_thread_runs_on(root, mode):
    todo = AIMessage("", id="w", tool_calls=[{"name": "write_todos", "args": {"todos": "fix"}, "id": "w0",
                                              "type": "tool_call"}])
    model = scripted(todo, *calls_of("look", 24), *(AIMessage(f"reply {i}", id=f"r{i}") for i in range(3)))
    whole = write_todos.invoke({"todos": "fix"})
    assert count_tokens(whole) > BUDGET, "the premise: the todo list alone is over the window"
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[look, write_todos], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=BUDGET, commit_mode=mode)])
        config = {"configurable": {"thread_id": "t"}}
        for n, text in enumerate(["go", "hello again", "anything?"]):  # the thread answers every run after it
            agent.invoke({"messages": [HumanMessage(text, id=f"u{n}")]}, config)
        engine.wait()
        assert engine.session_info("t")["commit_count"] >= 1, "the premise: a commit archived the todo call"
        assert all(sent_tokens(p) <= BUDGET for p in model.prompts)
        pinned = [r for p in model.prompts[-3:] for r in p if isinstance(r, ToolMessage) and r.tool_call_id == "w0"]
        assert pinned, "the newest todo list stays in view"
        first_lines = whole.split("\n")[:2]
        assert all(r.text.split("\n")[:2] == first_lines and count_tokens(r.text) < 1_000 for r in pinned)
        fed = 2 + 24 * 2 + 3 * 2
        assert stored_once(engine, "t") == list(range(1, fed + 1)), "every message stored once"


@pytest.mark.parametrize("as_blocks", [None, "text", "input_text"])
def test_a_task_sent_as_text_blocks_is_held_to_pinned_tokens_as_a_string_is(root, as_blocks):
    task = "\n".join(f"Requirement {i}: the exporter must handle case {i} correctly." for i in range(120))
    content = [{"type": as_blocks, "text": task}] if as_blocks else task
    model = scripted(*calls_of("look", 16), AIMessage("done", id="fin"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[look], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=BUDGET, commit_mode="sync")])
        agent.invoke({"messages": [HumanMessage(content, id="u0")]}, {"configurable": {"thread_id": "t"}})
        assert engine.session_info("t")["commit_count"] >= 1, "the premise: a commit archived the task"
        shown = [next(count_tokens(text_of(m)) for m in p if m.id == "u0") for p in model.prompts]
        assert shown[0] == count_tokens(task) and min(shown) <= 100 + 20, f"pinned_tokens=100 holds: {shown}"
        assert stored_once(engine, "t") == list(range(1, 1 + 16 * 2 + 2))


def test_a_task_over_the_window_sent_as_blocks_runs_on(root):
    task = [{"type": "text", "text": "Please refactor this module. " + "context line. " * 4_000}]
    model = scripted(*calls_of("look", 10), AIMessage("done", id="fin"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[look], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=BUDGET, commit_mode="sync")])
        agent.invoke({"messages": [HumanMessage(task, id="u0")]}, {"configurable": {"thread_id": "t"}})
        assert len(model.prompts) == 11 and all(sent_tokens(p) <= BUDGET for p in model.prompts)
        assert all(any(m.id == "u0" for m in p) for p in model.prompts), "the task stays in view, shortened"
        assert stored_once(engine, "t") == list(range(1, 1 + 10 * 2 + 2))


@pytest.mark.parametrize("text_type", ["text", "input_text"])
def test_a_task_with_many_images_keeps_its_first_image_pinned_and_runs_on(root, text_type):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                       + base64.b64encode(b"\x89PNG" + bytes(range(256))).decode()}}
    task = [{"type": text_type, "text": "Compare these screenshots."}, *(dict(image) for _ in range(6))]
    model = scripted(*calls_of("look", 14), AIMessage("done", id="fin"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[look], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=BUDGET, commit_mode="sync")])
        agent.invoke({"messages": [HumanMessage(task, id="u0")]}, {"configurable": {"thread_id": "t"}})
        assert engine.session_info("t")["commit_count"] >= 1
        assert len(model.prompts) == 15 and images_in(model.prompts[-1]) == 1
        pinned = next(m for m in model.prompts[-1] if m.id == "u0")
        assert pinned.content[0] == {"type": text_type, "text": "Compare these screenshots."}, "its text, whole"


def test_a_task_pinned_whole_over_the_window_does_not_make_every_call_commit(root):
    task = "Fix it.\n" + "\n".join(f"constraint {i}: keep api_{i} stable" for i in range(3_000))
    model = scripted(*calls_of("look", 15), AIMessage("done", id="fin"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, token_budget=BUDGET, commit_mode="sync", pinned_tokens=None)
        agent = create_agent(model, tools=[look], checkpointer=InMemorySaver(), middleware=[middleware])
        agent.invoke({"messages": [HumanMessage(task, id="u0")]}, {"configurable": {"thread_id": "t"}})
        assert count_tokens(task) > BUDGET, "the premise"
        assert 1 <= engine.session_info("t")["commit_count"] <= 3, "the pinned task is measured as it is shown"
        assert all(sent_tokens(p) <= BUDGET for p in model.prompts)


def test_a_system_prompt_that_fills_the_window_is_refused_by_name_and_the_run_stays_stored(root):
    model = scripted(AIMessage("hi", id="r"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[], system_prompt="rule " * 9_000, checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=BUDGET)])
        with pytest.raises(InvalidInput) as err:
            agent.invoke({"messages": [HumanMessage("go", id="u0")]}, {"configurable": {"thread_id": "t"}})
        assert err.value.field == "system_prompt" and "8,000" in str(err.value)
        assert not model.prompts, "no call went out"
        assert [m["seq"] for m in engine.live_messages("t")] == [1], "the user's message is stored, once"


def test_a_pinned_call_is_never_shortened_only_its_result():
    args = {"todos": "step " * 5_000}
    todo = {"name": "write_todos", "args": args, "id": "w0", "type": "tool_call"}
    call = {"role": "assistant", "parts": [], "tokens": 5_005, "lc": AIMessage("", id="w", tool_calls=[todo])}
    text = write_todos.invoke({"todos": "fix"})
    result = {"role": "tool", "parts": [], "tokens": count_tokens(text), "lc": ToolMessage(text, tool_call_id="w0")}
    shown_call, shown_result = within_window([call, result], BUDGET)
    assert shown_call is call, "the call's arguments are the call"
    assert shown_result["lc"].tool_call_id == "w0" and shown_result["tokens"] < result["tokens"]
    assert text.startswith(shown_result["lc"].content.rsplit("\n", 1)[0])
