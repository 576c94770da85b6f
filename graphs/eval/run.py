"""`run_eval`: ingest LoCoMo-format conversations turn by turn with periodic commits, then measure.

Always (no model needed): evidence reachability — is each evidence turn in the live tail, in the
working memory, or in the top 12 of `archive_search` with keywords of the question — and answer
retention in the assembled context next to its ceiling (the whole transcript). With a model: the
four answer modes of `workmem.graphs.eval.qa`, judged CORRECT/WRONG. Rules: `workmem.graphs.eval.metrics`.

Eval roots are written with `durable=False` (no fsync per append): they are scratch data, and ingest
stays fast. Without `root` a temporary root is used and removed afterwards; with `database_url` a scratch
schema of that PostgreSQL database, dropped afterwards.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from workmem.graphs.eval.data import ADVERSARIAL, QAItem, Sample, load_samples
from workmem.graphs.eval.metrics import (
    SEARCH_LIMIT,
    SpanIndex,
    accuracy_table,
    answer_present,
    padded,
    question_keywords,
    reachability_table,
    retention_table,
)
from workmem.graphs.eval.qa import answer_questions
from workmem.graphs.eval.scratch import scratch_storage
from workmem.state.errors import InvalidInput
from workmem.state.memory import DEFAULT_MEMORY_BUDGET
from workmem.state.retention import MESSAGES, Keep, keep_value, trigger_tokens, trigger_value
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW
from workmem.state.turns import DEFAULT_KEEP_RECENT

DEFAULT_EVAL_TRIGGER = ("fraction", 0.8)  # the default commit trigger: this share of the context budget
RULES = {
    "session_date": "a user message '[session <n> — <date_time>]' before each dated session's first turn",
    "keywords": "question words of 3+ chars, lowercase, possessive 's dropped, minus stopwords and speaker "
                "names, deduplicated; at most 6 (the longest, ties by position), in question order",
    "wm_presence": "a run of min(6, n) normalised words of the turn, found in no other turn, appears in the "
                   "normalised WM (turns under 3 words never count)",
    "answer_present": "normalised gold answer (lowercase, punctuation to spaces, a/an/the dropped) on word "
                      "boundaries in the normalised text; a list answer also when every item is present",
}

Advance = Callable[[], None]


@dataclass
class Ingested:
    """What ingesting one sample produced: dia id → seq, stored texts in order, commit results."""

    session_id: str
    dia_seq: dict[str, int] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    commits: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Models:
    """The models of one run: commits, answers (None: no model metrics), judge."""

    commit: Any
    answer: Any | None
    judge: Any | None


def run_eval(data: str | Path | dict[str, Any] | list[Any], *, root: str | Path | None = None, model: Any = None,
             judge: Any = None, commit_model: Any = None, threshold: int | None = None, trigger: Any = None,
             keep: Keep | int = DEFAULT_KEEP_RECENT, budget: int = DEFAULT_CONTEXT_WINDOW, no_model: bool = False,
             include_adversarial: bool = False, limit_questions: int | None = None,
             sample: int | str | None = None, progress: bool = True, console: Console | None = None,
             out: str | Path | None = None, search_recall: bool = False,
             database_url: str | None = None, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> dict[str, Any]:
    """Ingest, commit and measure LoCoMo-format data → a results dict (also written to `out` if given).

    `model`/`judge`/`commit_model`: a `BaseChatModel` or a spec like `openai:gpt-4o-mini`; `model=None`
    falls back to `WORKMEM_MODEL`; without any (or with `no_model`) only the no-model metrics run.
    Commits use `commit_model`, else the answer model, else the offline extractive model.
    `search_recall` adds the recall measure of `archive_search` (`recall.measure_search_recall`).
    `database_url`: evaluate on PostgreSQL, in a scratch schema dropped afterwards (`scratch.scratch_storage`).
    `trigger`: when a commit is due, by `after_turn`'s rule (default `("fraction", 0.8)` of `budget`, the model's
    input limit here; `("messages", 11)`: a commit whenever 11 messages are live); `threshold=n` is `("tokens", n)`.
    `memory_budget`: the WM's token budget (default an engine's at its default trigger, the full section table with
    its headings: 10 105).
    """
    from workmem.graphs.engine import WorkingMemoryEngine
    from workmem.state.turns import validate_keep

    samples = select_samples(load_samples(data), sample)
    keep = (MESSAGES, validate_keep(keep, "keep")) if isinstance(keep, int) else keep_value(keep, "keep")
    budget = _positive("budget", budget)
    if threshold is not None and trigger is not None:
        raise InvalidInput("trigger", trigger, "give threshold or trigger, not both")
    if threshold is not None:
        trigger = ("tokens", _positive("threshold", threshold))
    trigger = trigger_value(DEFAULT_EVAL_TRIGGER if trigger is None else trigger)
    if limit_questions is not None:
        limit_questions = _positive("limit_questions", limit_questions)
    models = resolve_models(model, judge, commit_model, no_model=no_model)
    console = console or Console(stderr=True)
    started = time.perf_counter()
    timing = {"ingest_s": 0.0, "metrics_s": 0.0, "qa_s": 0.0}
    questions: list[dict[str, Any]] = []
    sample_rows: list[dict[str, Any]] = []
    extra = {"judge_tokens": 0, "baseline_summary_tokens": 0, "errors": []}
    excluded = {"adversarial": 0, "over_limit": 0, "no_gold_answer": 0}
    with ExitStack() as stack:
        target = scratch_storage(stack, root, database_url, "workmem-eval-")
        engine = stack.enter_context(WorkingMemoryEngine(
            **target, model=models.commit, keep=keep, trigger=trigger, context_window=budget,
            memory_budget=memory_budget, durable=False))
        bar = stack.enter_context(_progress(console, progress))
        for item in samples:
            if engine.session_exists(item.session_id):
                raise InvalidInput("root", str(target.get("root")), f"session {item.session_id!r} already exists "
                                                                   "there; evaluate into an empty root")
            chosen = select_questions(item, include_adversarial, limit_questions)
            _count_excluded(excluded, item, chosen, include_adversarial)
            clock = time.perf_counter()
            task = bar.add_task(f"ingest {item.sample_id}", total=len(item.turns))
            ingested = ingest_sample(engine, item, trigger=trigger, keep=keep,
                                     advance=lambda t=task: bar.advance(t))
            timing["ingest_s"] += time.perf_counter() - clock
            clock = time.perf_counter()
            rows = evidence_metrics(engine, item, ingested, chosen, budget)
            timing["metrics_s"] += time.perf_counter() - clock
            if models.answer is not None:
                clock = time.perf_counter()
                task = bar.add_task(f"QA {item.sample_id}", total=len(rows) * 4)
                spent = answer_questions(engine, ingested.session_id, "\n".join(ingested.texts), rows,
                                         models.answer, models.judge, budget, advance=lambda t=task: bar.advance(t))
                for key in ("judge_tokens", "baseline_summary_tokens"):
                    extra[key] += spent[key]
                extra["errors"] += spent["errors"]
                timing["qa_s"] += time.perf_counter() - clock
            questions += rows
            sample_rows.append(_sample_row(engine, item, ingested))
    timing["total_s"] = time.perf_counter() - started
    results = {
        "config": {"threshold": trigger_tokens(trigger, budget), "trigger": list(trigger),
                   "keep": f"{keep[0]}:{keep[1]}", "budget": budget, "memory_budget": memory_budget,
                   "include_adversarial": include_adversarial,
                   "limit_questions": limit_questions, "durable": False, "search_limit": SEARCH_LIMIT,
                   "backend": "postgres" if database_url else "file",
                   "commit_model": _name(models.commit), "model": _name(models.answer),
                   "judge": _name(models.judge)},
        "rules": RULES,
        "samples": sample_rows,
        "reachability": reachability_table(questions),
        "retention": retention_table(questions),
        "model": _model_summary(questions, models, extra),
        "excluded": excluded,
        "search_recall": None,
        "timing": {k: round(v, 3) for k, v in timing.items()},
        "questions": questions,
    }
    if search_recall:
        from workmem.graphs.eval.recall import measure_search_recall

        clock = time.perf_counter()
        results["search_recall"] = measure_search_recall(data, sample=sample, database_url=database_url)
        results["timing"]["recall_s"] = round(time.perf_counter() - clock, 3)
    if out is not None:
        write_results(results, out)
    return results


def _count_excluded(excluded: dict[str, int], sample: Sample, chosen: list[QAItem], include_adversarial: bool) -> None:
    """Why questions of the sample are not measured: adversarial (category 5, no evidence answer) unless asked
    for, past `--limit-questions`, and — for retention only — without a gold answer string."""
    adversarial = 0 if include_adversarial else sum(q.category == ADVERSARIAL for q in sample.qa)
    excluded["adversarial"] += adversarial
    excluded["over_limit"] += len(sample.qa) - adversarial - len(chosen)
    excluded["no_gold_answer"] += sum(q.answer is None for q in chosen)


def write_results(results: Mapping[str, Any], out: str | Path) -> Path:
    """Write results as indented UTF-8 JSON; returns the path."""
    import json

    path = Path(out)
    path.write_text(json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path


def resolve_models(model: Any, judge: Any, commit_model: Any, *, no_model: bool = False,
                   env: Mapping[str, str] | None = None) -> Models:
    """Which model commits, answers and judges (see `run_eval`)."""
    env = os.environ if env is None else env
    answer = None if no_model else (_as_model(model, "model", env) if model is not None else _env_model(env))
    if answer is not None and _is_extractive(answer):
        raise InvalidInput("model", _name(answer), "the extractive model cannot answer questions; give a chat model")
    judge_model = None if answer is None else (_as_model(judge, "judge", env) if judge is not None else answer)
    if commit_model is not None:
        commit = _as_model(commit_model, "commit_model", env)
    else:
        from workmem.nodes.extractive.model import ExtractiveChatModel

        commit = answer if answer is not None else ExtractiveChatModel()
    return Models(commit, answer, judge_model)


def _as_model(value: Any, field_name: str, env: Mapping[str, str]) -> Any:
    from workmem.nodes.models import ENV_MODEL, resolve_model

    if isinstance(value, str):
        if not value.strip():
            raise InvalidInput(field_name, value, "must be 'extractive', 'openai:<model>' or a chat model")
        try:
            return resolve_model(env={**env, ENV_MODEL: value.strip()})
        except InvalidInput:
            raise
        except Exception as exc:  # e.g. the OpenAI client refusing to start without credentials
            from workmem.state.redact import redact_secrets

            raise InvalidInput(field_name, value, redact_secrets(f"cannot build the model: {exc}")[:300]) from exc
    if not hasattr(value, "invoke"):
        raise InvalidInput(field_name, type(value).__name__, "must be a chat model or a model spec string")
    return value


def _env_model(env: Mapping[str, str]) -> Any | None:
    from workmem.nodes.models import ENV_MODEL

    spec = (env.get(ENV_MODEL) or "").strip()
    model = _as_model(spec, ENV_MODEL, env) if spec else None
    return None if model is None or _is_extractive(model) else model


def _is_extractive(model: Any) -> bool:
    from workmem.nodes.extractive.model import ExtractiveChatModel

    return isinstance(model, ExtractiveChatModel)


def _name(model: Any) -> str | None:
    from workmem.nodes.models import model_name

    return None if model is None else model_name(model)


def _positive(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(field_name, value, "must be a positive integer")
    return value


def select_samples(samples: list[Sample], sample: int | str | None) -> list[Sample]:
    if sample is None:
        return samples
    if isinstance(sample, int) and not isinstance(sample, bool) and 0 <= sample < len(samples):
        return [samples[sample]]
    chosen = [s for s in samples if s.sample_id == str(sample)]
    if not chosen and isinstance(sample, str) and sample.isdigit() and int(sample) < len(samples):
        chosen = [samples[int(sample)]]
    if not chosen:
        raise InvalidInput("sample", sample, f"no such sample (an index below {len(samples)} or a sample_id)")
    return chosen


def _progress(console: Console, enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not enabled)


def select_questions(sample: Sample, include_adversarial: bool, limit: int | None) -> list[QAItem]:
    """The questions evaluated: adversarial ones only on request, then the first `limit`."""
    chosen = [q for q in sample.qa if include_adversarial or q.category != ADVERSARIAL]
    return chosen[:limit] if limit is not None else chosen


def ingest_sample(engine: Any, sample: Sample, *, trigger: Any, keep: Keep,
                  advance: Advance | None = None) -> Ingested:
    """Store the sample turn by turn (date notes first), committing when `after_turn`'s rule says so for
    `trigger` (None: never)."""
    done = Ingested(sample.session_id)

    transcript_tokens = 0

    def add(text: str) -> int:
        nonlocal transcript_tokens
        message = {"role": "user", "content": text}
        if trigger is None:
            turn = {"messages": engine.add_messages(done.session_id, [message]), "commit": None}
        else:
            turn = engine.after_turn(done.session_id, [message], trigger=trigger, keep=keep, wait=True)
        stored = turn["messages"][0]
        done.texts.append(text)
        transcript_tokens += stored["tokens"]
        if turn["commit"] is not None:
            result = turn["commit"]
            archive = engine.working_memory(done.session_id) or {}
            done.commits.append({"after_seq": stored["seq"], **{k: result.get(k) for k in
                                                                 ("status", "archive_id", "reason")},
                                 "transcript_tokens": transcript_tokens,
                                 "context_tokens": engine.context_tokens(done.session_id),
                                 "wm_tokens": (archive.get("tokens") or {}).get("working_memory", 0)})
        return stored["seq"]

    for session in sample.sessions:
        if session.note:
            add(session.note)
        for turn in session.turns:
            seq = add(turn.content)
            done.dia_seq.setdefault(turn.dia_id, seq)
            if advance:
                advance()
    return done


def evidence_metrics(engine: Any, sample: Sample, ingested: Ingested, questions: list[QAItem],
                     budget: int) -> list[dict[str, Any]]:
    """Per question: where each evidence turn is (tail / WM / search top 12) and whether the answer is kept."""
    sid = ingested.session_id
    live = {m["seq"] for m in engine.live_messages(sid)}
    archive = engine.working_memory(sid) or {}
    wm = padded(archive.get("working_summary", {}).get("markdown", ""))
    spans = SpanIndex({t.dia_id: t.text for t in reversed(sample.turns)})  # first occurrence of a dia id wins
    context = padded("\n".join(str(m.text) for m in engine.assemble(sid, budget)["messages"]))
    transcript = padded("\n".join(ingested.texts))
    rows = []
    for q in questions:
        keywords = question_keywords(q.question, sample.speakers)
        hits = engine.archive_search(sid, " ".join(keywords), limit=SEARCH_LIMIT) if keywords else []
        hit_seqs = {h["seq"] for h in hits}
        evidence = []
        for dia in q.evidence:
            seq = ingested.dia_seq.get(dia)
            where = "unknown" if seq is None else "tail" if seq in live else "archived"
            in_wm = seq is not None and spans.present(dia, wm)
            found = seq in hit_seqs
            evidence.append({"dia_id": dia, "seq": seq, "where": where, "wm": in_wm, "search": found,
                             "reachable": where == "tail" or in_wm or found})
        rows.append({"sample_id": sample.sample_id, "index": q.index, "category": q.category,
                     "question": q.question, "answer": q.answer, "adversarial_answer": q.adversarial_answer,
                     "keywords": keywords, "search_hits": [h["seq"] for h in hits], "evidence": evidence,
                     "in_context": None if q.answer is None else answer_present(q.answer, context),
                     "in_transcript": None if q.answer is None else answer_present(q.answer, transcript),
                     "answers": {}})
    return rows


def _sample_row(engine: Any, sample: Sample, ingested: Ingested) -> dict[str, Any]:
    from workmem.state.tokens import count_tokens

    sid = ingested.session_id
    info = engine.session_info(sid)
    return {"sample_id": sample.sample_id, "session_id": sid, "sessions": len(sample.sessions),
            "turns": len(sample.turns), "messages": info.get("total_message_count"),
            "tokens": sum(count_tokens(t) for t in ingested.texts), "commits": len(ingested.commits),
            "commits_failed": sum(c["status"] not in ("completed", "skipped") for c in ingested.commits),
            "archives": info.get("commit_count"), "live_messages": info.get("message_count"),
            "questions": len(sample.qa), "commit_series": ingested.commits}


def _model_summary(questions: list[dict[str, Any]], models: Models, extra: dict[str, Any]) -> dict[str, Any] | None:
    if models.answer is None:
        return None
    from workmem.graphs.eval.qa import MODES

    return {"model": _name(models.answer), "judge": _name(models.judge),
            "modes": {mode: accuracy_table(questions, mode) for mode in MODES},
            "judge_tokens": extra["judge_tokens"], "baseline_summary_tokens": extra["baseline_summary_tokens"],
            "errors": extra["errors"][:50], "error_count": len(extra["errors"])}
