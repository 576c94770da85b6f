"""Real coding-agent sessions replayed through every memory layer: grounding, tokens, cost, what is kept.

Data: `../shared/data/agent_sessions_dev.json` (read in place, never copied; skipped with a note when absent):
eleven real sessions — mini-swe-agent on SWE-bench (Gemini 3 Pro, DeepSeek) and one interactive Claude Code
session — with probes (facts a continuing agent must still know). Each session is replayed through
`create_agent`: a replay fake returns each recorded assistant message with its recorded tool calls, and a tool
middleware returns the recorded results; every tool name of the session is bound as a stub tool (a permissive
schema, the same for every layer). The session's system message is the agent's system prompt.

Layers, the same trigger (8 000 and 32 000 tokens) and keep (10 messages) for all: the full history;
`SummarizationMiddleware`; the same without `trim_tokens_to_summarize`; `ContextEditingMiddleware`
(`ClearToolUsesEdit` at the trigger, keep 3) + `SummarizationMiddleware`; LangMem `summarize_messages`; workmem
(`WorkingMemoryMiddleware(commit_mode="sync")`). Every summarising call of every layer — workmem's commits
included — is served by the token benchmark's one deterministic extractor rule (`token_fakes.py`). Counts are
cl100k of each call's messages plus `json.dumps` of its bound tool schemas.

Two drives: one `invoke` per user turn, and one per model call (`interrupt_after=["tools"]`, resumed with
`invoke(None)`). Per trigger and drive, per layer: tokens per call (mean, p95, max, max ÷ trigger, calls over the
trigger), maintenance calls and tokens, total (agent input + output + maintenance), the cache-discounted cost (the
messages a call shares with the previous call's start, as provider prompt caching bills them, at 0.1×) and the
cacheable share, probes kept in the next call's context (the last call's prompt and its answer) / found only by
`archive_search` (workmem) / lost, the memory layer's ms per call (median, the fakes' own time left out), and
messages stored vs fed (workmem). A stress row replays the sessions with every tool output ×10 through workmem
(model input limit 128 000, the engine's default; results over 64 KiB become payloads).

Grounding (`grounding.py`), per layer: the share of each recorded step's grounds — the code-like tokens it is built
from that first came from a tool output before it — that the call which produced the step could see (memory-only
grounds count as unseen and are shown apart), the same for its recent grounds (the tool outputs it just received),
blind calls (calls with an unseen ground), the unseen grounds by how far back the newest message holding them lies
(at most 10 messages, 11 to 40, further), and total + re-reads (agent input + maintenance, plus the whole input of
each blind call once: a live agent pays at least one more round trip to look again); and where each call's tokens go
(tool schemas, system, memory, user, assistant, tool results). `WORKMEM_REPLAY_OPTIONS` (JSON) passes settings to the
workmem row for what-ifs. workmem's row is checked against the peers of the same run (the targets below).
Run: `python tests/benchmarks/bench_agent_replay.py [--quick] [--write-baseline]` or `run.py --only agent_replay`.
`--sweep` instead replays the peers and workmem at each trigger × 0.9 … 1.1 and prints grounding and total + re-reads
per trigger and their mean: where the last commit falls moves one trigger's grounding by points (docs/benchmarks.md),
so a change of the view is judged on the mean.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

from grounding import DISTANCES, Step, Tally, seen_tokens, steps_of
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    SummarizationMiddleware,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field
from rich.console import Console
from rich.table import Table
from token_fakes import MEMORY_PREFIXES, CountingModel, commit_model, message_tokens, summary_model
from token_layers import LangMemLayer

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.archive_object import READ_TOOL_NAME

HERE = Path(__file__).resolve().parent
DATA = Path(os.environ.get("WORKMEM_AGENT_SESSIONS", HERE.parents[2] / "shared" / "data" / "agent_sessions_dev.json"))
BASELINES = HERE / "baselines"
TRIGGERS = (8_000, 32_000)
KEEP = 10
CACHED_PRICE = 0.1
LAYERS = ("full history", "summarization", "summarization (no trim)", "context editing + summ.", "langmem",
          "workmem")
PEERS = LAYERS[1:5]
DRIVES = ("per user turn", "per model call")
# what-ifs: middleware settings of the workmem row, as JSON (e.g. '{"offload_tokens": 4000}'); default none. A
# "trigger" there lists triggers added beside the replay's token one (e.g. '{"trigger": [["messages", 135]]}')
WORKMEM_OPTIONS: dict[str, Any] = json.loads(os.environ.get("WORKMEM_REPLAY_OPTIONS") or "{}")
SESSION = "replay"
STRESS = 10  # the stress row: every tool output of the sessions this many times over (payloads, synopses)
INPUT_LIMIT = 128_000  # the model input limit of the stress row (the engine's default context window)
STRESS_TARGET = 1.10  # tokens per call of the stress row ≤ this × the unstressed row's
# turn): (tokens, cached cost) ≤ these × those figures; cacheable share no lower, probes lost no more
# Targets (one invoke per user turn), workmem against the peers measured in the same run: every step sees its recent
# grounds; grounds seen and blind calls at least as good as the best peer's; probes lost at most a third of the best
# peer's; total + re-reads, total tokens and cached cost at most these × the lowest peer's
RECENT_TARGET = 0.995
REREAD_TARGET = 1.05
TOKEN_TARGETS = {8_000: 1.05, 32_000: 1.10}
COST_TARGETS = {8_000: 1.05, 32_000: 1.15}
SWEEP = (0.9, 0.95, 1.0, 1.05, 1.1)  # `--sweep`: each trigger times these


@dataclass
class Replay:
    """One recorded session as the replay needs it."""

    id: str
    system: str | None
    runs: list[list[dict[str, Any]]]  # each: the user message, then what the agent produced until the next one
    tools: list[str]
    probes: list[dict[str, Any]]
    fed: int
    steps: dict[int, Step] = field(default_factory=dict)  # recorded assistant steps by their index in the session
    task: str = ""


def load_sessions(path: Path = DATA) -> list[Replay] | None:
    """The dev sessions (None when the file is absent)."""
    if not path.is_file():
        return None
    out = []
    for s in json.loads(path.read_text(encoding="utf-8")):
        messages = s["messages"]
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
        body = messages[1:] if system is not None else messages
        runs: list[list[dict[str, Any]]] = []
        for m in body:
            if m["role"] == "user" or not runs:
                runs.append([])
            runs[-1].append(m)
        tools = sorted({c["function"]["name"] for m in body for c in m.get("tool_calls") or []})
        steps = {step.index: step for step in steps_of(messages)}
        out.append(Replay(s["id"], system, runs, tools, s["probes"], len(body), steps, s.get("task") or ""))
    return out


def stressed(sessions: Sequence[Replay], factor: int = STRESS) -> list[Replay]:
    """The sessions with every tool output `factor` times over (a 30 KB result becomes 300 KB: a payload)."""
    def grown(m: dict[str, Any]) -> dict[str, Any]:
        if m["role"] != "tool" or not isinstance(m.get("content"), str):
            return m
        return {**m, "content": m["content"] * factor}

    return [Replay(s.id, s.system, [[grown(m) for m in run] for run in s.runs], s.tools,
                   s.probes, s.fed, s.steps, s.task) for s in sessions]


def assistant_message(m: dict[str, Any]) -> AIMessage:
    """A recorded assistant message with its recorded tool calls (ids as recorded)."""
    calls = []
    for c in m.get("tool_calls") or []:
        try:
            args = json.loads(c["function"].get("arguments") or "{}")
        except ValueError:
            args = {"raw": c["function"].get("arguments")}
        calls.append({"name": c["function"]["name"], "args": args if isinstance(args, dict) else {"value": args},
                      "id": c["id"], "type": "tool_call"})
    return AIMessage(content=m.get("content") or "", tool_calls=calls)


def stub_tool(name: str) -> StructuredTool:
    """A tool the recorded agent had: its schema is bound; the recorded result is returned by `Recorded`."""
    return StructuredTool.from_function(func=lambda **kwargs: "", name=name, description=f"The agent's {name} tool.",
                                        args_schema={"type": "object", "properties": {}, "additionalProperties": True})


class Recorded(AgentMiddleware):
    """Tool calls answered with the recorded results of the assistant message the replay model just returned."""

    def __init__(self) -> None:
        super().__init__()
        self.results: dict[str, str] = {}
        self.seconds = 0.0

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """The recorded result for this call id (an empty result when the session recorded none)."""
        call = request.tool_call
        return ToolMessage(content=self.results.get(call["id"], ""), tool_call_id=call["id"], name=call["name"])


@dataclass
class CallRecord:
    tokens: int
    out: int
    prefix: int  # tokens of the messages this call shares with the start of the previous call


@dataclass
class LayerResult:
    layer: str
    calls: list[CallRecord] = field(default_factory=list)
    maintenance: list[tuple[int, int]] = field(default_factory=list)
    kept: int = 0
    searched: int = 0
    lost: int = 0
    layer_ms: list[float] = field(default_factory=list)
    stored: int = 0
    fed: int = 0
    commits: int = 0
    grounding: Tally = field(default_factory=Tally)
    parts: dict[str, int] = field(default_factory=dict)  # tokens per kind of what the calls were sent, summed
    memory: str = ""  # workmem's final working memory
    compacted: str = ""  # the same after `engine.compact` (run_layer's `compact`): the memory a handoff gets
    kept_by_kind: dict[str, int] = field(default_factory=dict)  # probes in the final call's context, per kind


def _shared_prefix(previous: list[tuple[str, int]], current: list[tuple[str, int]]) -> int:
    shared = 0
    for a, b in zip(previous, current, strict=False):
        if a[0] != b[0]:
            break
        shared += b[1]
    return shared


class ReplayModel(CountingModel):
    """The agent fake: each call returns the next recorded assistant message of the current run and arms its
    recorded tool results; a run whose recorded steps are spent (it ended on tool results, the next message being
    the user's) gets an empty reply, which ends the agent's run and carries nothing (workmem skips it)."""

    steps: list[list[tuple[AIMessage, dict[str, str], int]]] = []
    run_index: int = 0
    step_index: int = 0
    returned: list[int | None] = Field(default_factory=list)


def replay_model(session: Replay, recorded: Recorded) -> ReplayModel:
    """The replay fake of `session` (see `ReplayModel`); `start_run(i)` before each run's first invoke. Its
    `returned` lists, per call, the index in the session of the recorded step it returned (None: an empty reply)."""
    steps = []
    index = 1 if session.system is not None else 0  # the session's messages start with its system message
    for run in session.runs:
        per_run = []
        for i, m in enumerate(run):
            if m["role"] == "assistant":
                results = {}
                for later in run[i + 1:]:
                    if later["role"] != "tool":
                        break
                    results[later["tool_call_id"]] = later.get("content") or ""
                per_run.append((assistant_message(m), results, index + i))
        index += len(run)
        steps.append(per_run)

    def answer(messages: list[BaseMessage], tools: list[Any], choice: Any) -> AIMessage:
        run = model.steps[model.run_index]
        if model.step_index >= len(run):
            recorded.results = {}
            model.returned.append(None)
            return AIMessage(content="")
        reply, recorded.results, at = run[model.step_index]
        model.step_index += 1
        model.returned.append(at)
        return reply

    model = ReplayModel(answer=answer, steps=steps)
    return model


def _middleware(layer: str, trigger: int, maintainer: CountingModel, root: str) -> tuple[list[Any], Any]:
    summ = dict(trigger=("tokens", trigger), keep=("messages", KEEP), token_counter=message_tokens)
    if layer == "summarization":
        return [SummarizationMiddleware(maintainer, **summ)], None
    if layer == "summarization (no trim)":
        return [SummarizationMiddleware(maintainer, trim_tokens_to_summarize=None, **summ)], None
    if layer == "context editing + summ.":
        edit = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=trigger, keep=3)],
                                        token_counter=message_tokens)
        return [edit, SummarizationMiddleware(maintainer, **summ)], None
    if layer == "langmem":
        return [LangMemLayer(maintainer, trigger)], None
    if layer == "workmem":
        engine = WorkingMemoryEngine(root=root, model=maintainer, keep=("messages", KEEP), durable=False)
        options = dict(WORKMEM_OPTIONS)
        triggers = [("tokens", trigger), *(tuple(t) for t in options.pop("trigger", []))]  # extra ones beside it
        return [WorkingMemoryMiddleware(engine, session_id=SESSION, commit_mode="sync",
                                        trigger=triggers if len(triggers) > 1 else triggers[0], **options)], engine
    return [], None


def run_layer(layer: str, session: Replay, trigger: int, drive: str, *, compact: bool = False) -> LayerResult:
    """Replay one session through one layer (`compact`: then commit the raw tail too, as a handoff would, and keep
    that memory as `compacted`)."""
    recorded = Recorded()
    agent_fake = replay_model(session, recorded)
    maintainer = commit_model() if layer == "workmem" else summary_model()
    result = LayerResult(layer, fed=session.fed)
    with tempfile.TemporaryDirectory(prefix="workmem-replay-") as root:
        middleware, engine = _middleware(layer, trigger, maintainer, root)
        agent = create_agent(agent_fake, tools=[stub_tool(n) for n in session.tools], system_prompt=session.system,
                             middleware=[*middleware, recorded], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": SESSION}}
        previous: list[tuple[str, int]] = []

        def account(start: float, calls_before: int, fake_before: float, maint_before: float) -> None:
            wall = time.perf_counter() - start
            fakes = (agent_fake.seconds - fake_before) + (maintainer.seconds - maint_before)
            made = len(agent_fake.calls) - calls_before
            if made:
                result.layer_ms.extend([1000 * (wall - fakes) / made] * made)

        for index, run in enumerate(session.runs):
            agent_fake.run_index, agent_fake.step_index = index, 0
            user = HumanMessage(content=run[0].get("content") or "") if run[0]["role"] == "user" else None
            payload: Any = {"messages": [user] if user is not None else []}
            interrupts = {"interrupt_after": ["tools"]} if drive == DRIVES[1] else {}
            while True:
                start, calls_before = time.perf_counter(), len(agent_fake.calls)
                fake_before, maint_before = agent_fake.seconds, maintainer.seconds
                agent.invoke(payload, config, **interrupts)
                account(start, calls_before, fake_before, maint_before)
                if not interrupts or not agent.get_state(config).next:
                    break
                payload = None
        for (sent, out), prompt, at, (_memory, schemas) in zip(agent_fake.calls, agent_fake.prompts_seen,
                                                             agent_fake.returned, agent_fake.parts, strict=True):
            current = [(f"{type(m).__name__}:{m.text}", message_tokens([m])) for m in prompt]
            result.calls.append(CallRecord(sent, out, _shared_prefix(previous, current)))
            previous = current
            _count_parts(result.parts, prompt, schemas)
            if at is not None:
                seen, memory = seen_tokens(prompt, is_memory)
                result.grounding.add(session.steps[at], seen, memory - seen, sent)
        result.maintenance = list(maintainer.calls)
        final = "\n".join(m.text for m in agent_fake.last_prompt) + "\n" + (
            agent_fake.last_answer.text if agent_fake.last_answer is not None else "")
        for probe in session.probes:
            text = probe["text"]
            if text in final:
                result.kept += 1
                result.kept_by_kind[probe["kind"]] = result.kept_by_kind.get(probe["kind"], 0) + 1
            elif engine is not None and READ_TOOL_NAME in agent_fake.last_tools and _found_by_search(engine, text):
                result.searched += 1
            else:
                result.lost += 1
        if engine is not None:
            info = engine.session_info(SESSION)
            result.stored, result.commits = info["total_message_count"], info["commit_count"]
            result.memory = engine.summary_of(SESSION)[0]
            if compact:
                result.compacted = engine.compact(SESSION)["summary"] or result.memory
            engine.close()
    return result


def is_memory(message: BaseMessage) -> bool:
    """The memory message of a call: workmem's working memory, or a summariser's summary."""
    return message.text.startswith(MEMORY_PREFIXES)


PARTS = ("tool schemas", "system", "memory", "user", "assistant", "tool results")


def _count_parts(parts: dict[str, int], prompt: list[BaseMessage], schemas: int) -> None:
    """Add one call's tokens per kind (where the tokens go)."""
    parts["tool schemas"] = parts.get("tool schemas", 0) + schemas
    for message in prompt:
        kind = ("memory" if is_memory(message) else "system" if message.type == "system" else "user"
                if message.type == "human" else "assistant" if message.type == "ai" else "tool results")
        parts[kind] = parts.get(kind, 0) + message_tokens([message])


def _found_by_search(engine: WorkingMemoryEngine, text: str) -> bool:
    """Whether workmem's tools reach the probe: `archive_search` (then `archive_expand`), or `read_tool_result`
    searching the session's tool results (a live result shown as its synopsis). Asked only when the last call
    carried the tools (they join a call once something is out of view)."""
    if engine.read_tool_result(SESSION, query=text[:200])["matches"]:
        return True
    for hit in engine.archive_search(SESSION, text[:200], limit=12):
        if hit.get("seq") is None:
            if text in hit["content"]:
                return True
            continue
        full = engine.archive_expand(SESSION, start_seq=hit["seq"], end_seq=hit["seq"])
        if text in full["content"]:
            return True
    return False


def _p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(0.95 * len(ordered) + 0.5) - 1))] if ordered else 0


