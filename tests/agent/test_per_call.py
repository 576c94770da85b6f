"""The per-call path's economy: one view per model call, each new message normalised once on its way to storage,
the input limit computed once; per-session state bounded however many sessions pass, without forgetting a learned
input limit or an engaged breaker."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

import workmem.graphs.agent.view as view_module
import workmem.state.messages as messages_module
from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.context.call_state import SESSIONS_REMEMBERED, BoundedSessions, SessionCalls, call_states
from workmem.graphs.context.decision import Counters
from workmem.graphs.context.session_memory import MemoryCache
from workmem.graphs.engine import WorkingMemoryEngine


@tool
def look(path: str) -> str:
    """Look at a file."""
    return f"contents of {path}"


def tool_steps(n: int) -> list[AIMessage]:
    """n tool calls, then an answer."""
    calls = [AIMessage(content="", tool_calls=[{"name": "look", "args": {"path": f"f{i}.py"}, "id": f"c{i}",
                                                "type": "tool_call"}]) for i in range(n)]
    return [*calls, AIMessage(content="Done.")]


@pytest.fixture
def spies(monkeypatch):
    counts: dict[str, Any] = {"views": 0, "prepared": [], "limits": 0}
    real_init = view_module.StateView.__init__

    def counting_init(self, *args, **kwargs):
        counts["views"] += 1
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(view_module.StateView, "__init__", counting_init)
    for module in (view_module, messages_module):
        real = module.prepare_message

        def counting(message, *args, _real=real, **kwargs):
            counts["prepared"].append(message)
            return _real(message, *args, **kwargs)

        monkeypatch.setattr(module, "prepare_message", counting)
    real_limit = WorkingMemoryMiddleware._input_limit

    def counting_limit(self, *args, **kwargs):
        counts["limits"] += 1
        return real_limit(self, *args, **kwargs)

    monkeypatch.setattr(WorkingMemoryMiddleware, "_input_limit", counting_limit)
    return counts


def test_one_view_per_call_and_each_new_message_normalised_once(root, spies):
    steps = 4
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync")  # the default trigger: no commit here
        agent = create_agent(scripted(*tool_steps(steps)), tools=[look], middleware=[middleware],
                             checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage(content="Read the files.", id="h1")]},
                     {"configurable": {"thread_id": "t"}})
        calls = steps + 1
        assert engine.session_info("t")["commit_count"] == 0, "the premise: no commit"
        assert spies["views"] == calls + 1, "one view per model call, one for the end of the run"
        assert spies["limits"] == calls, "the input limit computed once per call"
        prepared_ids = [getattr(m, "id", None) for m in spies["prepared"]]
        stored = [m["meta"]["lc_id"] for m in engine.live_messages("t")]
        assert len(stored) == 1 + 2 * steps + 1
        assert sorted(prepared_ids) == sorted(stored), "each message normalised exactly once"


def test_a_call_after_a_commit_builds_its_view_again(root, spies):
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 2)) as engine:
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync", trigger=("messages", 4))
        agent = create_agent(scripted(*tool_steps(3)), tools=[look], middleware=[middleware],
                             checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage(content="Read the files.", id="h1")]},
                     {"configurable": {"thread_id": "t"}})
        commits = engine.session_info("t")["commit_count"]
        assert commits >= 1, "the premise: a commit ran"
        assert spies["views"] == 4 + commits + 1, "one view per call, one more after each commit, one at the end"


def test_per_session_call_state_is_bounded_and_keeps_what_must_not_be_forgotten():
    registry = call_states()
    registry.of("taught").input_limit = 5_000
    registry.of("breaker").counters = Counters(ineffective=3, breaker_at=1_000)
    registry.of("owed").background = "task-1"
    for i in range(10_000):
        registry.of(f"s{i}")
    assert len(registry) <= SESSIONS_REMEMBERED + 3
    assert registry.peek("taught").input_limit == 5_000, "a learned input limit is never evicted"
    assert registry.peek("breaker").counters.breaker_at == 1_000, "an engaged breaker is never evicted"
    assert registry.peek("owed").background == "task-1", "a commit owed to the next call is never evicted"
    assert registry.peek("s0") is None and registry.peek("s9999") is not None, "the oldest at rest went first"


def test_a_bounded_registry_keeps_at_most_its_size_of_evictable_records():
    registry: BoundedSessions[SessionCalls] = BoundedSessions(SessionCalls, size=8)
    for i in range(10_000):
        registry.of(f"s{i}")
        assert len(registry) <= 8
    memories = MemoryCache(size=8)
    for i in range(10_000):
        memories.get(f"s{i}", {"created_at": "now", "last_archive": None}, lambda: None)
    assert len(memories._items) == 8


def test_the_middleware_caches_stay_bounded_over_many_sessions(root, monkeypatch):
    import workmem.graphs.agent.session_cache as session_cache

    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync")
        monkeypatch.setattr(middleware, "_caches", BoundedSessions(session_cache.SessionCache, size=4))
        agent = create_agent(scripted(*(f"Answer {i}." for i in range(20))), middleware=[middleware],
                             checkpointer=InMemorySaver())
        for i in range(20):
            agent.invoke({"messages": [HumanMessage(content=f"Question {i}?")]},
                         {"configurable": {"thread_id": f"t{i}"}})
        assert len(middleware._caches) <= 4
        assert [m["parts"][0]["text"] for m in engine.live_messages("t19")] == ["Question 19?", "Answer 19."]


def test_a_learned_input_limit_survives_many_other_sessions(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.call_state("taught").input_limit = 3_000
        for i in range(SESSIONS_REMEMBERED * 2):
            engine.call_state(f"other{i}")
        middleware = WorkingMemoryMiddleware(engine)
        request = type("Request", (), {"model": None})()
        assert middleware._input_limit(request, engine, engine.call_state("taught")) == 3_000


def test_tool_results_are_stored_once_each(root):
    """The store path takes the view's normalised form: a tool result's stored record equals what a plain
    `add_messages` of the same message stores."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(scripted(*tool_steps(1)), tools=[look], middleware=[WorkingMemoryMiddleware(engine)],
                             checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage(content="Read.", id="h1")]}, {"configurable": {"thread_id": "a"}})
        via_agent = [(m["role"], m["parts"], m["tokens"], m["meta"]) for m in engine.live_messages("a")]
        result = next(m for m in agent.get_state({"configurable": {"thread_id": "a"}}).values["messages"]
                      if isinstance(m, ToolMessage))
        engine.add_messages("b", [result])
        direct = engine.live_messages("b")[0]
        assert (direct["role"], direct["parts"], direct["tokens"], direct["meta"]) in via_agent


