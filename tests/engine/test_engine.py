"""WorkingMemoryEngine lifecycle: background commits, failures, compact, stripping injected content, bad input."""

from __future__ import annotations

import os
import threading

import pytest
from engine_helpers import GatedModel, assistant, pairing_problems, talk, tool, user
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.graphs.context.assemble import SUMMARY_PREFIX
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import ArchiveNotFound, InvalidInput, SessionNotFound


def test_after_turn_returns_before_the_background_commit_finishes(backend):
    model = GatedModel()
    with backend.engine(model, durable=False, keep_recent_count=2, commit_token_threshold=200) as engine:
        result = engine.after_turn("bg", talk(4))
        # after_turn has returned while the model is still held: the commit runs in the background
        assert model.entered.wait(10), "no background commit reached the model"
        assert not model.gate.is_set() and not model.timed_out
        assert result["task_id"] is not None and result["stored"] == 8
        assert engine.task(result["task_id"])["status"] in ("pending", "running")
        assert not engine.assemble("bg")["stats"]["summary_included"]
        model.gate.set()
        engine.wait()
        assert not model.timed_out
        assert engine.task(result["task_id"])["status"] == "completed"
        after = engine.assemble("bg")
        assert after["stats"]["summary_included"] and after["stats"]["archives_total"] == 1
        # the low-water mark (half the 200-token trigger, less the memory's budget) keeps only the newest step
        assert [m.content[:10] for m in after["messages"][2:]] == ["Answer 3: "]


def test_turns_stored_while_a_background_commit_runs_get_a_follow_up_commit(backend):
    model = GatedModel()
    with backend.engine(model, durable=False, keep_recent_count=2, commit_token_threshold=200) as engine:
        first = engine.after_turn("bg", talk(4))
        assert model.entered.wait(10)
        more = talk(8)[8:]
        second = engine.after_turn("bg", more)  # the session is busy: nothing new can start now
        assert second["commit"]["status"] == "busy" and second["pending_tokens"] >= 200
        model.gate.set()
        engine.wait()  # also waits for the follow-up the first commit started when it finished
        tasks = engine.storage.tasks.list_tasks(session_id="bg")
        assert [t["status"] for t in tasks] == ["completed", "completed"]
        assert tasks[0]["task_id"] == first["task_id"]
        assert [a["archive_id"] for a in engine.storage.sessions.list_archives("bg")] == ["archive_001", "archive_002"]
        assert engine.session_info("bg")["pending_tokens"] < 200


def test_after_turn_below_the_threshold_starts_no_commit(backend):
    with backend.engine(durable=False, keep_recent_count=2, commit_token_threshold=10_000) as engine:
        result = engine.after_turn("quiet", talk(3))
        assert result["task_id"] is None and result["commit"] is None
        assert result["pending_tokens"] == engine.session_info("quiet")["pending_tokens"] > 0
        assert engine.storage.tasks.list_tasks(session_id="quiet") == []


def test_a_failed_background_commit_is_visible_and_its_messages_stay_live(backend, monkeypatch):
    with backend.engine(durable=False, keep_recent_count=2, commit_token_threshold=200) as engine:
        def broken_write(*args, **kwargs):
            raise OSError("No space left on device (token sk-abcdefghijklmnop1234)")

        monkeypatch.setattr(engine.storage.sessions, "write_archive", broken_write)
        result = engine.after_turn("fails", talk(4))
        engine.wait()
        task = engine.task(result["task_id"])
        assert task["status"] == "failed"
        assert "OSError" in task["error"] and "No space left on device" in task["error"]
        assert "sk-abcdefghijklmnop1234" not in task["error"], "secrets are redacted from stored errors"
        live = engine.storage.sessions.live_messages("fails")
        assert len(live) == 8 and engine.working_memory("fails") is None
        assert len(engine.assemble("fails")["messages"]) == 1 + 8
        monkeypatch.undo()
        # the next commit resumes the failed one, whose keep the low-water mark capped to the newest step
        engine.commit("fails", keep_recent_count=2)
        assert engine.working_memory("fails")["source_turn_range"]["end_seq"] == 7
        assert [m["seq"] for m in engine.storage.sessions.live_messages("fails")] == [8]


