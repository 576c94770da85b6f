"""kill -9 inside each node of the commit graph, then resume in a new process.

For every node, `crash_child.py` runs a real commit (several chunks, SQLite checkpoints, the
deterministic model made to walk every fallback) and SIGKILLs itself inside that node. One new
process then runs `engine.resume_all()` on every killed root. Each result must equal the
uninterrupted run's (only timestamps and task ids differ), every message must be in exactly one of
(archives, live) with seqs 1..N once, and the model must not be asked again about a chunk that was
merged before the kill (the child logs every model call).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from crash_child import KEEP, N_TURNS, SESSION
from paths import CRASH_CHILD
from pg_support import open_target

CHILD = str(CRASH_CHILD)
TIMEOUT = 300  # 20 child processes share the cores: generous, it only bounds a hang

# kill spec → (chunk in progress at the kill or None, does the task still need a resume,
#              model calls made again: only a killed `generate` loses its answer)
KILLS = {
    "slice_turns": (None, True, 0),
    "load_memory": (None, True, 0),
    "generate@0": (0, True, 1),
    "generate@4": (4, True, 1),
    "validate@2": (2, True, 0),
    "recover@1": (1, True, 0),
    "create_retry@2": (2, True, 0),
    "generate@3": (3, True, 1),  # the first of three transport attempts, made again
    "backoff@3": (3, True, 0),  # killed waiting before attempt 2: the resume makes attempts 2 and 3 only
    "extractive_fallback@3": (3, True, 0),
    "guard@3": (3, True, 0),
    "merge@1": (1, True, 0),
    "merge@5": (5, True, 0),
    "persist_mid": (None, True, 0),
    "persist": (None, False, 0),  # persist finished (task completed) before the kill: nothing to resume
    "report": (None, False, 0),
}
BASELINE = "none"
THEN_COMMIT = "merge@2"  # killed like the others, then a new commit (not resume_all) is requested


def _name(kill: str) -> str:
    return kill.replace("@", "_at_")


def _run(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture(scope="module", params=["file", "postgres"])
def runs(request, tmp_path_factory) -> dict[str, Any]:
    """The baseline and every killed commit (in parallel), then one resuming process for all of them."""
    base = tmp_path_factory.mktemp("crash")
    roots = {kill: base / _name(kill) for kill in [BASELINE, *KILLS]}
    roots[THEN_COMMIT] = base / f"{_name(THEN_COMMIT)}_then_commit"
    if request.param == "postgres":  # each root gets a database of its own (see crash_child.engine_for)
        server = request.getfixturevalue("pg_server")
        for root in roots.values():
            Path(f"{root}.url").write_text(server.create_database())
    procs = {kill: _run(["run", str(root), kill]) for kill, root in roots.items()}
    outputs = {kill: proc.communicate(timeout=TIMEOUT) for kill, proc in procs.items()}
    codes = {kill: proc.returncode for kill, proc in procs.items()}
    assert codes[BASELINE] == 0, outputs[BASELINE][1]
    calls_before = {kill: _calls(root) for kill, root in roots.items()}

    resumer = _run(["resume", *(str(roots[kill]) for kill in KILLS), f"commit:{roots[THEN_COMMIT]}"])
    out, err = resumer.communicate(timeout=TIMEOUT)
    assert resumer.returncode == 0, err
    resumed = json.loads(out)
    return {"roots": roots, "codes": codes, "stderr": {k: o[1] for k, o in outputs.items()},
            "calls_before": calls_before, "resumed": {k: resumed[str(roots[k])] for k in [*KILLS, THEN_COMMIT]}}


def _calls(root: Path) -> list[tuple[int, str]]:
    """(first seq of the chunk, tool) of every model call logged by the child processes."""
    path = Path(f"{root}.calls")
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(line.split("-", 1)[0]), line.split()[1]) for line in lines]


def _result(root: Path) -> dict[str, Any]:
    url = Path(f"{root}.url")
    storage = open_target(url.read_text() if url.exists() else str(root))
    try:
        return _read_result(storage.sessions, storage.tasks)
    finally:
        storage.close()


def _read_result(store: Any, tasks: Any) -> dict[str, Any]:
    archives = store.list_archives(SESSION)
    archived = [m["seq"] for a in archives for m in store.archive_messages(SESSION, a["archive_id"])]
    objects = []
    for a in archives:
        obj = store.read_archive(SESSION, a["archive_id"])
        obj.pop("created_at")
        obj.pop("task_id")
        objects.append(obj)
    return {"archives": objects, "archived": archived, "live": [m["seq"] for m in store.live_messages(SESSION)],
            "meta": {k: v for k, v in store.meta(SESSION).items() if not k.endswith("_at")},
            "tasks": [(t["status"], t["attempts"]) for t in tasks.list_tasks(SESSION)]}


@pytest.fixture(scope="module")
def baseline(runs) -> dict[str, Any]:
    result = _result(runs["roots"][BASELINE])
    route = result["archives"][0]["model"]["route"]
    # the baseline walks every node of the graph over several chunks
    assert {"recover", "create_retry", "extractive_fallback"} <= set(route)
    assert route.count("generate") == N_TURNS - 1 + 1 + 2  # one per chunk, the create retry, two transport retries
    assert route.count("merge") == N_TURNS - 1
    assert result["tasks"] == [("completed", 0)]
    return result


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_killed_commit_resumes_to_the_uninterrupted_result(runs, baseline, kill):
    root = runs["roots"][kill]
    assert runs["codes"][kill] == -signal.SIGKILL, f"the child was not killed in {kill}: {runs['stderr'][kill]}"
    killed_chunk, needs_resume, _ = KILLS[kill]
    resumed = runs["resumed"][kill]
    assert [r["status"] for r in resumed] == (["completed"] if needs_resume else [])

    result = _result(root)
    assert result["archives"] == baseline["archives"]  # same WM, route, ranges, tokens; only timestamps differ
    assert result["meta"] == baseline["meta"]
    assert result["live"] == baseline["live"]
    n = N_TURNS * 2
    assert sorted(result["archived"] + result["live"]) == list(range(1, n + 1))
    assert result["archived"] + result["live"] == list(range(1, n + 1))  # each seq exactly once, in order
    assert len(result["live"]) == KEEP
    assert result["tasks"] == [("completed", 1 if needs_resume else 0)]


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_merged_chunks_are_not_sent_to_the_model_again(runs, baseline, kill):
    killed_chunk, _, repeated = KILLS[kill]
    expected = _calls(runs["roots"][BASELINE])
    actual = _calls(runs["roots"][kill])
    first_seq_of_chunk = sorted({seq for seq, _ in expected})
    per_chunk = Counter(first_seq_of_chunk.index(seq) for seq, _ in actual)
    for chunk, count in Counter(first_seq_of_chunk.index(seq) for seq, _ in expected).items():
        again = repeated if chunk == killed_chunk else 0
        assert per_chunk[chunk] == count + again, f"chunk {chunk}: {per_chunk[chunk]} model calls, not {count + again}"
    assert set(actual) == set(expected)
    if killed_chunk is not None:
        before = Counter(runs["calls_before"][kill])
        # the kill really happened while that chunk was in progress: later chunks were never reached
        assert all(first_seq_of_chunk.index(seq) <= killed_chunk for seq, _ in before)


@pytest.mark.slow
def test_new_commit_after_a_kill_resumes_the_killed_one_first(runs, baseline):
    """No waiting for the dead process's lease to expire; the killed commit finishes as archive_001."""
    root = runs["roots"][THEN_COMMIT]
    assert runs["codes"][THEN_COMMIT] == -signal.SIGKILL
    [new] = runs["resumed"][THEN_COMMIT]
    assert new["status"] == "completed", new
    assert new["archive_id"] == "archive_002"
    result = _result(root)
    assert result["archives"][0] == baseline["archives"][0]
    n = N_TURNS * 2 + 2
    assert result["archived"] == list(range(1, n + 1))
    assert result["live"] == []
    assert result["tasks"] == [("completed", 1), ("completed", 0)]
    assert result["archives"][1]["source_turn_range"]["start_seq"] == N_TURNS * 2 - KEEP + 1
