"""Which session a run works on: a subagent's own (an agent run inside a tool call of another graph)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workmem.graphs.agent.binding import (
    delegated_from,
    delegation_of,
    readable_session,
    run_sessions,
    session_from_run,
)
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput


def config(namespace: str, thread: str = "t") -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": namespace}}


@pytest.mark.parametrize(("namespace", "delegation"), [
    ("", None),
    ("model:1", None),  # a node of a top-level agent
    ("tools:1", None),  # the top-level agent's own tool node
    ("agent:4|model:5", None),  # an agent added as a node of your own graph
    ("tools:9|model:2", "tools:9"),  # a subagent invoked from a tool
    ("tools:9|tools:3", "tools:9"),  # the subagent's own tool node
    ("tools:9|1|model:2", "tools:9|1"),  # a second graph run in the same tool call
    ("tools|model:2", "tools"),  # a subagent compiled with checkpointer=True
    ("agent:4|tools:9|model:2", "agent:4|tools:9"),  # the parent agent is a node of your graph
    ("tools:9|agent:4|model:2", "tools:9"),  # your own graph, wrapping an agent, run from a tool
    ("tools:9|tools:3|model:7", "tools:9|tools:3"),  # a subagent's subagent
])
def test_the_delegation_is_the_namespace_up_to_the_newest_tool_call(namespace, delegation):
    assert delegation_of(config(namespace)) == delegation


def test_inside_a_tool_call_a_session_from_the_run_is_the_delegations_own():
    inside = config("tools:9|model:2")
    assert run_sessions(config=inside) == ("t/tools:9", "t")
    assert session_from_run(config=config("agent:4|model:5")) == "t"
    assert session_from_run("fixed", config=inside) == "fixed", "a fixed session is used as given"
    by_user = SimpleNamespace(context=SimpleNamespace(user_id="u-7"))
    assert session_from_run(lambda rt: rt.context.user_id, runtime=by_user, config=inside) == "u-7/tools:9"
    in_context = SimpleNamespace(context={"session_id": "c-1"})
    assert session_from_run(runtime=in_context, config=inside) == "c-1/tools:9"


def test_a_helper_without_a_memory_of_its_own_reads_the_one_it_runs_inside(root):
    inside = config("tools:9|tools:3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("t", [{"role": "user", "content": "parent"}])
        assert readable_session(engine, config=inside) == "t"
        engine.add_messages("t/tools:9", [{"role": "user", "content": "sub"}])
        assert readable_session(engine, config=inside) == "t/tools:9"


def test_a_delegation_too_long_to_append_is_named_by_its_digest_and_forgotten_with_its_parent():
    long_thread = "x" * 1000
    own, base = run_sessions(config=config("tools:9f3a1c2e-1111-2222-3333-444455556666|model:2", long_thread))
    assert base == long_thread and own.startswith(long_thread + "/tools~") and len(own) <= 1024
    assert delegated_from(own, long_thread) and not delegated_from(long_thread + "/notes", long_thread)
    with pytest.raises(InvalidInput, match="subagent"):
        run_sessions(config=config("tools:9|model:2", "y" * 1020))