SECRETS = {"aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzz": "wJalrXUtnFEMI",
           "DB_PASSWORD: correct-horse-battery": "correct-horse", "ASIAIOSFODNN7EXAMPLE": "IOSFODNN7",
           "postgresql://app:s3cr3tpass@db/x": "s3cr3tpass", "Authorization: Basic dXNlcjpwYXNzd29yZA==": "dXNlcjpw"}


def test_secrets_in_a_failure_reach_no_file_and_no_log(backend, monkeypatch, caplog):
    import logging

    with backend.engine(durable=False, keep_recent_count=2) as engine:
        def broken_write(*args, **kwargs):
            raise OSError("upload failed: " + "; ".join(SECRETS))

        monkeypatch.setattr(engine.storage.sessions, "write_archive", broken_write)
        engine.add_messages("leaky", talk(4))
        with caplog.at_level(logging.DEBUG):
            result = engine.commit("leaky", keep_recent_count=2)
        assert result["status"] == "failed" and "upload failed" in result["reason"]
        stored = [engine.task(result["task_id"])["error"], result["reason"], caplog.text]
    if backend.url is None:
        stored += [p.read_bytes().decode("utf-8", "replace") for p in backend.root.rglob("*") if p.is_file()]
    for leak in SECRETS.values():
        assert all(leak not in text for text in stored), leak


