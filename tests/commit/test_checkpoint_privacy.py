"""No covered message text ever reaches a checkpoint.

Messages carry unique marker strings; the scripted model's ops never mention them. After commits
down every non-fallback path, no row or blob of any table of `checkpoints.sqlite` — nor the raw bytes
of the database and its WAL — holds a marker. A control op that does quote one marker proves the
scan would see it.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from fakes import create_call, fenced_json_reply, invalid_call, scripted, text_reply, valid_update_call

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.formatting import chunk_messages

CHUNK_TOKENS = 120


def marker() -> str:
    return f"MARKER-{uuid.uuid4().hex}"


def turn(markers: list[str], *, tool: bool = False) -> list[dict[str, Any]]:
    """A user request and an answer (optionally through a tool call), every text carrying a new marker."""
    ids = [marker() for _ in range(4)]
    markers.extend(ids)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Please look at the importer {ids[0]}."}]
    if tool:
        msgs.append({"role": "assistant", "content": f"Reading it {ids[1]}.", "tool_calls": [
            {"id": f"c-{ids[1][-6:]}", "type": "function",
             "function": {"name": "read_file", "arguments": f'{{"path": "src/{ids[2]}.py"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c-{ids[1][-6:]}", "content": f"def load(): pass  # {ids[3]}"})
    else:
        msgs.append({"role": "assistant", "content": f"Done {ids[1]} {ids[2]} {ids[3]}."})
    return msgs


GENERIC = {"Session Title": "Importer work", "Current State": "Working on the importer.",
           "Task & Goals": "- Fix the importer", "Key Facts & Decisions": "- The importer is in Python",
           "Files & Context": "- src/importer.py", "Errors & Corrections": "", "Open Issues": "- Check the tests"}


def checkpoint_rows(path: Path) -> list[tuple[str, Any]]:
    """Every value of every row of every table, with the table name."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [(table, value) for table in tables for row in conn.execute(f'SELECT * FROM "{table}"')
                for value in row]
    finally:
        conn.close()


def found_markers(root: Path, markers: list[str]) -> set[str]:
    """Markers present in any row / blob of checkpoints.sqlite or in its raw files (db, WAL)."""
    db = root / "checkpoints.sqlite"
    haystacks: list[bytes] = []
    for _, value in checkpoint_rows(db):
        if isinstance(value, str):
            haystacks.append(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, bytes | bytearray | memoryview):
            haystacks.append(bytes(value))
    for suffix in ("", "-wal", "-shm"):
        raw = Path(f"{db}{suffix}")
        if raw.exists():
            haystacks.append(raw.read_bytes())
    blob = b"\n".join(haystacks)
    return {m for m in markers if m.encode() in blob}


@pytest.fixture
def session(root):
    """An engine whose model plays the script given to `run`; commits down each non-fallback path."""
    engines: list[WorkingMemoryEngine] = []

    def run(script: list[Any], **kwargs: Any) -> WorkingMemoryEngine:
        engine = WorkingMemoryEngine(root=root, model=scripted(*script), durable=False, **kwargs)
        engines.append(engine)
        return engine

    yield run
    for engine in engines:
        engine.close()


def test_no_message_text_in_any_checkpoint(session, root):
    markers: list[str] = []
    paths: list[list[str]] = []

    def commit(engine: WorkingMemoryEngine, messages: list[dict[str, Any]], keep: int = 0) -> None:
        engine.add_messages("s", messages)
        result = engine.commit("s", keep_recent_count=keep)
        assert result["status"] == "completed", result
        paths.append(result["route"])

    # 1. create (first commit), huge tool output clipped in the prompt
    huge = turn(markers, tool=True)
    huge[-1]["content"] += " " + " ".join(marker() if i % 500 == 0 else "data" for i in range(6000))
    markers.extend(w for w in huge[-1]["content"].split() if w.startswith("MARKER-"))
    e1 = session([create_call(GENERIC)], clip_tokens=300)
    commit(e1, huge)
    # 2. valid update; 3. broken JSON → recover; 4. fenced JSON → recover; 5. no call → create retry
    scripts = [
        [valid_update_call({"Current State": {"op": "UPDATE", "content": "Still on the importer."}})],
        [invalid_call('{"sections": {"Open Issues": {"op": "APPEND", "items": ["Re-run the suite", "x')],
        [fenced_json_reply({"sections": {"Task & Goals": {"op": "APPEND", "items": ["Keep the API"]}}})],
        [text_reply("Nothing to add."), create_call(GENERIC)],
    ]
    for i, script in enumerate(scripts):
        engine = session(script)
        commit(engine, turn(markers, tool=i % 2 == 0), keep=1 if i == 3 else 0)
        assert engine.model.get().calls == len(script)  # the path was taken as scripted
    # 6. several chunks in one commit, each checkpointed
    long = [m for _ in range(4) for m in turn(markers)]
    e6 = WorkingMemoryEngine(root=root, model=scripted(), durable=False)  # only to count the chunks
    e6.add_messages("s", long)
    n_chunks = len(chunk_messages(e6.storage.sessions.live_messages("s"), CHUNK_TOKENS, clip_tokens=4000))
    e6.close()
    assert n_chunks >= 3
    engine = session([valid_update_call({"Current State": {"op": "UPDATE", "content": f"Chunk {i}."}})
                      for i in range(n_chunks)], chunk_tokens=CHUNK_TOKENS)
    result = engine.commit("s", keep_recent_count=0)
    assert result["status"] == "completed"
    paths.append(result["route"])
    # 7. a skipped run (its thread is deleted, but it must not have written message text either)
    assert engine.commit("s", keep_recent_count=0)["status"] == "skipped"

    covered = {step for route in paths for step in route}
    assert {"recover", "create_retry", "guard", "merge", "persist"} <= covered
    assert sum(r.count("merge") for r in paths) >= 5 + n_chunks
    # the markers were really committed: they are in the archives (the files hold the truth)
    history = engine.storage.sessions.session_dir("s") / "history"
    archived = "".join((p / "messages.jsonl").read_text() for p in history.iterdir())
    assert all(m in archived for m in markers)
    assert len(markers) > 30
    assert checkpoint_rows(root / "checkpoints.sqlite"), "the checkpoints were written"

    assert found_markers(root, markers) == set()


def test_scan_sees_text_the_model_put_into_ops(session, root):
    """Control: ops are checkpointed, so a marker the model copies into an op is found by the scan."""
    markers: list[str] = []
    messages = turn(markers)
    quoted = markers[0]
    engine = session([create_call({**GENERIC, "Current State": f"User asked about {quoted}."})])
    engine.add_messages("s", messages)
    assert engine.commit("s")["status"] == "completed"
    assert found_markers(root, markers) == {quoted}
