"""The two backends side by side: durable appends, a commit, `assemble` and `archive_search`
at 100 000 archived messages, a row per backend.

Baselines, measured in the same run:
- appends: the backend's floor — files: count the tokens, one `O_APPEND` write, one fsync; Postgres:
  count the tokens, one `INSERT` of the rows into a bare table, one durable commit;
- commit and assemble: the file backend (its own row reads 1.00×);
- search: a linear scan — files: every archive file read and matched line by line; Postgres: a
  sequential `ILIKE` scan of the messages table. Target ≤ 0.05× on both.

The Postgres server is `WORKMEM_TEST_DATABASE_URL`, else one started here with fsync on (pg_support).
Run: `python tests/benchmarks/bench_backends.py [--quick]`.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _path in (str(HERE), str(HERE.parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from common import BenchRow, print_table, timeit_best  # noqa: E402
from oracles import source_turn_range  # noqa: E402
from pg_support import Backend, Server, server_or_reason, start_server  # noqa: E402

from workmem.state.memory import render_sections  # noqa: E402
from workmem.state.tokens import count_tokens  # noqa: E402

_SYLLABLES = "ka lo mi ne ru sa ti vo ber dan fel gor hin jas kel mor nup pra quo rit sul tek vin wex".split()
VOCAB = sorted({a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES})[:3000]  # Zipf, as bench_engine
_WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCAB))]
QUERIES = [f"{VOCAB[300]} {VOCAB[700]}", "OPS-4242", f"{VOCAB[150]} {VOCAB[900]} {VOCAB[2000]}"]
WM = render_sections({"Session Title": "Benchmark session", "Current State": "Measuring the backends.",
                      "Key Facts & Decisions": "\n".join(f"- fact {i}: {' '.join(VOCAB[i:i + 8])}" for i in range(40))})


def texts(start: int, count: int, seed: int) -> list[str]:
    """`count` messages of 24 Zipf-distributed words and a ticket id."""
    rng = random.Random(seed)
    return [f"Message {i}: " + " ".join(rng.choices(VOCAB, _WEIGHTS, k=24)) + f" ticket OPS-{i}"
            for i in range(start, start + count)]


def write_archives(storage: Any, session: str, archives: int, per_archive: int) -> None:
    """`archives` complete, indexed archives of `per_archive` user messages each, through the storage API."""
    store = storage.sessions
    for n in range(archives):
        store.append(session, [{"role": "user", "content": t} for t in texts(n * per_archive, per_archive, n)],
                     durable=False)
        live = store.live_messages(session)
        archive = {"archive_id": store.next_archive_id(session), "session_id": session,
                   "source_turn_range": source_turn_range(live)}
        store.write_archive(session, archive, live, WM, "Benchmark session — Measuring the backends.")
        storage.search.index_messages(session, archive["archive_id"], live)
        store.drop_covered(session, live[-1]["seq"])
        store.record_commit(session, archive, 0)


class AppendFloor:
    """The least a durable append of a backend costs (see the module doc)."""

    def __init__(self, backend: Backend, folder: Path) -> None:
        self.backend = backend
        if backend.url is None:
            folder.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(folder / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        else:
            import psycopg

            self.conn = psycopg.connect(backend.url, autocommit=True)
            self.conn.execute("CREATE TABLE IF NOT EXISTS floor (session_id text, seq bigint, body text)")

    def append(self, batch: list[str]) -> None:
        """Count the tokens, then one write + fsync, or one INSERT of the rows + commit."""
        for text in batch:
            count_tokens(text)
        if self.backend.url is None:
            os.write(self.fd, b"".join(t.encode() + b"\n" for t in batch))
            os.fsync(self.fd)
        else:
            with self.conn.transaction(), self.conn.cursor() as cur:
                cur.executemany("INSERT INTO floor VALUES ('s', %s, %s)", list(enumerate(batch)))

    def close(self) -> None:
        """Release the file or the connection."""
        if self.backend.url is None:
            os.close(self.fd)
        else:
            self.conn.close()


def per_call(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Best over `rounds` of the mean seconds of `calls` calls of `fn`."""
    return timeit_best(lambda: [fn() for _ in range(calls)], rounds) / calls


def bench_appends(backend: Backend, folder: Path, batch: int, calls: int, rounds: int) -> tuple[float, float]:
    """(storage append, floor) seconds per durable append of `batch` messages."""
    storage = backend.storage()
    floor = AppendFloor(backend, folder)
    payload = texts(0, batch, 7)
    messages = [{"role": "user", "content": t} for t in payload]
    try:
        storage.sessions.append(f"append-{batch}", messages)  # the session exists, the encoder is loaded
        mine = per_call(lambda: storage.sessions.append(f"append-{batch}", messages, durable=True), calls, rounds)
        least = per_call(lambda: floor.append(payload), calls, rounds)
    finally:
        floor.close()
        storage.close()
    return mine, least


