"""`workmem eval`: the subcommand's parser (added by `graphs/cli.py`), its handler, and the result tables."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from workmem.graphs.cli_args import KEEP_HELP, add_trigger_options, check_out_file, keep_arg, positive_int
from workmem.graphs.eval.run import DEFAULT_EVAL_TRIGGER
from workmem.graphs.help_format import DefaultsFormatter, readable_on_any_terminal
from workmem.state.errors import CommitFailed, InvalidInput
from workmem.state.memory import DEFAULT_MEMORY_BUDGET
from workmem.state.retention import MESSAGES
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW
from workmem.state.turns import DEFAULT_KEEP_RECENT

DEFAULT_OUT = "eval_results.json"
DESCRIPTION = ("Ingest a LoCoMo-format conversation turn by turn with periodic commits, then measure evidence "
               "reachability, answer retention and, with a model, QA accuracy.")


def add_eval_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
    """Register the `eval` subcommand on an `add_subparsers()` object and return its parser."""
    cmd = subparsers.add_parser("eval", help=cmd_eval.__doc__, parents=list(parents), description=DESCRIPTION,
                                formatter_class=DefaultsFormatter)
    add_eval_arguments(cmd)
    return cmd


def add_eval_arguments(cmd: argparse.ArgumentParser) -> None:
    """The options of `eval`; the handler is set as `func`."""
    cmd.add_argument("--data", required=True, help="LoCoMo-format JSON (one sample or a list of samples)")
    cmd.add_argument("--sample", help="only this sample (index or sample_id)")
    cmd.add_argument("--no-model", action="store_true", help="no-model metrics only; commits use the extractive model")
    cmd.add_argument("--model", help="answer (and commit) model, e.g. openai:gpt-4o-mini (default: $WORKMEM_MODEL)")
    cmd.add_argument("--judge", help="judge model (default: the answer model)")
    cmd.add_argument("--commit-model", help="commit model, e.g. extractive (default: the answer model)")
    add_trigger_options(cmd, DEFAULT_EVAL_TRIGGER)
    cmd.add_argument("--keep", type=keep_arg, default=(MESSAGES, DEFAULT_KEEP_RECENT), metavar="UNIT:N",
                     help=f"{KEEP_HELP} (default: messages:{DEFAULT_KEEP_RECENT})")
    cmd.add_argument("--budget", type=positive_int, default=DEFAULT_CONTEXT_WINDOW,
                     help="token budget of the assembled context")
    cmd.add_argument("--memory-budget", type=int, default=DEFAULT_MEMORY_BUDGET,
                     help=f"token budget of the working memory (default {DEFAULT_MEMORY_BUDGET}, as an engine)")
    cmd.add_argument("--limit-questions", type=int, help="at most this many questions per sample")
    cmd.add_argument("--include-adversarial", action="store_true", help="also ask category 5 (adversarial)")
    cmd.add_argument("--out", default=DEFAULT_OUT, help=f"results JSON (default: {DEFAULT_OUT}; '' writes none)")
    cmd.add_argument("--report", metavar="DIR", help="also write results.json, questions.csv and PNG plots into DIR "
                                                     "(plots need the eval extra: pip install 'workmem[eval]')")
    cmd.add_argument("--no-search-recall", dest="search_recall", action="store_false",
                     help="skip the archive_search recall@12 measure (it stores and commits the data a second time)")
    cmd.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    """Evaluate working memory on LoCoMo-format data (reachability, retention, QA accuracy)."""
    from workmem.graphs.eval.run import run_eval, write_results

    as_json = bool(getattr(args, "json", False))
    check_outputs(args.out, args.report)  # before the run: a paid evaluation is never lost to a mistyped path
    results = run_eval(args.data, root=getattr(args, "root", None), model=args.model, judge=args.judge,
                       commit_model=args.commit_model, trigger=args.trigger, keep=args.keep, budget=args.budget,
                       no_model=args.no_model, include_adversarial=args.include_adversarial,
                       limit_questions=args.limit_questions, sample=args.sample, progress=not as_json,
                       search_recall=args.search_recall, database_url=getattr(args, "database_url", None),
                       memory_budget=args.memory_budget)
    path = write_results(results, args.out) if args.out else None
    if args.report:
        from workmem.graphs.eval.report import write_report

        write_report(results, args.report)
    unicode = readable_on_any_terminal()
    if as_json:
        print(json.dumps(results, indent=2, ensure_ascii=not unicode, default=str))
    else:
        console = Console(width=None if sys.stdout.isatty() else 120)  # a log file gets whole tables
        render_results(results, console, out=str(path) if path else None)
        if args.report:
            console.print(f"report (JSON, CSV, plots) in {args.report}")
    failed_commits(results, str(path) if path else None)
    return 0


def check_outputs(out: str | None, report: str | None) -> None:
    """`InvalidInput` when the results file or the report folder cannot be written where they are asked for."""
    if out:  # '' writes no results file
        check_out_file("out", out)
    if report:
        folder = Path(report)
        parent = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise InvalidInput("report", report, "must be a folder (made if missing) under one that can be written")


def failed_commits(results: Mapping[str, Any], out: str | None) -> None:
    """`CommitFailed` naming the first failed commit's cause when any commit of the run failed (the results are
    written first, so the run's measures are not lost)."""
    failed = [(s["session_id"], c) for s in results["samples"] for c in s["commit_series"]
              if c.get("status") not in ("completed", "skipped")]
    if failed:
        session_id, first = failed[0]
        total = sum(len(s["commit_series"]) for s in results["samples"])
        where = f"; results in {out}" if out else ""
        raise CommitFailed(session_id, None, f"{first.get('reason') or first.get('status')} ({len(failed)} of "
                                             f"{total} commit(s) failed{where})")


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _label(key: str) -> str:
    from workmem.graphs.eval.data import category_name

    return "overall" if key == "overall" else category_name(int(key))


