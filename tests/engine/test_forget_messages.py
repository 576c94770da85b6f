"""`forget_messages`: the verbatim text of the named messages leaves every file, row, payload and index row, the
seqs stay whole (nothing lost, nothing duplicated), the result says the working memory was not rewritten; bad
seqs and a held lease are refused with the data intact; a forget killed midway is finished by the next engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import GatedModel, assistant, stored, tool, user
from fakes import create_call, scripted, valid_update_call
from paths import REPO, TESTS
from pg_support import Backend

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import CommitInProgress, InvalidInput
from workmem.state.files.forgetting import INTENT_PREFIX
from workmem.state.forget import FORGOTTEN_TEXT

# Distinctive words (the porter stem of each is a prefix of it, so a stem left in an index is found too).
SECRET = "Quorvex blimpwaddle zentrifuge 7731905"
NEEDLES = ("quorvex", "blimpwaddl", "zentrifug", "7731905")  # a short number can turn up in a random id
BIG = "".join(f"2026-11-30 build step {i} ok\n" for i in range(6000)) + f"FAILED: {SECRET}\n"  # a payload
WM = create_call({"Session Title": "Build work", "Current State": "The build is being fixed."})
SID = "private"


def conversation() -> list[dict[str, Any]]:
    """Seqs 1-4 are committed (archive_001), 5-8 stay live; 1, 3 and 7 carry the secret (3 as a payload)."""
    return [user(f"My passphrase is {SECRET}."), assistant("", [("c1", "build", json.dumps({"tag": "x"}))]),
            tool("c1", BIG, "build"), assistant("The build failed."),
            user("Try again on the garden branch."), assistant("Retrying."),
            user(f"Remember {SECRET} for later."), assistant("Noted.")]


def committed(backend: Any, **settings: Any) -> WorkingMemoryEngine:
    engine = backend.engine(model=scripted(WM, valid_update_call({})), durable=False, **settings)
    engine.add_messages(SID, conversation())
    assert engine.commit(SID, keep_recent_count=4)["status"] == "completed"
    assert engine.archive_search(SID, "quorvex"), "indexed before the forget"
    return engine


def leaks(backend: Any) -> list[str]:
    """Where any needle still is: every file under the root, or every row of the Postgres schema."""
    found = []
    if backend.url is None:
        for folder, _dirs, files in os.walk(backend.root):
            for name in files:
                data = (Path(folder) / name).read_bytes().lower()
                found += [f"{folder}/{name}: {n}" for n in NEEDLES if n.encode() in data]
        return found
    import psycopg

    with psycopg.connect(backend.url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'workmem'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM workmem."{table}"'):
                for value in row:
                    data = bytes(value) if isinstance(value, (bytes, memoryview)) else \
                        json.dumps(value, default=str, ensure_ascii=False).encode()
                    found += [f"{table}: {n}" for n in NEEDLES if n.encode() in data.lower()]
    return found


def assert_whole(engine: WorkingMemoryEngine, forgotten: set[int], total: int = 8, live_from: int = 5) -> None:
    """Seqs 1..total each once, in order; the forgotten ones are placeholders, the others intact; nothing wrong."""
    messages = stored(engine, SID)
    assert [m["seq"] for m in messages] == list(range(1, total + 1)), "nothing lost, nothing duplicated"
    original = conversation()
    for m in messages:
        text = json.dumps(m["parts"])
        if m["seq"] in forgotten:
            assert FORGOTTEN_TEXT in text and m["meta"]["workmem_forgotten"]
        elif m["seq"] <= len(original):
            assert FORGOTTEN_TEXT not in text
    live = engine.live_messages(SID)
    assert [m["seq"] for m in live] == list(range(live_from, total + 1))
    assert engine.session_info(SID)["live_tokens"] == sum(m["tokens"] for m in live)
    assert engine.check(SID, deep=True) == []


def test_forget_leaves_no_verbatim_text_in_files_rows_payloads_or_index(backend):
    with committed(backend) as engine:
        result = engine.forget_messages(SID, [1, 3, 7])

        assert result["forgotten"] == [1, 3, 7] and result["payloads_removed"] == 1
        assert result["index_rows_removed"] == 2 and result["checkpoint_threads_removed"] == 1
        assert result["working_memory_rewritten"] is False and "not rewritten" in result["note"]
        assert_whole(engine, {1, 3, 7})
        assert engine.archive_search(SID, "quorvex") == [] and engine.archive_search(SID, "7731905") == []
        assert engine.archive_search(SID, "build failed"), "the rest is still found"
        assert engine.read_tool_result(SID, "seq:3")["text"] == FORGOTTEN_TEXT
        text = " ".join(m.text for m in engine.assemble(SID)["messages"])
        assert "Quorvex" not in text and FORGOTTEN_TEXT in text
    assert leaks(backend) == []


def test_forget_again_changes_nothing_and_the_session_goes_on(backend):
    with committed(backend) as engine:
        engine.forget_messages(SID, [1, 7])
        again = engine.forget_messages(SID, [1, 7])
        assert again["forgotten"] == [] and again["index_rows_removed"] == 0
        stored_next = engine.add_messages(SID, [user("A new question."), assistant("A new answer.")])
        assert [m["seq"] for m in stored_next] == [9, 10]
        assert engine.commit(SID, keep_recent_count=0)["status"] == "completed"
        assert_whole(engine, {1, 7}, total=10, live_from=11)
        assert engine.archive_messages(SID, "archive_002")[2]["parts"][0]["text"] == FORGOTTEN_TEXT


def with_ids(messages: list[dict[str, Any]]) -> list[Any]:
    """The conversation as an agent's state holds it: LangChain messages with ids."""
    from langchain_core.messages import convert_to_messages

    out = convert_to_messages(messages)
    for i, m in enumerate(out):
        m.id = f"lc-{i + 1}"
    return out