def bench_commit(backend: Backend, rounds: int) -> float:
    """Best seconds of one commit of 200 messages (the offline extractive model, keep 0)."""
    best = float("inf")
    with backend.engine(durable=True) as engine:
        for r in range(rounds):
            session = f"commit-{r}"
            engine.add_messages(session, [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                          for i, t in enumerate(texts(0, 200, r))])
            start = time.perf_counter()
            assert engine.commit(session, keep_recent_count=0)["status"] == "completed"
            best = min(best, time.perf_counter() - start)
    return best


def linear_scan(backend: Backend, storage: Any, query: str) -> int:
    """Messages containing any query word, case-insensitively, found without an index."""
    words = query.split()
    if backend.url is None:
        low_words = [w.lower().encode() for w in words]
        hits = 0
        for path in sorted((storage.sessions.session_dir("search") / "history").glob("archive_*/messages.jsonl")):
            with open(path, "rb") as f:
                hits += sum(1 for line in f if any(w in line.lower() for w in low_words))
        return hits
    from workmem.state.postgres.search import like_escape

    with storage.db.pool.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        where = " OR ".join("content ILIKE %s" for _ in words)
        row = conn.execute(f"SELECT count(*) AS n FROM messages WHERE session_id = 'search' AND archive_id IS NOT NULL "
                           f"AND ({where})", [f"%{like_escape(w)}%" for w in words]).fetchone()
    return row["n"]


def bench_search_and_assemble(backend: Backend, messages: int, rounds: int) -> dict[str, float]:
    """archive_search vs a linear scan, and assemble with a 40-message tail, at `messages` archived messages."""
    storage = backend.storage(durable=False)
    try:
        write_archives(storage, "search", messages // 1000, 1000)
        storage.sessions.append("search", [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                           for i, t in enumerate(texts(0, 40, 99))])
    finally:
        storage.close()
    out = {"search": 0.0, "scan": 0.0}
    with backend.engine(durable=False) as engine:
        for query in QUERIES:
            assert engine.archive_search("search", query), query
            out["search"] += timeit_best(lambda q=query: engine.archive_search("search", q), rounds) / len(QUERIES)
            out["scan"] += timeit_best(lambda q=query: linear_scan(backend, engine.storage, q),
                                       max(1, rounds // 2)) / len(QUERIES)
        engine.assemble("search")
        out["assemble"] = timeit_best(lambda: engine.assemble("search"), rounds)
    return out


def backends(tmp: Path, server: Server) -> list[Backend]:
    """The file backend on a root, and Postgres on a fresh database of `server`."""
    return [Backend("file", tmp / "root"), Backend("postgres", tmp / "pg", server.create_database())]


def run(quick: bool = False) -> list[BenchRow]:
    """Every row for both backends (quick: 10 000 archived messages and fewer rounds)."""
    messages, rounds, calls = (10_000, 3, 20) if quick else (100_000, 5, 50)
    server, reason = server_or_reason() if os.environ.get("WORKMEM_TEST_DATABASE_URL") else (None, "")
    if server is None:
        server = start_server(durable=True)  # a benchmark of durable appends needs a server that fsyncs
    measured: dict[str, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="wm-bench-backends-") as name:
            for backend in backends(Path(name), server):
                m = measured[backend.name] = {}
                m["append1"], m["floor1"] = bench_appends(backend, Path(name) / "floor1", 1, calls, rounds)
                m["append100"], m["floor100"] = bench_appends(backend, Path(name) / "floor100", 100,
                                                              max(2, calls // 10), rounds)
                m["commit"] = bench_commit(backend, 2 if quick else 3)
                m.update(bench_search_and_assemble(backend, messages, rounds))
    finally:
        server.stop()
    rows = []
    for name, m in measured.items():
        file = measured["file"]
        rows += [
            BenchRow.of(f"{name}: durable append, 1 message vs floor", m["append1"] * 1e3, m["floor1"] * 1e3,
                        None, "ms"),
            BenchRow.of(f"{name}: durable append, batch of 100 vs floor", m["append100"] * 1e3,
                        m["floor100"] * 1e3, None, "ms"),
            BenchRow.of(f"{name}: commit of 200 messages vs file backend", m["commit"] * 1e3, file["commit"] * 1e3,
                        None, "ms"),
            BenchRow.of(f"{name}: assemble at {messages:,} archived vs file backend", m["assemble"] * 1e3,
                        file["assemble"] * 1e3, None, "ms"),
            BenchRow.of(f"{name}: archive_search at {messages:,} archived vs linear scan", m["search"] * 1e3,
                        m["scan"] * 1e3, 0.05, "ms"),
        ]
    return rows


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]), title="workmem backends: files vs PostgreSQL")
