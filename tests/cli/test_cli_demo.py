"""`workmem demo --json` on a fresh root with no network and no key (SPEC §9, issue 4)."""

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
    assert files[0].startswith("app/importers/csv_loader.py — edited")
    errors = bullet_items(sections["Errors & Corrections"])
    assert any("— fixed: edited app/importers/csv_loader.py" in e for e in errors)


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