def summarize(results: list[LayerResult], trigger: int) -> dict[str, Any]:
    """Pooled figures of one layer over every session."""
    calls = [c for r in results for c in r.calls]
    tokens = [c.tokens for c in calls]
    agent_in, agent_out = sum(tokens), sum(c.out for c in calls)
    m_in = sum(i for r in results for i, _ in r.maintenance)
    m_out = sum(o for r in results for _, o in r.maintenance)
    cached = sum(c.prefix for c in calls)
    cost = (agent_in - cached) + CACHED_PRICE * cached + agent_out + m_in + m_out
    return {"layer": results[0].layer, "calls": len(calls), "mean": statistics.fmean(tokens) if tokens else 0,
            "p95": _p95(tokens), "max": max(tokens, default=0), "max_ratio": max(tokens, default=0) / trigger,
            "over": sum(t > trigger for t in tokens), "m_calls": sum(len(r.maintenance) for r in results),
            "m_in": m_in, "m_out": m_out, "total": agent_in + agent_out + m_in + m_out, "cost": cost,
            "cacheable": cached / agent_in if agent_in else 0.0, "kept": sum(r.kept for r in results),
            "searched": sum(r.searched for r in results), "lost": sum(r.lost for r in results),
            "ms": statistics.median([ms for r in results for ms in r.layer_ms] or [0.0]),
            "stored": sum(r.stored for r in results), "fed": sum(r.fed for r in results),
            "commits": sum(r.commits for r in results), **_grounding(results, agent_in + m_in + m_out)}


