"""Inputs checked before anything runs, in the syntax the user typed: the CLI and the Studio graph."""

from __future__ import annotations

import io
import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from rich.console import Console

import workmem.graphs.cli as cli
from workmem.graphs.commit import build_commit_graph
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.context import CommitContext
from workmem.state.errors import InvalidInput

SUBCOMMANDS = ("demo", "add", "commit", "context", "search", "expand", "tasks", "check", "eval")


def test_a_bad_keep_is_refused_in_the_cli_syntax(root, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--root", str(root), "commit", "s", "--keep", "messages:abc"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert "messages:10" in err and "('messages'" not in err
    assert not root.exists(), "nothing ran"


def test_expand_without_what_to_expand_says_what_it_needs(root, capsys):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "hello"}])
    assert cli.main(["--root", str(root), "expand", "s"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "say what to expand" in err and "start_seq=None" not in err


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_names_each_default_once(name, capsys):
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    for line in " ".join(capsys.readouterr().out.split()).split("--"):
        assert line.count("default") <= 1, line


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_explains_every_option_and_where_the_data_root_is(name, capsys):
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    options = text.split("options:", 1)[1]
    assert "(default: True)" not in options, "a --no-X flag's default reads as the flag being on"
    assert "$WORKMEM_HOME" in options, "the data root's default, as in the top-level help"
    for action in cli.build_parser()._subparsers._group_actions[0].choices[name]._actions:
        assert action.help or not action.option_strings, f"{name} {action.option_strings} has no help text"


def test_tasks_errors_wrap_as_a_paragraph_at_80_columns(root, monkeypatch):
    error = ("openai:stub-model failed, the extractive model stood in: BadRequestError: Error code: 400 - "
             "This model's maximum context length is 8192 tokens")
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=80))
    cli._render_tasks([{"task_id": "a" * 32, "session_id": "session-1", "archive_id": "archive_001",
                        "status": "completed", "attempts": 0, "updated_at": "2026-12-02T15:12:33+00:00",
                        "error": error}])
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert " ".join(" ".join(lines).split()).endswith(error), "the whole error, in reading order"
    below = [line for line in lines if line[:1].isalpha()]
    assert len(below) <= len(error) // 60 + 1, "wrapped as a paragraph, never one word a line"


@pytest.mark.parametrize(("given", "field", "says"), [
    ({}, "session_id", "non-empty"),
    ({"session_id": "  "}, "session_id", "non-empty"),
    ({"session_id": "s", "keep": "messages:abc"}, "keep", "messages:10"),
    ({"session_id": "s", "keep": "lines:3"}, "keep", "unit must be"),
    ({"session_id": "s", "keep": "turns:2", "keep_recent_count": 3}, "keep", "not both"),
    ({"session_id": "s", "memory_budget": 5}, "memory_budget", "400"),
    ({"session_id": "s", "messages": "hello"}, "messages", "list"),
    ({"session_id": "s", "messages": ["hello"]}, "messages[0]", "object"),
    ({"session_id": "x" * 100_000}, "session_id", "long"),
    ({"session_id": "\ud800"}, "session_id", "UTF-8"),
    ({"session_id": "s", "messages": [{"role": "user", "content": "y", "meta": "notadict"}]}, "messages[0].meta",
     "object"),
    ({"session_id": "s", "messages": [{"role": "wizard", "content": "y"}]}, "messages[0].role", "one of"),
    ({"session_id": "s", "messages": [{"role": "user", "content": "a\ud800"}]}, "messages[0].parts[0].text",
     "surrogate"),
])
def test_the_studio_graph_checks_its_input_before_any_node(root, given, field, says):
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    seen = []
    with pytest.raises(InvalidInput) as refused:
        for chunk in graph.stream(given, {"configurable": {"thread_id": "t"}}, context=CommitContext(root=str(root)),
                                  stream_mode="updates"):
            seen.append(chunk)
    assert refused.value.field == field and says in str(refused.value)
    assert "('messages'" not in str(refused.value)
    assert seen == [] and not root.exists(), "no node ran, nothing was written"


def test_the_studio_graph_takes_a_tool_result_the_store_keeps_as_a_payload(root):
    calls = [{"role": "user", "content": "fetch it"},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "fetch", "args": {}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "x" * 2_000_000}]
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"session_id": "s", "messages": calls, "keep": 0}, {"configurable": {"thread_id": "p"}},
                       context=CommitContext(root=str(root)))
    assert out["status"] == "completed", json.dumps(out, default=str)[:300]
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert [m["seq"] for m in engine.iter_messages("s")] == [1, 2, 3]


def test_the_studio_graph_takes_a_fraction_keep(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [{"role": r, "content": f"step {i}"} for i in range(6) for r in ("user", "assistant")])
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"session_id": "s", "keep": "fraction:0.00002"}, {"configurable": {"thread_id": "f"}},
                       context=CommitContext(root=str(root)))
    assert out["status"] == "completed", json.dumps(out, default=str)[:300]


def test_the_studio_graph_counts_a_bare_number_keep_in_messages(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [{"role": r, "content": f"step {i}"} for i in range(6) for r in ("user", "assistant")])
    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"session_id": "s", "keep": 4}, {"configurable": {"thread_id": "n"}},
                       context=CommitContext(root=str(root)))
    assert out["status"] == "completed"
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert len(engine.live_messages("s")) == 4


