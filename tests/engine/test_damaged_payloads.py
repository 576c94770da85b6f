"""Damage stays local: a payload that is missing, altered, truncated, a FIFO or a directory reads as a marked
placeholder naming its reference (never the data root's path) while live reads, assemble, the read tool and
commits go on; `check()` reports it; sending the result again repairs it (docs/repair.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
from fakes import create_call, scripted

from workmem.graphs.agent.tools import make_tool_result_reader
from workmem.state.files import payload_files

BIG = "".join(f"2026-11-30 step {i} compiled pkg/mod{i}.go\n" for i in range(4000)) + "FAILED: disk quota\n"
SHA = hashlib.sha256(BIG.encode()).hexdigest()
WM = create_call({"Session Title": "Build", "Current State": "The build failed on a disk quota."})


def conversation(result: str = BIG, call: str = "c1") -> list[dict]:
    return [{"role": "user", "content": "Build it."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": call, "type": "function", "function": {"name": "build", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": call, "name": "build", "content": result},
            {"role": "assistant", "content": "The build failed."}]


def damage(backend, how: str) -> None:
    """Damage the one payload of session `s` behind the engine's back."""
    if backend.url is not None:
        import psycopg

        sql = {"delete": "DELETE FROM workmem.payloads",
               "alter": "UPDATE workmem.payloads SET data = overlay(data placing 'X'::bytea from 20)"}[how]
        with psycopg.connect(backend.url, autocommit=True) as conn:
            conn.execute(sql)
        return
    path = payload_files.path_of(backend.root / "sessions" / "s", SHA)
    if how == "truncate":
        os.truncate(path, 100)
        return
    path.unlink()
    if how == "fifo":
        os.mkfifo(path, 0o600)
    elif how == "directory":
        path.mkdir()


def assert_placeholder(text: str, root) -> None:
    assert f"payload sha256:{SHA}" in text and "send the tool result again" in text
    assert BIG[:500] in text, "the stored preview is kept"
    assert str(root) not in text, "never the data root's path"


@pytest.mark.parametrize("how", ["delete", "alter"])
def test_a_damaged_payload_leaves_reads_assemble_the_read_tool_and_commits_going(backend, how):
    engine = backend.engine(model=scripted(WM), durable=False)
    with engine:
        engine.add_messages("s", conversation())
        damage(backend, how)
        engine.storage.sessions._payload_texts.forget("s")  # what this engine read before the damage
        live = engine.live_messages("s")
        assert_placeholder(live[2]["parts"][0]["content"], backend.root)
        assert live[2]["parts"][0]["damaged"]
        assert engine.assemble("s")["messages"], "assemble goes on"
        reader = make_tool_result_reader(engine, "s", max_tokens=50)
        assert "seq:3" in reader.invoke({}), "the listing goes on"
        assert_placeholder(engine.read_tool_result("s", "seq:3", limit=100_000, max_tokens=100_000)["text"],
                           backend.root)
        assert any(SHA in a["problem"] for a in engine.check("s")), "check() reports it"
        result = engine.commit("s", keep_recent_count=0)
        assert result["status"] == "completed" and not result.get("degraded"), result
        archived = engine.archive_messages("s", "archive_001")[2]["parts"][0]
        assert archived["content_ref"] == f"sha256:{SHA}", "the archive keeps the reference"
        assert_placeholder(archived["content"], backend.root)
        engine.add_messages("s", conversation(call="c2"))  # the repair: the same result sent again
        engine.storage.sessions._payload_texts.forget("s")
        assert engine.archive_messages("s", "archive_001")[2]["parts"][0]["content"] == BIG, "healed"
        assert engine.check("s") == []


@pytest.mark.parametrize("how", ["truncate", "fifo", "directory"])
def test_a_payload_that_is_not_a_regular_file_reads_as_a_placeholder(root, how):
    from pg_support import Backend

    from workmem.graphs.engine import WorkingMemoryEngine

    backend = Backend("file", root)
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", conversation())
    damage(backend, how)
    with WorkingMemoryEngine(root, durable=False) as engine:
        part = engine.live_messages("s")[2]["parts"][0]
        assert_placeholder(part["content"], root)
        kind = {"truncate": "does not match", "fifo": "a FIFO", "directory": "a directory"}[how]
        assert kind in part["damaged"]
        reader = make_tool_result_reader(engine, "s", max_tokens=100_000)
        assert_placeholder(reader.invoke({"ref": "seq:3", "limit": 100_000}), root)
        assert any(kind in a["problem"] for a in engine.check("s"))
        engine.add_messages("s", conversation(call="c2"))  # sending it again puts a regular file back
        assert engine.live_messages("s")[2]["parts"][0]["content"] == BIG and engine.check("s") == []


def test_a_damaged_live_file_comes_back_to_the_model_as_tool_text_without_the_root(root):
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", conversation())
        live = root / "sessions" / "s" / "messages.jsonl"
        live.unlink()
        live.mkdir()  # an OSError below the engine's typed errors
        answer = make_tool_result_reader(engine, "s").invoke({"ref": "seq:3"})
        assert "messages.jsonl" in answer and str(root) not in answer, answer


CHILD_TIMEOUT = 60  # a wait on a FIFO never ends; a loaded CI machine can take more than 5 s to import the CLI


def run_cli(root, *argv: str) -> subprocess.CompletedProcess:
    """The `workmem` command in a child process that must end (a FIFO read would wait for ever)."""
    return subprocess.run([sys.executable, "-m", "workmem.graphs.cli", "--root", str(root), *argv],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                          env={**os.environ, "WORKMEM_HOME": str(root)})


def test_a_fifo_payload_never_blocks_check_context_or_expand(root):
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", conversation())
    path = payload_files.path_of(root / "sessions" / "s", SHA)
    path.unlink()
    os.mkfifo(path, 0o600)
    checked = run_cli(root, "check", "s", "--json")
    assert checked.returncode == 1 and "a FIFO" in checked.stdout
    context = run_cli(root, "context", "s", "--json")
    assert context.returncode == 0, context.stderr
    assert f"payload sha256:{SHA}" in json.dumps(json.loads(context.stdout))
    expanded = run_cli(root, "expand", "s", "--ref", "seq:3", "--limit", "200000", "--max-tokens", "100000")
    assert expanded.returncode == 0 and f"sha256:{SHA}" in expanded.stdout, expanded.stderr


def test_a_fifo_in_place_of_the_live_file_is_an_error_never_a_wait(root):
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", conversation())
    live = root / "sessions" / "s" / "messages.jsonl"
    live.unlink()
    os.mkfifo(live, 0o600)
    for argv in (("context", "s"), ("expand", "s", "--start-seq", "1")):
        done = run_cli(root, *argv)
        assert done.returncode == 2 and "a FIFO" in done.stderr, done.stderr
    added = subprocess.run([sys.executable, "-m", "workmem.graphs.cli", "--root", str(root), "add", "s"],
                           input='[{"role": "user", "content": "hi"}]', capture_output=True, text=True,
                           timeout=CHILD_TIMEOUT)
    assert added.returncode == 2, added.stderr
