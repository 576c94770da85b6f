"""The commands a user reaches for first: `sessions`, `export`, and read-only commands on a mistyped root."""

from __future__ import annotations

import json

import pytest

from workmem.graphs.cli import main
from workmem.graphs.engine import WorkingMemoryEngine

ODD_ID = "team/alice:42"  # a hashed folder on disk, listed as given
READ_ONLY = [["context", "s"], ["search", "s", "port"], ["expand", "s", "archive_001"], ["tasks"], ["sessions"],
             ["export", "s"], ["check", "s"], ["commit", "s"], ["resume"], ["reindex"], ["repair"],
             ["delete", "s", "--yes"], ["forget-messages", "s", "1"]]


def conversation(tag: str, turns: int) -> list[dict[str, str]]:
    return [m for t in range(turns) for m in ({"role": "user", "content": f"{tag} question {t} about port {t}"},
                                              {"role": "assistant", "content": f"{tag} answer {t}"})]


@pytest.fixture
def filled(root):
    big = "\n".join(f"line {i}: status ok" for i in range(6_000))  # over payload_bytes: a payload file
    with WorkingMemoryEngine(root, durable=False, payload_bytes=4096) as engine:
        engine.add_messages("s", [*conversation("s", 2),
                                  {"role": "assistant", "content": "",
                                   "tool_calls": [{"id": "c1", "name": "read_log", "args": {}}]},
                                  {"role": "tool", "tool_call_id": "c1", "content": big}])
        engine.commit("s", keep_recent_count=2)
        engine.add_messages(ODD_ID, conversation("odd", 1))
    return root, big


@pytest.mark.parametrize("argv", READ_ONLY, ids=lambda a: a[0])
def test_a_read_only_command_refuses_a_root_that_is_not_there(argv, tmp_path, capsys):
    missing = tmp_path / "typo"
    assert main(["--root", str(missing), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: no workmem data at {missing}"
    assert not missing.exists(), "nothing created"


def test_a_folder_without_workmem_data_is_refused_and_left_alone(tmp_path, capsys):
    folder = tmp_path / "home"
    folder.mkdir()
    assert main(["--root", str(folder), "sessions"]) == 2
    assert "no workmem data at" in capsys.readouterr().err
    assert list(folder.iterdir()) == []


def test_add_still_creates_a_root(tmp_path, capsys):
    new = tmp_path / "new"
    source = tmp_path / "m.json"
    source.write_text(json.dumps(conversation("n", 1)), encoding="utf-8")
    assert main(["--root", str(new), "add", "s", str(source)]) == 0
    capsys.readouterr()
    assert main(["--root", str(new), "sessions", "--json"]) == 0
    assert [r["session_id"] for r in json.loads(capsys.readouterr().out)] == ["s"]


def test_sessions_lists_every_session_by_its_own_id(filled, capsys):
    root, _ = filled
    assert main(["--root", str(root), "sessions", "--json"]) == 0
    rows = {r["session_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"s", ODD_ID}
    assert (rows["s"]["live_messages"], rows["s"]["archived_messages"], rows["s"]["commits"]) == (2, 4, 1)
    assert (rows[ODD_ID]["live_messages"], rows[ODD_ID]["archived_messages"], rows[ODD_ID]["commits"]) == (2, 0, 0)
    assert main(["--root", str(root), "sessions"]) == 0
    table = capsys.readouterr().out
    assert ODD_ID in table and "archived" in table and "last activity" in table


def test_export_writes_every_message_in_seq_order_with_payloads_inline(filled, capsys, tmp_path):
    root, big = filled
    assert main(["--root", str(root), "export", "s"]) == 0
    lines = capsys.readouterr().out.splitlines()
    exported = [json.loads(line) for line in lines]
    assert [m["seq"] for m in exported] == [1, 2, 3, 4, 5, 6]  # four archived, two live
    result = next(p for p in exported[5]["parts"] if p["type"] == "tool_result")
    assert result["content"] == big  # the payload's whole text, not its preview
    out = tmp_path / "s.jsonl"
    assert main(["--root", str(root), "export", "s", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"session_id": "s", "messages": 6, "out": str(out)}
    assert out.read_text(encoding="utf-8").splitlines() == lines
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no partial file left


def test_export_of_an_unknown_session_writes_nothing(filled, capsys, tmp_path):
    root, _ = filled
    out = tmp_path / "nobody.jsonl"
    assert main(["--root", str(root), "export", "nobody", "--out", str(out)]) == 2
    assert "session not found" in capsys.readouterr().err
    assert not out.exists()


def test_the_tasks_table_counts_resumes(filled, capsys):
    root, _ = filled
    assert main(["--root", str(root), "tasks"]) == 0
    header = capsys.readouterr().out
    assert "resumes" in header and "tries" not in header


def test_resume_says_what_became_of_each_unfinished_commit(root, capsys):
    """A commit that never started was abandoned, and `resume` printed "resumed 1 commit(s)"."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", conversation("s", 3))
        ghost = engine.storage.tasks.create_task("s", archive_id="archive_001", status="running")
    assert main(["--root", str(root), "resume"]) == 0
    out = capsys.readouterr().out
    assert "resumed 0 of 1 unfinished commit(s)" in out and f"abandoned: task {ghost['task_id'][:8]}" in out
    assert main(["--root", str(root), "resume"]) == 0 and "nothing to resume" in capsys.readouterr().out
