"""The Studio checkpointer implements what `langgraph dev` asks of a custom checkpointer: deleting a run's
checkpoints, pruning a thread's history, copying a thread — each checked on a real graph's checkpoints."""

from __future__ import annotations

import asyncio
import operator
import threading
import uuid
from typing import Annotated

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from workmem.state.files.storage import open_studio_saver
from workmem.state.files.studio_saver import StudioSaver


class Counter(TypedDict):
    n: Annotated[int, operator.add]


def _graph(saver):
    builder = StateGraph(Counter)
    builder.add_node("a", lambda state: {"n": 1})
    builder.add_node("b", lambda state: {"n": 1})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str, run: str | None = None) -> dict:
    return {"configurable": {"thread_id": thread, **({"run_id": run} if run else {})}}


async def _history(saver, thread: str) -> list:
    return [c async for c in saver.alist(_config(thread))]


async def _writes(saver, thread: str) -> int:
    async with saver.conn.execute("SELECT count(*) FROM writes WHERE thread_id = ?", (thread,)) as cur:
        return (await cur.fetchone())[0]


def _run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize("method", ["adelete_for_runs", "aprune", "acopy_thread", "adelete_thread",
                                    "delete_for_runs", "prune", "copy_thread"])
def test_the_server_finds_each_method_implemented(method):
    """`langgraph dev` logs a missing capability when the method is the base class's own."""
    assert getattr(StudioSaver, method) is not getattr(BaseCheckpointSaver, method)


def test_delete_for_runs_removes_only_that_runs_checkpoints_and_writes(tmp_path):
    async def scenario():
        async with open_studio_saver(tmp_path) as saver:
            graph = _graph(saver)
            first, second = str(uuid.uuid4()), str(uuid.uuid4())
            await graph.ainvoke({"n": 0}, _config("t", first))
            before = await _history(saver, "t")
            await graph.ainvoke({"n": 0}, _config("t", second))
            await graph.ainvoke({"n": 0}, _config("other", second))
            await saver.adelete_for_runs([second])
            after = await _history(saver, "t")
            assert [c.checkpoint["id"] for c in after] == [c.checkpoint["id"] for c in before]
            assert {c.metadata["run_id"] for c in after} == {first}
            assert await _history(saver, "other") == []
            assert (await graph.aget_state(_config("t"))).values == {"n": 2}  # the state the first run left
            await saver.adelete_for_runs([])  # nothing to do

    _run(scenario())


def test_prune_keep_latest_leaves_one_readable_checkpoint_per_thread(tmp_path):
    async def scenario():
        async with open_studio_saver(tmp_path) as saver:
            graph = _graph(saver)
            for _ in range(3):
                await graph.ainvoke({"n": 0}, _config("t", str(uuid.uuid4())))
            await graph.ainvoke({"n": 0}, _config("kept", str(uuid.uuid4())))
            head = (await saver.aget_tuple(_config("t"))).checkpoint["id"]
            kept_history = len(await _history(saver, "kept"))
            await saver.aprune(["t"], strategy="keep_latest")
            history = await _history(saver, "t")
            assert [c.checkpoint["id"] for c in history] == [head] and history[0].parent_config is None
            assert (await graph.aget_state(_config("t"))).values == {"n": 6}
            assert len(await _history(saver, "kept")) == kept_history  # other threads untouched
            await graph.ainvoke({"n": 0}, _config("t", str(uuid.uuid4())))  # the pruned thread goes on
            assert (await graph.aget_state(_config("t"))).values == {"n": 8}
            await saver.aprune(["t"], strategy="delete")
            assert await _history(saver, "t") == [] and await _writes(saver, "t") == 0
            with pytest.raises(ValueError, match="strategy"):
                await saver.aprune(["kept"], strategy="keep_some")
            with pytest.raises(TypeError):
                await saver.aprune("kept")

    _run(scenario())


def test_prune_refuses_a_thread_with_a_delta_channel(tmp_path):
    async def scenario():
        async with open_studio_saver(tmp_path) as saver:
            graph = _graph(saver)
            config = _config("t", str(uuid.uuid4()))
            config["configurable"]["delta_writes_versioned"] = True  # how such a thread marks its metadata
            await graph.ainvoke({"n": 0}, config)
            count = len(await _history(saver, "t"))
            with pytest.raises(NotImplementedError, match="DeltaChannel"):
                await saver.aprune(["t"])
            assert len(await _history(saver, "t")) == count

    _run(scenario())


def test_copy_thread_copies_history_and_state(tmp_path):
    async def scenario():
        async with open_studio_saver(tmp_path) as saver:
            graph = _graph(saver)
            await graph.ainvoke({"n": 0}, _config("source", str(uuid.uuid4())))
            await saver.conn.execute(  # the server records the thread in each checkpoint's metadata
                "UPDATE checkpoints SET metadata = json_set(CAST(metadata AS TEXT), '$.thread_id', 'source')")
            await saver.conn.commit()
            await saver.acopy_thread("source", "copy")
            source, copy = await _history(saver, "source"), await _history(saver, "copy")
            assert [c.checkpoint["id"] for c in copy] == [c.checkpoint["id"] for c in source]
            assert {c.metadata.get("thread_id") for c in copy} == {"copy"}
            assert (await graph.aget_state(_config("copy"))).values == {"n": 2}

    _run(scenario())


def test_blocking_twins_work_from_another_thread(tmp_path):
    async def scenario():
        async with open_studio_saver(tmp_path) as saver:
            graph = _graph(saver)
            run = str(uuid.uuid4())
            await graph.ainvoke({"n": 0}, _config("t", run))
            await graph.ainvoke({"n": 0}, _config("u", run))
            errors: list[BaseException] = []
            pruned: list[int] = []

            def blocking():
                try:
                    saver.copy_thread("t", "t2")
                    saver.prune(["t2"])
                    pruned.append(len(list(saver.list(_config("t2")))))
                    saver.delete_for_runs([run])
                except BaseException as exc:  # reported in the test's thread
                    errors.append(exc)

            worker = threading.Thread(target=blocking)
            worker.start()
            while worker.is_alive():
                await asyncio.sleep(0.01)
            assert errors == []
            assert pruned == [1]
            assert await _history(saver, "t") == [] and await _history(saver, "u") == []
            assert await _history(saver, "t2") == []  # the copy carries the run's ids
            with pytest.raises(asyncio.InvalidStateError):
                saver.prune(["t2"])  # on the saver's own loop: refused, never a deadlock

    _run(scenario())
