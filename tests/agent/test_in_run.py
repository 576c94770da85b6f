"""Context managed inside a run, at every model call.

A single-task coding run — one `invoke`, then many model → tool → model steps with large tool outputs — is the
case the first builds missed: they stored and committed only in `after_agent`, so the whole run went out on
every call. Here each call stores the run's messages, commits before the call that would cross the trigger,
keeps the task's user message in view, never loops, and recovers from a provider's context-length error.
"""

from __future__ import annotations

import asyncio
import errno
from typing import Any

import pytest
from engine_helpers import after_system
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.context.injected import SUMMARY_MARKER
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import ContextOverflow, InvalidInput, StorageError
from workmem.state.tokens import count_tokens

TASK = "Fix the flaky export job: find why jobs/export.py times out and patch it."
STEPS = 14
TRIGGER = 6_000


def output(i: int) -> str:
    """A tool output of ~600 tokens carrying one fact worth finding later."""
    body = " ".join(f"line{i}_{j} ok" for j in range(180))
    return f"read_file jobs/part_{i}.py -> marker M{i:03d}\n{body}"


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return output(int(path.split("_")[1].split(".")[0]))


def tool_steps(n: int = STEPS) -> list[Any]:
    steps: list[Any] = [AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": f"jobs/part_{i}.py"},
                                                           "id": f"call_{i}", "type": "tool_call"}])
                        for i in range(n)]
    return [*steps, AIMessage(content="Patched jobs/export.py: the timeout was the retry loop.")]


def texts(prompt: list[Any]) -> list[str]:
    return [m.text for m in after_system(prompt)]


def lead(prompt: list[Any]) -> str:
    """The text of a prompt's first message after its system message: the memory, once a commit ran."""
    return after_system(prompt)[0].text


def prompt_tokens(prompt: list[Any]) -> int:
    return sum(count_tokens(m.text) for m in prompt)


def single_task(engine: WorkingMemoryEngine, model: Any, **settings: Any) -> tuple[Any, dict[str, Any]]:
    # the tool outputs are shown whole (no synopsis): these tests are about when commits happen
    settings.setdefault("offload_tokens", 10_000)
    middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", TRIGGER), **settings)
    agent = create_agent(model, tools=[read_file], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "task"}}
    return agent.invoke({"messages": [HumanMessage(TASK)]}, config), config


def test_a_single_task_run_commits_before_the_call_that_would_cross_the_trigger(root):
    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        state, _ = single_task(engine, model, commit_mode="sync")
        assert state["messages"][-1].text.startswith("Patched jobs/export.py")
        assert engine.session_info("task")["commit_count"] >= 1, "commits inside the one invoke"
        sizes = [prompt_tokens(p) for p in model.prompts]
        assert max(sizes) < TRIGGER, f"no call reached the trigger: {sizes}"
        first = next(i for i, p in enumerate(model.prompts) if lead(p).startswith(SUMMARY_MARKER))
        assert 0 < first < len(model.prompts) - 1
        for prompt in model.prompts[first:]:  # the task stays in view, right after the working memory
            assert lead(prompt).startswith(SUMMARY_MARKER) and texts(prompt)[1] == TASK
        assert engine.session_info("task")["total_message_count"] == 2 * STEPS + 2, "every message stored once"
        assert engine.archive_search("task", "M001")[0]["content"].startswith("read_file jobs/part_1.py")


def test_the_call_after_a_commit_carries_at_most_the_low_water_share(root):
    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        single_task(engine, model, commit_mode="sync", low_water=0.4)
        after = [prompt_tokens(p) for i, p in enumerate(model.prompts)
                 if lead(p).startswith(SUMMARY_MARKER) and not lead(model.prompts[i - 1]) == lead(p)]
        assert after and all(size <= 0.4 * TRIGGER for size in after), after


