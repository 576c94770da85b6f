"""Resume after an exception, LangGraph's `test_pending_writes_resume` idiom.

A node is made to fail once; the run raises, `get_state(cfg).next` names the failed node, and
`invoke(None, cfg)` finishes the commit. Call counters prove that the nodes that had finished were not
run again — only the failed one — and the result equals an uninterrupted run's. Persistence is
parametrised as LangGraph's own suite does (in memory / SQLite file). The engine-level tests cover
the task rows: a failed commit is resumed before the next one starts, and three failed resumes
abandon it.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import Field

import workmem.graphs.commit
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.context import CommitContext
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.memory import MIN_MEMORY_BUDGET, TABLE_TOTAL, body_tokens, budgets, parse_sections
from workmem.state.storage import open_storage

NODES = ["slice_turns", "load_memory", "generate", "validate", "recover", "create_retry", "extractive_fallback",
         "guard", "merge", "persist", "report"]
CHUNK_TOKENS = 200  # the lean transcript of `conversation()` is ~530 tokens: three chunks


class CountingExtractive(ExtractiveChatModel):
    """The deterministic offline model, counting its calls and keeping each call's instructions."""

    calls: int = 0
    systems: list[str] = Field(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls += 1
        self.systems.append("\n".join(m.text for m in messages if m.type == "system"))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def conversation(n_turns: int = 8) -> list[dict[str, Any]]:
    out = []
    for i in range(n_turns):
        out.append({"role": "user", "content": f"Turn {i}: please move settings_{i}.toml into config/app_{i}/ "
                                               f"before the release on 2024-06-{i + 1:02d}."})
        out.append({"role": "assistant", "content": f"Moved settings_{i}.toml to config/app_{i}/; decided to keep "
                                                    f"a symlink because Priya's deploy script reads the old path."})
    return out


class Counters:
    """Wraps the node functions of `graphs.commit` with call counters and an optional one-time failure."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.fail: dict[str, Callable[[dict[str, Any]], bool]] = {}
        self.failures: Counter[str] = Counter()
        self.fail_times: dict[str, int] = {}
        for name in NODES:
            monkeypatch.setattr(workmem.graphs.commit, name, self._wrap(name, getattr(workmem.graphs.commit, name)))

    def fail_once(self, node: str, when: Callable[[dict[str, Any]], bool] = lambda s: True, times: int = 1) -> None:
        self.fail[node], self.fail_times[node] = when, times

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)  # keeps the signature LangGraph reads to inject `runtime`
        def node(state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            when = self.fail.get(name)
            if when is not None and self.failures[name] < self.fail_times[name] and when(state):
                self.failures[name] += 1
                raise RuntimeError(f"{name} failed on purpose")
            return fn(state, *args, **kwargs)

        return node


@pytest.fixture(params=["memory", "sqlite_file"])
def checkpointer(request, tmp_path) -> Iterator[Any]:
    if request.param == "memory":
        yield InMemorySaver()
        return
    conn = sqlite3.connect(tmp_path / "checkpoints.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    yield saver
    conn.close()


def run_to_end(counters: Counters, checkpointer: Any, root, *, fail: str | None = None,
               when: Callable[[dict[str, Any]], bool] = lambda s: True,
               model: CountingExtractive | None = None) -> tuple[dict[str, Any], CountingExtractive]:
    """One commit on a fresh session; with `fail`, that node raises once and the run is resumed."""
    storage = open_storage(root, durable=False)
    storage.sessions.append("s", conversation())
    storage.tasks.create_task("s", task_id="task-1", archive_id="archive_001", status="running")
    model = model or CountingExtractive()
    context = CommitContext(root=str(root), model=model, chunk_tokens=CHUNK_TOKENS, storage=storage,
                            retry_backoff_s=0.0)
    graph = workmem.graphs.commit.compile_commit_graph(checkpointer)
    cfg = {"configurable": {"thread_id": "s/commit/task-1"}}
    graph_input = {"session_id": "s", "archive_id": "archive_001", "task_id": "task-1", "keep_recent_count": 2}
    if fail is None:
        out = graph.invoke(graph_input, cfg, context=context, durability="sync")
    else:
        counters.fail_once(fail, when)
        with pytest.raises(RuntimeError, match=f"{fail} failed on purpose"):
            graph.invoke(graph_input, cfg, context=context, durability="sync")
        state = graph.get_state(cfg)
        assert state.next == (fail,)
        assert [t.name for t in state.tasks if t.error] == [fail]
        before = Counter(counters.calls)
        out = graph.invoke(None, cfg, context=context, durability="sync")
        resumed = counters.calls - before
        # the resumed run restarts at the failed node: nodes before it are not run again
        first_node = out["route"][len(_finished_route(state.values)):][0]
        assert first_node == fail
        assert resumed[fail] >= 1
    assert out["status"] == "completed"
    out["wm"] = storage.sessions.latest_overview("s")
    out["archive"] = storage.sessions.last_complete_archive("s")
    out["task"] = storage.tasks.get_task("task-1")
    out["live"] = [m["seq"] for m in storage.sessions.live_messages("s")]
    storage.close()
    return out, model


def _finished_route(values: dict[str, Any]) -> list[str]:
    return list(values.get("route", []))


def _in_chunk(index: int) -> Callable[[dict[str, Any]], bool]:
    return lambda state: state.get("chunk_index", 0) == index


# (node that fails once, on which invocation)
FAILURES = [
    ("slice_turns", lambda s: True),
    ("load_memory", lambda s: True),
    ("validate", _in_chunk(1)),
    ("guard", _in_chunk(1)),
    ("merge", _in_chunk(2)),
    ("persist", lambda s: True),
    ("report", lambda s: True),
]


@pytest.mark.parametrize(("node", "when"), FAILURES, ids=[f[0] for f in FAILURES])
def test_node_failing_once_resumes_only_that_node(monkeypatch, tmp_path, checkpointer, node, when):
    baseline_counters = Counters(monkeypatch)
    baseline, baseline_model = run_to_end(baseline_counters, InMemorySaver(), tmp_path / "baseline")
    chunks = baseline["route"].count("merge")
    assert chunks >= 3, "the conversation must span several chunks"

    counters = Counters(monkeypatch)
    resumed, model = run_to_end(counters, checkpointer, tmp_path / "resumed", fail=node, when=when)

    # only the failed node ran twice; every other node ran exactly as often as in the baseline
    expected = Counter(baseline["route"])
    expected[node] += 1
    assert +counters.calls == +expected
    assert model.calls == baseline_model.calls == chunks
    assert resumed["route"] == baseline["route"]
    assert resumed["wm"] == baseline["wm"]
    assert resumed["archive"]["source_turn_range"] == baseline["archive"]["source_turn_range"]
    assert resumed["live"] == baseline["live"] == [15, 16]
    assert resumed["task"]["status"] == "completed"


class UnreachableOnce(CountingExtractive):
    """The counting model, but calls 2, 3 and 4 (every attempt for the second chunk) are connection errors."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if self.calls + 1 in (2, 3, 4):
            self.calls += 1
            raise ConnectionError("model endpoint unreachable")
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_transport_errors_never_raise_they_fall_back(monkeypatch, tmp_path, checkpointer):
    """A model that cannot be reached is data, not an exception: three drawn attempts, then the fallback."""
    counters = Counters(monkeypatch)
    out, model = run_to_end(counters, checkpointer, tmp_path / "root", model=UnreachableOnce())
    assert out["degraded"] is True and out["task"]["status"] == "completed"
    assert out["route"].count("extractive_fallback") == 1
    chunk_2 = out["route"].index("extractive_fallback")
    assert out["route"][chunk_2 - 3:chunk_2] == ["generate", "generate", "generate"]
    assert counters.calls["generate"] == model.calls


def test_failure_after_persist_wrote_the_archive_is_idempotent(monkeypatch, tmp_path, checkpointer):
    """persist crashing after its side effects: the re-run rewrites nothing twice and loses nothing."""
    counters = Counters(monkeypatch)
    real_persist = workmem.graphs.commit.persist
    calls = {"n": 0}

    @functools.wraps(real_persist)
    def persist_then_fail(state, runtime):
        calls["n"] += 1
        result = real_persist(state, runtime)
        if calls["n"] == 1:
            raise RuntimeError("persist failed on purpose")
        return result

    monkeypatch.setattr(workmem.graphs.commit, "persist", persist_then_fail)
    out, _ = run_to_end(counters, checkpointer, tmp_path / "root", fail="persist", when=lambda s: False)
    assert calls["n"] == 2
    storage = open_storage(tmp_path / "root")
    store = storage.sessions
    archived = [m["seq"] for m in store.archive_messages("s", "archive_001")]
    assert archived + out["live"] == list(range(1, 17))
    assert [a["archive_id"] for a in store.list_archives("s")] == ["archive_001"]
    hits = [h for h in storage.search.search("s", "symlink", limit=100) if "symlink" in h["content"]]
    assert sorted(h["seq"] for h in hits) == [s for s in archived if s % 2 == 0]  # indexed once each


# -- the engine: task rows, resume before a new commit, abandonment ----------------------------------


@pytest.fixture
def engine_with_counters(root, monkeypatch):
    counters = Counters(monkeypatch)
    engines: list[WorkingMemoryEngine] = []

    def make(**settings: Any) -> WorkingMemoryEngine:
        engine = WorkingMemoryEngine(root=root, model=CountingExtractive(), durable=False, chunk_tokens=CHUNK_TOKENS,
                                     **settings)
        engines.append(engine)
        return engine

    yield make, counters
    for engine in engines:
        engine.close()


def all_seqs(engine: WorkingMemoryEngine, session: str = "s") -> list[int]:
    seqs = [m["seq"] for a in engine.storage.sessions.list_archives(session)
            for m in engine.storage.sessions.archive_messages(session, a["archive_id"])]
    return seqs + [m["seq"] for m in engine.storage.sessions.live_messages(session)]


def test_failed_commit_is_resumed_before_a_new_one(engine_with_counters):
    make, counters = engine_with_counters
    engine = make()
    engine.add_messages("s", conversation())
    counters.fail_once("merge", _in_chunk(1))
    first = engine.commit("s", keep_recent_count=2)
    assert first["status"] == "failed"
    assert "merge failed on purpose" in first["reason"]
    task = engine.task(first["task_id"])
    assert task["status"] == "failed" and "merge failed on purpose" in task["error"]
    assert engine.working_memory("s") is None
    assert len(engine.storage.sessions.live_messages("s")) == 16  # nothing lost, nothing archived yet

    engine.add_messages("s", [{"role": "user", "content": "Also add a changelog entry in CHANGELOG.md."},
                              {"role": "assistant", "content": "Added the changelog entry."}])
    slices_before = counters.calls["slice_turns"]
    second = engine.commit("s", keep_recent_count=0)

    assert second["status"] == "completed", second
    assert [(r["task_id"], r["status"], r["archive_id"]) for r in second["resumed"]] == [
        (first["task_id"], "completed", "archive_001")]  # the caller sees the earlier work finished
    assert counters.calls["slice_turns"] == slices_before + 1  # the resumed run did not slice again
    resumed = engine.task(first["task_id"])
    assert (resumed["status"], resumed["attempts"]) == ("completed", 1)
    assert resumed["error"] is None and not second["resumed"][0]["reason"]  # the failure it got past is not its end
    archives = engine.storage.sessions.list_archives("s")
    assert [(a["archive_id"], a["start_seq"], a["end_seq"]) for a in archives] == [
        ("archive_001", 1, 14), ("archive_002", 15, 18)]
    assert engine.storage.sessions.read_archive("s", "archive_001")["task_id"] == first["task_id"]
    assert engine.storage.sessions.read_archive("s", "archive_002")["task_id"] == second["task_id"]
    assert all_seqs(engine) == list(range(1, 19))


def test_resume_all_finishes_a_failed_commit(engine_with_counters):
    make, counters = engine_with_counters
    engine = make()
    engine.add_messages("s", conversation())
    counters.fail_once("guard", _in_chunk(2))
    assert engine.commit("s", keep_recent_count=2)["status"] == "failed"
    generated = engine.model.get().calls

    results = engine.resume_all()

    assert [r["status"] for r in results] == ["completed"]
    assert engine.model.get().calls == generated  # chunks 0..2 were not asked again
    assert engine.working_memory("s")["source_turn_range"]["end_seq"] == 14
    assert engine.resume_all() == []
    assert all_seqs(engine) == list(range(1, 17))


def test_a_resumed_commit_keeps_the_memory_budget_it_started_with(engine_with_counters):
    """Issue 17: the budget is part of the run's checkpointed input. A commit with a 400-token memory fails
    mid-way; an engine set to the full table resumes it, and the run still spills to 400's budgets."""
    make, counters = engine_with_counters
    small = make(memory_budget=MIN_MEMORY_BUDGET)
    small.add_messages("s", conversation())
    counters.fail_once("merge", _in_chunk(1))
    failed = small.commit("s", keep_recent_count=2)
    assert failed["status"] == "failed" and small.working_memory("s") is None
    assert len(small.storage.sessions.live_messages("s")) == 16  # nothing lost, nothing archived yet
    small.close()

    full = make(memory_budget=TABLE_TOTAL)
    assert [r["status"] for r in full.resume_all()] == ["completed"]
    limits = budgets(MIN_MEMORY_BUDGET)
    told = f"Key Facts & Decisions ({limits.sections['Key Facts & Decisions']}):"
    assert full.model.get().systems and all(told in system for system in full.model.get().systems)
    sections = parse_sections(full.working_memory("s")["working_summary"]["markdown"])
    for name in ("Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues"):
        assert body_tokens(sections[name]) <= limits.sections[name], name
    assert all_seqs(full) == list(range(1, 17)), "every message once, archived or live"


def test_three_failed_resumes_abandon_the_commit(engine_with_counters):
    make, counters = engine_with_counters
    engine = make()
    engine.add_messages("s", conversation())
    counters.fail_once("persist", times=4)  # the run and its three resumes fail; later runs succeed

    first = engine.commit("s", keep_recent_count=2)
    assert first["status"] == "failed"
    thread = {"configurable": {"thread_id": engine.task(first["task_id"])["thread_id"]}}
    for attempt in (1, 2, 3):
        blocked = engine.commit("s", keep_recent_count=0)
        # the earlier commit keeps its messages while it may still be resumed: no second commit starts
        assert blocked["status"] == "failed", blocked
        assert first["task_id"] in blocked["reason"]
        assert engine.task(blocked["task_id"])["status"] == "skipped"
        task = engine.task(first["task_id"])
        assert (task["status"], task["attempts"]) == ("failed", attempt)
        assert engine.runner.checkpointer.get_tuple(thread) is not None
        assert engine.working_memory("s") is None

    final = engine.commit("s", keep_recent_count=0)

    task = engine.task(first["task_id"])
    assert task["status"] == "abandoned"
    assert engine.runner.checkpointer.get_tuple(thread) is None  # its thread was deleted
    assert final["status"] == "completed"
    archive = engine.working_memory("s")
    # the abandoned commit's messages (still live) went to the next commit, once each
    assert (archive["archive_id"], archive["task_id"]) == ("archive_001", final["task_id"])
    assert archive["source_turn_range"]["start_seq"] == 1
    assert all_seqs(engine) == list(range(1, 17))
    assert counters.calls["persist"] == 5


def test_task_that_never_checkpointed_is_abandoned(engine_with_counters):
    make, _ = engine_with_counters
    engine = make()
    engine.add_messages("s", conversation(2))
    ghost = engine.storage.tasks.create_task("s", archive_id="archive_001", status="running")
    result = engine.commit("s")
    assert engine.task(ghost["task_id"])["status"] == "abandoned"
    assert result["status"] == "completed"
    assert engine.working_memory("s")["task_id"] == result["task_id"]


def test_stale_task_whose_archive_another_commit_wrote_is_abandoned(engine_with_counters):
    """A resumed task must not claim (and re-index) an archive id another commit has completed."""
    make, counters = engine_with_counters
    engine = make()
    engine.add_messages("s", conversation())
    counters.fail_once("merge", _in_chunk(1))
    stale = engine.commit("s", keep_recent_count=2)
    assert stale["status"] == "failed"
    # another commit completes archive_001 meanwhile (as if the stale task had been lost track of)
    engine.storage.tasks.update_task(stale["task_id"], status="abandoned")
    done = engine.commit("s", keep_recent_count=0)
    assert done["status"] == "completed"
    engine.storage.tasks.update_task(stale["task_id"], status="failed")

    results = engine.resume_all()

    assert [r["status"] for r in results] == ["abandoned"]
    assert engine.working_memory("s")["task_id"] == done["task_id"]
    hits = engine.storage.search.search("s", "symlink", limit=100)
    assert sorted(h["seq"] for h in hits if "symlink" in h["content"]) == list(range(2, 17, 2))  # the full index
    assert len({h["seq"] for h in hits}) == len(hits)
