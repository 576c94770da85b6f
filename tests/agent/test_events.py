"""workmem's events pair up: each commit task is announced once (`commit_started`, with its task id) and ends with
exactly one of finished / degraded / failed / skipped for that task — in background mode at a later call, or at the
end of a run once it finished; a call that finds a commit running starts nothing and announces nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine

TURNS = 40
OUTCOMES = ("commit_finished", "commit_degraded", "commit_failed", "commit_skipped")


def question(i: int) -> str:
    return f"Turn {i}: " + " ".join(f"word{i}_{j}" for j in range(60))


def workmem_events(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c["workmem"] for c in chunks if isinstance(c, dict) and "workmem" in c]


def check_pairs(events: list[dict[str, Any]], engine: WorkingMemoryEngine, session: str) -> None:
    started = [e["task_id"] for e in events if e["event"] == "commit_started"]
    ended = [e["task_id"] for e in events if e["event"] in OUTCOMES]
    tasks = [t["task_id"] for t in engine.list_tasks(session)]
    assert started, "the premise: commits ran"
    assert len(started) == len(set(started)), "one start per task"
    assert Counter(started) == Counter(ended) == Counter(tasks), (started, ended, tasks)


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_events_pair_over_forty_turns_and_one_more(root, mode):
    model = scripted(*(f"Answer {i}." for i in range(TURNS + 2)))
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 4)) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(), middleware=[
            WorkingMemoryMiddleware(engine, trigger=("tokens", 1_500), commit_mode=mode)])
        config = {"configurable": {"thread_id": "ev"}}
        events: list[dict[str, Any]] = []
        for i in range(TURNS):
            events += workmem_events(list(agent.stream({"messages": [HumanMessage(question(i))]}, config,
                                                       stream_mode="custom")))
        for last in (question(TURNS), "Thanks."):  # after a wait a call reports what finished; the second one
            engine.wait()                          # reports a commit the first may have started
            events += workmem_events(list(agent.stream({"messages": [HumanMessage(last)]}, config,
                                                       stream_mode="custom")))
        check_pairs(events, engine, "ev")


def test_events_pair_with_an_async_agent(root):
    async def run() -> tuple[list[dict[str, Any]], list[str]]:
        model = scripted(*(f"Answer {i}." for i in range(TURNS + 2)))
        with WorkingMemoryEngine(root, durable=False, keep=("messages", 4)) as engine:
            agent = create_agent(model, checkpointer=InMemorySaver(), middleware=[
                WorkingMemoryMiddleware(engine, trigger=("tokens", 1_500))])
            config = {"configurable": {"thread_id": "ev"}}
            events: list[dict[str, Any]] = []
            for i in range(TURNS + 2):
                if i >= TURNS:
                    await engine.ajoin_commits()
                text = question(i) if i <= TURNS else "Thanks."
                async for chunk in agent.astream({"messages": [HumanMessage(text)]}, config, stream_mode="custom"):
                    events += workmem_events([chunk])
            check_pairs(events, engine, "ev")
            return events, [t["status"] for t in engine.list_tasks("ev")]

    events, statuses = asyncio.run(run())
    assert statuses and all(s == "completed" for s in statuses)
