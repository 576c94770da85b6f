"""An async run cancelled (a timeout, a closed connection) while its model call's storing step runs in a worker
thread: that step cannot be stopped and goes on. The next run on the session, and `forget`, wait for it — nothing
is stored twice, nothing forgotten comes back."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from engine_helpers import GATE_TIMEOUT_S, call, stored, texts
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem import WorkingMemoryEngine, WorkingMemoryMiddleware
from workmem.graphs.agent.session_locks import in_turn, session_locks
from workmem.state.messages import lc_id

CONFIG = {"configurable": {"thread_id": "t"}}


@tool
def read_file(path: str) -> str:
    """Read a project file."""
    return f"{path}: " + " ".join(f"{path}_line{j} ok" for j in range(90))


def reads(first: int, last: int) -> list[AIMessage]:
    """The agent's calls of read_file, one a step, each its own id and path."""
    return [call("read_file", {"path": f"f{n}"}, f"c{n}", msg_id=f"ai{n}") for n in range(first, last + 1)]


class StalledAppend:
    """The session store's append, held at its first call once the session has `after` live messages: `entered`
    is set and the append waits for `release` (a slow disk, a busy lock); `returned` once it went through."""

    def __init__(self, engine: WorkingMemoryEngine, after: int) -> None:
        self.entered, self.release, self.returned = threading.Event(), threading.Event(), threading.Event()
        sessions = engine.storage.sessions
        real, armed = sessions.append, [True]

        def append(session_id, messages, **kwargs):
            if armed[0] and sessions.session_exists(session_id) and len(sessions.live_messages(session_id)) >= after:
                armed[0] = False
                self.entered.set()
                self.release.wait(GATE_TIMEOUT_S)
                try:
                    return real(session_id, messages, **kwargs)
                finally:
                    self.returned.set()
            return real(session_id, messages, **kwargs)

        sessions.append = append


@dataclass
class CancelledRun:
    """An agent whose first run was cancelled while a model call's storing step is held in its worker thread."""

    engine: WorkingMemoryEngine
    stall: StalledAppend
    middleware: WorkingMemoryMiddleware
    saver: InMemorySaver
    agent: Any


async def a_cancelled_run(root, *later_answers: str) -> CancelledRun:
    """Start a run that reads eight files (then the model answers `later_answers`), cancel it once a model call's
    storing step is held."""
    engine = WorkingMemoryEngine(root, durable=False)
    stall = StalledAppend(engine, after=4)
    middleware = WorkingMemoryMiddleware(engine, commit_mode="sync", trigger=("tokens", 2000), keep=("messages", 4))
    saver = InMemorySaver()
    agent = create_agent(scripted(*reads(1, 8), "Done.", *later_answers), tools=[read_file], checkpointer=saver,
                         middleware=[middleware])
    run = asyncio.ensure_future(agent.ainvoke({"messages": [HumanMessage("Read the files.", id="h0")]}, CONFIG))
    assert await asyncio.to_thread(stall.entered.wait, GATE_TIMEOUT_S)
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run
    return CancelledRun(engine, stall, middleware, saver, agent)


def test_the_next_run_waits_for_a_cancelled_runs_storing_step_nothing_is_stored_twice(root):
    async def scenario():
        run = await a_cancelled_run(root)
        nxt = asyncio.ensure_future(run.agent.ainvoke({"messages": [HumanMessage("Go on.", id="h1")]}, CONFIG))
        await asyncio.wait({nxt}, timeout=1.0)  # without the wait it stores and commits meanwhile
        run.stall.release.set()
        await nxt
        await run.engine.ajoin_commits()
        return run.engine

    engine = asyncio.run(scenario())
    keys = collections.Counter(lc_id(m) for m in stored(engine, "t"))
    assert len(engine.list_archives("t")) >= 2, "the next run committed more than once"
    assert {k: n for k, n in keys.items() if n > 1} == {}, "every message stored once"
    assert {f"ai{n}" for n in range(1, 9)} <= set(keys)
    engine.close()