@tool
def read_part(path: str) -> str:
    """Read a file."""
    return "\n".join(f"{path} line {i}: value = {i * 7}" for i in range(40))


@pytest.mark.parametrize("trigger", [("fraction", 0.9), ("messages", 40)])
def test_a_trigger_above_the_usable_window_commits_before_the_call_overflows(root, trigger):
    """At a 10 000-token limit the reply keeps 1 500: a trigger at 9 000 tokens (or one counting only messages)
    lies above what a call may carry. The run must commit before a call passes 8 500, not stop on it."""
    steps = [AIMessage(content=f"reading part {i}", tool_calls=[
        {"name": "read_part", "args": {"path": f"src/mod{i}.py"}, "id": f"c{i}", "type": "tool_call"}])
        for i in range(30)]
    model = scripted(*steps, AIMessage(content="done"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, session_id="s", commit_mode="sync", token_budget=10_000,
                                             trigger=trigger)
        agent = create_agent(model, tools=[read_part], middleware=[middleware], checkpointer=InMemorySaver())
        state = agent.invoke({"messages": [HumanMessage("read all thirty modules")]},
                             {"configurable": {"thread_id": "t"}})
        assert state["messages"][-1].content == "done"
        assert engine.session_info("s")["commit_count"] >= 1
        stored = list(engine.iter_messages("s"))
        assert len(stored) == 62 and len({m["seq"] for m in stored}) == 62, "every message stored once"
        assert [m["parts"][0].get("text") for m in stored if m["role"] == "user"] == ["read all thirty modules"]


def test_a_trigger_above_the_usable_window_acts_at_that_line(root):
    """A 1M-token trigger on a 4 000-token model commits exactly as a trigger at the 3 400 tokens a call may carry:
    no call can reach it, so the trigger's sizes (synopses, the low-water mark, the floor) come from that line."""
    def commits(trigger: tuple[str, int], name: str) -> tuple[int, int]:
        steps = [AIMessage(content=f"reading part {i}", tool_calls=[
            {"name": "read_part", "args": {"path": f"src/mod{i}.py"}, "id": f"c{i}", "type": "tool_call"}])
            for i in range(30)]
        with WorkingMemoryEngine(root / name, durable=False) as engine:
            middleware = WorkingMemoryMiddleware(engine, session_id="s", commit_mode="sync", token_budget=4_000,
                                                 trigger=trigger)
            agent = create_agent(scripted(*steps, AIMessage(content="done")), tools=[read_part],
                                 middleware=[middleware], checkpointer=InMemorySaver())
            agent.invoke({"messages": [HumanMessage("read all thirty modules")]}, {"configurable": {"thread_id": "t"}})
            return engine.session_info("s")["commit_count"], len(list(engine.iter_messages("s")))

    assert commits(("tokens", 1_000_000), "far") == commits(("tokens", 3_400), "at")
