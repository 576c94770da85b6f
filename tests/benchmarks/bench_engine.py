"""Engine benchmarks of issue 5, as ratios measured in the same process.

- `archive_search` over 100 000 archived messages vs a linear scan of the archive files (the
  reference greps every file; the scan here only reads lines and tests substrings, no JSON parsing,
  so it is a generous floor): target ≤ 0.05×.
- `assemble` of a session with 1 000 archives vs one with 1 archive (same WM, same live tail): ≤ 2×.

Fixtures are written through the store and index APIs (durable=False), not through a model.
Run: `python tests/benchmarks/bench_engine.py [--quick]`.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path
from typing import Any

try:
    from common import BenchRow, print_table, timeit_best
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table, timeit_best

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test helpers, when run on its own
from oracles import source_turn_range  # noqa: E402

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import render_sections

_SYLLABLES = "ka lo mi ne ru sa ti vo ber dan fel gor hin jas kel mor nup pra quo rit sul tek vin wex".split()
# A Zipf-distributed vocabulary of 3 000 words, like natural text: a few words are everywhere, most are rare.
VOCAB = sorted({a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES})[:3000]
_WEIGHTS = [1 / (rank + 1) for rank in range(len(VOCAB))]
# What an agent types: 2–3 distinctive words (mid-frequency ranks), an exact ticket id, a mixed query.
QUERIES = [f"{VOCAB[300]} {VOCAB[700]}", "OPS-4242", f"{VOCAB[150]} {VOCAB[900]} {VOCAB[2000]}"]
WM = render_sections({"Session Title": "Benchmark session", "Current State": "Measuring the engine.",
                      "Key Facts & Decisions": "\n".join(f"- fact {i}: {' '.join(VOCAB[i:i + 8])}"
                                                         for i in range(40))})


def _texts(start: int, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"Message {i}: " + " ".join(rng.choices(VOCAB, _WEIGHTS, k=24)) + f" ticket OPS-{i}"
            for i in range(start, start + count)]


def write_archives(engine: WorkingMemoryEngine, session: str, archives: int, per_archive: int) -> None:
    """`archives` complete, indexed archives of `per_archive` user messages each, via the store API."""
    store, index = engine.storage.sessions, engine.storage.search
    seq = 0
    for n in range(archives):
        store.append(session, [{"role": "user", "content": t} for t in _texts(seq, per_archive, n)], durable=False)
        seq += per_archive
        live = store.live_messages(session)
        archive = {"archive_id": store.next_archive_id(session), "session_id": session,
                   "source_turn_range": source_turn_range(live),
                   "working_summary": {"markdown": WM, "sections": {}}}
        store.write_archive(session, archive, live, WM, "Benchmark session — Measuring the engine.")
        index.index_messages(session, archive["archive_id"], live)
        store.drop_covered(session, live[-1]["seq"])
        store.record_commit(session, archive, 0)


def linear_scan(session_dir: Path, query: str) -> list[tuple[str, int]]:
    """Every archived line containing any query word (case-insensitive), by reading every archive file."""
    words = [w.lower().encode() for w in query.split()]
    hits = []
    for path in sorted((session_dir / "history").glob("archive_*/messages.jsonl")):
        with open(path, "rb") as f:
            for no, line in enumerate(f, 1):
                low = line.lower()
                if any(w in low for w in words):
                    hits.append((path.parent.name, no))
    return hits


def bench_search(root: Path, messages: int, rounds: int) -> tuple[float, float]:
    """(archive_search, linear scan) best seconds per query, averaged over QUERIES."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        write_archives(engine, "search", messages // 1000, 1000)
        folder = engine.storage.sessions.session_dir("search")
        search = scan = 0.0
        for query in QUERIES:
            assert engine.archive_search("search", query), query
            search += timeit_best(lambda q=query: engine.archive_search("search", q), rounds)
            scan += timeit_best(lambda q=query: linear_scan(folder, q), max(1, rounds // 2))
    return search / len(QUERIES), scan / len(QUERIES)


def bench_assemble(root: Path, archives: int, rounds: int) -> tuple[float, float]:
    """(many archives, one archive) best seconds of assemble() with the same WM and live tail."""
    tail: list[dict[str, Any]] = [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                  for i, t in enumerate(_texts(0, 40, 99))]
    with WorkingMemoryEngine(root, durable=False) as engine:
        write_archives(engine, "many", archives, 2)
        write_archives(engine, "one", 1, 2)
        for session in ("many", "one"):
            engine.add_messages(session, tail)
    with WorkingMemoryEngine(root, durable=False) as engine:  # a fresh process-like engine: no warm caches
        many = engine.assemble("many")
        one = engine.assemble("one")
        assert many["stats"]["archives_total"] == archives and one["stats"]["archives_total"] == 1
        assert len(many["messages"]) == len(one["messages"])
        best_many = best_one = float("inf")
        for _ in range(rounds):  # interleaved, best of each
            best_many = min(best_many, timeit_best(lambda: engine.assemble("many"), 3))
            best_one = min(best_one, timeit_best(lambda: engine.assemble("one"), 3))
    return best_many, best_one


def run(quick: bool = False) -> list[BenchRow]:
    """Measure the two rows of issue 5 (quick: 10 000 messages and 100 archives)."""
    messages, archives = (10_000, 100) if quick else (100_000, 1_000)
    with tempfile.TemporaryDirectory(prefix="wm-bench-engine-") as name:
        tmp = Path(name)
        search, scan = bench_search(tmp / "search", messages, 3 if quick else 5)
        many, one = bench_assemble(tmp / "assemble", archives, 3 if quick else 10)
    return [
        BenchRow.of(f"archive_search, {messages:,} archived messages vs linear scan", search * 1e3, scan * 1e3,
                    0.05, "ms"),
        BenchRow.of(f"assemble, {archives:,} archives vs 1", many * 1e3, one * 1e3, 2.0, "ms"),
    ]


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]), title="workmem engine (issue 5)")
