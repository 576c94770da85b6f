"""The async twins of the engine and the async archive tools, under anyio's pytest plugin."""

from __future__ import annotations

import inspect
import threading

import anyio
import pytest

from workmem.graphs.agent.tools import make_archive_tools
from workmem.graphs.engine import WorkingMemoryEngine

pytestmark = pytest.mark.anyio

PUBLIC_METHODS = ("add_messages", "after_turn", "commit", "compact", "assemble", "archive_search", "archive_expand",
                  "delete_session", "working_memory", "session_info", "resume_all", "check", "close", "task",
                  "reindex", "repair", "context_tokens", "join_commits", "read_archive", "list_tasks",
                  "list_sessions")


@pytest.fixture
def anyio_backend():
    return "asyncio"


def conversation(tag: str, n: int = 6) -> list[dict[str, str]]:
    return [m for i in range(n) for m in ({"role": "user", "content": f"{tag} question {i} about port {9000 + i}"},
                                          {"role": "assistant", "content": f"{tag} answer {i}"})]


def test_every_public_method_has_an_async_twin():
    for name in PUBLIC_METHODS:
        twin = getattr(WorkingMemoryEngine, f"a{name}")
        assert inspect.iscoroutinefunction(twin), name
        assert twin.__doc__.startswith(f"Async twin of `{name}`")
    assert inspect.iscoroutinefunction(WorkingMemoryEngine.await_commits)  # the deprecated name still awaits


async def test_the_async_twins_store_commit_assemble_search_expand_and_delete(root):
    async with WorkingMemoryEngine(root, durable=False) as engine:
        stored = await engine.aadd_messages("a", conversation("alpha"))
        assert [m["seq"] for m in stored] == list(range(1, 13))
        result = await engine.acommit("a", keep=("turns", 1))
        assert result["status"] == "completed" and (await engine.atask(result["task_id"]))["status"] == "completed"
        assembled = await engine.aassemble("a")
        assert assembled["stats"]["summary_included"] and len(assembled["messages"]) == 4
        hits = await engine.aarchive_search("a", "port 9002")
        assert hits[0]["seq"] == 5
        expanded = await engine.aarchive_expand("a", "archive_001")
        assert "alpha question 0" in expanded["content"]
        assert (await engine.aworking_memory("a"))["archive_id"] == "archive_001"
        assert (await engine.asession_info("a"))["commit_count"] == 1
        assert await engine.acheck("a") == []
        assert (await engine.acompact("a"))["compacted"]
        assert await engine.aresume_all() == []
        assert (await engine.adelete_session("a"))["deleted"]


async def test_concurrent_after_turns_on_two_sessions_each_store_and_commit_their_own(root):
    threads: set[str] = set()
    real = WorkingMemoryEngine.after_turn

    def recording(self, *args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(self, *args, **kwargs)

    WorkingMemoryEngine.after_turn = recording
    try:
        async with WorkingMemoryEngine(root, durable=False, commit_token_threshold=60, keep=("messages", 2)) as engine:
            async def talk(session: str) -> list[dict]:
                results = []
                for i in range(0, 12, 2):
                    results.append(await engine.aafter_turn(session, conversation(session)[i:i + 2], wait=True))
                return results

            async with anyio.create_task_group() as group:
                outcomes: dict[str, list[dict]] = {}

                async def run(session: str) -> None:
                    outcomes[session] = await talk(session)

                group.start_soon(run, "left")
                group.start_soon(run, "right")
            await engine.ajoin_commits()
            for session in ("left", "right"):
                assert sum(r["stored"] for r in outcomes[session]) == 12
                assert any(r["commit"] for r in outcomes[session])
                info = await engine.asession_info(session)
                assert info["total_message_count"] == 12 and info["commit_count"] >= 1
                everything = engine.storage.sessions.messages_in_range(session, 1, 12)
                assert [m["parts"][0]["text"] for m in everything] == [m["content"] for m in conversation(session)]
    finally:
        WorkingMemoryEngine.after_turn = real
    assert threading.main_thread().name not in threads, "the work ran in worker threads, not on the event loop"


async def test_the_archive_tools_are_async_capable(root):
    async with WorkingMemoryEngine(root, durable=False) as engine:
        await engine.aadd_messages("t", conversation("beta"))
        await engine.acommit("t")
        search, expand = make_archive_tools(engine, "t")
        assert search.coroutine is not None and expand.coroutine is not None
        message = await search.ainvoke({"type": "tool_call", "id": "c1", "name": "archive_search",
                                        "args": {"query": "port 9004"}})
        assert message.artifact[0]["seq"] == 9
        assert "beta question 0" in await expand.ainvoke({"archive_id": "archive_001"})
        missing = await expand.ainvoke({"archive_id": "archive_404"})
        assert "archive_404" in missing