def archived_with_ids(root: Path, forget: list[int] | None = None) -> tuple[Backend, list[Any]]:
    """A files session holding the conversation with ids: 1-4 archived, 5-8 live; `forget` forgotten then."""
    backend, history = Backend("file", root), with_ids(conversation())
    with backend.engine(model=scripted(WM, valid_update_call({})), durable=False) as engine:
        engine.add_messages(SID, history)
        assert engine.commit(SID, keep_recent_count=4)["status"] == "completed"
        if forget:
            engine.forget_messages(SID, forget)
    return backend, history


@pytest.mark.parametrize("resend", ["add_messages", "after_turn"])
def test_a_forgotten_message_sent_again_stays_forgotten(backend, resend):
    history = with_ids(conversation())
    engine = backend.engine(model=scripted(WM), durable=False)
    with engine:
        engine.add_messages(SID, history)
        assert engine.commit(SID, keep_recent_count=4)["status"] == "completed"  # 1-4 archived, 5-8 live
        engine.forget_messages(SID, [1, 3, 7])
        synopsis = history[2].model_copy(update={"content": BIG[:200] + "…"})  # the state's shortened copy
        again = [*history, history[6].model_copy(), synopsis]
        out = engine.add_messages(SID, again) if resend == "add_messages" else engine.after_turn(SID, again)
        stored_now = out if resend == "add_messages" else out["messages"]
        assert [m["seq"] for m in stored_now][:8] == list(range(1, 9)), "each message is its stored copy"
        assert all(FORGOTTEN_TEXT in json.dumps(m["parts"]) for m in stored_now if m["seq"] in (1, 3, 7))
        assert_whole(engine, {1, 3, 7})
        results = [m for m in stored(engine, SID) if m["role"] == "tool"]
        assert len(results) == 1, "a re-sent forgotten result is no second result"
    assert leaks(backend) == []


@pytest.mark.parametrize("forgotten_while", ["archived", "live"])
def test_a_forgotten_message_sent_again_stays_forgotten_in_an_older_archive(backend, forgotten_while):
    # the repeat check looks at the live messages and the newest archive only: a forgotten message must be found
    # wherever it is by the time it is sent again (here in archive_001, while archive_002 is the newest)
    history = with_ids(conversation())
    engine = backend.engine(model=scripted(WM, valid_update_call({})), durable=False)
    with engine:
        engine.add_messages(SID, history)
        if forgotten_while == "live":
            engine.forget_messages(SID, [1, 3, 7])
        assert engine.commit(SID, keep_recent_count=4)["status"] == "completed"  # 1-4 archived, 5-8 live
        if forgotten_while == "archived":
            engine.forget_messages(SID, [1, 3, 7])
        assert engine.commit(SID, keep_recent_count=0)["status"] == "completed"  # 5-8: the newest archive
        again = engine.add_messages(SID, [*history, history[2].model_copy(update={"content": BIG[:200]})])
        by_id = {m["meta"]["lc_id"]: m["seq"] for m in again}
        assert [by_id[f"lc-{n}"] for n in (1, 3, 7)] == [1, 3, 7], "each forgotten one is its placeholder"
        assert all(FORGOTTEN_TEXT in json.dumps(m["parts"]) for m in again if m["seq"] in (1, 3, 7))
        messages = stored(engine, SID)
        assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), "nothing lost"
        assert sum(1 for m in messages if m["role"] == "tool") == 1, "a re-sent forgotten result is no second one"
    assert leaks(backend) == []