def _grounding(results: list[LayerResult], total_without_output: int) -> dict[str, Any]:
    """Grounding pooled over the sessions, and where each call's tokens go (mean per call)."""
    tally = Tally()
    for r in results:
        tally.merge(r.grounding)
    calls = sum(len(r.calls) for r in results) or 1
    parts = {kind: sum(r.parts.get(kind, 0) for r in results) / calls for kind in PARTS}
    return {"steps": tally.steps, "grounds": tally.grounds, "recent": tally.recent, "unseen": tally.unseen,
            "recent_unseen": tally.recent_unseen, "memory_only": tally.memory_only,
            "grounds_seen": tally.seen_share, "recent_seen": tally.recent_seen_share,
            "blind_calls": tally.blind_calls, "total_rereads": total_without_output + tally.blind_input,
            "unseen_by_distance": dict(tally.unseen_by_distance),
            "parts": parts, "kept_by_kind": {kind: sum(r.kept_by_kind.get(kind, 0) for r in results)
                                             for kind in sorted({k for r in results for k in r.kept_by_kind})}}


def table(title: str, rows: list[dict[str, Any]]) -> Table:
    cheapest_total = min(r["total"] for r in rows if r["layer"] in PEERS)
    cheapest_cost = min(r["cost"] for r in rows if r["layer"] in PEERS)
    out = Table(title=title)
    heads = ("layer", "calls", "tok/call mean", "p95", "max", "max÷trig", "over trig", "maint calls", "maint in/out",
             "total", "× cheapest", "cached cost", "× cheapest", "cacheable", "probes kept/search/lost", "ms/call",
             "stored/fed")
    for head in heads:
        out.add_column(head, justify="left" if head == "layer" else "right")
    for r in rows:
        out.add_row(r["layer"], f"{r['calls']:,}", f"{r['mean']:,.0f}", f"{r['p95']:,}", f"{r['max']:,}",
                    f"{r['max_ratio']:.2f}", f"{r['over']:,}", f"{r['m_calls']:,}", f"{r['m_in']:,}/{r['m_out']:,}",
                    f"{r['total']:,}", f"{r['total'] / cheapest_total:.2f}", f"{r['cost']:,.0f}",
                    f"{r['cost'] / cheapest_cost:.2f}", f"{100 * r['cacheable']:.0f}%",
                    f"{r['kept']}/{r['searched']}/{r['lost']}", f"{r['ms']:.1f}",
                    f"{r['stored']}/{r['fed']}" if r["layer"] == "workmem" else "")
    return out