def test_a_background_commit_lands_at_a_later_call_and_the_state_stays_bounded(root):
    waits: list[int] = []

    @tool
    def slow_read(path: str) -> str:
        """Read a file (the test waits here for background commits, so their landing is deterministic)."""
        engine.wait()
        waits.append(1)
        return output(int(path.split("_")[1].split(".")[0]))

    steps = [AIMessage(content="", tool_calls=[{"name": "slow_read", "args": {"path": f"jobs/part_{i}.py"},
                                                "id": f"call_{i}", "type": "tool_call"}]) for i in range(STEPS)]
    model = scripted(*steps, AIMessage(content="Done."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[slow_read], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", TRIGGER),
                                                                 offload_tokens=10_000)])
        config = {"configurable": {"thread_id": "task"}}
        state = agent.invoke({"messages": [HumanMessage(TASK)]}, config)
        engine.wait()
        assert engine.session_info("task")["commit_count"] >= 1
        assert any(lead(p).startswith(SUMMARY_MARKER) for p in model.prompts), "a later call used the new WM"
        assert len(state["messages"]) < 2 * STEPS + 2, "archived messages left the state (trim_state default)"
        assert all(TASK in [m.text for m in p] for p in model.prompts), "the running turn's user message stays"


def test_over_the_input_limit_a_background_commit_is_waited_for(root):
    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        single_task(engine, model, token_budget=TRIGGER + 800)  # background mode, a small window
        sizes = [prompt_tokens(p) for p in model.prompts]
        assert max(sizes) <= TRIGGER + 800, sizes


def test_between_commits_each_call_begins_with_the_previous_calls_messages(root):
    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        single_task(engine, model, commit_mode="sync")
        pairs = 0
        for before, after in zip(model.prompts, model.prompts[1:], strict=False):
            if lead(before) != lead(after) and lead(after).startswith(SUMMARY_MARKER):
                continue  # a commit changed the prefix
            whole = [m.text for m in before]  # the system message included: workmem's note joins with the memory
            assert [m.text for m in after][:len(whole)] == whole, "append-only between commits"
            pairs += 1
        assert pairs >= STEPS // 2


def test_a_clear_holds_from_the_first_call(root):
    model = scripted("Noted: the launch code is ORCA-7.", "I hold nothing from before.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "c"}}
        agent.invoke({"messages": [HumanMessage("The launch code is ORCA-7.")]}, config)
        agent.update_state(config, {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
        agent.invoke({"messages": [HumanMessage("What do you know?")]}, config)
        assert texts(model.prompts[-1]) == ["What do you know?"], "nothing of the cleared conversation"
        assert engine.hidden("c") == {1, 2}
        assert engine.session_info("c")["total_message_count"] == 4


def test_a_context_overflow_gets_one_commit_and_one_retry(root):
    limit = 4_000
    answers = iter(tool_steps(10))

    def provider(messages: list[Any]) -> Any:
        if prompt_tokens(messages) > limit:
            raise ContextOverflowError("This model's maximum context length is 4000 tokens")
        return next(answers)

    model = scripted(*[provider] * 40)
    with WorkingMemoryEngine(root, durable=False) as engine:  # no profile: the engine assumes 128 k
        state, _ = single_task(engine, model, commit_mode="sync")
        assert state["messages"][-1].text.startswith("Patched")
        assert engine.session_info("task")["commit_count"] >= 1
        last = state.get("workmem_last_call") or {}
        del last
        learned = [p for p in model.prompts if prompt_tokens(p) > limit]
        assert learned, "premise: at least one call overflowed"
        assert all(prompt_tokens(p) <= limit for p in model.prompts[model.prompts.index(learned[-1]) + 1:]), \
            "after the overflow the session's input limit is learned: no call overflows again"


def test_a_second_overflow_raises_context_overflow(root):
    model = scripted(*tool_steps(3)[:-1], *[ContextOverflowError("too long")] * 2)
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(ContextOverflow) as info:
            single_task(engine, model, commit_mode="sync")
        assert info.value.call_tokens > 0 and info.value.limit > 0
        assert engine.session_info("task")["total_message_count"] >= 4, "every message of the run was stored"


def test_three_ineffective_commits_engage_the_breaker(root, caplog):
    """A system prompt larger than the trigger: no commit can bring a call under it. After three ineffective
    commits in a row trigger commits stop (one WARNING), never a commit on every call."""
    big_system = "You are careful. " * 2_000  # ~8 k tokens, over the trigger on every call
    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", TRIGGER), commit_mode="sync")
        agent = create_agent(model, tools=[read_file], middleware=[middleware], system_prompt=big_system,
                             checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage(TASK)]}, {"configurable": {"thread_id": "loop"}})
        commits = engine.session_info("loop")["commit_count"]
        assert 3 <= commits < len(model.prompts) / 2, f"{commits} commits for {len(model.prompts)} calls"
        assert sum("commits in a row left the next call over the trigger" in r.getMessage()
                   for r in caplog.records) == 1, "one WARNING"


def test_events_stream_as_custom_events(root):
    async def run() -> list[dict[str, Any]]:
        model = scripted(*tool_steps())
        with WorkingMemoryEngine(root, durable=False) as engine:
            agent = create_agent(model, tools=[read_file], checkpointer=InMemorySaver(),
                                 middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", TRIGGER),
                                                                     commit_mode="sync", offload_tokens=10_000)])
            seen = []
            async for chunk in agent.astream({"messages": [HumanMessage(TASK)]},
                                             {"configurable": {"thread_id": "ev"}}, stream_mode="custom"):
                seen.append(chunk)
            return seen

    events = [c["workmem"] for c in asyncio.run(run()) if isinstance(c, dict) and "workmem" in c]
    names = [e["event"] for e in events]
    assert "commit_started" in names and "commit_finished" in names
    assert all(e["session_id"] == "ev" for e in events)


