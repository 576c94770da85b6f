"""The CLI in-process: add, commit, context, search, expand (and the older commands) with --json."""

from __future__ import annotations

import io
import json

import pytest
from engine_helpers import FailingPersist, assistant, tool_turn

from workmem.graphs.cli import main
from workmem.graphs.context.assemble import SUMMARY_PREFIX, SYSTEM_ADDITION
from workmem.graphs.engine import WorkingMemoryEngine

MESSAGES = [
    {"role": "user", "content": "Please read config/app.toml and tell me the port."},
    {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "config/app.toml"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "port = 8080"},
    {"role": "assistant", "content": "The service listens on port 8080."},
    {"role": "user", "content": "Thanks. Keep it [bold]as is[/bold]."},
    {"role": "assistant", "content": "Will do."},
]


def run(capsys, root, *argv: str) -> tuple[int, object]:
    """Run the CLI with --json on `root`; return the exit code and the parsed stdout (or None)."""
    code = main(["--root", str(root), *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


@pytest.fixture
def session(tmp_path, capsys, root):
    jsonl = tmp_path / "conversation.jsonl"
    jsonl.write_text("\n".join(json.dumps(m) for m in MESSAGES) + "\n", encoding="utf-8")
    code, out = run(capsys, root, "add", "cli-s", str(jsonl))
    assert code == 0 and out["added"] == 6 and out["first_seq"] == 1
    return "cli-s"


def test_add_accepts_a_json_list_too(tmp_path, capsys, root):
    path = tmp_path / "list.json"
    path.write_text(json.dumps(MESSAGES[:2]), encoding="utf-8")
    code, out = run(capsys, root, "add", "listed", str(path))
    assert (code, out["added"]) == (0, 2)


def test_context_before_and_after_a_commit(capsys, root, session):
    code, before = run(capsys, root, "context", session)
    assert code == 0
    assert [m["role"] for m in before["messages"]] == ["system", "user", "assistant", "tool", "assistant", "user",
                                                      "assistant"]
    assert before["messages"][0] == {"role": "system", "content": SYSTEM_ADDITION, "workmem": "system"}
    assert before["messages"][2]["tool_calls"] == [{"id": "call_1", "name": "read_file",
                                                   "args": {"path": "config/app.toml"}}]
    assert before["messages"][3]["tool_call_id"] == "call_1"

    code, committed = run(capsys, root, "commit", session, "--keep", "2")
    assert code == 0 and committed["status"] == "completed" and committed["archive_id"] == "archive_001"

    code, after = run(capsys, root, "context", session, "--budget", "4000")
    assert [m["workmem"] for m in after["messages"][:2]] == ["system", "summary"]
    assert after["messages"][1]["content"].startswith(SUMMARY_PREFIX + "# Working Memory")
    assert [m["content"] for m in after["messages"][2:]] == ["Thanks. Keep it [bold]as is[/bold].", "Will do."]
    assert after["stats"]["budget"] == 4000 and after["stats"]["archives_total"] == 1


def test_search_and_expand(capsys, root, session):
    run(capsys, root, "commit", session, "--keep", "0")
    code, hits = run(capsys, root, "search", session, "config/app.toml")
    assert code == 0 and hits[0]["archive_id"] == "archive_001"
    assert "config/app.toml" in hits[0]["content"]
    code, hits = run(capsys, root, "search", session, "port", "8080", "--archive", "archive_001", "--limit", "2")
    assert code == 0 and len(hits) == 2 and {h["seq"] for h in hits} <= {3, 4}
    assert run(capsys, root, "search", session, "nothing-like-this")[1] == []

    code, archive = run(capsys, root, "expand", session, "archive_001")
    assert code == 0 and archive["message_count"] == 6 and "port = 8080" in archive["content"]
    code, seqs = run(capsys, root, "expand", session, "--start-seq", "3", "--end-seq", "4")
    assert (seqs["start_seq"], seqs["end_seq"], seqs["message_count"]) == (3, 4, 2)
    code, turn = run(capsys, root, "expand", session, "--start-turn", "t2")
    assert code == 0 and turn["start_seq"] == 5 and turn["message_count"] == 2


def test_errors_exit_2_with_a_message(capsys, root, session, tmp_path):
    assert main(["--root", str(root), "context", "no-such-session"]) == 2
    assert "session not found" in capsys.readouterr().err
    assert main(["--root", str(root), "expand", session, "archive_042"]) == 2
    assert "archive_042" in capsys.readouterr().err
    assert main(["--root", str(root), "context", session, "--budget", "0"]) == 2
    assert "token_budget" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    assert main(["--root", str(root), "add", session, str(bad)]) == 2
    assert "cannot read messages" in capsys.readouterr().err
    bad.write_text('\n\n{"role": "user", "content": "fine"}\n\n{"role": "user", oops}\n', encoding="utf-8")
    assert main(["--root", str(root), "add", session, str(bad)]) == 2
    assert "line 5:" in capsys.readouterr().err, "a bad JSONL line is named by its own number"


def test_add_reads_back_an_export_holding_a_line_separator_in_its_text(capsys, root, tmp_path):
    """JSONL lines end at a newline only: U+2028 inside a JSON string is text (`splitlines` would cut it)."""
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"role": "user", "content": "one\u2028two"}, ensure_ascii=False) + "\n",
                      encoding="utf-8")
    assert main(["--root", str(root), "add", "sep", str(source)]) == 0
    capsys.readouterr()
    out = tmp_path / "out.jsonl"
    assert main(["--root", str(root), "export", "sep", "--out", str(out)]) == 0
    assert main(["--root", str(root), "add", "sep2", str(out)]) == 0
    assert "added 1 message(s)" in capsys.readouterr().out