def grounding_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """Grounding per layer (memory-only grounds count as unseen and are shown apart), and where the tokens go."""
    lowest = min(r["total_rereads"] for r in rows if r["layer"] in PEERS)
    out = Table(title=title)
    heads = ("layer", "grounds seen", "recent seen", "memory-only", "unseen " + " / ".join(n for _, n in DISTANCES),
             "blind calls", "total + re-reads", "× lowest", *(f"{kind}/call" for kind in PARTS))
    for head in heads:
        out.add_column(head, justify="left" if head == "layer" else "right")
    for r in rows:
        out.add_row(r["layer"], f"{100 * r['grounds_seen']:.1f}%", f"{100 * r['recent_seen']:.1f}%",
                    f"{r['memory_only']:,}", " / ".join(f"{n:,}" for n in r["unseen_by_distance"].values()),
                    f"{r['blind_calls']:,}", f"{r['total_rereads']:,}",
                    f"{r['total_rereads'] / lowest:.2f}", *(f"{r['parts'][kind]:,.0f}" for kind in PARTS))
    return out


def measure(sessions: Sequence[Replay], trigger: int, drive: str,
            layers: Sequence[str] = LAYERS) -> list[dict[str, Any]]:
    """Every layer over every session at one trigger and drive → one row per layer."""
    return [summarize([run_layer(layer, s, trigger, drive) for s in sessions], trigger) for layer in layers]


