"""Storage conformance: what every backend of the `Storage` protocol (state/storage.py) must do alike.

In the spirit of langgraph's `checkpoint-conformance`: one suite, every test run once per backend
through one parametrised fixture, `storage` (`file`: `open_storage(root)` on a fresh data root;
`postgres`: `open_storage(database_url=…)` on a fresh schema of the test server, which conftest's
`pg_server` provides or skips), talking to the storage only through the protocol (`sessions`,
`tasks`, `search`, `delete_session`) — never a backend-private attribute.

What it pins down:

- appends: stored messages numbered 1..n with `t<n>` turn ids, returned as they are read back;
  a refused batch stores nothing;
- the live rule: after `write_archive` each seq is in exactly one of the archive and the live list,
  before and after `drop_covered`; archives chain oldest first; `write_archive` is idempotent and
  refuses a wrong next id or messages that are not the oldest live ones (`InvalidInput`, nothing written);
- the session meta: its public fields, its counters, `pending_tokens` by its definition and never
  negative; `set_keep`, `hidden` / `set_hidden`;
- tasks (status vocabulary, checked fields) and leases (exclusive, re-entrant, renewed, released,
  taken over once expired);
- search: archived messages and spilled items are found, live ones are not;
- `delete_session` removes messages, tasks, the lease and search rows; `check()` of a healthy session
  reports nothing; bad ids and unknown sessions or archives give typed errors and leave data intact.

A new backend passes this file before anything above `state/` may use it.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from datetime import datetime
from typing import Any

import pytest
from engine_helpers import assistant, tool, user
from oracles import compute_pending_tokens, source_turn_range

from workmem.state.archive_object import ABSTRACT_CHARS
from workmem.state.errors import ArchiveNotFound, InvalidInput, SessionNotFound
from workmem.state.session_meta import PUBLIC_FIELDS
from workmem.state.storage import commit_thread_id, open_storage
from workmem.state.task_rules import TASK_STATUSES

WM = "# Working Memory\n\n## Session Title\nConformance\n\n## Current State\nChecking both backends.\n"
ABSTRACT = "Conformance — checking both backends."
CREATED_AT = "2026-01-02T03:04:05+00:00"
SHORT_TTL = 0.2  # seconds: a lease that expires while the test sleeps past it


@pytest.fixture(scope="module")
def conformance_database(pg_server):
    """One database for the module; each test gets a schema of its own in it (cheaper than a database each)."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(params=["file", "postgres"])
def storage(request, root):
    """A fresh, empty storage on the backend under test (non-durable: the suite checks behaviour, not fsyncs):
    a new data root, or a new schema of the module's database."""
    if request.param == "file":
        opened = open_storage(root, durable=False)
    else:
        opened = open_storage(database_url=request.getfixturevalue("conformance_database"),
                              database_schema=f"conformance_{uuid.uuid4().hex[:12]}", durable=False)
    yield opened
    opened.close()


def conversation(turns: int, word: str = "topic") -> list[dict[str, Any]]:
    """`turns` user/assistant pairs, each naming its own `<word><i>`."""
    return [m for i in range(turns) for m in (user(f"Question {i} about {word}{i}"),
                                              assistant(f"Answer {i}: detail {word}{i}"))]


def seqs(messages: list[dict[str, Any]]) -> list[int]:
    return [m["seq"] for m in messages]


def archive_for(sessions: Any, session_id: str, count: int, **extra: Any) -> tuple[dict[str, Any], list[dict]]:
    """The next archive object over the `count` oldest live messages, and those messages."""
    covered = sessions.live_messages(session_id)[:count]
    archive = {"archive_id": sessions.next_archive_id(session_id), "session_id": session_id, "task_id": None,
               "created_at": CREATED_AT, "source_turn_range": source_turn_range(covered), **extra}
    return archive, covered


