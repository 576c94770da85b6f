"""A commit interrupted under an earlier build resumes under this one (its checkpoint and files kept as a fixture).

`fixtures/root_commit_interrupted.tar.gz` was written by `crash_child.py run <root> merge@3` on main 58683c2,
before the packages moved into subfolders: the commit was SIGKILLed inside `merge` of its fourth chunk, so the
checkpoint holds three merged chunks, the fallback route taken so far and the chunk in progress. Resuming it here
must finish the same archive an uninterrupted commit of the same conversation makes now, with every seq once.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from crash_child import KEEP, N_TURNS, SESSION, conversation, engine_for
from paths import FIXTURES
from test_commit_crash import _read_result

FIXTURE = FIXTURES / "root_commit_interrupted.tar.gz"


def _untar(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "root_interrupted"


def _uninterrupted(tmp_path: Path) -> dict:
    root = tmp_path / "baseline"
    with engine_for(str(root)) as engine:
        engine.add_messages(SESSION, conversation())
        assert engine.commit(SESSION, keep_recent_count=KEEP)["status"] == "completed"
        return _read_result(engine.storage.sessions, engine.storage.tasks)


def test_a_commit_killed_under_the_flat_layout_resumes_to_the_uninterrupted_result(tmp_path):
    root = _untar(tmp_path)
    with engine_for(str(root)) as engine:
        [resumed] = engine.resume_all()
        assert resumed["status"] == "completed", resumed
        result = _read_result(engine.storage.sessions, engine.storage.tasks)
    baseline = _uninterrupted(tmp_path)
    assert result["archives"] == baseline["archives"]
    assert result["live"] == baseline["live"]
    n = N_TURNS * 2
    assert result["archived"] + result["live"] == list(range(1, n + 1))  # each seq exactly once, in order
    assert result["tasks"] == [("completed", 1)]