def checked_rows(trigger: int, rows: list[dict[str, Any]]) -> list[BenchRow]:
    """workmem's row against the peers of the same run (see the targets above)."""
    by = {r["layer"]: r for r in rows}
    wm = by["workmem"]
    peers = [by[p] for p in PEERS]
    cheapest = min(peers, key=lambda r: r["total"])
    cheapest_cost = min(peers, key=lambda r: r["cost"])
    lowest_rereads = min(peers, key=lambda r: r["total_rereads"])
    best_seen = max(peers, key=lambda r: r["grounds_seen"])
    best_blind = min(peers, key=lambda r: r["blind_calls"])
    best_lost = min(p["lost"] for p in peers)
    at = f"replay @{trigger}"
    return [BenchRow.of(f"{at}: recent grounds unseen, workmem (share)", 1 - wm["recent_seen"], 1.0,
                        1 - RECENT_TARGET, "share"),
            BenchRow.of(f"{at}: grounds unseen, workmem vs best peer ({best_seen['layer']})", 1 - wm["grounds_seen"],
                        1 - best_seen["grounds_seen"], 1.0, "share"),
            BenchRow.of(f"{at}: blind calls, workmem vs best peer ({best_blind['layer']})", wm["blind_calls"],
                        best_blind["blind_calls"], 1.0, "calls"),
            BenchRow.of(f"{at}: probes lost, workmem vs best peer", wm["lost"], max(best_lost, 1), 1 / 3, "probes"),
            BenchRow.of(f"{at}: total + re-reads vs lowest peer ({lowest_rereads['layer']})", wm["total_rereads"],
                        lowest_rereads["total_rereads"], REREAD_TARGET, "tok"),
            BenchRow.of(f"{at}: workmem tokens vs cheapest peer ({cheapest['layer']})", wm["total"],
                        cheapest["total"], TOKEN_TARGETS[trigger], "tok"),
            BenchRow.of(f"{at}: workmem cached cost vs cheapest peer ({cheapest_cost['layer']})", wm["cost"],
                        cheapest_cost["cost"], COST_TARGETS[trigger], "tok")]


