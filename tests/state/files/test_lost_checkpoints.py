"""A power cut that took a commit's later checkpoints (`checkpoints.sqlite` runs `synchronous=NORMAL`) but not
its archive: the two cases the power-loss benchmark found with `durable=False`, rebuilt by hand.

1. The archive is complete (`.done`) but not indexed: the resumed run must finish from the archive, not re-run
   the graph from its input (which slices afresh, finds nothing left to cover and never indexes it).
2. The archive has no `.done` and covers more than the re-sliced run (the live tail past it was lost): every
   seq it holds is still live, so the resumed run may rewrite it; refusing left the session unable to commit.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from workmem.graphs.engine import WorkingMemoryEngine

SESSION = "cut"
KEEP = 4


def turns(n: int) -> list[dict[str, str]]:
    return [m for i in range(n) for m in ({"role": "user", "content": f"word{i}u move src/mod_{i}.py"},
                                          {"role": "assistant", "content": f"word{i}a moved, E{i:03d} gone"})]


def first_checkpoint_only(root: Path, thread_id: str) -> None:
    """What the power cut left of the commit's checkpoints: its input step alone."""
    db = sqlite3.connect(root / "checkpoints.sqlite")
    with db:
        (first,) = db.execute("SELECT min(checkpoint_id) FROM checkpoints WHERE thread_id = ?", [thread_id]).fetchone()
        db.execute("DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id > ?", [thread_id, first])
        db.execute("DELETE FROM writes WHERE thread_id = ? AND checkpoint_id >= ?", [thread_id, first])
    db.close()


def committed(root: Path) -> tuple[dict, dict]:
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=KEEP) as engine:
        engine.add_messages(SESSION, turns(6))
        result = engine.commit(SESSION, keep_recent_count=KEEP)
        assert result["status"] == "completed"
        task = engine.task(result["task_id"])
        archive = engine.list_archives(SESSION)[-1]
        engine.storage.search.index_messages(SESSION, archive["archive_id"], [])  # the index rows the cut took
        engine.storage.tasks.update_task(task["task_id"], status="running")  # nor did the task hear of the end
    first_checkpoint_only(root, task["thread_id"])
    return task, archive


def words_in(engine: WorkingMemoryEngine) -> list[str]:
    stored = [*(m for a in engine.list_archives(SESSION) for m in engine.archive_messages(SESSION, a["archive_id"])),
              *engine.live_messages(SESSION)]
    return [m["parts"][0]["text"].split()[0] for m in stored]


def test_a_complete_archive_whose_checkpoints_were_lost_is_finished_and_indexed(root):
    task, archive = committed(root)
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=KEEP) as engine:
        (resumed,) = engine.resume_all()
        assert resumed["status"] == "completed", resumed
        assert engine.check(SESSION, deep=True) == []
        for word in ("word0u", "word3a"):
            assert [h["seq"] for h in engine.archive_search(SESSION, word) if word in h["content"]], word
        assert engine.task(task["task_id"])["status"] == "completed"
        assert words_in(engine) == [f"word{i}{r}" for i in range(6) for r in "ua"], "nothing lost or twice"


def test_an_archive_without_done_that_covers_more_than_the_resumed_run_is_rewritten(root):
    task, archive = committed(root)
    folder = root / "sessions" / SESSION / "history" / archive["archive_id"]
    live = root / "sessions" / SESSION / "messages.jsonl"
    # The cut as found: `.done` not yet on disk, and the live file holding exactly the archived lines (the
    # four kept messages after them were appended without an fsync and are gone).
    (folder / ".done").unlink()
    live.write_bytes((folder / "messages.jsonl").read_bytes())
    (root / "sessions" / SESSION / ".meta.json").unlink()
    held = [json.loads(line)["seq"] for line in (folder / "messages.jsonl").read_text().splitlines()]
    assert held == list(range(1, 9))
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=KEEP) as engine:
        (resumed,) = engine.resume_all()
        assert resumed["status"] == "completed", resumed
        (rewritten,) = engine.list_archives(SESSION)
        assert (rewritten["start_seq"], rewritten["end_seq"]) == (1, 4), "re-sliced: keep 4 of the 8 left"
        assert [m["seq"] for m in engine.live_messages(SESSION)] == [5, 6, 7, 8]
        assert engine.check(SESSION, deep=True) == []
        assert words_in(engine) == [f"word{i}{r}" for i in range(4) for r in "ua"], "nothing lost or twice"
        engine.add_messages(SESSION, turns(8)[8:])
        assert engine.commit(SESSION, keep_recent_count=KEEP)["status"] == "completed", "the session commits again"
