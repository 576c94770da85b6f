"""Fewer tokens than the summarisers (issue 17): one session through five memory layers, side by side.

Sessions: a synthetic 600-turn coding session (seeded; one user message and one agent reply per turn)
and one dev LoCoMo conversation (`../shared/data/locomo_dev.json`, read in place, skipped with a note
when absent; one user message per dialogue turn and per session date note). Layers (`token_layers`):
workmem's middleware (`commit_mode="sync"`), `SummarizationMiddleware`, LangMem `summarize_messages`,
full history and last-N truncation — the same trigger (4 000 and 8 000 tokens) and keep (10 messages).
Fakes and the one extractor rule: `token_fakes`. Counts are cl100k tokens, exact and repeatable
(nothing random but a seeded generator, no clock in a count); only the layer time varies by machine.

Printed per session and trigger: agent context tokens per call (mean, p95, max; and the mean of its memory
message — working memory or summary — and of its tool schemas), maintenance input and
output tokens, commits or summaries per 100 turns, total tokens (agent input + its 60-token replies +
maintenance input + output) and its ratio to full history and to each summariser, memory-layer time
per turn (wall time less the fakes' own), and answers retained in the final agent call's context.
Retention: for LoCoMo the non-adversarial gold answers present (the eval's `answer_present`); for the
synthetic session the ticket ids it plants (`OPS-<n>`).

Rows checked (synthetic session): workmem's total ≤ 1.15× each summariser's at 4 000 (≤ 1.05× at
8 000), and maintenance input per commit ≤ 1.1× theirs per summary call.
Run: `python tests/benchmarks/bench_tokens.py [--quick]` or `run.py --only tokens`.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path
from typing import Any

try:
    from common import BenchRow, print_table
except ImportError:  # imported as a module of the tests tree
    from tests.benchmarks.common import BenchRow, print_table

from rich.console import Console
from rich.table import Table
from token_fakes import fixed_reply
from token_layers import LAYERS, LayerRun, run_layer

from workmem.graphs.eval.data import ADVERSARIAL, load_samples
from workmem.graphs.eval.metrics import answer_present, padded
from workmem.state.tokens import count_tokens

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo_dev.json"
TRIGGERS = (4_000, 8_000)
KEEP = 10
TURNS = 600
TARGETS = {4_000: 1.15, 8_000: 1.05}
MAINTENANCE_TARGET = 1.1
PEERS = ("summarization", "langmem")

_PEOPLE = ["Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Omar", "Ingrid", "Dmitri", "Fatima", "Hugo"]
_MODULES = [f"{a}/{n}.py" for a in ("app", "lib", "api", "jobs", "db") for n in
            ("loader", "parser", "client", "cache", "report", "export", "auth", "queue", "sync", "config")]
_ERRORS = ["KeyError: 'field_{n}'", "TimeoutError after {s}s", "AssertionError: expected {n} rows, got {s}",
           "ValueError: invalid literal for int(): 'x{n}'", "ConnectionResetError on port {n}"]


def coding_session(turns: int = TURNS, seed: int = 17) -> tuple[list[str], list[str]]:
    """(user messages, planted answers): a seeded coding session of `turns` requests, ~90 tokens each."""
    rng = random.Random(seed)
    messages, answers = [], []
    for i in range(turns):
        path, other, person = rng.choice(_MODULES), rng.choice(_MODULES), rng.choice(_PEOPLE)
        n, s = 1000 + i * 7 + rng.randint(0, 6), rng.randint(3, 90)
        kind = i % 6
        if kind == 0:
            error = rng.choice(_ERRORS).format(n=n, s=s)
            text = (f"{person} reports that the nightly export fails in {path} with {error}. It started after "
                    f"the deploy of build {n} and only affects the large tenants; the logs show the retry loop "
                    f"giving up after {s} attempts. Can you find the cause before the morning run?")
        elif kind == 1:
            text = (f"No, do not change {other}; keep the retry limit at {s} and fix {path} instead. We agreed "
                    f"with {person} that the shared helpers stay frozen until the release, so any change has to "
                    f"live in the caller and come with a test that reproduces the failure.")
        elif kind == 2:
            text = (f"Should we move the cache of {path} to Redis before the release on 2025-{i % 12 + 1:02d}-"
                    f"{i % 27 + 1:02d}? {person} worries about memory on the small workers, and the current "
                    f"in-process cache is rebuilt on every deploy, which costs about {s} seconds of warm-up.")
        elif kind == 3:
            answers.append(f"OPS-{n}")
            text = (f"TODO: add a regression test for ticket OPS-{n} covering {path}, including the empty batch "
                    f"and the timezone edge case. {person} will review it; the test should run in under {s} "
                    f"seconds so it can stay in the default suite.")
        else:
            text = (f"Please refactor {path} so that batch {n} runs in under {s} seconds; {person} reviews it. "
                    f"Keep the public function names, log the row count at debug level, and split the parsing "
                    f"from the writing so each half can be tested on its own with small fixtures.")
        ci = (f"Last CI run on runner ci-{rng.randint(1, 40)}: {rng.randint(200, 900)} passed, {i % 4} failed in "
              f"{rng.randint(60, 600)}.{rng.randint(0, 9)}s; the slowest test is test_{path.split('/')[1][:-3]}_{n} "
              f"and the coverage of {path} is {rng.randint(40, 99)}%.")
        messages.append(f"{text}\n{ci}")
    return messages, answers


def locomo_session(path: Path = LOCOMO, sample: int = 0) -> tuple[list[str], list[str]] | None:
    """(user messages, gold answers) of one dev LoCoMo conversation; None when the file is absent."""
    if not path.is_file():
        return None
    chosen = load_samples(path)[sample]
    messages = []
    for session in chosen.sessions:
        if session.note:
            messages.append(session.note)
        messages += [turn.content for turn in session.turns]
    answers = [q.answer for q in chosen.qa if q.category != ADVERSARIAL and q.answer]
    return messages, answers


def retained(answers: list[str], text: str) -> int:
    """How many answers occur in `text` (normalised, whole words)."""
    padded_text = padded(text)
    return sum(answer_present(a, padded_text) for a in answers)


def _p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def summarize(run: LayerRun, answers: list[str]) -> dict[str, Any]:
    """One table row's numbers of a layer run."""
    contexts = [sent for sent, _ in run.agent_calls]
    m_in = sum(sent for sent, _ in run.maintenance_calls)
    m_out = sum(out for _, out in run.maintenance_calls)
    calls = len(run.maintenance_calls)
    total = sum(contexts) + sum(out for _, out in run.agent_calls) + m_in + m_out
    return {"layer": run.layer, "mean": sum(contexts) / len(contexts), "p95": _p95(contexts), "max": max(contexts),
            "memory": sum(m for m, _ in run.agent_parts) / len(contexts),
            "schemas": sum(t for _, t in run.agent_parts) / len(contexts),
            "m_in": m_in, "m_out": m_out, "calls": calls, "per_100": 100 * calls / run.turns,
            "m_in_per_call": m_in / calls if calls else 0.0, "total": total,
            "ms_per_turn": 1000 * run.layer_seconds / run.turns, "retained": retained(answers, run.final_context),
            "answers": len(answers), "commits": run.extra.get("commits")}