def test_add_reads_standard_input_from_a_dash(capsys, root, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('[{"role": "user", "content": "from stdin"}]'))
    assert main(["--root", str(root), "add", "dashed", "-"]) == 0
    assert "added 1 message(s)" in capsys.readouterr().out


def test_human_output_does_not_interpret_message_text_as_markup(capsys, root, session):
    assert main(["--root", str(root), "context", session]) == 0
    out = capsys.readouterr().out
    assert "[bold]as is[/bold]" in out and "of 108000 tokens" in out
    assert main(["--root", str(root), "search", session, "anything"]) == 0
    assert "no archived message matches" in capsys.readouterr().out


def test_global_and_trailing_json_flags_agree(capsys, root, session):
    assert main(["--root", str(root), "--json", "tasks"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["tasks", "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first == []


def test_expand_reads_a_tool_result_by_reference(capsys, root):
    log = "\n".join(f"line {i}: ok" for i in range(3_000)) + "\nFATAL: disk quota exceeded on /var/data"
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("t", tool_turn("Why did the job stop?", "tail_log", log))
    code, window = run(capsys, root, "expand", "t", "--ref", "seq:3", "--offset", "10", "--limit", "30")
    assert code == 0 and window["text"] == log[10:40] and window["chars"] == len(log)
    code, found = run(capsys, root, "expand", "t", "--query", "disk quota")
    assert code == 0 and [m["ref"] for m in found["matches"]] == ["seq:3"]
    assert main(["--root", str(root), "expand", "t", "--ref", "seq:1"]) == 2  # not a tool result: a clear error


def test_expand_takes_a_start_seq_alone_and_refuses_a_ref_mixed_with_a_range(capsys, root, session):
    code, one = run(capsys, root, "expand", session, "--start-seq", "2")
    assert code == 0 and (one["start_seq"], one["end_seq"], one["message_count"]) == (2, 2, 1)
    assert main(["--root", str(root), "expand", session, "--ref", "seq:3", "--start-seq", "2"]) == 2
    assert "--start-seq cannot go with them" in capsys.readouterr().err
    assert main(["--root", str(root), "expand", session, "--start-seq", "2", "--limit", "5"]) == 2
    assert "go with --ref" in capsys.readouterr().err
    assert main(["--root", str(root), "expand", "no-such-session", "--ref", "seq:3"]) == 2
    assert "session not found" in capsys.readouterr().err


def test_context_clips_a_newest_result_too_large_for_the_budget(capsys, root):
    log = "\n".join(f"2026-11-30 line {i}: compiled pkg/{i}.go" for i in range(8_000)) + "\nFATAL: out of memory"
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("big", tool_turn("Build it.", "build", log))
        assembled = engine.assemble("big", 8_000)
        assert assembled["stats"]["total_tokens"] <= assembled["stats"]["available"]
        result = assembled["messages"][-1].content
        assert result.startswith(log[:200]) and result.endswith("FATAL: out of memory") and "clipped" in result
    code, context = run(capsys, root, "context", "big", "--budget", "8000")
    assert code == 0 and "clipped" in context["messages"][-1]["content"]


def test_expand_shows_a_large_result_as_a_window_with_how_to_read_on(capsys, root):
    log = "\n".join(f"2026-11-30 line {i}: compiled pkg/{i}.go" for i in range(20_000)) + "\nFATAL: out of memory"
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("big", [*tool_turn("Build it.", "build", log), assistant("Out of memory.")])
        engine.commit("big", keep_recent_count=0)
    assert main(["--root", str(root), "expand", "big", "archive_001"]) == 0
    out = capsys.readouterr().out
    assert "FATAL: out of memory" in out and "line 10000:" not in out and len(out) < 10_000
    assert 'read_tool_result(ref="seq:3", offset=0)' in " ".join(out.split())


@pytest.mark.parametrize("as_json", [True, False])
def test_a_commit_after_an_interrupted_one_says_it_finished_that_one(capsys, root, session, monkeypatch, as_json):
    FailingPersist(monkeypatch, times=1)
    assert main(["--root", str(root), "commit", session, "--keep", "2"]) != 0
    assert "persist failed on purpose" in capsys.readouterr().err

    if as_json:
        code, out = run(capsys, root, "commit", session, "--keep", "2")
        [earlier] = out["resumed"]
        assert code == 0 and out["status"] == "skipped"
        assert (earlier["status"], earlier["archive_id"]) == ("completed", "archive_001")
        assert earlier["covered"] == {"start_seq": 1, "end_seq": 4, "messages": 4}
        assert out["tokens_after"] > 0 and out["tokens_before"] > 0
    else:
        assert main(["--root", str(root), "commit", session, "--keep", "2"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("resumed: completed task ") and lines[0].endswith(" archive_001")
        assert lines[1] == "covered seqs 1–4 (4 messages)"
        assert lines[2].startswith("nothing more to commit (task ") and lines[3].startswith("context tokens ")