@pytest.mark.parametrize("forgetter", ["its-middleware", "another-middleware-on-the-engine", "aforget"])
def test_forget_after_a_cancelled_run_waits_for_its_storing_step_the_session_stays_gone(root, forgetter):
    async def scenario():
        run = await a_cancelled_run(root)
        engine, stall, middleware, saver = run.engine, run.stall, run.middleware, run.saver
        threading.Timer(1.0, stall.release.set).start()
        if forgetter == "aforget":
            await middleware.aforget("t", checkpointer=saver)
        else:
            forgets = middleware if forgetter == "its-middleware" else WorkingMemoryMiddleware(engine)
            await asyncio.to_thread(forgets.forget, "t", checkpointer=saver)
        assert await asyncio.to_thread(stall.returned.wait, GATE_TIMEOUT_S)
        return engine

    engine = asyncio.run(scenario())
    assert not engine.session_exists("t"), "the cancelled run's step stored nothing after the forget"
    engine.close()


@pytest.mark.parametrize("waiter", ["steps", "aforget"])
def test_steps_waiting_for_a_busy_session_leave_the_thread_pool_to_other_sessions(root, waiter):
    """Many runs on a session whose step is held (a long commit), or forgets of it, wait in the event loop: a step of
    another session, and any `to_thread` of the application, still gets a worker thread."""
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        engine.add_messages("busy", [{"role": "user", "content": "hello"}])
        locks, held, release = session_locks(engine), threading.Event(), threading.Event()

        def long_step():
            held.set()
            release.wait(GATE_TIMEOUT_S)

        def wait_for_busy():
            if waiter == "aforget":
                return WorkingMemoryMiddleware(engine).aforget("busy")
            return in_turn(locks, "busy", lambda: "later")

        holder = asyncio.ensure_future(in_turn(locks, "busy", long_step))
        assert await asyncio.to_thread(held.wait, GATE_TIMEOUT_S)
        waiting = [asyncio.ensure_future(wait_for_busy()) for _ in range(40)]
        other = await asyncio.wait_for(in_turn(locks, "other", lambda: "served"), GATE_TIMEOUT_S / 2)
        release.set()
        later = await asyncio.gather(holder, *waiting)
        engine.close()
        return other, later[1:]

    other, later = asyncio.run(scenario())
    assert other == "served"
    if waiter == "aforget":
        assert sum(answer["deleted"] for answer in later) == 1, "the session was deleted once, by the first forget"
    else:
        assert later == ["later"] * 40


def test_aforget_cancelled_by_its_caller_still_deletes_the_thread_nothing_forgotten_comes_back(root):
    """The caller's timeout fires while `aforget` waits for a cancelled run's storing step: the forget still runs to
    its end, the session and the thread both, so the next run stores only its own turn."""
    async def scenario():
        run = await a_cancelled_run(root, "A new answer.")
        engine, stall, middleware, saver, agent = run.engine, run.stall, run.middleware, run.saver, run.agent
        before = {lc_id(m) for m in stored(engine, "t")}
        threading.Timer(0.5, stall.release.set).start()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(middleware.aforget("t", checkpointer=saver), 0.1)
        assert await asyncio.to_thread(stall.returned.wait, GATE_TIMEOUT_S)
        for _ in range(int(GATE_TIMEOUT_S / 0.02)):  # the shielded forget finishes in this loop
            if not engine.session_exists("t") and (await agent.aget_state(CONFIG)).values == {}:
                break
            await asyncio.sleep(0.02)
        assert (await agent.aget_state(CONFIG)).values == {}, "the thread was deleted too"
        await agent.ainvoke({"messages": [HumanMessage("A new topic.", id="h9")]}, CONFIG)
        return engine, before

    engine, before = asyncio.run(scenario())
    after = stored(engine, "t")
    assert "h0" in before and texts(after)[0] == "A new topic."
    assert not before & {lc_id(m) for m in after}, "a message stored before the forget was stored again"
    engine.close()
