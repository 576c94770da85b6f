"""`workmem demo --json` on a fresh root with no network and no key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from snapshot import assert_snapshot

from workmem.graphs.demo.run import demo_conversation
from workmem.state.files.store import SessionStore
from workmem.state.memory import SECTIONS, bullet_items, parse_sections

# Runs the CLI with every way out to the network closed: a connect attempt fails loudly.
CHILD = """
import socket, sys
def _refuse(*args, **kwargs):
    raise OSError("network access attempted during the offline demo")
socket.socket.connect = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
from workmem.graphs.cli import main
sys.exit(main(sys.argv[1:]))
"""
KEY_FILES = ["app/importers/csv_loader.py", "config/settings.toml", "tests/test_csv_loader.py"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo") / "wm"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "WORKMEM_", "LANGCHAIN_", "LANGSMITH_"))}
    env["HOME"] = str(root.parent)
    proc = subprocess.run([sys.executable, "-c", CHILD, "--root", str(root), "demo", "--json"],
                          capture_output=True, text=True, env=env, cwd=root.parent, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root, json.loads(proc.stdout)


@pytest.mark.slow
def test_demo_runs_several_commits_offline(demo):
    _, out = demo
    assert len(out["commits"]) >= 2
    assert all(c["status"] == "completed" and not c["degraded"] for c in out["commits"])
    assert [a["archive_id"] for a in out["archives"]] == [c["archive_id"] for c in out["commits"]]


@pytest.mark.slow
def test_demo_working_memory_is_readable(demo):
    _, out = demo
    wm = out["working_memory"]
    sections = parse_sections(wm)
    assert list(sections) == list(SECTIONS)
    for name in ("Session Title", "Current State", "Task & Goals", "Key Facts & Decisions", "Files & Context"):
        assert sections[name].strip(), name
    for path in KEY_FILES:
        assert path in sections["Files & Context"], path
    assert sections["Errors & Corrections"].strip()  # the session has failing tests and user corrections


@pytest.mark.slow
def test_demo_working_memory_reads_as_a_handoff(demo):
    """The printed memory, as stored in `tests/snapshots/demo_working_memory.md`: the task first, the user's own
    words, files edited first, each error once with what fixed it."""
    _, out = demo
    wm = out["working_memory"]
    assert_snapshot("demo_working_memory.md", wm)
    sections = parse_sections(wm)
    assert bullet_items(sections["Task & Goals"])[0] == "Task: Fix the failing CSV import in the Flask app."
    files = bullet_items(sections["Files & Context"])
    edited = [" — edited" in f for f in files]
    assert edited == sorted(edited, reverse=True), "edited files first"
    assert any(f.startswith("app/importers/csv_loader.py — edited") for f in files)
    errors = bullet_items(sections["Errors & Corrections"])
    assert any("— fixed: edited app/importers/csv_loader.py" in e for e in errors)


def test_the_offline_model_docs_quote_the_demo_memory_as_it_is():
    """docs/offline_model.md's example is lines of the snapshot, in the snapshot's order ("…" for lines left out)."""
    docs = (Path(__file__).parents[2] / "docs" / "offline_model.md").read_text(encoding="utf-8")
    example = docs.split("## An example", 1)[1].split("```", 2)[1].strip("\n").splitlines()
    snapshot = (Path(__file__).parents[1] / "snapshots" / "demo_working_memory.md").read_text(encoding="utf-8")
    lines, at = snapshot.splitlines(), 0
    for line in example:
        if line == "…":
            continue
        assert line in lines[at:], f"docs/offline_model.md quotes a line the demo no longer prints: {line!r}"
        at = lines.index(line, at) + 1


@pytest.mark.slow
def test_demo_every_message_is_in_exactly_one_place(demo):
    root, out = demo
    store = SessionStore(root)
    seqs = [m["seq"] for a in store.list_archives("demo") for m in store.archive_messages("demo", a["archive_id"])]
    live = store.live_messages("demo")
    seqs += [m["seq"] for m in live]
    assert seqs == list(range(1, len(demo_conversation()) + 1))
    assert len(live) == out["live_messages"]
    assert Path(out["session_dir"]).is_dir()
    assert (Path(out["session_dir"]) / "history" / "archive_001" / ".done").exists()


def test_demo_stays_offline_when_workmem_model_names_a_paid_model(tmp_path):
    """Issue 27: `WORKMEM_MODEL` set (with or without a key) must not make the demo call out or come back empty;
    only `--model` changes the demo's model."""
    root = tmp_path / "wm"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORKMEM_", "LANGCHAIN_"))}
    env |= {"HOME": str(tmp_path), "WORKMEM_MODEL": "openai:gpt-4.1-mini", "OPENAI_API_KEY": "sk-not-used"}
    proc = subprocess.run([sys.executable, "-c", CHILD, "--root", str(root), "demo", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert len(summary["commits"]) >= 2 and all(not c.get("degraded") for c in summary["commits"]), summary["commits"]
    archive = json.loads(next((root / "sessions").glob("*/history/archive_001/archive.json")).read_text())
    assert archive["model"]["name"] == "workmem-extractive"
    wm = parse_sections(summary["working_memory"])
    assert all(wm.get(name, "").strip() for name in ("Session Title", "Current State")), summary["working_memory"]


MINI_LOCOMO = str(Path(__file__).parent.parent / "fixtures" / "locomo_mini.json")


@pytest.mark.parametrize("argv", [["demo"], ["demo", "--json"],
                                  ["eval", "--data", MINI_LOCOMO, "--no-model", "--no-search-recall", "--out", ""]],
                         ids=["demo", "demo-json", "eval"])
def test_a_terminal_that_cannot_show_unicode_gets_the_report_not_an_error_after_the_work(tmp_path, argv):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORKMEM_"))}
    env |= {"PYTHONIOENCODING": "ascii", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", CHILD, "--root", str(tmp_path / "wm"), *argv],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.isascii() and "UnicodeEncodeError" not in proc.stderr
    if "--json" in argv:
        assert json.loads(proc.stdout)["commits"], "JSON ASCII-escaped, nothing of it lost"


def test_an_export_to_a_terminal_without_unicode_is_the_same_data_escaped(tmp_path):
    from workmem.graphs.cli import main

    root = tmp_path / "wm"
    assert main(["--root", str(root), "add", "s", str(_messages_file(tmp_path, "Grüße — naïve café ✓"))]) == 0
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    proc = subprocess.run([sys.executable, "-c", CHILD, "--root", str(root), "export", "s"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.isascii() and json.loads(proc.stdout)["parts"][0]["text"] == "Grüße — naïve café ✓"


def _messages_file(folder: Path, text: str) -> Path:
    path = folder / "in.json"
    path.write_text(json.dumps([{"role": "user", "content": text}]), encoding="utf-8")
    return path


def test_the_demo_takes_the_keep_and_trigger_syntax_of_every_command(tmp_path, capsys):
    from workmem.graphs.cli import main

    root = tmp_path / "wm"
    # a trigger the low-water mark leaves room under for three turns (a smaller one caps the keep to tokens)
    assert main(["--root", str(root), "demo", "--keep", "turns:3", "--trigger", "tokens:8000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["commits"] and all(c["status"] == "completed" for c in summary["commits"])
    archive = json.loads(next((root / "sessions").glob("demo/history/archive_001/archive.json")).read_text())
    assert archive["preserved_tail"]["keep"] == ["turns", 3]


@pytest.mark.parametrize("argv", [["--threshold", "-5"], ["--trigger", "tokens:-5"], ["--trigger", "messages:5"],
                                  ["--keep", "-3"], ["--keep", "turns:-1"]])
def test_the_demo_refuses_negative_sizes(argv, tmp_path, capsys):
    from workmem.graphs.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--root", str(tmp_path / "wm"), "demo", *argv])
    assert exit_info.value.code == 2 and "error:" in capsys.readouterr().err
    assert not (tmp_path / "wm").exists()


def test_without_a_key_the_demo_with_a_paid_model_exits_2_with_one_error_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORKMEM_", "LANGCHAIN_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", CHILD, "demo", "--model", "openai:gpt-4.1-mini"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "OPENAI_API_KEY" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


CHILD_WITH_A_KEY = CHILD.replace("from workmem", "import os; os.environ['OPENAI_API_KEY'] = 'sk-test'\nfrom workmem")


@pytest.mark.slow
def test_a_demo_whose_model_cannot_be_reached_says_it_degraded_and_exits_3(tmp_path):
    """The model's calls fail (no network): each commit falls back to the extractive model, and the demo says so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORKMEM_", "LANGCHAIN_"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-c", CHILD_WITH_A_KEY, "demo", "--model", "openai:gpt-4.1-mini"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 3, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "degraded:" in proc.stdout and "fell back to the extractive model" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_allow_degraded_makes_a_degraded_demo_exit_0(tmp_path, monkeypatch, capsys):
    from workmem.graphs import cli
    from workmem.graphs.demo import run

    monkeypatch.setattr(run, "run_demo", lambda **_: {"commits": [{"status": "completed", "degraded": True}]})
    assert cli.main(["--root", str(tmp_path / "wm"), "demo", "--json"]) == 3
    assert cli.main(["--root", str(tmp_path / "wm"), "demo", "--json", "--allow-degraded"]) == 0


def test_the_demo_reuses_one_folder_and_starts_it_afresh(tmp_path, capsys, monkeypatch):
    from workmem.graphs.cli import main
    from workmem.graphs.demo.run import default_demo_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        assert main(["demo", "--json"]) == 0
        runs.append(json.loads(capsys.readouterr().out))
    assert runs[0]["root"] == runs[1]["root"] == str(default_demo_root()) == str(tmp_path / "cache/workmem/demo")
    assert [c["archive_id"] for c in runs[0]["commits"]] == [c["archive_id"] for c in runs[1]["commits"]]
    assert runs[1]["live_messages"] == runs[0]["live_messages"]
    assert main(["--root", runs[0]["root"], "sessions", "--json"]) == 0
    assert [(r["session_id"], r["live_messages"] + r["archived_messages"]) for r in
            json.loads(capsys.readouterr().out)] == [("demo", len(demo_conversation()))]


def test_the_demo_never_appends_to_a_demo_session_in_a_root_given_to_it(tmp_path, capsys):
    from workmem.graphs.cli import main

    root = tmp_path / "mine"
    assert main(["--root", str(root), "demo", "--json"]) == 0
    capsys.readouterr()
    assert main(["--root", str(root), "demo", "--json"]) == 2
    assert "already holds a 'demo' session" in capsys.readouterr().err


def test_an_empty_section_shows_as_none_yet():
    from workmem.graphs.demo.run import EMPTY_SECTION, marked_empty
    from workmem.state.memory import render_sections

    wm = render_sections({"Session Title": "Fix the import", "Open Issues": ""})
    marked = parse_sections(marked_empty(wm))
    assert marked["Session Title"] == "Fix the import"
    assert marked["Open Issues"] == marked["Task & Goals"] == EMPTY_SECTION
    assert marked_empty("") == ""


def test_the_demo_prints_the_budget_as_the_context_command_does(tmp_path, capsys):
    from workmem.graphs.cli import main

    root = tmp_path / "wm"
    assert main(["--root", str(root), "demo"]) == 0
    shown = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "of 20000 tokens (40000 budget − 20000 reply reserve)" in shown
    assert "Open Issues (none yet)" in shown  # the bundled session leaves no issue open
    assert main(["--root", str(root), "context", "demo", "--budget", "40000"]) == 0
    assert "of 20000 tokens (40000 budget − 20000 reply reserve)" in " ".join(capsys.readouterr().out.split())
