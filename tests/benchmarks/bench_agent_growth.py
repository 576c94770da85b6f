"""The agent layer over a long session: its time per model call stays flat, its checkpoints stay bounded.

1. **Time per call** (CPU time of the calling thread, `time.thread_time`, so a busy machine does not skew the
   ratios; the fakes' own time is measured on the same clock and left out). One offline process, the data root on
   tmpfs (`/dev/shm` when present), `InMemorySaver`,
   `commit_mode="sync"` (so a commit's time can be left out), trigger 8 000, keep 10 messages: a scripted coding
   session of 750 turns — the user's message, a `read_file` call with a 1–4 KB result, the answer — so 1 500
   model calls. The memory layer's time of a call is its hooks' own time: `wrap_model_call` less the model's
   handler and less any commit it ran, plus its turn's `before_agent` and `after_agent` shared over the turn's
   calls. Rows: the median of calls 1 401–1 500 against the median of calls 51–150 (target ≤ 1.3×), and against
   `SummarizationMiddleware`'s median of calls 1 401–1 500 (same trigger and keep, its `before_model` timed; target
   ≤ 2.5×).
2. **The agent's checkpoints.** The README's snippet as a user writes it — `SqliteSaver` on a file, default
   middleware settings (background commits, `trim_state` on), `keep=("turns", 3)`, `trigger=("fraction", 0.6)` of
   a 128k model — over 300 turns of which 100 read a 20–60 KB file, against `SummarizationMiddleware` at the same
   trigger (`("fraction", 0.6)`, its default keep) on the same script. Row: the database's bytes (with its WAL),
   workmem ÷ SummarizationMiddleware (target ≤ 1.5×).

Every summarising call is served by the token benchmark's deterministic extractor (`token_fakes.py`).
Run: `python tests/benchmarks/bench_agent_growth.py [--quick]` (quick: 300 calls, 60 turns) or
`run.py --only agent_growth`.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
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

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from token_fakes import CountingModel, commit_model, message_tokens, summary_model

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine

TRIGGER = 8_000
KEEP = 10
TIME_TURNS = 750  # two model calls each
EARLY, LATE = (51, 150), (1_401, 1_500)
TIME_TARGET = 1.3
clock = time.thread_time  # CPU time of the calling thread: other processes on a shared machine do not inflate it
CountingModel.clock = clock  # the fakes' own time, left out of a layer's, on the same clock
PEER_TARGET = 2.5  # workmem's per-call time late in the session ≤ this × SummarizationMiddleware's
DB_TURNS = 300
BIG_READS = 100
DB_TARGET = 1.5
PROFILE = {"max_input_tokens": 128_000}
WORDS = ("def", "return", "self", "config", "value", "import", "path", "error", "result", "items", "parse", "load",
         "for", "in", "if", "None", "True", "raise", "class", "data", "row", "key", "index", "tests", "assert")


def file_text(rng: random.Random, size: int) -> str:
    """Code-like text of about `size` bytes."""
    lines, length = [], 0
    while length < size:
        line = "    " * rng.randint(0, 3) + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return ""


class Script:
    """A coding session: turn i asks about a file; the model reads it, then answers."""

    def __init__(self, turns: int, sizes: Callable[[int, random.Random], int], seed: int = 7) -> None:
        rng = random.Random(seed)
        self.results = [file_text(rng, sizes(i, rng)) for i in range(turns)]
        self.turn = 0

    def question(self, i: int) -> str:
        return f"Turn {i}: why does src/module_{i % 40}.py fail on case {i}? Check it and tell me."

    def answer(self, messages: list[BaseMessage], tools: list[Any], choice: Any) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=f"Turn {self.turn}: module_{self.turn % 40}.py returns None on an empty row; "
                                     f"the fix is a guard at line {10 + self.turn % 90}.")
        return AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": f"src/module_{self.turn}.py"},
                                                  "id": f"call-{self.turn}", "type": "tool_call"}])


class ScriptedTools(AgentMiddleware):
    """`read_file` answered with the script's result for the running turn."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        return ToolMessage(content=self.script.results[self.script.turn], tool_call_id=call["id"], name=call["name"])


