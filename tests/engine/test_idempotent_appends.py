"""Idempotent appends by message id, on both backends.

A message whose LangChain id and fingerprint equal those of a live or newest-archived message is not stored
again; the stored one is returned in its batch position. The same id with other content is an edit and is
stored. Once a batch is stored `add_messages` succeeds, so a caller's retry after a late failure is safe.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from workmem.state.errors import InvalidInput, StorageError


def batch(prefix: str = "m") -> list:
    return [HumanMessage(f"{prefix}: read the config", id=f"{prefix}-h"),
            AIMessage("", id=f"{prefix}-a", tool_calls=[{"name": "read", "args": {"p": "a.toml"}, "id": f"{prefix}-c",
                                                         "type": "tool_call"}]),
            ToolMessage("timeout = 30", tool_call_id=f"{prefix}-c", id=f"{prefix}-t"),
            AIMessage("The timeout is 30 seconds.", id=f"{prefix}-r")]


def seqs(engine, session: str = "s") -> list[int]:
    return [m["seq"] for m in engine.storage.sessions.live_messages(session)]


def test_a_repeated_batch_is_stored_once_and_returns_the_stored_copies(backend):
    with backend.engine(durable=False) as engine:
        first = engine.add_messages("s", batch())
        again = engine.add_messages("s", [*batch(), HumanMessage("and the port?", id="m-h2")])
        assert [m["seq"] for m in again] == [m["seq"] for m in first] + [5]
        assert again[:4] == first, "the stored ones, in their batch positions"
        assert seqs(engine) == [1, 2, 3, 4, 5] and engine.session_info("s")["total_message_count"] == 5


def test_the_same_id_with_other_content_is_an_edit_and_is_stored(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", batch())
        edited = engine.add_messages("s", [HumanMessage("m: read the other config", id="m-h")])
        assert [m["seq"] for m in edited] == [5]
        assert [m["meta"]["lc_id"] for m in engine.storage.sessions.live_messages("s")].count("m-h") == 2


def image(data: str) -> HumanMessage:
    return HumanMessage([{"type": "text", "text": "what is on this chart?"},
                         {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}], id="img")


def test_the_same_id_with_another_image_is_an_edit_and_the_same_image_a_repeat(backend):
    """The fingerprint covers what a message says in words; its other content blocks are compared as they are."""
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [image("AAAA")])
        assert [m["seq"] for m in engine.add_messages("s", [image("AAAA")])] == [1]
        assert [m["seq"] for m in engine.add_messages("s", [image("BBBB")])] == [2]
        assert [m["seq"] for m in engine.add_messages("s", [image("CCCC"), image("CCCC"), image("DDDD")])] == [3, 3, 4]
        urls = [b["image_url"]["url"][-4:] for m in engine.storage.sessions.live_messages("s")
                for b in m["meta"]["content_blocks"]]
        assert urls == ["AAAA", "BBBB", "CCCC", "DDDD"]


def test_an_edited_message_sent_back_with_its_old_meta_is_an_edit(backend):
    """The fingerprint is recomputed from the content: a caller's `meta.fp` is never trusted."""
    with backend.engine(durable=False) as engine:
        stored = engine.add_messages("s", batch())[0]
        edited = {"role": "user", "parts": [{"type": "text", "text": "m: read the other config"}],
                  "meta": dict(stored["meta"])}
        again = engine.add_messages("s", [edited])
        assert [m["seq"] for m in again] == [5] and again[0]["parts"][0]["text"] == "m: read the other config"
        assert again[0]["meta"]["fp"] != stored["meta"]["fp"]