@pytest.mark.parametrize("how", ["stream", "astream"])
def test_a_commit_inside_a_run_is_not_streamed_as_the_agents_messages(root, how):
    async def run(agent: Any, config: dict[str, Any]) -> list[Any]:
        return [chunk async for chunk in agent.astream({"messages": [HumanMessage(TASK)]}, config,
                                                       stream_mode="messages", subgraphs=True)]

    model = scripted(*tool_steps())
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_file], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", TRIGGER),
                                                                 commit_mode="sync", offload_tokens=10_000)])
        config = {"configurable": {"thread_id": "streamed"}}
        chunks = (list(agent.stream({"messages": [HumanMessage(TASK)]}, config, stream_mode="messages",
                                    subgraphs=True)) if how == "stream" else asyncio.run(run(agent, config)))
        assert engine.session_info("streamed")["commit_count"] >= 1
    streamed = [message for _namespace, (message, _meta) in chunks]
    called = {call["name"] for m in streamed for call in getattr(m, "tool_calls", None) or ()}
    assert called == {"read_file"}, "only the agent's own calls are streamed, never a commit's memory update"
    assert any(m.text.startswith("Patched jobs/export.py") for m in streamed)


@pytest.mark.parametrize("bad", [0, 1, -0.5, 1.5, True, "0.5"])
def test_a_low_water_outside_the_open_unit_interval_is_refused(root, bad):
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(InvalidInput) as info:
            WorkingMemoryMiddleware(engine, low_water=bad)
        assert info.value.field == "low_water"


class Outage:
    """The engine's storage, refusing every call while `down` (a disk gone read-only, a database restarting)."""

    def __init__(self, sessions: Any) -> None:
        self.sessions, self.down = sessions, False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.sessions, name)
        if not callable(real):
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise StorageError(str(self.sessions.root), OSError(errno.EROFS, "Read-only file system"))
            return real(*args, **kwargs)

        return call


