"""Store benchmarks of issue 3, as ratios against floors measured in the same process.

- Floor of a durable append = count the message's tokens + a raw `fcntl.flock` + one `O_APPEND`
  write of its line + one fsync. One-at-a-time `append` target ≤ 1.5× that floor.
- Batch of 100: floor = 100 token counts + one locked write of 100 lines + one fsync; target ≤ 1.3×.
- Reading the live messages of a session with 10 000 archived messages vs one with none: ≤ 1.2×.

Run: `python tests/benchmarks/bench_store.py [--quick]`.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

try:
    from common import BenchRow, print_table, timeit_best
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table, timeit_best


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test helpers, when run on its own
from oracles import source_turn_range  # noqa: E402

from workmem.state.files.store import SessionStore
from workmem.state.jsonutil import dumps
from workmem.state.tokens import count_tokens
from workmem.state.turns import choose_covered_range


def _text(i: int) -> str:
    return (f"Message {i}: deploy service-{i % 17} to staging, then compare latency against the "
            f"baseline in config/deploy.yaml and report p95 numbers.")


def _line(i: int) -> bytes:
    """A line the size of what the store writes for `_text(i)`."""
    return dumps({"id": "m-" + "0" * 32, "seq": i, "turn_id": f"t{i}", "role": "user",
                  "created_at": "2026-01-01T00:00:00.000000+00:00", "tokens": 30, "meta": {},
                  "parts": [{"type": "text", "text": _text(i)}]}) + b"\n"


class _Floor:
    """The raw cost of a durable append: no validation, ids, meta or lock library."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.lock = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        self.fd = os.open(folder / "messages.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, texts: list[str], data: bytes) -> None:
        """Count, lock, write once, fsync, unlock."""
        for text in texts:
            count_tokens(text)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        os.write(self.fd, data)
        os.fsync(self.fd)
        fcntl.flock(self.lock, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close both descriptors."""
        os.close(self.fd)
        os.close(self.lock)


def _per_call(fn_calls: list, rounds: int) -> float:
    """Best over `rounds` of the mean seconds per call of a list of zero-argument calls."""
    return timeit_best(lambda: [call() for call in fn_calls], rounds) / len(fn_calls)


def bench_appends(tmp: Path, *, batch: int, count: int, rounds: int) -> tuple[float, float]:
    """(store, floor) seconds per append call of `batch` messages, interleaving the two each round."""
    store = SessionStore(tmp / f"store-{batch}")
    floor = _Floor(tmp / f"floor-{batch}")
    payloads = [[_text(i * batch + j) for j in range(batch)] for i in range(count)]
    lines = [b"".join(_line(i * batch + j) for j in range(batch)) for i in range(count)]
    messages = [[{"role": "user", "content": t} for t in texts] for texts in payloads]
    store.append("bench", messages[0])  # create the session, load the encoder
    best_store = best_floor = float("inf")
    clock = time.perf_counter
    for _ in range(rounds):  # floor and store alternate call by call, so both meet the same disk state
        spent_store = spent_floor = 0.0
        for texts, data, batch_messages in zip(payloads, lines, messages, strict=True):
            start = clock()
            floor.append(texts, data)
            middle = clock()
            store.append("bench", batch_messages)
            spent_store += clock() - middle
            spent_floor += middle - start
        best_store, best_floor = min(best_store, spent_store / count), min(best_floor, spent_floor / count)
    floor.close()
    return best_store, best_floor


def bench_live_read(tmp: Path, *, archived: int, live: int, rounds: int) -> tuple[float, float]:
    """(with archives, without) seconds to read the live messages of two sessions with equal live files."""
    store = SessionStore(tmp / "read", durable=False)
    chunk = 1000
    for start in range(0, archived, chunk):
        store.append("archived", [{"role": "user", "content": _text(i)} for i in range(start, start + chunk)])
        msgs = store.live_messages("archived")
        _start, end = choose_covered_range(msgs, 0) or (0, 0)
        archive = {"archive_id": store.next_archive_id("archived"), "session_id": "archived",
                   "source_turn_range": source_turn_range(msgs)}
        store.write_archive("archived", archive, msgs, "# Working Memory\n", "bench")
        store.drop_covered("archived", end)
        store.record_commit("archived", archive, 0)
    tail = [{"role": "user", "content": _text(i)} for i in range(live)]
    store.append("archived", tail)
    store.append("plain", tail)
    reader = SessionStore(tmp / "read")
    assert len(reader.live_messages("archived")) == len(reader.live_messages("plain")) == live
    with_archives = without = float("inf")
    for _ in range(rounds):  # interleaved, best of each
        with_archives = min(with_archives, timeit_best(lambda: reader.live_messages("archived"), 3))
        without = min(without, timeit_best(lambda: reader.live_messages("plain"), 3))
    return with_archives, without


def run(quick: bool = False) -> list[BenchRow]:
    """Measure the three rows of issue 3 (quick: fewer iterations, same shape)."""
    with tempfile.TemporaryDirectory(prefix="wm-bench-store-") as name:
        tmp = Path(name)
        # best of 10 rounds: an fsync's time varies call by call far more than the code around it
        single_store, single_floor = bench_appends(tmp, batch=1, count=100 if quick else 400,
                                                   rounds=3 if quick else 10)
        batch_store, batch_floor = bench_appends(tmp, batch=100, count=5 if quick else 20,
                                                 rounds=3 if quick else 10)
        read_with, read_without = bench_live_read(tmp, archived=10_000, live=200, rounds=5 if quick else 20)
    return [
        BenchRow.of("durable append, one message per call", single_store * 1e6, single_floor * 1e6, 1.5, "µs"),
        BenchRow.of("durable append, batch of 100", batch_store * 1e6, batch_floor * 1e6, 1.3, "µs"),
        BenchRow.of("live read, 10 000 archived vs none (200 live)", read_with * 1e3, read_without * 1e3,
                    1.2, "ms"),
    ]


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv[1:]), title="workmem store (issue 3)")