@pytest.mark.parametrize("then", ["re-send", "forget another"])
def test_a_session_forgotten_in_before_the_record_existed_keeps_a_resent_copy_out(root, then):
    # a build before `forgotten.jsonl` forgot seq 1; the file is found missing and written from the archives
    from workmem.state.files.forgetting import FORGOTTEN

    backend, history = archived_with_ids(root, forget=[1, 3])
    (root / "sessions" / SID / FORGOTTEN).unlink()  # as that build left it
    with backend.engine(model=scripted(valid_update_call({})), durable=False) as engine:
        if then == "forget another":
            engine.forget_messages(SID, [7])
        assert engine.commit(SID, keep_recent_count=0)["status"] == "completed"  # 1-4 in an older archive now
        again = engine.add_messages(SID, history)
        assert [m["seq"] for m in again if m["meta"]["lc_id"] in ("lc-1", "lc-3")] == [1, 3]
        assert all(FORGOTTEN_TEXT in json.dumps(m["parts"]) for m in again if m["seq"] in (1, 3))


def test_a_payload_stays_while_another_message_refers_to_it(backend):
    with committed(backend) as engine:
        engine.add_messages(SID, [assistant("", [("c2", "build", "{}")]), tool("c2", BIG, "build")])  # seq 10
        assert engine.forget_messages(SID, [3])["payloads_removed"] == 0
        assert engine.read_tool_result(SID, "seq:10", limit=50)["text"] == BIG[:50], "the other copy reads whole"
        assert engine.check(SID, deep=True) == []
        assert engine.forget_messages(SID, [10])["payloads_removed"] == 1


def test_unknown_seqs_are_refused_and_nothing_changes(backend):
    with committed(backend) as engine:
        before = stored(engine, SID)
        for bad in ([9], [2, 99], [], [0], ["1"], "1"):
            with pytest.raises(InvalidInput) as err:
                engine.forget_messages(SID, bad)
            assert err.value.field == "seqs"
        assert stored(engine, SID) == before
        assert engine.storage.tasks.lease_holder(SID) is None, "no lease left behind"


def test_a_forget_is_refused_while_a_commit_holds_the_lease(backend):
    model = GatedModel()
    with backend.engine(model=model, durable=False) as engine:
        engine.add_messages(SID, conversation())
        engine.commit(SID, keep_recent_count=0, wait=False)
        assert model.entered.wait(20)
        with pytest.raises(CommitInProgress):
            engine.forget_messages(SID, [1])
        model.gate.set()
        engine.wait()
        assert "Quorvex" in json.dumps(stored(engine, SID)[0]["parts"]), "nothing was forgotten"
        assert engine.forget_messages(SID, [1])["forgotten"] == [1]


def test_the_working_memory_made_from_forgotten_messages_is_not_rewritten(root):
    with WorkingMemoryEngine(root, durable=False) as engine:  # the offline model copies facts into the WM
        engine.add_messages(SID, conversation())
        engine.commit(SID, keep_recent_count=4)
        wm_before = engine.working_memory(SID)["working_summary"]["markdown"]
        result = engine.forget_messages(SID, [1])
        assert result["working_memory_rewritten"] is False
        assert engine.working_memory(SID)["working_summary"]["markdown"] == wm_before
        assert_whole(engine, {1})


def test_copies_left_by_a_commit_that_crashed_before_its_gc_are_forgotten_too(root):
    """The live file still holds archived lines when a commit stopped between `.done` and its GC (files only: on
    Postgres a message is one row)."""
    backend = Backend("file", root)
    with committed(backend) as engine:
        folder = Path(engine.storage.sessions.location(SID))
        archived = (folder / "history" / "archive_001" / "messages.jsonl").read_bytes()
        live = folder / "messages.jsonl"
        live.write_bytes(archived + live.read_bytes())
        engine.forget_messages(SID, [1, 3, 7])
        assert_whole(engine, {1, 3, 7})
    assert leaks(backend) == []


