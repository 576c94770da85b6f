"""Large tool results stored whole as content-addressed payloads, on both backends."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.state.errors import InvalidInput, UnsupportedFormat
from workmem.state.files import fsutil, payload_files
from workmem.state.index_text import INDEX_CHARS, index_text, is_digest
from workmem.state.payloads import PayloadLimits
from workmem.state.tokens import count_tokens

MB = 1 << 20
NEEDLE = "ERROR shard 17 lost quorum: ETIMEDOUT after 3 retries (raft/election.go:412)"


def json_output(size: int) -> str:
    """A JSON API response of about `size` bytes, quote-heavy (escapes make it larger once stored as JSON)."""
    rows, out, i = [], 0, 0
    while out < size:
        row = {"id": i, "name": f"item-{i}", "tags": ["a\"b", "c\\d"], "note": "ünïcødé ✓ " * (i % 5)}
        rows.append(row)
        out += len(json.dumps(row, ensure_ascii=False).encode()) + 1
        i += 1
    return json.dumps(rows, ensure_ascii=False)


def log_output(size: int) -> str:
    """A build log of about `size` bytes with one distinctive error line deep inside."""
    line = "2026-11-30 10:00:00 INFO compiled module pkg/{i:07d}.go in {ms} ms\n"
    n = size // len(line.format(i=0, ms=10))
    lines = [line.format(i=i, ms=i % 97) for i in range(n)]
    lines[n * 2 // 3] = NEEDLE + "\n"
    return "".join(lines)


def session_with(engine, text: str, session: str = "s") -> int:
    """A user turn whose tool call returned `text`; → the seq of the tool message."""
    engine.add_messages(session, [
        {"role": "user", "content": "Run it and tell me what broke."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "run", "content": text},
        {"role": "assistant", "content": "It ran."},
    ])
    return 3


def read_back(engine, seq: int, max_tokens: int) -> str:
    """Every window of a stored result through the read tool's engine method, joined (the first window as the
    tool reads by default, capped by tokens; the others `max_tokens` characters each)."""
    pieces, offset = [], 0
    while True:
        limit = None if not offset else max_tokens
        window = engine.read_tool_result("s", f"seq:{seq}", offset=offset, limit=limit, max_tokens=max_tokens)
        assert window["offset"] == offset
        assert offset or count_tokens(window["text"]) <= max_tokens, "a window is within its token cap"
        pieces.append(window["text"])
        offset = window["end"]
        if offset >= window["chars"]:
            return "".join(pieces)


@pytest.mark.parametrize(("make", "size", "max_tokens"),
                         [(json_output, 3 * MB, 200_000), (log_output, 30 * MB, 4_000_000)],
                         ids=["json-3MB", "log-30MB"])
def test_a_large_result_is_stored_byte_exact_live_and_archived(backend, make, size, max_tokens):
    text = make(size)
    digest = hashlib.sha256(text.encode()).hexdigest()
    with backend.engine(durable=False) as engine:
        seq = session_with(engine, text)
        stored = engine.live_messages("s")[seq - 1]["parts"][0]
        assert stored["sha256"] == digest and stored["size"] == len(text.encode()) and stored["chars"] == len(text)
        assert hashlib.sha256(read_back(engine, seq, max_tokens).encode()).hexdigest() == digest
        for i in range(3):
            engine.add_messages("s", [{"role": "user", "content": f"next {i}"}, {"role": "assistant", "content": "ok"}])
        assert engine.commit("s", keep_recent_count=2)["status"] == "completed"
        archived = engine.storage.sessions.archive_messages("s", "archive_001")[seq - 1]["parts"][0]["content"]
        assert hashlib.sha256(archived.encode()).hexdigest() == digest, "archived"
        tail = engine.read_tool_result("s", f"seq:{seq}", offset=len(text) - 5000, limit=5000)
        assert tail["text"] == text[-5000:]
        expanded = engine.archive_expand("s", "archive_001")
        assert text[:5000] in expanded["content"] and text[-5000:] in expanded["content"], "expand shows it whole"
        assert engine.check("s") == []
    if backend.url is None:
        lines = (backend.root / "sessions" / "s" / "history" / "archive_001" / "messages.jsonl").read_bytes()
        assert len(lines) < 64 * 1024, "the line refers to the payload; it does not hold it"


def test_a_deep_line_of_an_archived_payload_is_found_and_shown_around_the_match(backend):
    text = log_output(2 * MB)
    assert len(text) > INDEX_CHARS
    with backend.engine(durable=False) as engine:
        session_with(engine, text)
        for i in range(3):
            engine.add_messages("s", [{"role": "user", "content": f"next {i}"}, {"role": "assistant", "content": "ok"}])
        engine.commit("s", keep_recent_count=2)
        hits = engine.archive_search("s", "quorum ETIMEDOUT")
        assert hits and hits[0]["seq"] == 3
        assert NEEDLE in hits[0]["content"] and len(hits[0]["content"]) <= 1500
        assert not is_digest(hits[0]["content"])


def test_the_index_holds_a_bounded_digest_of_a_long_text():
    text = log_output(MB)
    digest = index_text(text)
    assert is_digest(digest) and len(digest) <= INDEX_CHARS + 1
    assert "quorum" in digest and "etimedout" in digest.lower(), "a word deep inside is indexed"
    assert index_text("short text") == "short text"


def test_a_removed_or_altered_payload_is_found_by_check_and_reads_as_a_placeholder(backend):
    text = json_output(MB)
    sha = hashlib.sha256(text.encode()).hexdigest()
    with backend.engine(durable=False) as engine:
        session_with(engine, text)
    for damage in ("alter", "remove"):
        if backend.url is None:
            path = payload_files.path_of(backend.root / "sessions" / "s", sha)
            if damage == "alter":
                path.write_bytes(path.read_bytes().replace(b"item-1", b"item-X", 1))
            else:
                path.unlink()
        else:
            import psycopg

            with psycopg.connect(backend.url, autocommit=True) as conn:
                if damage == "alter":
                    conn.execute("UPDATE workmem.payloads SET data = overlay(data placing 'X'::bytea from 20)")
                else:
                    conn.execute("DELETE FROM workmem.payloads")
        storage = backend.storage()
        try:
            found = storage.sessions.check("s")
            assert any(sha in str(a) and ("missing" in str(a) if damage == "remove" else "does not match" in str(a))
                       for a in found), found
            part = storage.sessions.live_messages("s")[2]["parts"][0]
            assert part["damaged"] and f"payload sha256:{sha}" in part["content"], "a placeholder, not an error"
            assert part["content"].startswith(text[:1000]) and "send the tool result again" in part["content"]
            assert len(storage.sessions.messages_in_range("s", 1, 2)) == 2, "the other messages still read"
        finally:
            storage.close()


def test_a_result_beyond_max_payload_bytes_is_stored_clipped_and_flagged(backend):
    text = log_output(64 * 1024)
    with backend.engine(durable=False, payload_bytes=4096, max_payload_bytes=16 * 1024) as engine:
        session_with(engine, text)
        stored = engine.live_messages("s")[2]
        part = stored["parts"][0]
        assert part["size"] <= 16 * 1024 and stored["meta"]["workmem_clipped_bytes"] == len(text.encode())
        assert part["content"].startswith(text[:1000]) and part["content"].endswith(text[-1000:])
        assert "clipped" in part["content"] and "max_payload_bytes" in part["content"]


def test_a_small_result_stays_in_its_line_and_the_same_result_twice_is_one_payload(backend):
    text = json_output(200 * 1024)
    with backend.engine(durable=False) as engine:
        session_with(engine, "small output")
        session_with(engine, text)
        session_with(engine, text)
        live = engine.live_messages("s")
        assert "content_ref" not in live[2]["parts"][0]
        assert live[6]["parts"][0]["sha256"] == live[10]["parts"][0]["sha256"]
        assert live[6]["parts"][0]["content"] == live[10]["parts"][0]["content"] == text
        engine.delete_session("s")
    if backend.url is None:
        folder = backend.root / "sessions" / "s" / payload_files.FOLDER
        assert not folder.exists(), "payloads go with their session"
    else:
        import psycopg

        with psycopg.connect(backend.url) as conn:
            assert conn.execute("SELECT count(*) FROM workmem.payloads").fetchone()[0] == 0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"payload_bytes": 0}, "payload_bytes"), ({"max_payload_bytes": -1}, "max_payload_bytes"),
    ({"payload_bytes": True}, "payload_bytes"), ({"payload_bytes": 2048, "max_payload_bytes": 1024}, "payload_bytes"),
])
def test_bad_payload_settings_are_typed_errors(root, kwargs, field):
    from workmem.graphs.engine import WorkingMemoryEngine

    with pytest.raises(InvalidInput) as err:
        WorkingMemoryEngine(root, **kwargs)
    assert err.value.field == field
    with pytest.raises(InvalidInput):
        PayloadLimits(**kwargs)


def test_payloads_are_fsynced_even_when_the_store_is_not_durable(root, monkeypatch):
    from workmem.graphs.engine import WorkingMemoryEngine

    writes = []
    real = fsutil.atomic_write
    monkeypatch.setattr(fsutil, "atomic_write", lambda path, data, *, durable=True: (
        writes.append((os.path.basename(path), durable)), real(path, data, durable=durable))[1])
    with WorkingMemoryEngine(root, durable=False) as engine:
        session_with(engine, json_output(100 * 1024))
    payload_writes = [w for w in writes if len(w[0]) == 64 or w[0] == payload_files.FORMAT_FILE]
    assert len(payload_writes) == 2 and all(durable for _, durable in payload_writes)


def test_a_session_in_a_newer_format_is_refused_not_misread(backend):
    with backend.engine(durable=False) as engine:
        session_with(engine, json_output(100 * 1024))
    if backend.url is None:
        (backend.root / "sessions" / "s" / payload_files.FORMAT_FILE).write_text("3\n")
        with pytest.raises(UnsupportedFormat), backend.engine() as engine:
            engine.live_messages("s")
    else:
        import psycopg

        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute("UPDATE workmem.workmem_schema SET version = 3")
        with pytest.raises(UnsupportedFormat):
            backend.storage()


def test_a_failed_append_on_postgres_leaves_neither_payload_nor_message(backend, monkeypatch):
    if backend.url is None:
        pytest.skip("the file backend's kill-at-every-step test is tests/state/files/test_payload_crash.py")
    import psycopg

    import workmem.state.postgres.sessions as pg_sessions

    text = json_output(200 * 1024)
    with backend.engine(durable=False) as engine:
        real = pg_sessions._message_row
        monkeypatch.setattr(pg_sessions, "_message_row", lambda *a: (_ for _ in ()).throw(RuntimeError("cut")))
        with pytest.raises(RuntimeError):
            session_with(engine, text)
        monkeypatch.setattr(pg_sessions, "_message_row", real)
        with psycopg.connect(backend.url) as conn:
            assert conn.execute("SELECT count(*) FROM workmem.payloads").fetchone()[0] == 0
        assert not engine.session_exists("s")
        session_with(engine, text)
        assert [m["seq"] for m in engine.live_messages("s")] == [1, 2, 3, 4]
        assert engine.live_messages("s")[2]["parts"][0]["content"] == text


@tool
def fetch_inventory() -> str:
    """Fetch the whole inventory as JSON."""
    return BIG_JSON


BIG_JSON = json_output(3 * MB)[:-1] + ', {"id": -1, "name": "the-lost-widget", "warehouse": "B7"}]'


def test_an_agent_sees_a_3mb_result_as_its_synopsis_pages_it_and_finds_a_line(root):
    from langgraph.checkpoint.memory import InMemorySaver

    from workmem.graphs.engine import WorkingMemoryEngine

    def call(name: str, args: dict, i: int) -> AIMessage:
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{i}", "type": "tool_call"}])

    model = scripted(call("fetch_inventory", {}, 0),
                     call("read_tool_result", {"ref": "seq:3", "offset": 0, "limit": 2000}, 1),
                     call("read_tool_result", {"ref": "seq:3", "offset": 2000, "limit": 2000}, 2),
                     call("read_tool_result", {"ref": "seq:3", "query": "the-lost-widget"}, 3),
                     AIMessage(content="It is in warehouse B7."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[fetch_inventory], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 64_000))])
        agent.invoke({"messages": [HumanMessage("Where is the lost widget?")]}, {"configurable": {"thread_id": "s"}})
        shown = [[m.content for m in p if isinstance(m, ToolMessage) and m.tool_call_id == "c0"][0]
                 for p in model.prompts[1:]]
        assert len(set(shown)) == 1 and "\n[… tool result seq:3 · fetch_inventory · json" in shown[0], "same bytes"
        assert count_tokens(shown[0]) <= 1_653  # offload_tokens: (64 000 − 2 000) / 37.5
        pages = [[m.content for m in model.prompts[i]
                  if isinstance(m, ToolMessage) and m.tool_call_id == f"c{i - 1}"][0] for i in (2, 3)]
        assert BIG_JSON[:2000] in pages[0] and BIG_JSON[2000:4000] in pages[1]
        hit = [m.content for m in model.prompts[4] if isinstance(m, ToolMessage) and m.tool_call_id == "c3"][0]
        assert '"the-lost-widget", "warehouse": "B7"' in hit
        stored = engine.live_messages("s")[2]["parts"][0]
        assert stored["content"] == BIG_JSON and stored["sha256"] == hashlib.sha256(BIG_JSON.encode()).hexdigest()


# -- review regressions -----------------------------------------------------------------------------------

def test_a_result_with_a_large_block_keeps_its_payload_text_and_drops_the_block(root):
    from langchain_core.messages import ToolMessage as LcTool

    from workmem.graphs.agent.view import clip_oversized
    from workmem.graphs.engine import WorkingMemoryEngine

    text = log_output(3 * MB)
    image = {"type": "image", "source_type": "base64", "mime_type": "image/png", "data": "A" * (1200 * 1024)}
    message = LcTool(content=[{"type": "text", "text": text}, image], tool_call_id="c1", name="shot", id="t1")
    with WorkingMemoryEngine(root, durable=False) as engine:
        clipped = clip_oversized([message], engine.max_message_bytes, payloads=engine.payload_limits)
        engine.add_messages("s", [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]}, *clipped])
        part = engine.live_messages("s")[1]["parts"][0]
        assert part["content"].startswith(text) and "content_ref" in part, "the text is stored whole"
        assert engine.live_messages("s")[1]["meta"].get("workmem_dropped_blocks") == 1


def test_reindex_with_one_damaged_payload_keeps_every_other_session_searchable(root):
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(root, durable=False) as engine:
        for session in ("damaged", "fine"):
            session_with(engine, log_output(MB), session)
            engine.add_messages(session, [{"role": "user", "content": f"{session} heron survey"},
                                          {"role": "assistant", "content": "ok"}] * 3)
            engine.commit(session, keep_recent_count=2)
        [payload] = (root / "sessions" / "damaged" / "payloads").glob("[0-9a-f]" * 64)
        payload.unlink()
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.reindex()
        assert engine.archive_search("fine", "quorum ETIMEDOUT"), "the other session is indexed whole"
        assert engine.archive_search("damaged", "heron survey"), "the damaged one too, its payload by preview"
        assert any("missing" in f["problem"] for f in engine.check("damaged"))


def test_a_session_in_a_newer_format_is_refused_for_writes_by_a_warm_engine(root):
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(root, durable=False) as engine:
        session_with(engine, json_output(100 * 1024))
        (root / "sessions" / "s" / payload_files.FORMAT_FILE).write_text("3\n")
        with pytest.raises(UnsupportedFormat):
            engine.add_messages("s", [{"role": "user", "content": "more"}])
    lines = (root / "sessions" / "s" / "messages.jsonl").read_bytes().count(b"\n")
    assert lines == 4, "nothing appended"


def batch_with_ids(text: str) -> list[dict]:
    return [{"role": "assistant", "content": "", "id": "a1", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "run", "content": text, "id": "t1"}]


def damage_payload(backend, sha: str, how: str) -> None:
    if backend.url is None:
        path = payload_files.path_of(backend.root / "sessions" / "s", sha)
        if how == "remove":
            path.unlink()
        else:
            path.write_bytes(b"\x00" * path.stat().st_size)  # same size, other bytes
        return
    import psycopg

    with psycopg.connect(backend.url, autocommit=True) as conn:
        if how == "remove":
            conn.execute("DELETE FROM workmem.payloads")
        else:
            conn.execute("UPDATE workmem.payloads SET data = overlay(data placing '\\x00'::bytea from 10)")


@pytest.mark.parametrize("how", ["remove", "same-size"])
def test_a_retry_carrying_the_text_heals_a_damaged_payload_and_never_raises(backend, how):
    text = json_output(200 * 1024)
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "go"}])
        first = engine.add_messages("s", batch_with_ids(text))
        sha = first[1]["parts"][0]["sha256"]
    damage_payload(backend, sha, how)
    with backend.engine(durable=False) as engine:
        again = engine.add_messages("s", [*batch_with_ids(text), {"role": "assistant", "content": "done"}])
        assert [m["seq"] for m in again] == [2, 3, 4], "the repeats are not stored again"
        assert again[1]["parts"][0]["content"] == text
        assert engine.check("s") == [], "the caller's copy replaced the damaged payload"
        assert engine.live_messages("s")[2]["parts"][0]["content"] == text


def test_concurrent_retries_on_postgres_do_not_wait_on_the_pool(backend):
    if backend.url is None:
        pytest.skip("a Postgres pool")
    from concurrent.futures import ThreadPoolExecutor

    text = json_output(200 * 1024)
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", batch_with_ids(text))
    with backend.engine(durable=False) as engine, ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: engine.add_messages("s", batch_with_ids(text)), range(16)))
        assert all([m["seq"] for m in r] == [1, 2] and r[1]["parts"][0]["content"] == text for r in results)


def test_workmem_own_large_results_stay_out_of_the_commit_transcript():
    from workmem.nodes.formatting import format_message
    from workmem.state.messages import normalize_message

    msg = normalize_message({"role": "tool", "tool_call_id": "c1", "name": "archive_expand", "content": "y" * 90_000},
                            payloads=PayloadLimits())
    assert "content_ref" in msg["parts"][0]
    assert "y" * 100 not in format_message({**msg, "seq": 5}, clip_tokens=400)


@pytest.mark.parametrize("clip", [64, 80])
def test_a_payload_synopsis_in_a_commit_transcript_is_never_cut_by_a_small_clip(clip):
    # a synopsis is made for the clip but never shorter than its marker line (~110 tokens): the clip must not cut it
    from workmem.nodes.formatting import format_message
    from workmem.state.messages import normalize_message

    text = "\n".join(f"tests/test_{i}.py::test_case PASSED" for i in range(12_000))
    msg = normalize_message({"role": "tool", "tool_call_id": "c1", "name": "pytest", "content": text},
                            payloads=PayloadLimits())
    block = format_message({**msg, "seq": 12}, clip_tokens=clip)
    assert "…[clipped " not in block
    assert 'read_tool_result(ref="seq:12", offset=' in block and "chars left out here" in block
    assert block.count("[… tool result seq:12") == 1 and block.rstrip().endswith("PASSED")
