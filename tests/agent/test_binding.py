"""Which session a run works on: a subagent's own (an agent run inside a tool call of an agent on its session)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from workmem.graphs.agent.binding import (
    delegated_from,
    delegating,
    readable_session,
    run_sessions,
    session_from_run,
)
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput


def config(namespace: str, thread: str = "t") -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": namespace}}


PARENT_TOOL = config("tools:9")  # the parent agent's tool call, as its wrap_tool_call sees it


@pytest.mark.parametrize(("namespace", "own"), [
    ("model:1", "t"),  # the parent's own nodes
    ("tools:9", "t"),  # the tool itself
    ("tools:9|model:2", "t/subagent/tools:9"),  # a subagent's node
    ("tools:9|tools:3", "t/subagent/tools:9"),  # the subagent's own tool node
    ("tools:9|1|model:2", "t/subagent/tools:9|1"),  # a second graph run in the same tool call
    ("tools:9|agent:4|model:2", "t/subagent/tools:9|agent:4"),  # an agent node of your own graph run from the tool
    ("tools|model:2", "t/subagent/tools"),  # a subagent compiled with checkpointer=True (no task id)
])
def test_inside_a_marked_tool_call_a_run_on_the_callers_session_gets_its_own(namespace, own):
    with delegating("t", PARENT_TOOL):
        assert session_from_run(config=config(namespace)) == own
    assert session_from_run(config=config(namespace)) == "t", "outside the call: the thread's session"


def test_only_a_run_that_would_land_in_the_calling_agents_session_or_thread_is_moved():
    inside = config("tools:9|model:2")
    with delegating("s1", PARENT_TOOL):  # the parent pinned another session; its thread is t
        assert run_sessions(config=inside) == ("t/subagent/tools:9", "s1")
        assert session_from_run("fixed", config=inside) == "fixed"
        assert session_from_run(runtime=SimpleNamespace(context={"session_id": "mine"}), config=inside) == "mine"
    with delegating("t", PARENT_TOOL):
        by_user = SimpleNamespace(context=SimpleNamespace(user_id="t"))
        assert session_from_run(lambda rt: rt.context.user_id, runtime=by_user, config=inside) == "t/subagent/tools:9"
        assert session_from_run("t", config=inside) == "t/subagent/tools:9", "one middleware pinned for both"


def test_two_agents_run_inside_one_call_in_graphs_of_their_own_get_one_session_each():
    with delegating("t", PARENT_TOOL):
        research, write = (session_from_run(config=config(f"tools:9|{node}:1|model:2"))
                           for node in ("research", "write"))
    assert (research, write) == ("t/subagent/tools:9|research:1", "t/subagent/tools:9|write:1")


def test_the_mark_reaches_a_run_on_a_thread_of_its_own_through_the_config():
    seen: list[str] = []
    with delegating("t", PARENT_TOOL):
        worker = threading.Thread(target=lambda: seen.append(session_from_run(config=config("tools:9|model:2"))))
        worker.start()
        worker.join()
    assert seen == ["t/subagent/tools:9"]
    assert session_from_run(config=config("tools:9|model:2")) == "t", "gone once the call returned"


def test_a_task_the_tool_started_keeps_its_call_after_the_tool_returned():
    async def run() -> str:
        go = asyncio.Event()

        async def later() -> str:
            await go.wait()
            return session_from_run(config=config("tools:9|model:2"))

        with delegating("t", PARENT_TOOL):
            task = asyncio.create_task(later())
        go.set()
        return await task

    assert asyncio.run(run()) == "t/subagent/tools:9"


def test_a_subagents_subagent_and_the_helpers_inside_them():
    with delegating("t", PARENT_TOOL), delegating("t/subagent/tools:9", config("tools:9|tools:3")):
        deeper = config("tools:9|tools:3|model:5")
        assert run_sessions(config=deeper) == ("t/subagent/tools:9|tools:3", "t/subagent/tools:9")
        assert session_from_run(config=config("tools:9|tools:3")) == "t/subagent/tools:9", "the subagent's tools"


def test_a_helper_without_a_memory_of_its_own_reads_the_calling_agents(root):
    inside = config("tools:9|tools:3")
    with WorkingMemoryEngine(root, durable=False) as engine, delegating("t", PARENT_TOOL):
        engine.add_messages("t", [{"role": "user", "content": "parent"}])
        assert readable_session(engine, config=inside) == "t"
        engine.add_messages("t/subagent/tools:9", [{"role": "user", "content": "sub"}])
        assert readable_session(engine, config=inside) == "t/subagent/tools:9"


def test_a_delegation_too_long_to_append_is_named_by_its_digest_and_forgotten_with_its_parent():
    long_thread = "x" * 1000
    call = "tools:9f3a1c2e-1111-2222-3333-444455556666"
    with delegating(long_thread, config(call, long_thread)):
        own, base = run_sessions(config=config(call + "|model:2", long_thread))
        assert base == long_thread and own.startswith(long_thread + "/subagent/~") and len(own) <= 1024
        with pytest.raises(InvalidInput, match="subagent"):
            with delegating("y" * 1020, config(call, "y" * 1020)):
                run_sessions(config=config(call + "|model:2", "y" * 1020))
    assert delegated_from(own, long_thread)
    assert not any(delegated_from(f"acme{rest}", "acme") for rest in ("/tools", "/tools:deploy", "/general"))