def test_forget_on_the_async_twin(root):
    import asyncio

    async def run() -> dict[str, Any]:
        async with WorkingMemoryEngine(root, model=scripted(WM), durable=False) as engine:
            await engine.aadd_messages(SID, conversation())
            return await engine.aforget_messages(SID, [1])

    assert asyncio.run(run())["forgotten"] == [1]


# -- a forget killed midway --------------------------------------------------------------------------------

KILL_CHILD = r"""
import importlib, sys
from kill_at import kill_at
target, owner, name, nth, when = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
module_name, _, cls = owner.partition(":")
holder = importlib.import_module(module_name)
if cls:
    holder = getattr(holder, cls)
seen = kill_at(holder, name, nth, when)
from workmem.graphs.engine import WorkingMemoryEngine
if target.startswith("postgresql://"):
    engine = WorkingMemoryEngine(None, database_url=target, durable=False)
else:
    engine = WorkingMemoryEngine(target, durable=False)
engine.forget_messages("private", [1, 3, 7])
print("calls", seen[0])
"""

FILE_KILLS = [  # (owner, attribute, nth call, before or after it)
    ("workmem.state.files.fsutil", "atomic_write", 1, "before"),  # the intent: nothing started
    ("workmem.state.files.fsutil", "atomic_write", 1, "after"),  # the intent is durable, nothing else
    ("workmem.state.files.fsutil", "atomic_write", 2, "after"),  # the archive rewritten, not the live file
    ("workmem.state.files.fsutil", "atomic_write", 3, "after"),  # both files, the payload still there
    ("workmem.state.files.fsutil", "remove_file", 1, "after"),  # the payload gone, the index not touched
    ("workmem.state.files.search_index", "truncate_wal", 1, "before"),  # rows deleted, the log not cut
    ("workmem.state.files.storage:FileStorage", "_clear_commit_threads", 1, "before"),
    ("workmem.state.files.store:SessionStore", "end_forget", 1, "before"),  # all done but the intent
]
PG_KILLS = [("workmem.state.postgres.storage", "unindex_documents", 1, "before"),  # inside the transaction
            ("workmem.state.postgres.storage", "commit_threads_to_clear", 1, "after")]


def kill_forget(backend: Any, owner: str, name: str, nth: int, when: str) -> subprocess.CompletedProcess:
    code = f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n" + KILL_CHILD
    return subprocess.run([sys.executable, "-c", code, backend.target, owner, name, str(nth), when],
                          capture_output=True, text=True, cwd=REPO, timeout=180)


@pytest.mark.slow
def test_a_forget_killed_at_any_step_is_finished_by_the_next_engine_files(root):
    backend = Backend("file", root)
    for i, (owner, name, nth, when) in enumerate(FILE_KILLS):
        if i:  # a fresh session each time, same name
            with backend.engine(durable=False) as engine:
                engine.delete_session(SID)
        committed(backend).close()
        killed = kill_forget(backend, owner, name, nth, when)
        assert killed.returncode == -signal.SIGKILL, (owner, name, nth, when, killed.stdout, killed.stderr)
        intents = [p for p in (root / "sessions").iterdir() if p.name.startswith(INTENT_PREFIX)]
        with backend.engine(durable=False) as engine:  # opening finishes what the kill interrupted
            assert not [p for p in (root / "sessions").iterdir() if p.name.startswith(INTENT_PREFIX)]
            if not intents:  # killed before its intent was durable: nothing was changed, the caller retries
                assert_whole(engine, set())
                engine.forget_messages(SID, [1, 3, 7])
            assert_whole(engine, {1, 3, 7})
            assert engine.archive_search(SID, "quorvex") == []
        assert leaks(backend) == [], (owner, name, nth, when)


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_forget_killed_around_its_record_of_forgotten_ids_still_keeps_a_resent_copy_out(root, when):
    backend, history = archived_with_ids(root)
    killed = kill_forget(backend, "workmem.state.files.forgetting", "_record_forgotten", 1, when)
    assert killed.returncode == -signal.SIGKILL, (when, killed.stdout, killed.stderr)
    with backend.engine(model=scripted(valid_update_call({})), durable=False) as engine:  # finishes the forget
        assert_whole(engine, {1, 3, 7})
        assert engine.commit(SID, keep_recent_count=0)["status"] == "completed"  # 1-4 now in an older archive
        again = engine.add_messages(SID, history)
        assert [m["seq"] for m in again if m["meta"]["lc_id"] in ("lc-1", "lc-3", "lc-7")] == [1, 3, 7]
    assert leaks(backend) == [], when


