"""`StudioSaver`: the `studio.sqlite` checkpointer of `langgraph dev`, with what its server asks beyond
`AsyncSqliteSaver`: deleting the checkpoints of runs (`multitask_strategy="rollback"`), pruning a thread's
history, copying a thread. LangGraph is imported here, so this module is loaded only when Studio opens it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

PRUNE_STRATEGIES = ("keep_latest", "delete")
# A DeltaChannel keeps only deltas between snapshots; dropping a thread's older checkpoints would lose them.
DELTA_MARKERS = ("counters_since_delta_snapshot", "delta_writes_versioned")


class StudioSaver(AsyncSqliteSaver):
    """`AsyncSqliteSaver` plus `adelete_for_runs`, `aprune` and `acopy_thread` (and their blocking twins)."""

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their pending writes) that the given runs saved."""
        runs = [str(r) for r in run_ids]
        if not runs:
            return
        await self.setup()
        marks = ",".join("?" * len(runs))
        chosen = (f"SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
                  f"WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') IN ({marks})")
        async with self.lock, self.conn.cursor() as cur:
            await cur.execute(f"DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN ({chosen})",
                              runs)
            await cur.execute(f"DELETE FROM checkpoints WHERE (thread_id, checkpoint_ns, checkpoint_id) IN ({chosen})",
                              runs)
            await self.conn.commit()

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's newest checkpoint of each thread (its parent link cleared), drop
        the rest with their writes; `delete`: drop the threads. A thread using a DeltaChannel is refused with
        `NotImplementedError` (its state lives in the chain keep_latest would cut)."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"unknown prune strategy: {strategy!r}")
        threads = [str(t) for t in thread_ids]
        if not threads:
            return
        if strategy == "delete":
            for thread_id in threads:
                await self.adelete_thread(thread_id)
            return
        await self.setup()
        async with self.lock, self.conn.cursor() as cur:
            await _refuse_delta_threads(cur, threads)
            for thread_id in threads:
                await _keep_latest(cur, thread_id)
            await self.conn.commit()

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another (the metadata's `thread_id` rewritten)."""
        await self.setup()
        source, target = str(source_thread_id), str(target_thread_id)
        async with self.lock, self.conn.cursor() as cur:
            await cur.execute("SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
                              "FROM checkpoints WHERE thread_id = ?", (source,))
            for ns, cid, parent, kind, checkpoint, metadata in await cur.fetchall():
                await cur.execute("INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
                                  "parent_checkpoint_id, type, checkpoint, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                  (target, ns, cid, parent, kind, checkpoint, _retargeted(metadata, target)))
            await cur.execute("INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
                              "channel, type, value) SELECT ?, checkpoint_ns, checkpoint_id, task_id, idx, channel, "
                              "type, value FROM writes WHERE thread_id = ?", (target, source))
            await self.conn.commit()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Blocking twin of `adelete_for_runs` (from a thread other than the saver's event loop)."""
        self._blocking(self.adelete_for_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Blocking twin of `aprune` (from a thread other than the saver's event loop)."""
        self._blocking(self.aprune(thread_ids, strategy=strategy))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Blocking twin of `acopy_thread` (from a thread other than the saver's event loop)."""
        self._blocking(self.acopy_thread(source_thread_id, target_thread_id))

    def _blocking(self, coroutine: Any) -> None:
        try:
            if asyncio.get_running_loop() is self.loop:
                coroutine.close()
                raise asyncio.InvalidStateError("blocking calls to the Studio checkpointer are only allowed from "
                                                "another thread; await its async method instead")
        except RuntimeError:  # no running loop in this thread
            pass
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


async def _refuse_delta_threads(cur: Any, threads: list[str]) -> None:
    marks = ",".join("?" * len(threads))
    found = set()
    for marker in DELTA_MARKERS:
        await cur.execute(f"SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id IN ({marks}) "
                          f"AND json_extract(CAST(metadata AS TEXT), '$.{marker}') IS NOT NULL", threads)
        found |= {row[0] for row in await cur.fetchall()}
    if found:
        names = ", ".join(sorted(found))
        raise NotImplementedError(f"keep_latest cannot prune threads that use a DeltaChannel: {names}")


async def _keep_latest(cur: Any, thread_id: str) -> None:
    """One thread: per namespace, its newest checkpoint stays (checkpoint ids sort by time), the rest goes."""
    older = ("SELECT c.checkpoint_ns, c.checkpoint_id FROM checkpoints c WHERE c.thread_id = ? AND c.checkpoint_id < "
             "(SELECT max(n.checkpoint_id) FROM checkpoints n WHERE n.thread_id = c.thread_id "
             "AND n.checkpoint_ns = c.checkpoint_ns)")
    await cur.execute(f"DELETE FROM writes WHERE thread_id = ? AND (checkpoint_ns, checkpoint_id) IN ({older})",
                      (thread_id, thread_id))
    await cur.execute(f"DELETE FROM checkpoints WHERE thread_id = ? AND (checkpoint_ns, checkpoint_id) IN ({older})",
                      (thread_id, thread_id))
    await cur.execute("UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ?", (thread_id,))


def _retargeted(metadata: Any, thread_id: str) -> Any:
    """Checkpoint metadata (JSON bytes) with its `thread_id`, if it records one, set to the copy's."""
    try:
        data = json.loads(metadata)
    except (TypeError, ValueError):
        return metadata
    if isinstance(data, dict) and "thread_id" in data:
        data["thread_id"] = thread_id
        return json.dumps(data, ensure_ascii=False).encode("utf-8")
    return metadata
