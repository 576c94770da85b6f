"""An async run cancelled (a timeout, a closed connection) while its model call's storing step runs in a worker
thread: that step cannot be stopped and goes on. The next run on the session, and `forget`, wait for it — nothing
is stored twice, nothing forgotten comes back."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading

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


async def cancelled_while_storing(agent, stall: StalledAppend) -> None:
    """Start a run, cancel it once a model call's storing step is held in its worker thread."""
    run = asyncio.ensure_future(agent.ainvoke({"messages": [HumanMessage("Read the files.", id="h0")]}, CONFIG))
    assert await asyncio.to_thread(stall.entered.wait, GATE_TIMEOUT_S)
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run


def test_the_next_run_waits_for_a_cancelled_runs_storing_step_nothing_is_stored_twice(root):
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        stall = StalledAppend(engine, after=4)
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync", trigger=("tokens", 2000),
                                             keep=("messages", 4))
        agent = create_agent(scripted(*reads(1, 8), "Done."), tools=[read_file], checkpointer=InMemorySaver(),
                             middleware=[middleware])
        await cancelled_while_storing(agent, stall)
        nxt = asyncio.ensure_future(agent.ainvoke({"messages": [HumanMessage("Go on.", id="h1")]}, CONFIG))
        await asyncio.wait({nxt}, timeout=1.0)  # without the wait it stores and commits meanwhile
        stall.release.set()
        await nxt
        await engine.ajoin_commits()
        return engine

    engine = asyncio.run(scenario())
    keys = collections.Counter(lc_id(m) for m in stored(engine, "t"))
    assert len(engine.list_archives("t")) >= 2, "the next run committed more than once"
    assert {k: n for k, n in keys.items() if n > 1} == {}, "every message stored once"
    assert {f"ai{n}" for n in range(1, 9)} <= set(keys)
    engine.close()


@pytest.mark.parametrize("forgetter", ["its-middleware", "another-middleware-on-the-engine", "aforget"])
def test_forget_after_a_cancelled_run_waits_for_its_storing_step_the_session_stays_gone(root, forgetter):
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        stall = StalledAppend(engine, after=4)
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync", trigger=("tokens", 2000),
                                             keep=("messages", 4))
        saver = InMemorySaver()
        agent = create_agent(scripted(*reads(1, 8), "Done."), tools=[read_file], checkpointer=saver,
                             middleware=[middleware])
        await cancelled_while_storing(agent, stall)
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


def test_steps_waiting_for_a_busy_session_leave_the_thread_pool_to_other_sessions(root):
    """Many runs on a session whose step is held (a long commit) wait in the event loop: a step of another session,
    and any `to_thread` of the application, still gets a worker thread."""
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        locks, held, release = session_locks(engine), threading.Event(), threading.Event()

        def long_step():
            held.set()
            release.wait(GATE_TIMEOUT_S)

        holder = asyncio.ensure_future(in_turn(locks, "busy", long_step))
        assert await asyncio.to_thread(held.wait, GATE_TIMEOUT_S)
        waiting = [asyncio.ensure_future(in_turn(locks, "busy", lambda: "later")) for _ in range(40)]
        other = await asyncio.wait_for(in_turn(locks, "other", lambda: "served"), GATE_TIMEOUT_S / 2)
        release.set()
        later = await asyncio.gather(holder, *waiting)
        engine.close()
        return other, later

    other, later = asyncio.run(scenario())
    assert other == "served" and later[1:] == ["later"] * 40


def test_aforget_cancelled_by_its_caller_still_deletes_the_thread_nothing_forgotten_comes_back(root):
    """The caller's timeout fires while `aforget` waits for a cancelled run's storing step: the forget still runs to
    its end, the session and the thread both, so the next run stores only its own turn."""
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        stall = StalledAppend(engine, after=4)
        middleware = WorkingMemoryMiddleware(engine, commit_mode="sync", trigger=("tokens", 2000),
                                             keep=("messages", 4))
        saver = InMemorySaver()
        agent = create_agent(scripted(*reads(1, 8), "Done.", "A new answer."), tools=[read_file],
                             checkpointer=saver, middleware=[middleware])
        await cancelled_while_storing(agent, stall)
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


def test_aforgets_waiting_for_a_busy_session_leave_the_thread_pool_to_other_sessions(root):
    async def scenario():
        engine = WorkingMemoryEngine(root, durable=False)
        middleware = WorkingMemoryMiddleware(engine)
        engine.add_messages("busy", [{"role": "user", "content": "hello"}])
        locks, held, release = session_locks(engine), threading.Event(), threading.Event()

        def long_step():
            held.set()
            release.wait(GATE_TIMEOUT_S)

        holder = asyncio.ensure_future(in_turn(locks, "busy", long_step))
        assert await asyncio.to_thread(held.wait, GATE_TIMEOUT_S)
        forgets = [asyncio.ensure_future(middleware.aforget("busy")) for _ in range(40)]
        other = await asyncio.wait_for(in_turn(locks, "other", lambda: "served"), GATE_TIMEOUT_S / 2)
        release.set()
        await holder
        answers = await asyncio.gather(*forgets)
        engine.close()
        return other, answers

    other, answers = asyncio.run(scenario())
    assert other == "served"
    assert sum(a["deleted"] for a in answers) == 1, "the session was deleted once, by the first forget"
