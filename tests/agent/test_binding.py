"""Which session a run works on: the nesting rule of a subagent (an agent run inside another's graph)."""

from __future__ import annotations

from workmem.graphs.agent.binding import graph_namespace, hold_session, own_session, release_session, session_from_run


def config(thread: str, namespace: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": namespace}}


TOP = config("nest-t", "model:1")  # a node of a top-level graph
SUB = config("nest-t", "tools:9|model:2")  # a node of a graph run inside the top graph's tool node
NODE = config("nest-t", "agent:4|model:5")  # an agent added as a node of a user's graph


def test_the_graph_namespace_leaves_out_the_nodes_own_segment():
    assert [graph_namespace(c) for c in (TOP, SUB, {}, config("x", ""))] == ["", "tools:9", "", ""]


def test_a_run_inside_a_run_holding_its_session_gets_its_own_and_only_while_it_is_held():
    assert session_from_run(config=SUB) == "nest-t", "an agent as a node of a graph without workmem: the thread"
    hold_session("nest-t", TOP)
    try:
        assert session_from_run(config=TOP) == "nest-t", "the holder itself"
        assert session_from_run(config=SUB) == "nest-t/tools:9"
        assert session_from_run(config=NODE) == "nest-t/agent:4"
        assert session_from_run("bound", config=SUB) == "bound", "a bound session is used as given"
        assert own_session("other", "tools:9") == "other"
        hold_session("nest-t/tools:9", SUB)
        deeper = config("nest-t", "tools:9|tools:3|model:7")
        assert session_from_run(config=deeper) == "nest-t/tools:9|tools:3"
        release_session("nest-t/tools:9", SUB)
    finally:
        release_session("nest-t", TOP)
    assert session_from_run(config=SUB) == "nest-t"
    release_session("nest-t", TOP)  # a second release of a run that ended is harmless
    assert own_session("nest-t", "tools:9") == "nest-t"