def test_storage_down_inside_a_run_sends_the_last_good_view_and_stores_everything_later(root, caplog):
    with WorkingMemoryEngine(root, durable=False) as engine:
        outage = Outage(engine.storage.sessions)
        engine.storage.sessions = outage

        @tool
        def flaky_read(path: str) -> str:
            """Read a file of the repository."""
            outage.down = path.endswith(("_2.py", "_3.py"))  # down for the calls after these two reads
            return output(int(path.split("_")[1].split(".")[0]))

        steps = [AIMessage(content="", tool_calls=[{"name": "flaky_read", "args": {"path": f"jobs/part_{i}.py"},
                                                    "id": f"call_{i}", "type": "tool_call"}]) for i in range(6)]
        model = scripted(*steps, AIMessage(content="Patched jobs/export.py."))
        middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", 100_000))
        agent = create_agent(model, tools=[flaky_read], middleware=[middleware], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "down"}}
        agent.invoke({"messages": [HumanMessage(TASK)]}, config)
        assert outage.down is False
        # the two calls made while storage was down still went out, with everything the run had so far
        for i in (3, 4):
            assert f"marker M{i - 1:03d}" in "\n".join(m.text for m in model.prompts[i])
            assert texts(model.prompts[i])[:len(texts(model.prompts[2]))] == texts(model.prompts[2])
        # with nothing out of view, workmem's tools went out on no call, the outage's included (as the last good)
        assert [[getattr(t, "name", None) for t in b["tools"]] for b in model.bound] == [["flaky_read"]] * 7
        warnings = [r for r in caplog.records if "storage is unavailable" in r.getMessage()]
        assert len(warnings) == 1, "one WARNING for the outage"
        stored = engine.live_messages("down")
        assert [m["role"] for m in stored] == ["user", *["assistant", "tool"] * 6, "assistant"]
        assert len({m["seq"] for m in stored}) == len(stored) == 14, "every message once, stored after the outage"


def outage_agent(engine: WorkingMemoryEngine, *answers: Any) -> tuple[Any, Outage, Any, Any]:
    outage = Outage(engine.storage.sessions)
    engine.storage.sessions = outage
    model = scripted(*answers)
    middleware = WorkingMemoryMiddleware(engine, trigger=("tokens", 100_000))
    saver = InMemorySaver()
    return create_agent(model, tools=[], middleware=[middleware], checkpointer=saver), outage, model, (middleware,
                                                                                                       saver)


def test_an_outage_at_a_runs_start_or_end_never_fails_the_run_and_loses_nothing(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, outage, model, _ = outage_agent(engine, "one", "two", "three")
        config = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("hello", id="h1")]}, config)
        outage.down = True  # down for the whole second run: before_agent, the call, after_agent
        state = agent.invoke({"messages": [HumanMessage("again", id="h2")]}, config)
        assert state["messages"][-1].text == "two" and "hello" in [m.text for m in model.prompts[1]]
        outage.down = False
        agent.invoke({"messages": [HumanMessage("and now", id="h3")]}, config)
        assert [m["parts"][0]["text"] for m in engine.live_messages("t")] == [
            "hello", "one", "again", "two", "and now", "three"], "stored once each, after the outage"


def test_an_outage_while_the_end_of_a_run_trims_the_state_still_returns_the_answer(root, caplog):
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, _outage, _model, (middleware, _saver) = outage_agent(engine, "one", "two")
        config = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("hello", id="h1")]}, config)

        def storage_gone(*_args: Any) -> Any:  # the connection drops after the run's messages were stored
            raise StorageError(str(root), OSError(errno.EIO, "Input/output error"))

        middleware._archived_in_state = storage_gone
        state = agent.invoke({"messages": [HumanMessage("again", id="h2")]}, config)
        assert state["messages"][-1].text == "two", "the run's answer comes back"
        assert any("trimming the state failed" in r.getMessage() for r in caplog.records)
        assert [m["parts"][0]["text"] for m in engine.live_messages("t")] == ["hello", "one", "again", "two"]


def test_an_overflow_during_an_outage_is_context_overflow(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, outage, _, _ = outage_agent(engine, "first", ContextOverflowError("too long"), "never")
        config = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("hello")]}, config)
        outage.down = True
        with pytest.raises(ContextOverflow):
            agent.invoke({"messages": [HumanMessage("again")]}, config)
        outage.down = False


@pytest.mark.parametrize("how", ["clear", "forget"])
def test_an_outage_never_sends_a_cleared_or_forgotten_conversation(root, how):
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, outage, model, (middleware, saver) = outage_agent(engine, "noted", "fresh")
        config = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("my card is 4111-1111-1111-1111")]}, config)
        first = [HumanMessage("start over")]
        if how == "clear":
            first = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *first]
        else:
            middleware.forget("t", checkpointer=saver)
        outage.down = True
        agent.invoke({"messages": first}, config)
        outage.down = False
        sent = "\n".join(m.text for m in model.prompts[-1])
        assert "start over" in sent and "4111" not in sent