def measure(name: str, messages: list[str], answers: list[str], trigger: int) -> list[dict[str, Any]]:
    """Every layer on one session at one trigger → table rows."""
    reply = fixed_reply()
    return [summarize(run_layer(layer, messages, reply, trigger=trigger, keep=KEEP), answers) for layer in LAYERS]


def table(title: str, rows: list[dict[str, Any]], ceiling: int) -> Table:
    """The side-by-side table of one session at one trigger."""
    by = {r["layer"]: r for r in rows}
    out = Table(title=title)
    heads = ("layer", "ctx mean", "ctx p95", "ctx max", "of it memory", "of it tools", "maint in", "maint out",
             "calls/100 turns", "in/call", "total", "× full", "× summ.", "× langmem", "layer ms/turn", "answers kept")
    for head in heads:
        out.add_column(head, justify="left" if head == "layer" else "right")
    for r in rows:
        ratios = [r["total"] / by[k]["total"] for k in ("full history", *PEERS)]
        out.add_row(r["layer"], f"{r['mean']:,.0f}", f"{r['p95']:,}", f"{r['max']:,}", f"{r['memory']:,.0f}",
                    f"{r['schemas']:,.0f}", f"{r['m_in']:,}",
                    f"{r['m_out']:,}", f"{r['per_100']:.1f}", f"{r['m_in_per_call']:,.0f}", f"{r['total']:,}",
                    *(f"{x:.3f}" for x in ratios), f"{r['ms_per_turn']:.1f}",
                    f"{r['retained']}/{r['answers']} (ceiling {ceiling})")
    return out


def rows_of(trigger: int, rows: list[dict[str, Any]]) -> list[BenchRow]:
    """The checked ratios of the synthetic session at one trigger."""
    by = {r["layer"]: r for r in rows}
    wm = by["workmem"]
    out = [BenchRow.of(f"tokens @{trigger}: workmem total vs {peer}", wm["total"], by[peer]["total"],
                       TARGETS[trigger], "tok") for peer in PEERS]
    if trigger == TRIGGERS[0]:
        out += [BenchRow.of(f"tokens @{trigger}: maintenance input per commit vs per {peer} call",
                            wm["m_in_per_call"], by[peer]["m_in_per_call"], MAINTENANCE_TARGET, "tok")
                for peer in PEERS]
    return out


def run(quick: bool = False) -> list[BenchRow]:
    """Both sessions at both triggers (`quick`: the synthetic session's first 150 turns at 4 000 only)."""
    console = Console(width=None if sys.stdout.isatty() else 200)
    sessions = {"synthetic coding session": coding_session(150 if quick else TURNS)}
    found = None if quick else locomo_session()
    if found is not None:
        sessions["LoCoMo " + load_samples(LOCOMO)[0].sample_id] = found
    elif not quick:
        console.print(f"[yellow]LoCoMo skipped[/]: {LOCOMO} not found")
    checked: list[BenchRow] = []
    for trigger in TRIGGERS[:1] if quick else TRIGGERS:
        for name, (messages, answers) in sessions.items():
            rows = measure(name, messages, answers, trigger)
            ceiling = retained(answers, "\n".join(messages))
            tokens = sum(count_tokens(m) for m in messages)
            console.print(table(f"{name}: {len(messages)} turns, {tokens:,} user tokens, trigger {trigger:,}, "
                                f"keep {KEEP} messages (workmem commits: {rows[0]['commits']})", rows, ceiling))
            if name.startswith("synthetic"):
                checked += rows_of(trigger, rows)
    return checked


if __name__ == "__main__":
    print_table(run(quick="--quick" in sys.argv), title="tokens")
