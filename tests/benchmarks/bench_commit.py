"""Commit benchmarks of issue 4, as ratios measured in the same process.

- A commit of 200 messages with the extractive model through the checkpointed graph (SqliteSaver on
  `<root>/checkpoints.sqlite`, `durability="sync"`, as the engine runs it) vs the same graph compiled
  without a checkpointer: target ≤ 2×. Measured with one chunk (the default 24 k budget) and with
  small chunks (one checkpointed loop per chunk); plus the whole `engine.commit` (lease, task row).
- Checkpoint bytes written per commit (checkpoint + metadata + pending-write blobs of its thread),
  reported beside the bytes of the covered messages (no target: it shows that state carries seq
  ranges and the WM, not message bodies).

Every round commits a fresh copy of the same session; only the commit is timed.
Run: `python tests/benchmarks/bench_commit.py [--quick]`.
"""

from __future__ import annotations

import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

from langgraph.checkpoint.sqlite import SqliteSaver

from workmem.graphs.commit import compile_commit_graph
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.context import CommitContext
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.files.sqlite import connect
from workmem.state.files.store import SessionStore
from workmem.state.storage import open_storage

SESSION = "bench"
N_MESSAGES = 200
SMALL_CHUNK_TOKENS = 1500
_chunks = 0  # chunks of the last measured commit (for the labels)


def conversation(n: int = N_MESSAGES) -> list[dict[str, Any]]:
    """A coding session: requests, tool calls with results, answers, a correction now and then."""
    out: list[dict[str, Any]] = []
    i = 0
    while len(out) < n:
        out.append({"role": "user", "content": f"Step {i}: the nightly import of feed_{i}.csv failed on "
                                               f"2024-05-{i % 28 + 1:02d}; please check src/importers/feed_{i}.py."})
        out.append({"role": "assistant", "content": "Reading the importer.", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read_file", "arguments": f'{{"path": "src/importers/feed_{i}.py"}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"c{i}",
                    "content": "\n".join(f"def step_{j}(row): return row[{j}].strip()  # column {j}"
                                         for j in range(12))})
        out.append({"role": "assistant", "content": f"Column {i % 12} is read without a delimiter check; I decided "
                                                    f"to use csv.Sniffer because suppliers change formats."})
        if i % 5 == 4:
            out.append({"role": "user", "content": "No, keep the comma default for Brightline, only sniff Nordhavn."})
        i += 1
    return out[:n]


def _template(folder: Path) -> Path:
    """A data root holding the session (written once, copied for every round)."""
    root = folder / "template"
    SessionStore(root, durable=False).append(SESSION, conversation())
    return root


def _fresh(template: Path, folder: Path, name: str) -> Path:
    root = folder / name
    shutil.copytree(template, root)
    return root


def _graph_commit(root: Path, *, checkpointed: bool, chunk_tokens: int, tag: str) -> tuple[float, int]:
    """Time one commit through the graph; returns (seconds, checkpoint bytes of its thread)."""
    global _chunks
    storage = open_storage(root)
    context = CommitContext(root=str(root), model=ExtractiveChatModel(), chunk_tokens=chunk_tokens, storage=storage)
    conn = connect(root / "checkpoints.sqlite", synchronous="NORMAL") if checkpointed else None
    saver = SqliteSaver(conn) if conn is not None else None
    if saver is not None:
        saver.setup()
    graph = compile_commit_graph(saver)
    thread_id = f"{SESSION}/commit/{tag}"
    graph_input = {"session_id": SESSION, "archive_id": "archive_001", "task_id": None, "keep_recent_count": 10}
    config = {"configurable": {"thread_id": thread_id}}
    # (LangGraph 1.2 raises AttributeError for durability="sync" without a checkpointer)
    durability = {"durability": "sync"} if saver is not None else {}
    start = time.perf_counter()
    out = graph.invoke(graph_input, config, context=context, **durability)
    elapsed = time.perf_counter() - start
    assert out["status"] == "completed", out
    _chunks = out["route"].count("merge")
    written = _checkpoint_bytes(conn, thread_id) if conn is not None else 0
    if conn is not None:
        conn.close()
    storage.close()
    return elapsed, written


def _checkpoint_bytes(conn: sqlite3.Connection, thread_id: str) -> int:
    checkpoints = conn.execute(
        "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints WHERE thread_id = ?",
        [thread_id]).fetchone()[0]
    writes = conn.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?",
                          [thread_id]).fetchone()[0]
    return int(checkpoints) + int(writes)


def _engine_commit(root: Path, *, chunk_tokens: int, tag: str) -> tuple[float, int]:
    with WorkingMemoryEngine(root=root, model=ExtractiveChatModel(), chunk_tokens=chunk_tokens) as engine:
        start = time.perf_counter()
        result = engine.commit(SESSION, keep_recent_count=10)
        elapsed = time.perf_counter() - start
        assert result["status"] == "completed", result
    return elapsed, 0


def _best(rounds: int, template: Path, folder: Path, name: str,
          commit: Callable[[Path, str], tuple[float, int]]) -> tuple[float, int]:
    times, written = [], 0
    for r in range(rounds):
        seconds, written = commit(_fresh(template, folder, f"{name}-{r}"), f"{name}-{r}")
        times.append(seconds)
    return min(times), written


def _covered_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "sessions" / SESSION / "history").glob("archive_*/messages.jsonl"))


def run(quick: bool = False) -> list[BenchRow]:
    """Measure the rows of issue 4 (quick: fewer rounds, same shape)."""
    rounds = 2 if quick else 5
    rows: list[BenchRow] = []
    with tempfile.TemporaryDirectory(prefix="workmem-bench-commit-") as tmp:
        folder = Path(tmp)
        template = _template(folder)
        written_by_chunking = {}
        for label, chunk_tokens in (("1 chunk", 24_000), (f"{SMALL_CHUNK_TOKENS}-token chunks", SMALL_CHUNK_TOKENS)):
            bare, _ = _best(rounds, template, folder, f"bare-{chunk_tokens}", lambda root, tag, c=chunk_tokens:
                            _graph_commit(root, checkpointed=False, chunk_tokens=c, tag=tag))
            saved, written = _best(rounds, template, folder, f"ckpt-{chunk_tokens}", lambda root, tag, c=chunk_tokens:
                                   _graph_commit(root, checkpointed=True, chunk_tokens=c, tag=tag))
            label = f"{label} ({_chunks} chunk{'s' if _chunks > 1 else ''})" if chunk_tokens != 24_000 else label
            written_by_chunking[label] = (written, f"ckpt-{chunk_tokens}-0")
            rows.append(BenchRow.of(f"commit {N_MESSAGES} msgs, {label}: checkpointed vs no checkpointer",
                                    saved * 1000, bare * 1000, 2.0, "ms"))
            if chunk_tokens == SMALL_CHUNK_TOKENS:
                engine, _ = _best(rounds, template, folder, "engine", lambda root, tag, c=chunk_tokens:
                                  _engine_commit(root, chunk_tokens=c, tag=tag))
                rows.append(BenchRow.of(f"engine.commit {N_MESSAGES} msgs, {label} (lease, task) vs no checkpointer",
                                        engine * 1000, bare * 1000, 2.0, "ms"))
        for label, (written, root_name) in written_by_chunking.items():
            covered = _covered_bytes(folder / root_name)
            rows.append(BenchRow.of(f"checkpoint bytes per commit vs covered bytes, {label}",
                                    written / 1024, covered / 1024, None, "KiB"))
    return rows


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]), title="workmem commit (issue 4)")