def render_results(results: Mapping[str, Any], console: Console, out: str | None = None) -> None:
    """Print the run's summary line and its reachability, retention and (if any) model tables."""
    from workmem.graphs.eval.qa import MODE_LABELS

    for s in results["samples"]:
        console.print(f"[bold]{s['sample_id']}[/]: {s['turns']} turns, {s['messages']} messages, {s['tokens']} tokens; "
                      f"{s['commits']} commit(s) ({s['commits_failed']} failed), {s['live_messages']} message(s) "
                      f"live; {s['questions']} question(s)")
    cfg = results["config"]
    console.print(f"threshold {cfg['threshold']} tokens, keep {cfg['keep']}, budget {cfg['budget']}, memory budget "
                  f"{cfg['memory_budget']}, commit model {cfg['commit_model']}")
    excluded = results.get("excluded") or {}
    console.print(f"excluded: {excluded.get('adversarial', 0)} adversarial question(s) (category 5: no answer in the "
                  f"conversation; --include-adversarial asks them), {excluded.get('over_limit', 0)} past "
                  f"--limit-questions; {excluded.get('no_gold_answer', 0)} without a gold answer string are left out "
                  "of retention")
    table = Table(title="Evidence reachability (recall@12 = evidence turns in tail ∪ WM ∪ search top 12)")
    for name in ("category", "questions", "evidence", "in tail", "in WM", "search@12", "recall@12"):
        table.add_column(name, justify="left" if name == "category" else "right", no_wrap=name == "category")
    for key, row in results["reachability"].items():
        table.add_row(_label(key), str(row["questions"]), str(row["evidence"]), str(row["in_tail"]),
                      str(row["in_wm"]), f"{row['search_hits']}/{row['archived']}", _pct(row["recall_at_12"]))
    console.print(table)
    table = Table(title="Answer retention (gold answer in the assembled context; ceiling: in the transcript)")
    for name in ("category", "questions", "in context", "retention", "ceiling"):
        table.add_column(name, justify="left" if name == "category" else "right", no_wrap=name == "category")
    for key, row in results["retention"].items():
        table.add_row(_label(key), str(row["questions"]), str(row["in_context"]), _pct(row["retention"]),
                      _pct(row["ceiling"]))
    console.print(table)
    if results.get("search_recall"):
        from workmem.graphs.eval.recall import recall_table

        console.print(recall_table(results["search_recall"]))
    model = results.get("model")
    if model:
        table = Table(title=f"QA accuracy — answers by {model['model']}, judged by {model['judge']}")
        table.add_column("category", no_wrap=True)
        for mode in model["modes"]:
            table.add_column(MODE_LABELS.get(mode, mode), justify="right")
        keys = list(next(iter(model["modes"].values()), {}))
        for key in keys:
            table.add_row(_label(key), *[_pct(m.get(key, {}).get("accuracy")) for m in model["modes"].values()])
        overall = [m.get("overall", {}) for m in model["modes"].values()]
        table.add_row("QA tokens", *[str(o.get("qa_tokens", 0)) for o in overall])
        table.add_row("tokens / correct", *["–" if o.get("tokens_per_correct") is None
                                            else f"{o['tokens_per_correct']:.0f}" for o in overall])
        console.print(table)
        console.print(f"judge tokens {model['judge_tokens']}, baseline summary tokens "
                      f"{model['baseline_summary_tokens']}, model errors {model['error_count']}")
    else:
        console.print("No answer model configured: QA accuracy skipped (use --model openai:… or WORKMEM_MODEL).")
    timing = results["timing"]
    console.print(f"ingest {timing['ingest_s']:.1f} s, metrics {timing['metrics_s']:.1f} s, QA {timing['qa_s']:.1f} s, "
                  f"total {timing['total_s']:.1f} s" + (f"; results in {out}" if out else ""))
