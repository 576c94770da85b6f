"""What the command line reads through the engine: sessions listed, every message exported, archives and tasks
read, a data root that is not there refused without creating it; waiting for a session's background commits."""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from typing import Any

import psycopg
import pytest
from engine_helpers import talk, user
from langchain_core.messages import BaseMessage

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.errors import ArchiveNotFound, DataRootNotFound, InvalidInput, SessionNotFound

ODD_ID = "team/alice:42"  # stored under a hashed folder name; listed as given


def test_list_sessions_counts_live_and_archived_messages_by_original_id(backend):
    with backend.engine(durable=False) as engine:
        assert engine.list_sessions() == []
        engine.add_messages(ODD_ID, talk(3, tag="odd"))
        engine.add_messages("plain", talk(2, tag="plain"))
        assert engine.commit("plain", keep_recent_count=1)["status"] == "completed"
        rows = {r["session_id"]: r for r in engine.list_sessions()}
        assert set(rows) == {ODD_ID, "plain"}
        assert {k: rows["plain"][k] for k in ("live_messages", "archived_messages", "commits")} == \
            {"live_messages": 1, "archived_messages": 3, "commits": 1}
        assert {k: rows[ODD_ID][k] for k in ("live_messages", "archived_messages", "commits")} == \
            {"live_messages": 6, "archived_messages": 0, "commits": 0}
        info = engine.session_info("plain")
        assert rows["plain"]["last_activity"] == max(info["updated_at"], info["last_commit_at"])
        engine.delete_session(ODD_ID)
        assert [r["session_id"] for r in engine.list_sessions()] == ["plain"]


def test_iter_messages_gives_every_message_in_seq_order_with_payloads_inline(backend):
    big = "\n".join(f"row {i}: value {i * 7}" for i in range(4_000))  # over payload_bytes: stored as a payload
    messages = [user("read the export"),
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "read", "args": {}}]},
                {"role": "tool", "tool_call_id": "c1", "content": big}, *talk(3, tag="more")]
    with backend.engine(durable=False, payload_bytes=4096) as engine:
        engine.add_messages("s", messages)
        engine.commit("s", keep_recent_count=2)
        exported = list(engine.iter_messages("s", batch=3))  # batch edges inside the archive and the live tail
        assert [m["seq"] for m in exported] == list(range(1, len(messages) + 1))
        result = next(p for p in exported[2]["parts"] if p["type"] == "tool_result")
        assert result["content"] == big
        assert exported[-1]["parts"][0]["text"] == messages[-1]["content"]
        assert asyncio.run(_collect(engine.aiter_messages("s", batch=4))) == exported
        with pytest.raises(SessionNotFound):
            engine.iter_messages("nobody")  # at the call, before any message