APPEND_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from kill_at import kill_at
import workmem.state.files.forgetting as forgetting
from workmem.graphs.engine import WorkingMemoryEngine
from langchain_core.messages import AIMessage, HumanMessage
kill_at(forgetting, "write_placeholders", 1, sys.argv[3])
with WorkingMemoryEngine(sys.argv[1], durable=False) as engine:
    engine.add_messages("private", [HumanMessage("A new question.", id="lc-9"), AIMessage("Answer.", id="lc-10")])
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_an_append_killed_around_the_record_it_rebuilds_stores_each_message_once_and_nothing_forgotten(root, when):
    from langchain_core.messages import HumanMessage

    from workmem.state.files.forgetting import FORGOTTEN

    backend, history = archived_with_ids(root, forget=[1, 3, 7])
    with backend.engine(model=scripted(valid_update_call({})), durable=False) as engine:
        assert engine.commit(SID, keep_recent_count=0)["status"] == "completed"  # 1-4 in the older archive
    (root / "sessions" / SID / FORGOTTEN).unlink()  # as a build before the record left it
    killed = subprocess.run([sys.executable, "-c", APPEND_CHILD, str(root), str(TESTS), when],
                            capture_output=True, text=True, cwd=REPO, timeout=180)
    assert killed.returncode == -signal.SIGKILL, (when, killed.stderr)
    with backend.engine(durable=False) as engine:
        again = engine.add_messages(SID, [*history, HumanMessage("A new question.", id="lc-9")])
        assert [m["seq"] for m in again if m["meta"]["lc_id"] in ("lc-1", "lc-3", "lc-7")] == [1, 3, 7]
        messages = stored(engine, SID)
        assert [m["seq"] for m in messages] == list(range(1, len(messages) + 1)), "each stored once, in order"
        assert sum(1 for m in messages if m["meta"].get("lc_id") == "lc-9") == 1, "the killed append stored nothing"
    assert leaks(backend) == [], when


@pytest.mark.slow
def test_a_forget_killed_inside_its_transaction_leaves_all_or_nothing_postgres(root, database_url):
    backend = Backend("postgres", root, database_url)
    for i, (owner, name, nth, when) in enumerate(PG_KILLS):
        if i:
            with backend.engine(durable=False) as engine:
                engine.delete_session(SID)
        committed(backend).close()
        killed = kill_forget(backend, owner, name, nth, when)
        assert killed.returncode == -signal.SIGKILL, (owner, name, killed.stderr)
        with backend.engine(durable=False) as engine:
            assert_whole(engine, set())  # the transaction was rolled back whole
            engine.forget_messages(SID, [1, 3, 7])
            assert_whole(engine, {1, 3, 7})
        assert leaks(backend) == []


# -- the middleware's option ---------------------------------------------------------------------------------

@pytest.mark.parametrize("forget_on_remove", [True, False], ids=["forgets", "only-hides"])
def test_the_middleware_forgets_stored_messages_its_state_removes(root, forget_on_remove):
    from engine_helpers import ask, prompt_texts, thread
    from langchain.agents import create_agent
    from langchain_core.messages import RemoveMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware

    model = scripted("A1", "A2", "A3")
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine, forget_on_remove=forget_on_remove)
        agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
        agent.invoke(ask(f"Q1 {SECRET}"), thread("t"))
        state = agent.invoke(ask("Q2"), thread("t"))
        agent.update_state(thread("t"), {"messages": [RemoveMessage(id=state["messages"][0].id)]})
        agent.invoke(ask("Q3"), thread("t"))

        first = engine.live_messages("t")[0]
        assert engine.hidden("t") == {1} and engine.session_info("t")["total_message_count"] == 6
        assert (first["parts"][0]["text"] == FORGOTTEN_TEXT) is forget_on_remove
        assert not any("Quorvex" in text for text in prompt_texts(model))
    with pytest.raises(InvalidInput, match="forget_on_remove"):
        WorkingMemoryMiddleware(engine, forget_on_remove="yes")


