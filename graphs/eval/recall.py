"""Search recall@12 on LoCoMo-format data.

Each conversation is stored turn by turn exactly as `workmem eval` stores it (`ingest_sample`: a
`"<speaker>: <text>"` user message per turn, a `[session <n> — <date>]` note per dated session), then
committed once with `keep_recent_count=0`, so every message is archived and indexed. Every category 1–4
question is asked of `archive_search` (`context=0`, 12 hits) in two query styles:

- `keywords`: `" ".join(question_keywords(question, speakers))`, the eval's content-word rule;
- `question`: the question's full text, unchanged.

**recall@12** is over evidence turns: the distinct turns cited as evidence by the
questions, pooled over the conversations; a turn counts as found when its message is among the first 12
hits of a question that cites it. Per category, the turns and questions of that category. Next to it,
`citation_recall` pools every (question, evidence turn) pair — stricter: a turn cited by five questions
must be found five times. An evidence dia id that maps to no stored turn counts as missed.
Run: `python -m workmem.graphs.eval.recall [--database-url URL] <data.json>` (files, or PostgreSQL).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workmem.graphs.eval.data import ADVERSARIAL, Sample, category_name, load_samples
from workmem.graphs.eval.metrics import SEARCH_LIMIT, question_keywords, ratio
from workmem.graphs.eval.scratch import scratch_storage

OVERALL = "overall"
STYLES: dict[str, Callable[[str, tuple[str, ...]], str]] = {
    "keywords": lambda question, speakers: " ".join(question_keywords(question, speakers)),
    "question": lambda question, speakers: question,
}


@dataclass
class Tally:
    """Per category (and overall): evidence turn → found by some citing question; citations and found ones."""

    turns: dict[str, dict[tuple[str, str], bool]] = field(default_factory=dict)
    citations: dict[str, list[int]] = field(default_factory=dict)

    def add(self, category: str, turn: tuple[str, str], found: bool) -> None:
        for key in (category, OVERALL):
            seen = self.turns.setdefault(key, {})
            seen[turn] = seen.get(turn, False) or found
            pair = self.citations.setdefault(key, [0, 0])
            pair[0] += 1
            pair[1] += found

    def merge(self, other: Tally) -> None:
        for key, seen in other.turns.items():
            self.turns.setdefault(key, {}).update(seen)  # turns carry their sample id: never shared
        for key, (cited, found) in other.citations.items():
            pair = self.citations.setdefault(key, [0, 0])
            pair[0] += cited
            pair[1] += found

    def table(self) -> dict[str, dict[str, Any]]:
        keys = sorted((k for k in self.turns if k != OVERALL), key=int) + [k for k in self.turns if k == OVERALL]
        out = {}
        for key in keys:
            turns, found = len(self.turns[key]), sum(self.turns[key].values())
            cited, cited_found = self.citations[key]
            out[key] = {"turns": turns, "found": found, "recall": ratio(found, turns), "citations": cited,
                        "citations_found": cited_found, "citation_recall": ratio(cited_found, cited)}
        return out


def measure_search_recall(data: str | Path | dict[str, Any] | list[Any], *, root: str | Path | None = None,
                          sample: int | str | None = None, database_url: str | None = None) -> dict[str, Any]:
    """Ingest every sample, commit all of it, and measure recall@12 of both query styles.

    → `{"limit": 12, "styles": {style: {"1": row, …, "overall": row}}, "samples": [{sample_id, styles}]}`, each
    row `{turns, found, recall, citations, citations_found, citation_recall}`. `root` must not hold these
    sessions yet; without it a temporary root is used and removed. `sample` picks one (index or id).
    `database_url`: measure on PostgreSQL, in a scratch schema dropped afterwards.
    """
    from workmem.graphs.engine import WorkingMemoryEngine
    from workmem.graphs.eval.run import ingest_sample, select_samples

    samples = select_samples(load_samples(data), sample)
    pooled = {style: Tally() for style in STYLES}
    per_sample = []
    with ExitStack() as stack:
        target = scratch_storage(stack, root, database_url, "workmem-recall-")
        engine = stack.enter_context(WorkingMemoryEngine(**target, durable=False))
        for sample in samples:
            ingested = ingest_sample(engine, sample, trigger=None, keep=0)
            engine.commit(sample.session_id, keep_recent_count=0, wait=True)
            tallies = {style: _measure(engine, sample, ingested.dia_seq, query_of)
                       for style, query_of in STYLES.items()}
            for style, tally in tallies.items():
                pooled[style].merge(tally)
            per_sample.append({"sample_id": sample.sample_id,
                               "styles": {style: tally.table() for style, tally in tallies.items()}})
    return {"limit": SEARCH_LIMIT, "styles": {style: tally.table() for style, tally in pooled.items()},
            "samples": per_sample}


def _measure(engine: Any, sample: Sample, dia_seq: dict[str, int],
             query_of: Callable[[str, tuple[str, ...]], str]) -> Tally:
    tally = Tally()
    for qa in sample.qa:
        if qa.category == ADVERSARIAL or not qa.evidence:
            continue
        query = query_of(qa.question, sample.speakers)
        hits = engine.archive_search(sample.session_id, query, limit=SEARCH_LIMIT) if query.strip() else []
        found = {h["seq"] for h in hits}
        for dia in qa.evidence:
            tally.add(str(qa.category), (sample.sample_id, dia), dia_seq.get(dia) in found)
    return tally


def recall_table(results: dict[str, Any]) -> Any:
    """A rich table: per category (and overall, then per sample) the evidence turns and each style's recall."""
    from rich.table import Table

    table = Table(title=f"archive_search recall@{results['limit']} (evidence turns; citations in brackets)")
    table.add_column("category")
    table.add_column("turns", justify="right")
    for style in results["styles"]:
        table.add_column(style, justify="right")
    rows = [("overall" if key == OVERALL else category_name(int(key)), key, results["styles"])
            for key in next(iter(results["styles"].values()))]
    rows += [(f"  {s['sample_id']}", OVERALL, s["styles"]) for s in results["samples"]]
    for name, key, styles in rows:
        first = next(iter(styles.values())).get(key, {})
        cells = [f"{_pct(styles[s].get(key, {}).get('recall'))} ({_pct(styles[s].get(key, {}).get('citation_recall'))})"
                 for s in styles]
        table.add_row(name, str(first.get("turns", 0)), *cells)
    return table


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def main(argv: list[str] | None = None) -> int:
    """`python -m workmem.graphs.eval.recall [--database-url URL] <data.json>`: print the recall table (files, or
    a scratch schema of that PostgreSQL database)."""
    from rich.console import Console

    args = sys.argv[1:] if argv is None else argv
    url = None
    if len(args) == 3 and args[0] == "--database-url":
        url, args = args[1], args[2:]
    if len(args) != 1:
        Console(stderr=True).print("usage: python -m workmem.graphs.eval.recall [--database-url URL] <locomo.json>")
        return 2
    Console().print(recall_table(measure_search_recall(args[0], database_url=url)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