def test_an_export_of_a_session_whose_next_seq_was_set_far_ahead_ends_after_its_last_message(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", talk(4))
        engine.commit("s", keep_recent_count=2)
    _set_next_seq(backend, "s", 10**12)  # damage `check` reports; an export walked every empty range up to it
    with backend.engine(durable=False) as engine:
        reads = []
        in_range = engine.storage.sessions.messages_in_range

        def counted(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            reads.append(args)
            assert len(reads) < 100, "the export walks empty ranges"
            return in_range(*args, **kwargs)

        engine.storage.sessions.messages_in_range = counted
        assert [m["seq"] for m in engine.iter_messages("s", batch=3)] == list(range(1, 9))
        assert [m["seq"] for m in asyncio.run(_collect(engine.aiter_messages("s", batch=3)))] == list(range(1, 9))
        assert engine.check("s")  # and `check` names the damage


def _set_next_seq(backend: Any, session: str, value: int) -> None:
    if backend.url is not None:
        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("UPDATE workmem.sessions SET next_seq = %s WHERE session_id = %s", [value, session])
        return
    meta_file = backend.root / "sessions" / session / ".meta.json"
    meta = json.loads(meta_file.read_text())
    meta["next_seq"] = value
    meta_file.write_text(json.dumps(meta))


async def _collect(iterator: Any) -> list[dict[str, Any]]:
    return [m async for m in iterator]


def test_read_archive_list_tasks_and_location(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", talk(2, tag="s"))
        result = engine.commit("s")
        archive = engine.read_archive("s", result["archive_id"])
        assert archive["source_turn_range"]["start_seq"] == 1 and archive["source_turn_range"]["end_seq"] == 4
        with pytest.raises(ArchiveNotFound):
            engine.read_archive("s", "archive_009")
        tasks = engine.list_tasks("s")
        assert [(t["task_id"], t["status"]) for t in tasks] == [(result["task_id"], "completed")]
        assert engine.list_tasks() == tasks
        with pytest.raises(SessionNotFound):
            engine.list_tasks("nobody")
        assert "s" in engine.session_location("s")


def test_create_false_refuses_a_root_without_workmem_data_and_creates_nothing(tmp_path):
    missing, empty = tmp_path / "typo", tmp_path / "empty"
    empty.mkdir()
    for root in (missing, empty):
        with pytest.raises(DataRootNotFound, match=f"no workmem data at {root}"):
            WorkingMemoryEngine(root, create=False)
    assert not missing.exists() and list(empty.iterdir()) == []
    with WorkingMemoryEngine(missing) as engine:  # the default still creates a new root
        engine.add_messages("s", talk(1, tag="s"))
    with WorkingMemoryEngine(missing, create=False) as engine:
        assert engine.session_exists("s")


def test_create_false_on_postgres_refuses_a_schema_without_workmem_tables(database_url):
    with pytest.raises(DataRootNotFound, match="schema nothing_here"):
        WorkingMemoryEngine(database_url=database_url, database_schema="nothing_here", create=False)
    with WorkingMemoryEngine(database_url=database_url, database_schema="made_here") as engine:
        engine.add_messages("s", talk(1, tag="s"))
    with WorkingMemoryEngine(database_url=database_url, database_schema="made_here", create=False) as engine:
        assert engine.session_exists("s")
    import psycopg

    with psycopg.connect(database_url) as conn:
        names = {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace")}
    assert "nothing_here" not in names and "made_here" in names


class GatedTopic(ExtractiveChatModel):
    """The extractive model, but a commit whose transcript names `topic` waits for `gate`."""

    topic: str = "slowtopic"
    gate: Any = None
    entered: Any = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate, self.entered = threading.Event(), threading.Event()

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        if any(self.topic in str(m.content) for m in messages):
            self.entered.set()
            assert self.gate.wait(30), "the gate was never opened"
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_join_commits_waits_for_one_session_or_for_all(make_engine):
    model = GatedTopic()
    engine = make_engine(model, keep_recent_count=2, commit_token_threshold=200)
    slow = engine.after_turn("slow", talk(4, tag="slowtopic"))
    assert model.entered.wait(10), "the slow session's background commit never reached the model"
    fast = engine.after_turn("fast", talk(4, tag="fast"))
    assert fast["task_id"] is not None
    engine.join_commits("fast")  # returns while the slow session's commit is still held
    assert engine.task(fast["task_id"])["status"] == "completed"
    assert engine.task(slow["task_id"])["status"] in ("pending", "running")
    model.gate.set()
    engine.join_commits()
    assert engine.task(slow["task_id"])["status"] == "completed"


def test_ajoin_commits_awaits_and_the_old_names_still_work(make_engine):
    engine = make_engine(None, keep_recent_count=2, commit_token_threshold=200)
    first = engine.after_turn("a", talk(4, tag="a"))
    asyncio.run(engine.ajoin_commits("a"))
    assert engine.task(first["task_id"])["status"] == "completed"
    with pytest.warns(DeprecationWarning, match="ajoin_commits"):
        asyncio.run(engine.await_commits())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.wait()  # the blocking spelling the middleware uses stays silent


@pytest.mark.parametrize(("setting", "value"), [("root", "   "), ("WORKMEM_HOME", "   "),
                                                ("WORKMEM_DATABASE_SCHEMA", "Bad;")])
def test_a_blank_root_or_a_bad_schema_in_the_environment_is_refused_and_makes_nothing(tmp_path, monkeypatch,
                                                                                     setting, value):
    monkeypatch.chdir(tmp_path)
    for name in ("WORKMEM_HOME", "WORKMEM_DATABASE_URL", "POSTGRES_URI", "WORKMEM_DATABASE_SCHEMA"):
        monkeypatch.delenv(name, raising=False)
    if setting == "root":
        kwargs = {"root": value}
    else:
        monkeypatch.setenv(setting, value)
        kwargs = {"root": str(tmp_path / "wm")} if setting == "WORKMEM_DATABASE_SCHEMA" else {}
    with pytest.raises(InvalidInput) as refused:
        WorkingMemoryEngine(**kwargs)
    assert refused.value.field == setting
    assert list(tmp_path.iterdir()) == [], "no folder named by spaces, no data root"