def test_a_fork_to_an_earlier_checkpoint_forgets_nothing_of_the_branch_it_leaves(root):
    """Time travel is not a removal: the main branch's messages stay whole while a fork hides them, and are shown
    again (unforgotten) when the thread goes back to its tip."""
    from engine_helpers import ask, thread
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware

    model = scripted("A1", "A2", "A3", "Fork answer.", "Main answer.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, forget_on_remove=True)],
                             checkpointer=InMemorySaver())
        for question in ("Q1", f"Q2 {SECRET}", "Q3"):
            agent.invoke(ask(question), thread("t"))
        history = list(agent.get_state_history(thread("t")))
        fork_at = next(s.config for s in history if [m.text for m in s.values.get("messages", [])] == ["Q1", "A1"])
        agent.invoke(ask("Fork question?"), fork_at)
        assert engine.hidden("t") == {3, 4, 5, 6}, "the branch left behind is hidden"
        agent.invoke(ask("Back on the main branch."), history[0].config)

        texts = {m["seq"]: m["parts"][0]["text"] for m in engine.live_messages("t")}
        assert texts[3] == f"Q2 {SECRET}" and FORGOTTEN_TEXT not in texts.values()
        assert engine.hidden("t") == {7, 8}, "now the fork's own messages are the branch left behind"


def test_a_removal_while_a_commit_holds_the_session_is_forgotten_once_it_finished(root):
    """`forget_on_remove` waits for a running commit, and forgets the removed message after it, archived or not."""
    from engine_helpers import ask, thread
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
    from workmem.state.messages import lc_id

    gated = GatedModel()
    model = scripted(*[AIMessage(content=f"Reply {i} " + "word " * 20) for i in range(40)])
    with WorkingMemoryEngine(root, durable=False, model=gated) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(), middleware=[WorkingMemoryMiddleware(
            engine, trigger=("tokens", 400), keep=("messages", 2), forget_on_remove=True)])
        agent.invoke({"messages": [HumanMessage(f"My card is {SECRET} " + "blah " * 20, id="secret")]},
                     thread("t"))
        turn = 1
        while not gated.entered.is_set():  # until a background commit is running (held at the gate)
            agent.invoke(ask(f"Question {turn} " + "blah " * 20), thread("t"))
            turn += 1
        agent.update_state(thread("t"), {"messages": [RemoveMessage(id="secret")]})
        agent.invoke(ask("Next question"), thread("t"))
        assert not engine.storage.sessions.meta("t").get("forgotten_count"), "held back while the commit runs"
        gated.gate.set()
        engine.wait()
        agent.invoke(ask("Later"), thread("t"))
        engine.wait()

        row = next(m for m in engine.iter_messages("t") if lc_id(m) == "secret")
        assert row["parts"][0]["text"] == FORGOTTEN_TEXT
        assert engine.archive_search("t", "Quorvex") == []
        assert not agent.get_state(thread("t")).values.get("workmem_to_forget")


def test_what_the_state_recorded_of_a_deleted_session_forgets_nothing_in_the_new_one(root):
    """The state's record of what it held (and a removal still to forget) names seqs of one incarnation of the
    session: after the session is deleted and the thread goes on, it forgets nothing and fails no run."""
    from engine_helpers import ask, thread
    from langchain.agents import create_agent
    from langchain_core.messages import RemoveMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware

    model = scripted(*[f"A{i}" for i in range(8)])
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, forget_on_remove=True)],
                             checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("t"))
        agent.update_state(thread("t"), {"workmem_to_forget": [5]})  # as a commit that held a removal back leaves it
        engine.delete_session("t")
        other = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, forget_on_remove=True)],
                             checkpointer=InMemorySaver())
        other.invoke(ask(f"B1 {SECRET}"), thread("t"))  # another thread writes the new session's seqs 1-2 first
        agent.update_state(thread("t"), {"messages": [RemoveMessage(id=agent.get_state(thread("t")).values[
            "messages"][0].id)]})
        agent.invoke(ask("Q4"), thread("t"))
        assert FORGOTTEN_TEXT not in [m["parts"][0]["text"] for m in engine.live_messages("t")]


def test_the_cli_forgets_by_seq(root, capsys):
    from workmem.graphs.cli import main

    committed(Backend("file", root)).close()
    assert main(["--root", str(root), "forget-messages", SID, "1", "7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["forgotten"] == [1, 7] and out["working_memory_rewritten"] is False
    assert main(["--root", str(root), "forget-messages", SID, "99"]) == 2
    assert "seqs" in capsys.readouterr().err