def test_compact_frees_tokens(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("c", talk(6, size=80))
        out = engine.compact("c")
        assert out["ok"] and out["compacted"] and out["archive_id"] == "archive_001"
        assert out["tokens_before"] > out["tokens_after"] > 0
        assert out["summary"].startswith("# Working Memory")
        assert engine.storage.sessions.live_messages("c") == []
        again = engine.compact("c")
        assert (again["compacted"], again["reason"]) == (False, "no_messages")
        assert again["tokens_before"] == again["tokens_after"] == 0
        with pytest.raises(SessionNotFound):
            engine.compact("never-written")


def test_compact_waits_for_a_running_background_commit(backend, monkeypatch):
    model = GatedModel()
    with backend.engine(model, durable=False, keep_recent_count=2, commit_token_threshold=200) as engine:
        engine.after_turn("busy", talk(4))
        assert model.entered.wait(10)
        saw_busy = threading.Event()
        start = engine.runner.start

        def observed_start(*args, **kwargs):
            out = start(*args, **kwargs)
            if out["status"] == "busy":
                saw_busy.set()
            return out

        monkeypatch.setattr(engine.runner, "start", observed_start)
        outcome: dict = {}
        worker = threading.Thread(target=lambda: outcome.update(engine.compact("busy")))
        worker.start()
        assert saw_busy.wait(10), "compact should have met the running commit"
        model.gate.set()
        worker.join(30)
        assert outcome["compacted"] and outcome["archive_id"] == "archive_002"
        assert engine.storage.sessions.live_messages("busy") == []


def test_after_turn_drops_only_what_workmem_tagged(backend):
    """workmem's own messages are known by their tag; text that only looks like them is conversation."""
    with backend.engine(durable=False) as engine:
        assembled_earlier = [
            SystemMessage(content="workmem system addition", additional_kwargs={"workmem": "system"}),
            HumanMessage(content=SUMMARY_PREFIX + "# Working Memory", additional_kwargs={"workmem": "summary"}),
        ]
        turn = [
            *assembled_earlier,
            HumanMessage(content=SUMMARY_PREFIX + "an untagged copy of a summary"),
            HumanMessage(content="<relevant-memories>\n- old fact\n</relevant-memories>\nWhat is the port?"),
            {"role": "user", "content": "tagged dict", "additional_kwargs": {"workmem": "hint"}},
            AIMessage(content="The port is 5433."),
        ]
        out = engine.after_turn("strip", [HumanMessage(content="already stored")] + turn, pre_prompt_count=1)
        assert out["stored"] == 3
        live = engine.storage.sessions.live_messages("strip")
        assert [(m["role"], m["parts"][0]["text"]) for m in live] == [
            ("user", SUMMARY_PREFIX + "an untagged copy of a summary"),
            ("user", "<relevant-memories>\n- old fact\n</relevant-memories>\nWhat is the port?"),
            ("assistant", "The port is 5433.")]


def test_after_turn_stores_each_message_once_with_pre_prompt_count(backend):
    with backend.engine(durable=False) as engine:
        history = talk(1)
        engine.after_turn("once", history)
        history += talk(2)[2:]
        engine.after_turn("once", history, pre_prompt_count=2)
        texts = [m["parts"][0]["text"][:10] for m in engine.storage.sessions.live_messages("once")]
        assert texts == ["Question 0", "Answer 0: ", "Question 1", "Answer 1: "]


def test_a_tool_result_stored_after_a_commit_still_finds_its_call(backend):
    """A compact between a tool call and its result must not archive the call alone."""
    with backend.engine(durable=False) as engine:
        engine.add_messages("late", [user("Read the config."),
                                     assistant(calls=[("call_late", "read_file", '{"path": "app.toml"}')])])
        assert engine.commit("late", keep_recent_count=0)["status"] == "completed"
        live = engine.storage.sessions.live_messages("late")
        assert [m["role"] for m in live] == ["assistant"], "the open call stays live"
        engine.add_messages("late", [tool("call_late", "port = 8080", "read_file")])
        messages = engine.assemble("late")["messages"]
        assert pairing_problems(messages) == []
        calls = [(i, c["id"]) for i, m in enumerate(messages) if isinstance(m, AIMessage) for c in m.tool_calls]
        results = [(i, m.tool_call_id, m.content) for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
        assert calls == [(len(messages) - 2, "call_late")]
        assert results == [(len(messages) - 1, "call_late", "port = 8080")]
        assert engine.commit("late", keep_recent_count=0)["status"] == "completed", "answered: now it can go"
        assert engine.storage.sessions.live_messages("late") == []


# -- bad input ----------------------------------------------------------------------------------

BAD_MESSAGES = [
    ({"role": "wizard", "content": "hi"}, "messages[1].role"),
    ({"role": "user", "content": ""}, "messages[1].parts"),
    ({"role": "user", "content": b"bytes"}, "messages[1].content"),
    ({"role": "user", "content": "lone \ud800 surrogate"}, "messages[1]"),
    ({"role": "user", "content": "x" * 5_000}, "messages[1]"),
    ({"role": "tool", "content": "no call id"}, "messages[1].parts[0].tool_call_id"),
    ("not a message", "messages[1]"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_MESSAGES)
def test_bad_messages_are_typed_errors_and_leave_data_intact(root, bad, field):
    with WorkingMemoryEngine(root, durable=False, max_message_bytes=4_096) as engine:
        engine.add_messages("s", [user("first")])
        before = (engine.storage.sessions.session_dir("s") / "messages.jsonl").read_bytes()
        for call in (lambda: engine.add_messages("s", [user("ok"), bad]),
                     lambda: engine.after_turn("s", [user("ok"), bad])):
            with pytest.raises(InvalidInput) as err:
                call()
            assert err.value.field.startswith(field)
        assert (engine.storage.sessions.session_dir("s") / "messages.jsonl").read_bytes() == before
        with pytest.raises(InvalidInput):
            engine.add_messages("new-session", [bad])
        assert not engine.storage.sessions.session_dir("new-session").exists(), "nothing touches disk before validation"


@pytest.mark.parametrize(("call", "field"), [
    (lambda e: e.commit("s", keep_recent_count=-1), "keep_recent_count"),
    (lambda e: e.commit("s", keep_recent_count="3"), "keep_recent_count"),
    (lambda e: e.commit("s", keep_recent_count=True), "keep_recent_count"),
    (lambda e: e.after_turn("s", [user("x")], pre_prompt_count=-1), "pre_prompt_count"),
    (lambda e: e.after_turn("s", "not a list"), "messages"),
    (lambda e: e.archive_search("s", ""), "query"),
    (lambda e: e.archive_search("s", None), "query"),
    (lambda e: e.archive_search("s", "x", limit=0), "limit"),
    (lambda e: e.archive_search("s", "x", limit=13), "limit"),
    (lambda e: e.archive_expand("s"), "start_seq"),
    (lambda e: e.archive_expand("s", start_seq=5, end_seq=2), "end_seq"),
    (lambda e: e.archive_expand("s", start_turn_id="turn one"), "start_turn_id"),
    (lambda e: e.archive_expand("s", "archive_001", start_seq=1), "archive_id"),
    (lambda e: e.assemble("s", 128_000, pending="not a list"), "pending"),
    (lambda e: e.add_messages(None, [user("x")]), "session_id"),
    (lambda e: e.add_messages("", [user("x")]), "session_id"),
    (lambda e: e.task(None), "task_id"),
])
def test_bad_arguments_are_typed_errors_naming_the_field(backend, call, field):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", talk(2))
        before = engine.storage.sessions.live_messages("s")
        with pytest.raises(InvalidInput) as err:
            call(engine)
        assert err.value.field == field
        assert engine.storage.sessions.live_messages("s") == before


@pytest.mark.parametrize("kwargs", [
    {"context_window": 0}, {"context_window": -1}, {"commit_token_threshold": 0},
    {"keep_recent_count": -3}, {"max_message_bytes": 0}, {"chunk_tokens": True},
])
def test_bad_engine_settings_are_rejected(backend, kwargs):
    with pytest.raises(InvalidInput) as err:
        backend.engine(**kwargs)
    assert err.value.field == next(iter(kwargs))


def test_huge_keep_is_clamped_not_rejected(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", talk(2))
        out = engine.commit("s", keep_recent_count=10**9)
        assert (out["status"], out["reason"]) == ("skipped", "all_within_keep_window")


def test_unknown_archive_and_session_are_typed_errors(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", talk(2))
        engine.commit("s", keep_recent_count=0)
        for archive_id in ("archive_002", "archive_999", "../../etc/passwd", "nope"):
            with pytest.raises(ArchiveNotFound) as err:
                engine.archive_expand("s", archive_id)
            assert archive_id in str(err.value)
        with pytest.raises(SessionNotFound):
            engine.assemble("missing")
        with pytest.raises(SessionNotFound):
            engine.archive_search("missing", "x")
        with pytest.raises(SessionNotFound):
            engine.commit("missing")


def test_hostile_session_ids_stay_inside_the_root(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        for session_id in ("../../escape", "/etc/passwd", "UPPER", "a" * 300, "."):
            engine.add_messages(session_id, [user("x")])
            folder = engine.storage.sessions.session_dir(session_id)
            assert folder.parent == root.resolve() / "sessions" and folder.name.startswith("~")
        assert not (root.parent / "escape").exists()


def test_a_corrupt_line_on_disk_is_skipped_and_reported(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", talk(1))
    path = root / "sessions" / "s" / "messages.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"{not json\n" + lines[1])
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m.content[:8] for m in engine.assemble("s")["messages"][1:]] == ["Question", "Answer 0"]
        problems = engine.storage.sessions.problems("s")
        assert problems and problems[0].line_no == 2 and str(path) in str(problems[0])


def test_archive_expand_by_id_seq_range_and_turn_range(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("x", [user("Read a.py"), assistant(calls=[("c1", "read", '{"path": "a.py"}')]),
                                  tool("c1", "print(1)"), assistant("It prints 1."), *talk(2)])
        engine.commit("x", keep_recent_count=3)
        by_id = engine.archive_expand("x", "archive_001")
        assert (by_id["start_seq"], by_id["end_seq"], by_id["message_count"]) == (1, 5, 5)
        assert "→ call read" in by_id["content"] and by_id["abstract"]
        spanning = engine.archive_expand("x", start_seq=4, end_seq=7)
        assert [line.split()[0] for line in spanning["content"].splitlines() if line.startswith("[#")] == [
            "[#4", "[#5", "[#6", "[#7"]
        turns = engine.archive_expand("x", start_turn_id="t2", end_turn_id="t3")
        assert (turns["start_seq"], turns["end_seq"], turns["message_count"]) == (5, 8, 4)
        assert engine.archive_expand("x", start_turn_id="t1")["message_count"] == 4
        with pytest.raises(InvalidInput, match="start_seq"):  # past the last seq: an error, not an empty range
            engine.archive_expand("x", start_seq=100, end_seq=200)


def test_close_flushes_and_a_new_engine_sees_the_same_state(backend):
    engine = backend.engine(durable=False)
    engine.add_messages("s", talk(3))
    engine.commit("s", keep_recent_count=2)
    info = engine.session_info("s")
    engine.close()
    with backend.engine(durable=False) as again:
        assert again.session_info("s")["pending_tokens"] == info["pending_tokens"]
        assert again.working_memory("s")["archive_id"] == "archive_001"
    if backend.name == "file":
        assert os.path.exists(backend.root / "index.sqlite")