def test_a_message_the_newest_archive_holds_is_not_stored_again(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", batch())
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        again = engine.add_messages("s", batch())
        assert [m["seq"] for m in again] == [1, 2, 3, 4] and seqs(engine) == []
        engine.add_messages("s", batch("n"))
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        older = engine.add_messages("s", batch()[:1])
        assert [m["seq"] for m in older] == [9], "only the newest archive is looked in: an older one is history"


def test_messages_without_ids_get_no_dedupe_and_one_batch_stores_a_repeat_once(backend):
    with backend.engine(durable=False) as engine:
        plain = [{"role": "user", "content": "hello"}]
        engine.add_messages("s", plain)
        engine.add_messages("s", plain)
        assert seqs(engine) == [1, 2], "no id, no dedupe (the README says to set ids for safe retries)"
        twice = engine.add_messages("s", [HumanMessage("same", id="x"), HumanMessage("same", id="x")])
        assert [m["seq"] for m in twice] == [3, 3] and seqs(engine) == [1, 2, 3]


def test_a_retry_after_a_failure_past_the_store_stores_nothing_twice(backend, monkeypatch, caplog):
    """The keep bookkeeping after the write fails (a full disk, a dropped connection): the append still
    succeeds; the caller's retry — had it seen an error — stores nothing again."""
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [HumanMessage("start", id="h0")])

        def broken(*args, **kwargs):
            raise StorageError("meta", OSError(28, "No space left on device"))

        monkeypatch.setattr(engine.storage.sessions, "set_keep", broken)
        monkeypatch.setattr(engine, "keep", ("turns", 2))  # forces the keep refresh after the write
        stored = engine.add_messages("s", batch())
        assert [m["seq"] for m in stored] == [2, 3, 4, 5]
        assert "refreshing the keep bookkeeping failed" in caplog.text
        monkeypatch.undo()
        retried = engine.add_messages("s", batch())
        assert retried == stored and seqs(engine) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("failing", ["append_bytes"])
def test_a_failure_before_the_write_raises_and_stores_nothing(root, monkeypatch, failing):
    from workmem.graphs.engine import WorkingMemoryEngine
    from workmem.state.files import fsutil

    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [HumanMessage("start", id="h0")])
        monkeypatch.setattr(fsutil, failing, lambda *a, **k: (_ for _ in ()).throw(OSError(28, "disk full")))
        with pytest.raises(StorageError):
            engine.add_messages("s", batch())
        monkeypatch.undo()
        assert seqs(engine) == [1]
        assert [m["seq"] for m in engine.add_messages("s", batch())] == [2, 3, 4, 5]


def test_a_dict_message_with_an_id_is_stored_once_on_retry(backend):
    with backend.engine(durable=False) as engine:
        sent = [{"role": "user", "content": "deploy at 14:00", "id": "u1"},
                {"role": "assistant", "content": "Scheduled.", "id": "a1"}]
        first = engine.add_messages("s", sent)
        again = engine.add_messages("s", [*sent, {"role": "user", "content": "and roll back at 15:00", "id": "u2"}])
        assert [m["seq"] for m in again] == [1, 2, 3] and again[:2] == first
        assert engine.add_messages("s", [{"role": "user", "content": "deploy at 16:00", "id": "u1"}])[0]["seq"] == 4
        assert seqs(engine) == [1, 2, 3, 4], "an edit by id is stored; the repeats are not"
        engine.add_messages("s", [{"role": "user", "content": "x", "id": 7}])  # a caller's row number: its digits
        engine.add_messages("s", [{"role": "user", "content": "x", "id": 7}])
        assert seqs(engine) == [1, 2, 3, 4, 5], "an integer id is matched on retry as its digits"


@pytest.mark.parametrize("bad", [1.5, float("inf"), True, ["u1"], {"id": "u1"}, 10**5000],
                         ids=["float", "inf", "bool", "list", "dict", "huge-int"])
def test_a_dict_message_id_that_is_no_string_or_integer_is_refused_and_nothing_stored(backend, bad):
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "deploy at 14:00", "id": "u1"}])
        with pytest.raises(InvalidInput, match=r"messages\[1\]\.id"):
            engine.add_messages("s", [{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "id": bad}])
        assert seqs(engine) == [1]