# -- found by a hostile pass over the CLI: each input gets one typed error line, nothing run or written ----------

def _stored(root, session="s", n=4):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages(session, [{"role": "user" if i % 2 == 0 else "assistant", "content": f"note {i}"}
                                      for i in range(n)])


@pytest.mark.parametrize("out", ["", "a folder", "a missing folder"], ids=["empty", "folder", "missing-folder"])
def test_export_to_no_file_is_refused_before_anything_is_written(root, tmp_path, capsys, out):
    _stored(root)
    target = {"a folder": str(tmp_path), "a missing folder": str(tmp_path / "missing" / "s.jsonl")}.get(out, out)
    assert cli.main(["--root", str(root), "export", "s", "--out", target]) == 2
    assert "invalid out=" in capsys.readouterr().err
    assert not list(tmp_path.parent.glob(".*.partial")) and not list(tmp_path.glob(".*.partial"))


@pytest.mark.parametrize("own", ["index.sqlite", "checkpoints.sqlite", "studio.sqlite", "sessions/s/messages.jsonl"])
def test_export_over_one_of_workmems_own_files_is_refused_and_leaves_it_whole(root, capsys, own):
    _stored(root, n=6)
    with WorkingMemoryEngine(root, durable=False) as engine:
        assert engine.commit("s", keep_recent_count=2)["status"] == "completed"
    target = root / own
    if not target.exists():
        target.write_bytes(b"Studio's database")
    before = target.read_bytes()
    assert cli.main(["--root", str(root), "export", "s", "--out", str(target)]) == 2
    assert "workmem's own files" in capsys.readouterr().err
    assert target.read_bytes() == before


def test_export_through_a_link_or_a_fifo_writes_through_it_never_replacing_it(root, tmp_path, capsys):
    _stored(root)
    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert cli.main(["--root", str(root), "export", "s", "--out", str(link)]) == 0
    assert link.is_symlink() and len(real.read_text().splitlines()) == 4
    real.write_text("old\n")

    def fails_midway(messages, handle):
        handle.write("half an export\n")
        raise OSError(28, "No space left on device")

    with pytest.MonkeyPatch.context() as patch:  # the export fails: the file the link names keeps what it held
        patch.setattr(cli, "write_jsonl", fails_midway)
        assert cli.main(["--root", str(root), "export", "s", "--out", str(link)]) == 2
    assert real.read_text() == "old\n" and link.is_symlink() and not list(tmp_path.glob(".*.partial"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with ThreadPoolExecutor(1) as pool:
        reader = pool.submit(lambda: open(fifo, encoding="utf-8").read())  # noqa: SIM115
        assert cli.main(["--root", str(root), "export", "s", "--out", str(fifo)]) == 0
        assert len(reader.result(timeout=30).splitlines()) == 4
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(("argv", "says"), [
    (["--start-turn", "t0"], "no message of the session is in turns t0–t0"),
    (["--start-turn", "t99"], "no message of the session is in turns t99–t99"),
    (["--start-turn", "t1", "--end-seq", "3"], "invalid end_seq=3"),
], ids=["t0", "past-the-end", "mixed-names-the-seq-given"])
def test_expand_of_an_empty_or_mixed_turn_range_is_an_error(root, capsys, argv, says):
    _stored(root)
    assert cli.main(["--root", str(root), "expand", "s", *argv]) == 2
    assert says in capsys.readouterr().err


def test_add_says_how_many_messages_it_stored_and_how_many_were_already_there(root, tmp_path, capsys):
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"role": "user", "content": "hi", "id": "m1"}] * 2))
    assert cli.main(["--root", str(root), "--json", "add", "s", str(batch)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["added"], first["already_stored"]) == (1, 0), "a message given twice in a batch is stored once"
    assert cli.main(["--root", str(root), "--json", "add", "s", str(batch)]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["added"], again["already_stored"], again["first_seq"]) == (0, 1, None)


@pytest.mark.parametrize("case", ["out-in-a-missing-folder", "out-a-folder", "report-a-file", "deep-json",
                                  "two-samples-one-session"])
def test_eval_refuses_what_it_cannot_run_or_write_before_it_runs(root, tmp_path, capsys, case):
    sample = {"sample_id": "conv-a", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [
        {"speaker": "A", "dia_id": "D1:1", "text": "hello"}], "session_1_date_time": "1 May 2023"}, "qa": []}
    data = tmp_path / "data.json"
    data.write_text(json.dumps([sample]))
    argv = ["--root", str(root / "eval"), "eval", "--data", str(data), "--no-model", "--no-search-recall"]
    if case == "out-in-a-missing-folder":
        argv += ["--out", str(tmp_path / "missing" / "r.json")]
    elif case == "out-a-folder":
        argv += ["--out", str(tmp_path)]
    elif case == "report-a-file":
        argv += ["--report", str(data)]
    elif case == "deep-json":
        data.write_text("[" * 100_000 + "]" * 100_000)
    else:
        data.write_text(json.dumps([sample, {**sample, "sample_id": "Conv A"}]))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error: invalid" in err and "Traceback" not in err and "RecursionError" not in err, err
    assert not (root / "eval").exists(), "refused before the evaluation stored anything"


def test_a_root_with_a_nul_is_invalid_input():
    with pytest.raises(InvalidInput) as err:
        WorkingMemoryEngine(root="/tmp/wm\x00root")
    assert err.value.field == "root"