def agent_model(script: Script) -> CountingModel:
    model = CountingModel(answer=script.answer)
    model.profile = PROFILE
    return model


class TimedWorkmem(WorkingMemoryMiddleware):
    """The middleware with its hooks timed: per call, its own seconds less the model's and any commit's."""

    def __init__(self, engine: WorkingMemoryEngine, **kwargs: Any) -> None:
        super().__init__(engine, **kwargs)
        self.call_seconds: list[float] = []
        self.turn_seconds = 0.0
        self.commit_seconds = 0.0
        commit = engine.commit_for_call

        def timed_commit(*args: Any, **kw: Any) -> dict[str, Any]:
            start = clock()
            try:
                return commit(*args, **kw)
            finally:
                self.commit_seconds += clock() - start

        engine.commit_for_call = timed_commit

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        inner = 0.0

        def timed_handler(req: Any) -> Any:
            nonlocal inner
            start = clock()
            try:
                return handler(req)
            finally:
                inner += clock() - start

        start, commits = clock(), self.commit_seconds
        try:
            return super().wrap_model_call(request, timed_handler)
        finally:
            self.call_seconds.append(clock() - start - inner - (self.commit_seconds - commits))

    def _timed_turn_hook(self, hook: Callable[..., Any], *args: Any) -> Any:
        start = clock()
        try:
            return hook(*args)
        finally:
            self.turn_seconds += clock() - start

    def before_agent(self, state: Any, runtime: Any) -> Any:
        return self._timed_turn_hook(super().before_agent, state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> Any:
        return self._timed_turn_hook(super().after_agent, state, runtime)


class TimedSummarization(SummarizationMiddleware):
    """`SummarizationMiddleware` with its `before_model` timed, less its summariser's own time."""

    def __init__(self, model: CountingModel, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.maintainer = model
        self.call_seconds: list[float] = []

    def before_model(self, state: Any, runtime: Any) -> Any:
        start, fake = clock(), self.maintainer.seconds
        try:
            return super().before_model(state, runtime)
        finally:
            self.call_seconds.append(clock() - start - (self.maintainer.seconds - fake))


def drive(agent: Any, script: Script, turns: int, thread: str, on_turn: Callable[[int], None] | None = None) -> None:
    config = {"configurable": {"thread_id": thread}}
    for i in range(turns):
        script.turn = i
        agent.invoke({"messages": [HumanMessage(content=script.question(i))]}, config)
        if on_turn is not None:
            on_turn(i)


def workmem_call_ms(turns: int, root: Path) -> list[float]:
    """Per-call memory-layer ms of workmem over the scripted session (see the module docstring)."""
    script = Script(turns, lambda i, rng: rng.randint(1_000, 4_000))
    engine = WorkingMemoryEngine(root=root, model=commit_model(), keep=("messages", KEEP), durable=False)
    middleware = TimedWorkmem(engine, session_id="growth", trigger=("tokens", TRIGGER), commit_mode="sync")
    agent = create_agent(agent_model(script), tools=[read_file], middleware=[middleware, ScriptedTools(script)],
                         checkpointer=InMemorySaver())
    per_call: list[float] = []

    def on_turn(_: int) -> None:
        calls = middleware.call_seconds
        share = middleware.turn_seconds / len(calls) if calls else 0.0
        per_call.extend(1000 * (s + share) for s in calls)
        calls.clear()
        middleware.turn_seconds = 0.0

    try:
        drive(agent, script, turns, "growth", on_turn)
    finally:
        engine.close()
    return per_call


def summarization_call_ms(turns: int) -> list[float]:
    script = Script(turns, lambda i, rng: rng.randint(1_000, 4_000))
    middleware = TimedSummarization(summary_model(), trigger=("tokens", TRIGGER), keep=("messages", KEEP),
                                    token_counter=message_tokens)
    agent = create_agent(agent_model(script), tools=[read_file], middleware=[middleware, ScriptedTools(script)],
                         checkpointer=InMemorySaver())
    drive(agent, script, turns, "growth")
    return [1000 * s for s in middleware.call_seconds]


def window_median(values: list[float], window: tuple[int, int]) -> float:
    """The median of calls `window` (1-based, inclusive)."""
    return statistics.median(values[window[0] - 1:window[1]])


def big_read_sizes(turns: int, reads: int) -> Callable[[int, random.Random], int]:
    every = max(1, turns // reads)
    return lambda i, rng: rng.randint(20_000, 60_000) if i % every == 0 else rng.randint(500, 1_500)


def db_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def checkpoint_db(layer: str, turns: int, reads: int, folder: Path) -> int:
    """Bytes of the agent's SqliteSaver database after the script through `layer`, default settings."""
    script = Script(turns, big_read_sizes(turns, reads), seed=11)
    path = folder / f"{layer}.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    engine = None
    if layer == "workmem":
        engine = WorkingMemoryEngine(root=folder / "wm", model=commit_model(), keep=("turns", 3),
                                     trigger=("fraction", 0.6))
        middleware: Any = WorkingMemoryMiddleware(engine)
    else:
        summariser = summary_model()
        summariser.profile = PROFILE  # the fraction is of the summarising model's profile
        middleware = SummarizationMiddleware(summariser, trigger=("fraction", 0.6), token_counter=message_tokens)
    agent = create_agent(agent_model(script), tools=[read_file], middleware=[middleware, ScriptedTools(script)],
                         checkpointer=SqliteSaver(conn))
    try:
        drive(agent, script, turns, "user-42")
        if engine is not None:
            engine.wait()
    finally:
        if engine is not None:
            engine.close()
        conn.close()
    return db_bytes(path)


def tmpfs() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None


def run(quick: bool = False) -> list[BenchRow]:
    """Both measures (`quick`: a shorter session, the windows scaled to it)."""
    turns = 150 if quick else TIME_TURNS
    early, late = ((11, 40), (271, 300)) if quick else (EARLY, LATE)
    with tempfile.TemporaryDirectory(prefix="workmem-growth-", dir=tmpfs()) as root:
        wm = workmem_call_ms(turns, Path(root))
    peer = summarization_call_ms(turns)
    db_turns, reads = (60, 20) if quick else (DB_TURNS, BIG_READS)
    with tempfile.TemporaryDirectory(prefix="workmem-growth-db-") as folder:
        wm_db = checkpoint_db("workmem", db_turns, reads, Path(folder))
        peer_db = checkpoint_db("summarization", db_turns, reads, Path(folder))
    print(f"workmem ms/call median: calls {early[0]}–{early[1]} {window_median(wm, early):.2f}, "
          f"{late[0]}–{late[1]} {window_median(wm, late):.2f}; SummarizationMiddleware "
          f"{window_median(peer, early):.2f} → {window_median(peer, late):.2f}")
    print(f"agent checkpoints after {db_turns} turns ({reads} reads of 20–60 KB): workmem {wm_db / 1e6:.1f} MB, "
          f"SummarizationMiddleware {peer_db / 1e6:.1f} MB")
    return [
        BenchRow.of(f"agent: workmem ms/call, calls {late[0]}–{late[1]} vs {early[0]}–{early[1]}",
                    window_median(wm, late), window_median(wm, early), TIME_TARGET, "ms"),
        BenchRow.of(f"agent: workmem ms/call vs SummarizationMiddleware's, calls {late[0]}–{late[1]}",
                    window_median(wm, late), window_median(peer, late), PEER_TARGET, "ms"),
        BenchRow.of(f"agent: SummarizationMiddleware ms/call, calls {late[0]}–{late[1]} vs {early[0]}–{early[1]}",
                    window_median(peer, late), window_median(peer, early), None, "ms"),
        BenchRow.of("agent: checkpoint DB bytes, workmem (defaults) vs SummarizationMiddleware", wm_db, peer_db,
                    DB_TARGET, "B"),
    ]


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv), title="agent growth")