def run(quick: bool = False, write_baseline: bool = False) -> list[BenchRow]:
    """Both triggers and both drives (`quick`: three sessions, 8 000, one invoke per user turn)."""
    console = Console(width=None if sys.stdout.isatty() else 250)
    sessions = load_sessions()
    if sessions is None:
        console.print(f"[yellow]agent replay skipped[/]: {DATA} not found")
        return []
    if quick:
        sessions = sessions[1:4]
    checked: list[BenchRow] = []
    figures: dict[str, Any] = {}
    for trigger in TRIGGERS[:1] if quick else TRIGGERS:
        for drive in DRIVES[:1] if quick else DRIVES:
            rows = measure(sessions, trigger, drive)
            messages = sum(s.fed for s in sessions)
            console.print(table(f"{len(sessions)} real sessions ({messages:,} messages), trigger {trigger:,}, keep "
                                f"{KEEP}, one invoke {drive}", rows))
            steps = rows[0]["steps"]
            console.print(grounding_table(f"grounding: {steps:,} recorded steps, {rows[0]['grounds']:,} grounds "
                                          f"({rows[0]['recent']:,} recent), trigger {trigger:,}, one invoke {drive}",
                                          rows))
            figures[f"{trigger}/{drive}"] = rows
            if drive == DRIVES[0]:
                checked += checked_rows(trigger, rows)
            if drive == DRIVES[0] and trigger == TRIGGERS[0]:
                stress = measure(stressed(sessions), trigger, drive, layers=("workmem",))[0]
                stress["layer"] = f"workmem, tool outputs ×{STRESS}"
                plain = next(r for r in rows if r["layer"] == "workmem")
                console.print(table(f"stress: every tool output ×{STRESS}, model input limit {INPUT_LIMIT:,}, "
                                    f"trigger {trigger:,}, one invoke {drive}", [*rows[1:5], plain, stress]))
                figures[f"{trigger}/{drive}/stress x{STRESS}"] = [stress]
                checked += [BenchRow.of(f"stress ×{STRESS} @{trigger}: tokens per call vs unstressed", stress["mean"],
                                        plain["mean"], STRESS_TARGET, "tok"),
                            BenchRow.of(f"stress ×{STRESS} @{trigger}: largest call vs the input limit", stress["max"],
                                        INPUT_LIMIT, 1.0, "tok")]
    if write_baseline:
        BASELINES.mkdir(exist_ok=True)
        (BASELINES / "agent_replay.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return checked


def sweep(quick: bool = False) -> None:
    """Per user turn, the peers and workmem at each trigger × `SWEEP`: grounds seen, blind calls and total +
    re-reads per trigger, their means, and workmem's mean against the best (lowest) peer's."""
    console = Console(width=None if sys.stdout.isatty() else 250)
    sessions = load_sessions()
    if sessions is None:
        console.print(f"[yellow]agent replay sweep skipped[/]: {DATA} not found")
        return
    layers = (*PEERS, "workmem")
    for trigger in TRIGGERS[:1] if quick else TRIGGERS:
        points = [round(trigger * factor) for factor in SWEEP]
        rows = {point: {r["layer"]: r for r in measure(sessions[1:4] if quick else sessions, point, DRIVES[0],
                                                        layers)} for point in points}
        out = Table(title=f"grounds seen % / blind calls / total + re-reads (M) per trigger, one invoke {DRIVES[0]}")
        for head in ("layer", *(f"{p:,}" for p in points), "mean"):
            out.add_column(head, justify="left" if head == "layer" else "right")
        means = {}
        for layer in layers:
            cells = [rows[p][layer] for p in points]
            means[layer] = {k: statistics.fmean(c[k] for c in cells) for k in ("grounds_seen", "blind_calls",
                                                                                "total_rereads")}
            out.add_row(layer, *(_sweep_cell(c) for c in [*cells, means[layer]]))
        wm, peers = means["workmem"], [means[p] for p in PEERS]
        console.print(out)
        console.print(f"workmem on the mean: grounds seen {100 * wm['grounds_seen']:.1f}% (best peer "
                      f"{100 * max(p['grounds_seen'] for p in peers):.1f}%), blind calls {wm['blind_calls']:.1f} (best "
                      f"{min(p['blind_calls'] for p in peers):.1f}), total + re-reads "
                      f"{wm['total_rereads'] / min(p['total_rereads'] for p in peers):.3f}× the lowest peer's")


def _sweep_cell(row: dict[str, Any]) -> str:
    return f"{100 * row['grounds_seen']:.1f} / {row['blind_calls']:.0f} / {row['total_rereads'] / 1e6:.2f}"


if __name__ == "__main__":
    if "--sweep" in sys.argv:
        sweep(quick="--quick" in sys.argv)
        sys.exit(0)
    print_table(run(quick="--quick" in sys.argv, write_baseline="--write-baseline" in sys.argv),
                title="agent replay")