def commit_oldest(storage: Any, session_id: str, count: int, *, keep: tuple[str, int] = ("messages", 2),
                  spilled: list[dict[str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    """What the persist node does, through the protocol: write the archive, index it, collect, record."""
    archive, covered = archive_for(storage.sessions, session_id, count, **extra)
    storage.sessions.write_archive(session_id, archive, covered, WM, ABSTRACT, spilled)
    storage.search.index_messages(session_id, archive["archive_id"], covered,
                                  storage.sessions.spilled_items(session_id, archive["archive_id"]))
    storage.sessions.drop_covered(session_id, covered[-1]["seq"])
    storage.sessions.record_commit(session_id, archive, keep)
    return archive


def snapshot(storage: Any, session_id: str) -> tuple[Any, ...]:
    """Everything a reader sees of a session, to prove a refused call changed nothing."""
    s = storage.sessions
    return (s.live_messages(session_id), s.list_archives(session_id), s.hidden(session_id),
            {k: v for k, v in s.meta(session_id).items() if k != "updated_at"})


# -- appends --------------------------------------------------------------------------------------------

def test_append_numbers_seqs_from_one_and_starts_a_turn_at_each_user_message(storage):
    first = storage.sessions.append("s", [{"role": "system", "content": "be brief"}, user("hi"),
                                          assistant("", [("c1", "read_file", '{"path": "a.py"}')]),
                                          tool("c1", "print(1)", "read_file"), assistant("done")])
    assert seqs(first) == [1, 2, 3, 4, 5]
    assert [m["turn_id"] for m in first] == ["t0", "t1", "t1", "t1", "t1"]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "tool", "assistant"]
    assert len({m["id"] for m in first}) == 5 and all(m["id"].startswith("m-") for m in first)
    assert all(isinstance(m["tokens"], int) and m["tokens"] > 0 for m in first)
    assert all(datetime.fromisoformat(m["created_at"]).tzinfo is not None for m in first)
    assert first[2]["parts"] == [{"type": "tool_call", "id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}]
    assert first[3]["parts"][0]["tool_call_id"] == "c1" and first[3]["parts"][0]["content"] == "print(1)"
    more = storage.sessions.append("s", [user("next"), assistant("ok")])
    assert seqs(more) == [6, 7] and [m["turn_id"] for m in more] == ["t2", "t2"], "numbering goes on across batches"


def test_live_messages_and_ranges_return_exactly_what_append_stored(storage):
    odd = [user("ünïcödé \u2028 \U0001F600 '; DROP TABLE messages; --"),
           {"role": "assistant", "content": "ok", "meta": {"n": 1.5, "deep": [[{"x": None}]], "flag": True}}]
    stored = storage.sessions.append("odd id / with ü", odd) + storage.sessions.append("odd id / with ü",
                                                                                       conversation(2))
    assert storage.sessions.live_messages("odd id / with ü") == stored
    assert storage.sessions.messages_in_range("odd id / with ü", 2, 4) == stored[1:4]
    assert storage.sessions.messages_in_range("odd id / with ü", 5, 99) == stored[4:]
    assert stored[1]["meta"]["deep"] == [[{"x": None}]] and stored[1]["meta"]["flag"] is True


def test_an_empty_batch_stores_nothing_and_creates_no_session(storage):
    assert storage.sessions.append("s", []) == []
    assert storage.sessions.session_exists("s") is False
    assert storage.sessions.list_sessions() == []
    with pytest.raises(SessionNotFound):
        storage.sessions.meta("s")


def test_a_refused_batch_leaves_the_session_as_it_was(storage):
    storage.sessions.append("s", conversation(2))
    before = snapshot(storage, "s")
    for batch, durable in (([user("ok"), {"role": "wizard", "content": "x"}], None),
                           ([user("ok"), {"role": "user", "parts": []}], None),
                           ([user("ok"), {"role": "user", "content": "bad \ud800 surrogate"}], None),
                           ([user("ok")], "yes")):
        with pytest.raises(InvalidInput):
            storage.sessions.append("s", batch, durable=durable)
        assert snapshot(storage, "s") == before, batch
    assert seqs(storage.sessions.append("s", [user("after")])) == [5], "no seq was used up by a refused batch"


def test_sessions_exist_once_written_are_listed_and_have_a_location(storage):
    assert storage.sessions.session_exists("a") is False
    storage.sessions.append("a", [user("x")])
    storage.sessions.append("Mixed Case/ID", [user("y")])
    assert storage.sessions.session_exists("a") and storage.sessions.session_exists("Mixed Case/ID")
    assert storage.sessions.session_exists("b") is False
    assert sorted(storage.sessions.list_sessions()) == ["Mixed Case/ID", "a"]
    places = {storage.sessions.location(s) for s in ("a", "Mixed Case/ID")}
    assert len(places) == 2 and all(isinstance(p, str) and p for p in places)


BAD_SESSION_IDS = ["", 7, None, b"bytes", "x" * 1025, "lone \ud800 surrogate"]


def test_a_bad_session_id_is_invalid_input_everywhere_and_writes_nothing(storage):
    storage.sessions.append("kept", [user("x")])
    for session_id in BAD_SESSION_IDS:
        calls = [(storage.sessions.append, session_id, [user("x")]), (storage.sessions.session_exists, session_id),
                 (storage.sessions.meta, session_id), (storage.sessions.live_messages, session_id),
                 (storage.tasks.create_task, session_id), (storage.tasks.acquire_lease, session_id, "t", "me"),
                 (storage.search.search, session_id, "x"), (storage.delete_session, session_id)]
        if session_id is not None:  # list_tasks(None) lists every session's tasks
            calls.append((storage.tasks.list_tasks, session_id))
        for method, *args in calls:
            with pytest.raises(InvalidInput) as err:
                method(*args)
            assert err.value.field == "session_id", (session_id, method.__name__)
    assert storage.sessions.list_sessions() == ["kept"] and storage.tasks.list_tasks() == []


def test_every_read_of_an_unknown_session_is_session_not_found(storage):
    storage.sessions.append("kept", conversation(2))
    archive, covered = archive_for(storage.sessions, "kept", 2)
    s = storage.sessions
    calls = {"meta": lambda: s.meta("nobody"), "live_messages": lambda: s.live_messages("nobody"),
             "messages_in_range": lambda: s.messages_in_range("nobody", 1, 5),
             "set_keep": lambda: s.set_keep("nobody", ("messages", 3)), "hidden": lambda: s.hidden("nobody"),
             "set_hidden": lambda: s.set_hidden("nobody", {1}, set()),
             "last_complete_archive": lambda: s.last_complete_archive("nobody"),
             "latest_overview": lambda: s.latest_overview("nobody"),
             "next_archive_id": lambda: s.next_archive_id("nobody"),
             "list_archives": lambda: s.list_archives("nobody"),
             "read_archive": lambda: s.read_archive("nobody", "archive_001"),
             "archive_messages": lambda: s.archive_messages("nobody", "archive_001"),
             "spilled_items": lambda: s.spilled_items("nobody", "archive_001"),
             "write_archive": lambda: s.write_archive("nobody", {**archive, "session_id": "nobody"}, covered, WM,
                                                      ABSTRACT),
             "drop_covered": lambda: s.drop_covered("nobody", 0),
             "record_commit": lambda: s.record_commit("nobody", {**archive, "session_id": "nobody"}, 2),
             "check": lambda: s.check("nobody"), "problems": lambda: s.problems("nobody"),
             "delete_session": lambda: storage.delete_session("nobody")}
    for name, call in calls.items():
        with pytest.raises(SessionNotFound) as err:
            call()
        assert err.value.session_id == "nobody", name
    assert s.session_exists("nobody") is False, "no read creates the session"
    assert s.list_sessions() == ["kept"] and len(s.live_messages("kept")) == 4


# -- the session meta -----------------------------------------------------------------------------------

def test_meta_has_the_public_fields_and_counts_every_append(storage):
    stored = storage.sessions.append("s", conversation(3))
    meta = storage.sessions.meta("s")
    assert set(meta) == set(PUBLIC_FIELDS) and meta["session_id"] == "s"
    assert (meta["next_seq"], meta["message_count"], meta["total_message_count"], meta["commit_count"]) == (7, 6, 6, 0)
    assert meta["last_archive"] is None and meta["last_commit_at"] is None
    assert meta["keep"] == ["messages", 10] and meta["keep_recent_count"] == 10, "the engine's default keep"
    assert meta["live_tokens"] == sum(m["tokens"] for m in stored)
    assert datetime.fromisoformat(meta["created_at"]) <= datetime.fromisoformat(meta["updated_at"])


def test_meta_counts_after_archives(storage):
    storage.sessions.append("s", conversation(5))
    commit_oldest(storage, "s", 4, keep=("messages", 3))
    meta = storage.sessions.meta("s")
    counts = (meta["next_seq"], meta["message_count"], meta["total_message_count"], meta["commit_count"])
    assert counts == (11, 6, 10, 1)
    assert meta["last_archive"] == {"id": "archive_001", "end_seq": 4}
    assert datetime.fromisoformat(meta["last_commit_at"]) == datetime.fromisoformat(CREATED_AT)
    assert meta["keep"] == ["messages", 3] and meta["keep_recent_count"] == 3
    commit_oldest(storage, "s", 6, keep=("messages", 0))
    meta = storage.sessions.meta("s")
    assert (meta["message_count"], meta["total_message_count"], meta["commit_count"]) == (0, 10, 2)
    assert meta["last_archive"] == {"id": "archive_002", "end_seq": 10}
    assert meta["pending_tokens"] == 0 and meta["live_tokens"] == 0


def test_meta_right_after_write_archive_already_follows_the_live_rule(storage):
    """A crash between writing the archive and `record_commit` leaves a meta that agrees with the archive."""
    storage.sessions.append("s", conversation(3))
    archive, covered = archive_for(storage.sessions, "s", 4)
    storage.sessions.write_archive("s", archive, covered, WM, ABSTRACT)
    meta = storage.sessions.meta("s")
    assert (meta["message_count"], meta["total_message_count"], meta["commit_count"]) == (2, 6, 1)
    assert meta["last_archive"] == {"id": "archive_001", "end_seq": 4}
    assert meta["live_tokens"] == sum(m["tokens"] for m in storage.sessions.live_messages("s"))
    assert storage.sessions.next_archive_id("s") == "archive_002"


KEEPS = [("messages", 3), ("messages", 0), ("messages", 50), ("turns", 2), ("turns", 0), ("tokens", 25),
         ("tokens", 0)]


def test_pending_tokens_follow_the_keep_window_and_are_never_negative(storage):
    for n, keep in enumerate(KEEPS):
        session = f"s{n}"
        storage.sessions.append(session, [user("opening words")])
        assert storage.sessions.set_keep(session, keep)["keep"] == list(keep)
        for batch in range(4):
            storage.sessions.append(session, [user(f"question {batch} " * (batch + 1)), assistant(f"answer {batch}")])
            meta = storage.sessions.meta(session)
            expected = compute_pending_tokens(storage.sessions.live_messages(session), keep)
            assert meta["pending_tokens"] == expected >= 0, (keep, batch)
        commit_oldest(storage, session, 5, keep=keep)
        meta, live = storage.sessions.meta(session), storage.sessions.live_messages(session)
        assert meta["pending_tokens"] == compute_pending_tokens(live, keep) >= 0, keep
        assert meta["live_tokens"] == sum(m["tokens"] for m in live), keep


def test_set_keep_refuses_bad_forms_and_keeps_the_old_window(storage):
    storage.sessions.append("s", conversation(4))
    storage.sessions.set_keep("s", ("turns", 1))
    before = storage.sessions.meta("s")
    for bad in (("weeks", 3), ("messages", -1), ("messages", 2.5), ("tokens", True), "ten", None):
        with pytest.raises(InvalidInput):
            storage.sessions.set_keep("s", bad)
    after = storage.sessions.meta("s")
    assert (after["keep"], after["pending_tokens"]) == (before["keep"], before["pending_tokens"]) == (
        ["turns", 1], compute_pending_tokens(storage.sessions.live_messages("s"), ("turns", 1)))
    assert storage.sessions.set_keep("s", ("messages", 10**6))["keep"] == ["messages", 10_000], "clamped"


# -- hidden messages ------------------------------------------------------------------------------------

def test_hidden_holds_only_live_seqs_and_shown_wins(storage):
    s = storage.sessions
    s.append("s", conversation(4))
    assert s.hidden("s") == set()
    assert s.set_hidden("s", {1, 3, 6, 42, "x", None}, set()) == {1, 3, 6}, "unknown seqs name nothing"
    assert s.set_hidden("s", {7}, {6, 7}) == {1, 3}, "shown wins over hidden"
    assert s.hidden("s") == {1, 3}
    assert s.set_hidden("s", set(), {1}) == {3} == s.hidden("s")
    assert seqs(s.live_messages("s")) == list(range(1, 9)), "hiding never removes a message from the log"
    commit_oldest(storage, "s", 4)
    assert s.hidden("s") == set(), "an archived seq is no longer a hidden live message"
    assert s.set_hidden("s", {2, 5}, set()) == {5}


# -- archives and the live rule -------------------------------------------------------------------------

def test_after_write_archive_each_seq_is_in_exactly_one_of_archive_and_live(storage):
    s = storage.sessions
    s.append("s", conversation(5))
    archive, covered = archive_for(s, "s", 6)
    s.write_archive("s", archive, covered, WM, ABSTRACT)
    for stage in ("before drop_covered", "after drop_covered"):
        archived, live = seqs(s.archive_messages("s", "archive_001")), seqs(s.live_messages("s"))
        assert archived == [1, 2, 3, 4, 5, 6] and live == [7, 8, 9, 10], stage
        assert not set(archived) & set(live) and sorted(archived + live) == list(range(1, 11)), stage
        assert s.archive_messages("s", "archive_001") == covered, stage
        assert seqs(s.messages_in_range("s", 5, 8)) == [5, 6, 7, 8], stage
        s.drop_covered("s", 6)


def test_drop_covered_refuses_seqs_that_are_not_archived(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    for bad in (1, -1, True, "2"):
        with pytest.raises(InvalidInput) as err:
            s.drop_covered("s", bad)
        assert err.value.field == "end_seq"
    commit_oldest(storage, "s", 2)
    with pytest.raises(InvalidInput, match="not archived"):
        s.drop_covered("s", 3)
    assert seqs(s.live_messages("s")) == [3, 4, 5, 6]
    assert s.drop_covered("s", 2) >= 0 and seqs(s.live_messages("s")) == [3, 4, 5, 6], "a second GC is harmless"


def test_archive_reads_agree_with_what_was_written(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    assert (s.last_complete_archive("s"), s.latest_overview("s"), s.list_archives("s")) == (None, None, [])
    assert s.next_archive_id("s") == "archive_001"
    long_abstract = "Line one\nline   two " + "word " * 100
    archive, covered = archive_for(s, "s", 4, task_id="task-1")
    s.write_archive("s", archive, covered, WM, long_abstract)
    stored_abstract = " ".join(long_abstract.split())[:ABSTRACT_CHARS]
    read = s.read_archive("s", "archive_001")
    assert (read["archive_id"], read["session_id"], read["task_id"]) == ("archive_001", "s", "task-1")
    assert read["source_turn_range"] == {"start_turn_id": "t1", "end_turn_id": "t2", "start_seq": 1, "end_seq": 4}
    assert read["overview"] == WM and read["working_summary"]["markdown"] == WM
    assert read["working_summary"]["sections"]["session_title"] == "Conformance"
    assert read["abstract"] == stored_abstract and "\n" not in read["abstract"]
    assert s.read_archive("s", "archive_1") == read, "a loosely typed id finds the same archive"
    assert s.last_complete_archive("s")["archive_id"] == "archive_001"
    assert s.last_complete_archive("s")["working_summary"]["markdown"] == WM
    assert s.latest_overview("s") == WM
    assert s.list_archives("s") == [{"archive_id": "archive_001", "abstract": stored_abstract,
                                     "start_seq": 1, "end_seq": 4}]
    assert s.next_archive_id("s") == "archive_002"


def test_archives_chain_oldest_first(storage):
    s = storage.sessions
    s.append("s", conversation(6))
    commit_oldest(storage, "s", 4)
    s.append("s", [user("late question"), assistant("late answer")])
    commit_oldest(storage, "s", 6)
    assert [(a["archive_id"], a["start_seq"], a["end_seq"]) for a in s.list_archives("s")] == [
        ("archive_001", 1, 4), ("archive_002", 5, 10)]
    assert seqs(s.archive_messages("s", "archive_002")) == list(range(5, 11))
    assert seqs(s.live_messages("s")) == [11, 12, 13, 14]
    assert seqs(s.messages_in_range("s", 3, 12)) == list(range(3, 13)), "one range across two archives and live"
    assert seqs(s.messages_in_range("s", 1, 14)) == list(range(1, 15))
    assert s.last_complete_archive("s")["archive_id"] == "archive_002" and s.next_archive_id("s") == "archive_003"


def test_write_archive_is_idempotent(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    archive, covered = archive_for(s, "s", 4)
    s.write_archive("s", archive, covered, WM, ABSTRACT)
    before = snapshot(storage, "s")
    s.write_archive("s", archive, covered, "# Working Memory\n\nanother\n", "another abstract")
    s.write_archive("s", archive, s.archive_messages("s", "archive_001"), WM, ABSTRACT)
    assert snapshot(storage, "s") == before
    assert s.read_archive("s", "archive_001")["abstract"] == ABSTRACT and s.latest_overview("s") == WM


def test_write_archive_refuses_a_wrong_next_archive_id(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    before = snapshot(storage, "s")
    archive, covered = archive_for(s, "s", 2)
    for wrong in ("archive_002", "archive_010"):
        with pytest.raises(InvalidInput, match="archive_001") as err:
            s.write_archive("s", {**archive, "archive_id": wrong}, covered, WM, ABSTRACT)
        assert err.value.field == "archive.archive_id"
    assert snapshot(storage, "s") == before
    commit_oldest(storage, "s", 2)
    live = s.live_messages("s")[:2]
    with pytest.raises(InvalidInput, match="archive_002"):
        s.write_archive("s", {**archive, "archive_id": "archive_003", "source_turn_range": source_turn_range(live)},
                        live, WM, ABSTRACT)
    # archive_001 again, over other messages: it is complete, so the write is the idempotent no-op
    s.write_archive("s", {**archive, "source_turn_range": source_turn_range(live)}, live, WM, ABSTRACT)
    assert seqs(s.live_messages("s")) == [3, 4, 5, 6] and seqs(s.archive_messages("s", "archive_001")) == [1, 2]
    assert len(s.list_archives("s")) == 1


def test_write_archive_refuses_messages_that_are_not_the_oldest_live_ones(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    live = s.live_messages("s")
    before = snapshot(storage, "s")
    gap = [live[0], live[2]]
    for covered in (live[1:3], live[2:], gap):
        archive = {"archive_id": "archive_001", "session_id": "s", "created_at": CREATED_AT,
                   "source_turn_range": source_turn_range(covered)}
        with pytest.raises(InvalidInput) as err:
            s.write_archive("s", archive, covered, WM, ABSTRACT)
        assert err.value.field == "messages" and "oldest live messages" in err.value.reason, seqs(covered)
        assert snapshot(storage, "s") == before, "rolled back whole"
    with pytest.raises(ArchiveNotFound):
        s.read_archive("s", "archive_001")


def test_write_archive_refuses_malformed_input_before_writing(storage):
    s = storage.sessions
    s.append("s", conversation(2))
    archive, covered = archive_for(s, "s", 2)
    before = snapshot(storage, "s")
    bad_calls = {
        "archive": ("not an archive", covered, WM, ABSTRACT),
        "archive.session_id": ({**archive, "session_id": "other"}, covered, WM, ABSTRACT),
        "archive.source_turn_range": ({**archive, "source_turn_range": None}, covered, WM, ABSTRACT),
        "archive.source_turn_range.end_seq": ({**archive, "source_turn_range": {"start_seq": 1, "end_seq": 0}},
                                              covered, WM, ABSTRACT),
        "messages": ({**archive}, [], WM, ABSTRACT),
        "messages[1].seq": ({**archive}, [covered[1], covered[0]], WM, ABSTRACT),
        "overview": ({**archive}, covered, None, ABSTRACT),
        "abstract": ({**archive}, covered, WM, 12),
    }
    for field, args in bad_calls.items():
        with pytest.raises(InvalidInput) as err:
            s.write_archive("s", *args)
        assert err.value.field == field
    with pytest.raises(InvalidInput):  # the covered range says 1..3, the messages are 1..2
        s.write_archive("s", {**archive, "source_turn_range": {"start_seq": 1, "end_seq": 3}}, covered, WM, ABSTRACT)
    assert snapshot(storage, "s") == before and s.next_archive_id("s") == "archive_001"


UNKNOWN_ARCHIVE_IDS = ["archive_002", "archive_999", "archive_0", "nope", "../../etc/passwd", "archive_001/../x", ""]


def test_an_unknown_archive_id_is_archive_not_found_and_changes_nothing(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    with pytest.raises(ArchiveNotFound):  # before the first commit
        s.read_archive("s", "archive_001")
    commit_oldest(storage, "s", 2)  # archive_001 exists; the others do not
    before = snapshot(storage, "s")
    for archive_id in UNKNOWN_ARCHIVE_IDS:
        for read in (s.read_archive, s.archive_messages, s.spilled_items):
            with pytest.raises(ArchiveNotFound) as err:
                read("s", archive_id)
            assert (err.value.archive_id, err.value.session_id) == (archive_id, "s"), read
        with pytest.raises(ArchiveNotFound):
            s.record_commit("s", {"archive_id": archive_id}, 2)
    for not_a_string in (7, None, ["archive_001"]):
        with pytest.raises(InvalidInput):
            s.read_archive("s", not_a_string)
    assert storage.search.search("s", "topic0", archive_id="archive_999") == [], "a search there finds nothing"
    assert snapshot(storage, "s") == before


def test_record_commit_sets_the_keep_of_the_newest_archive(storage):
    s = storage.sessions
    s.append("s", conversation(4))
    archive, covered = archive_for(s, "s", 4)
    s.write_archive("s", archive, covered, WM, ABSTRACT)
    meta = s.record_commit("s", archive, ("turns", 1))
    assert meta == {**s.meta("s"), "updated_at": meta["updated_at"]}
    assert meta["keep"] == ["turns", 1] and meta["keep_recent_count"] is None
    assert meta["pending_tokens"] == compute_pending_tokens(s.live_messages("s"), ("turns", 1))
    assert s.record_commit("s", archive, 3)["keep"] == ["messages", 3], "an int keeps messages"
    with pytest.raises(InvalidInput):
        s.record_commit("s", "archive_001", 3)
    with pytest.raises(InvalidInput):
        s.record_commit("s", archive, ("weeks", 1))
    assert s.meta("s")["keep"] == ["messages", 3]


def test_spilled_items_round_trip_and_are_searchable_as_memory(storage):
    s = storage.sessions
    s.append("s", conversation(3))
    spilled = [{"section": "Key Facts & Decisions", "item": "The staging host is kestrel-7."},
               {"section": "Key Facts & Decisions", "item": "Deploys happen on Tuesdays."},
               {"section": "Open Issues", "item": "Rotate the wombat certificate."}]
    commit_oldest(storage, "s", 4, spilled=spilled)
    assert s.spilled_items("s", "archive_001") == spilled
    commit_oldest(storage, "s", 2)
    assert s.spilled_items("s", "archive_002") == [], "an archive that spilled nothing"
    hits = storage.search.search("s", "wombat certificate")
    assert hits and hits[0]["role"] == "memory" and hits[0]["seq"] is None
    assert hits[0]["archive_id"] == "archive_001" and "wombat" in hits[0]["content"]
    assert hits[0]["section"] == "Open Issues"


def test_spilled_items_come_back_verbatim_in_the_order_written(storage, request):
    """What a commit spilled is stored as it was given: a Current State remainder keeps its line breaks and
    spacing, items stay in the spill's order, and nothing is dropped."""
    if request.node.callspec.params["storage"] == "file":
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "file backend: spilled.md is rendered one '- item' line per item under section headings, so "
            "spilled_items() collapses whitespace inside an item (newlines, double spaces) and regroups the "
            "items in SECTIONS order; Postgres returns them verbatim, in the order written")))
    s = storage.sessions
    s.append("s", conversation(2))
    spilled = [{"section": "Open Issues", "item": "Rotate the certificate."},
               {"section": "Current State", "item": "Deploying to staging.\nNext: run  the smoke tests."},
               {"section": "Key Facts & Decisions", "item": "Release on 2026-02-01."}]
    commit_oldest(storage, "s", 2, spilled=spilled)
    assert s.spilled_items("s", "archive_001") == spilled


# -- search ---------------------------------------------------------------------------------------------

def test_search_finds_archived_messages_and_not_live_ones(storage):
    s = storage.sessions
    s.append("s", [user("We picked zebrafish as the model organism."), assistant("Noted: zebrafish."),
                   user("And the quokka study?"), assistant("The quokka study waits.")])
    archive, covered = archive_for(s, "s", 2)
    s.write_archive("s", archive, covered, WM, ABSTRACT)
    assert storage.search.index_messages("s", "archive_001", covered, s.spilled_items("s", "archive_001")) == 2
    s.drop_covered("s", 2)
    hits = storage.search.search("s", "zebrafish")
    assert sorted(h["seq"] for h in hits) == [1, 2]
    assert {"archive_id", "seq", "turn_id", "role", "content"} <= set(hits[0])
    first = next(h for h in hits if h["seq"] == 1)
    assert (first["archive_id"], first["turn_id"], first["role"]) == ("archive_001", "t1", "user")
    assert "zebrafish" in first["content"]
    assert storage.search.search("s", "quokka") == [], "live messages are not in the index"
    assert storage.search.search("s", "platypus") == []
    assert storage.search.search("s", "") == []


def test_search_is_scoped_to_its_session_and_archive(storage):
    for session in ("a", "b"):
        storage.sessions.append(session, [user("first about heron"), assistant("heron noted")])
        commit_oldest(storage, session, 2, keep=("messages", 0))
        storage.sessions.append(session, [user("second about heron"), assistant("heron again")])
        commit_oldest(storage, session, 2, keep=("messages", 0))
    storage.sessions.append("c", [user("heron live only")])
    assert len(storage.search.search("a", "heron")) == 4
    assert {h["archive_id"] for h in storage.search.search("a", "heron", archive_id="archive_2")} == {"archive_002"}
    assert [h["archive_id"] for h in storage.search.search("a", "heron", limit=1)] == ["archive_002"], "newest first"
    assert storage.search.search("c", "heron") == [] and storage.search.search("nobody", "heron") == []


def test_search_refuses_bad_arguments(storage):
    storage.sessions.append("s", conversation(2))
    commit_oldest(storage, "s", 2)
    for kwargs, field in (({"query": 7}, "query"), ({"query": None}, "query"), ({"query": "x", "limit": 0}, "limit"),
                          ({"query": "x", "limit": 1001}, "limit"), ({"query": "x", "limit": True}, "limit"),
                          ({"query": "x", "archive_id": "nope"}, "archive_id")):
        with pytest.raises(InvalidInput) as err:
            storage.search.search("s", **kwargs)
        assert err.value.field == field, kwargs
    assert storage.search.search("s", 'topic0" OR * NEAR(') != [], "the query is literal text, never syntax"
    with pytest.raises(InvalidInput):
        storage.search.index_messages("s", "archive_001", "not a list")


# -- tasks ----------------------------------------------------------------------------------------------

def test_create_task_fills_the_defaults_and_refuses_a_duplicate_id(storage):
    task = storage.tasks.create_task("Some Session", task_id="t1", archive_id="archive_7")
    assert task["task_id"] == "t1" and task["session_id"] == "Some Session"
    assert (task["status"], task["attempts"], task["error"], task["result"]) == ("pending", 0, None, None)
    assert task["archive_id"] == "archive_007", "stored canonical"
    assert task["thread_id"] == commit_thread_id("Some Session", "t1")
    assert datetime.fromisoformat(task["created_at"]).tzinfo is not None
    assert storage.tasks.get_task("t1") == task
    assert storage.tasks.get_task("missing") is None
    generated = storage.tasks.create_task("s", thread_id="studio:abc", status="running")
    assert generated["task_id"] and generated["task_id"] != "t1" and generated["thread_id"] == "studio:abc"
    with pytest.raises(InvalidInput) as err:
        storage.tasks.create_task("s", task_id="t1")
    assert err.value.field == "task_id"
    assert storage.tasks.get_task("t1") == task, "the first row is untouched"


def test_update_task_round_trips_every_field(storage):
    storage.tasks.create_task("s", task_id="t1")
    secret = "boom: sk-proj-abcdefghijklmnop1234 and Bearer abc.def.ghijkl123 "
    row = storage.tasks.update_task("t1", status="failed", error=secret + "x" * 1000, attempts=2,
                                    result={"route": ["persist"], "n": None, "deep": {"k": [1, 2.5, True]}},
                                    archive_id="archive_3", thread_id="s/commit/other")
    assert row == storage.tasks.get_task("t1")
    assert (row["status"], row["attempts"], row["archive_id"], row["thread_id"]) == (
        "failed", 2, "archive_003", "s/commit/other")
    assert row["result"] == {"route": ["persist"], "n": None, "deep": {"k": [1, 2.5, True]}}
    assert "abcdefghijklmnop1234" not in row["error"] and "ghijkl123" not in row["error"]
    assert len(row["error"]) <= 500
    assert row["updated_at"] >= row["created_at"]
    cleared = storage.tasks.update_task("t1", error=None, result=None, archive_id=None, thread_id=None)
    assert (cleared["error"], cleared["result"], cleared["archive_id"], cleared["thread_id"]) == (None,) * 4
    assert cleared["status"] == "failed" and cleared["attempts"] == 2, "fields not named stay"


def test_every_status_is_accepted_and_filters_list_tasks(storage):
    for i, status in enumerate(TASK_STATUSES):
        assert storage.tasks.create_task("a" if i % 2 else "b", task_id=f"c{i}", status=status)["status"] == status
        storage.tasks.create_task("a", task_id=f"u{i}")
        assert storage.tasks.update_task(f"u{i}", status=status)["status"] == status
    for i, status in enumerate(TASK_STATUSES):
        assert {t["task_id"] for t in storage.tasks.list_tasks(status=status)} == {f"c{i}", f"u{i}"}, status
        assert {t["status"] for t in storage.tasks.list_tasks("a", status=status)} <= {status}
    assert len(storage.tasks.list_tasks()) == 2 * len(TASK_STATUSES)


def test_bad_task_fields_and_statuses_are_invalid_input_and_change_nothing(storage):
    storage.tasks.create_task("s", task_id="t")
    before = storage.tasks.get_task("t")
    bad_updates = [({"status": "done"}, "status"), ({"status": None}, "status"), ({"attempts": -1}, "attempts"),
                   ({"attempts": True}, "attempts"), ({"attempts": 1.5}, "attempts"), ({"colour": "red"}, "fields"),
                   ({"result": {"x": object()}}, "result"), ({"result": float("nan")}, "result"),
                   ({"archive_id": "../x"}, "archive_id"), ({"status": "completed", "owner": "x"}, "fields")]
    for fields, field in bad_updates:
        with pytest.raises(InvalidInput) as err:
            storage.tasks.update_task("t", **fields)
        assert err.value.field == field, fields
    assert storage.tasks.get_task("t") == before
    for bad in ("done", "", None, "PENDING"):
        with pytest.raises(InvalidInput):
            storage.tasks.create_task("s", task_id=f"new-{bad}", status=bad)
        with pytest.raises(InvalidInput):
            storage.tasks.list_tasks(status=bad if bad is not None else "nope")
    for bad_id in ("", 7):
        with pytest.raises(InvalidInput):
            storage.tasks.create_task("s", task_id=bad_id)
    with pytest.raises(InvalidInput, match="no such task"):
        storage.tasks.update_task("missing", status="failed")
    assert [t["task_id"] for t in storage.tasks.list_tasks()] == ["t"]


def test_list_tasks_is_oldest_first_per_session(storage):
    for name, session in (("t1", "a"), ("t2", "b"), ("t3", "a"), ("t4", "a"), ("t5", "b")):
        storage.tasks.create_task(session, task_id=name)
    storage.tasks.update_task("t1", status="completed")  # updating does not reorder
    assert [t["task_id"] for t in storage.tasks.list_tasks()] == ["t1", "t2", "t3", "t4", "t5"]
    assert [t["task_id"] for t in storage.tasks.list_tasks("a")] == ["t1", "t3", "t4"]
    assert [t["task_id"] for t in storage.tasks.list_tasks("a", status="pending")] == ["t3", "t4"]
    assert storage.tasks.list_tasks("nobody") == []


def test_threads_to_prune_are_completed_commits_beyond_the_newest_kept(storage):
    for name in "abcd":
        storage.tasks.create_task("s", task_id=name)
        storage.tasks.update_task(name, status="completed")
    storage.tasks.create_task("s", task_id="failed-one")
    storage.tasks.update_task("failed-one", status="failed")
    storage.tasks.create_task("s", task_id="studio", thread_id="studio:thread")
    storage.tasks.update_task("studio", status="completed")
    # the newest 2 completed tasks (studio, d) are kept whatever their thread; a Studio thread is never pruned here
    assert [t["task_id"] for t in storage.tasks.threads_to_prune(2)] == ["c", "b", "a"]
    assert [t["task_id"] for t in storage.tasks.threads_to_prune(0)] == ["d", "c", "b", "a"]
    assert storage.tasks.threads_to_prune(0)[0]["thread_id"] == commit_thread_id("s", "d")
    storage.tasks.forget_thread("b")
    assert storage.tasks.get_task("b")["thread_id"] is None
    assert [t["task_id"] for t in storage.tasks.threads_to_prune(0)] == ["d", "c", "a"]


# -- leases ---------------------------------------------------------------------------------------------

def test_a_lease_is_exclusive_and_reentrant_only_for_its_own_task_and_owner(storage):
    tasks = storage.tasks
    assert tasks.lease_holder("s") is None
    assert tasks.acquire_lease("s", "t1", "me", ttl=60) is None
    assert tasks.acquire_lease("s", "t1", "me", ttl=60) is None, "ours already"
    assert tasks.acquire_lease("s", "t2", "me", ttl=60) == "t1", "another task gets the holder"
    assert tasks.acquire_lease("s", "t1", "another process", ttl=60) == "t1", "same task, another owner"
    holder = tasks.lease_holder("s")
    assert (holder["task_id"], holder["owner"], holder["pid"], holder["host"]) == (
        "t1", "me", os.getpid(), socket.gethostname())
    assert abs(float(holder["expires_at"]) - (time.time() + 60)) < 30
    assert tasks.acquire_lease("other", "t3", "me") is None, "sessions are independent"
    assert tasks.lease_holder("other")["task_id"] == "t3" and tasks.lease_holder("s")["task_id"] == "t1"
    for bad_task in ("", None):
        with pytest.raises(InvalidInput):
            tasks.acquire_lease("s", bad_task, "me")
    assert tasks.lease_holder("s")["task_id"] == "t1"


def test_renew_extends_a_lease_and_only_its_holder_releases_it(storage):
    tasks = storage.tasks
    assert tasks.acquire_lease("s", "t1", "me", ttl=SHORT_TTL) is None
    assert tasks.renew_lease("s", "t1", ttl=60) is True
    time.sleep(SHORT_TTL * 2)
    assert tasks.lease_holder("s")["task_id"] == "t1", "renewed past its first expiry"
    assert tasks.acquire_lease("s", "t2", "you") == "t1"
    assert tasks.renew_lease("s", "t2") is False, "only the holder renews"
    assert tasks.renew_lease("nobody", "t1") is False
    tasks.release_lease("s", "t2")
    assert tasks.lease_holder("s")["task_id"] == "t1", "only the holder releases"
    tasks.release_lease("s", "t1")
    assert tasks.lease_holder("s") is None
    tasks.release_lease("s", "t1")  # releasing a free lease is harmless
    assert tasks.acquire_lease("s", "t2", "you") is None and tasks.lease_holder("s")["task_id"] == "t2"


def test_an_expired_lease_is_taken_over(storage):
    tasks = storage.tasks
    assert tasks.acquire_lease("s", "t1", "dead process", ttl=SHORT_TTL) is None
    time.sleep(SHORT_TTL * 2)
    assert tasks.lease_holder("s") is None, "an expired lease has no holder"
    assert tasks.acquire_lease("s", "t2", "me", ttl=60) is None, "taken over"
    assert tasks.lease_holder("s")["task_id"] == "t2"
    assert tasks.renew_lease("s", "t1") is False, "the old holder learns it lost the lease"
    tasks.release_lease("s", "t1")
    assert tasks.lease_holder("s")["task_id"] == "t2"


def test_bad_ttls_are_invalid_input(storage):
    for ttl in (0, -1, True, "60", None, 10**9, float("nan")):
        with pytest.raises(InvalidInput) as err:
            storage.tasks.acquire_lease("s", "t", "me", ttl=ttl)
        assert err.value.field == "ttl"
    assert storage.tasks.lease_holder("s") is None
    assert storage.tasks.acquire_lease("s", "t", "me", ttl=1) is None
    with pytest.raises(InvalidInput):
        storage.tasks.renew_lease("s", "t", ttl=0)


# -- delete ---------------------------------------------------------------------------------------------

def test_delete_session_removes_messages_tasks_lease_and_search_rows(storage):
    for session in ("gone", "kept"):
        storage.sessions.append(session, [user(f"the pelican plan of {session}"), assistant("pelican agreed"),
                                          user("anything else?"), assistant("no")])
        commit_oldest(storage, session, 2, spilled=[{"section": "Open Issues", "item": f"pelican permit {session}"}],
                      task_id=f"{session}-task")
        storage.tasks.create_task(session, task_id=f"{session}-task", archive_id="archive_001", status="completed")
        storage.tasks.create_task(session, task_id=f"{session}-running", status="running")
        storage.sessions.set_hidden(session, {3}, set())
    assert storage.tasks.acquire_lease("gone", "gone-running", "me") is None
    assert len(storage.search.search("gone", "pelican")) == 3

    storage.delete_session("gone")

    assert storage.sessions.session_exists("gone") is False and storage.sessions.list_sessions() == ["kept"]
    with pytest.raises(SessionNotFound):
        storage.sessions.meta("gone")
    assert storage.tasks.list_tasks("gone") == [] and storage.tasks.get_task("gone-task") is None
    assert storage.tasks.lease_holder("gone") is None
    assert storage.search.search("gone", "pelican") == []
    assert len(storage.search.search("kept", "pelican")) == 3, "another session keeps everything"
    assert seqs(storage.sessions.live_messages("kept")) == [3, 4] and storage.sessions.hidden("kept") == {3}
    assert [t["task_id"] for t in storage.tasks.list_tasks("kept")] == ["kept-task", "kept-running"]

    again = storage.sessions.append("gone", [user("a new start")])
    assert seqs(again) == [1] and again[0]["turn_id"] == "t1", "the id starts over at seq 1"
    meta = storage.sessions.meta("gone")
    assert (meta["commit_count"], meta["last_archive"], meta["total_message_count"]) == (0, None, 1)
    assert storage.sessions.hidden("gone") == set() and storage.sessions.list_archives("gone") == []
    assert storage.search.search("gone", "pelican") == [], "the old rows never come back"


def test_delete_of_an_unknown_session_is_session_not_found_and_touches_nothing(storage):
    storage.sessions.append("kept", conversation(2))
    storage.tasks.create_task("nobody", task_id="orphan")
    with pytest.raises(SessionNotFound):
        storage.delete_session("nobody")
    assert storage.sessions.list_sessions() == ["kept"] and len(storage.sessions.live_messages("kept")) == 4
    assert storage.tasks.get_task("orphan") is not None


# -- check ----------------------------------------------------------------------------------------------

def test_check_of_a_healthy_session_reports_nothing(storage):
    s = storage.sessions
    s.append("s", conversation(4))
    assert s.check("s") == [] and s.problems("s") == []
    commit_oldest(storage, "s", 4, spilled=[{"section": "Open Issues", "item": "Ship the release."}])
    s.append("s", conversation(2, "later"))
    commit_oldest(storage, "s", 6)
    s.set_hidden("s", {13}, set())
    s.set_keep("s", ("turns", 1))
    assert s.check("s") == [] and s.problems("s") == []
    assert seqs(s.messages_in_range("s", 1, 99)) == list(range(1, 13))
