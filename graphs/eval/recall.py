"""Search recall@12 on LoCoMo-format data (SPEC §7 [r2] "Ranking quality is a product property, measured").

Each conversation is stored turn by turn exactly as `workmem eval` stores it (`ingest_sample`: a
`"<speaker>: <text>"` user message per turn, a `[session <n> — <date>]` note per dated session), then
committed once with `keep_recent_count=0`, so every message is archived and indexed. For every
evidence turn of a category 1–4 question we ask whether its message is among the first 12 hits of
`archive_search` (`context=0`), with two query styles:

- `keywords`: `" ".join(question_keywords(question, speakers))`, the eval's content-word rule;
- `question`: the question's full text, unchanged.

Recall is pooled over evidence turns (not averaged over questions or conversations); an evidence
dia id that maps to no stored turn counts as missed. Run: `python -m workmem.graphs.eval.recall <data.json>`.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from workmem.graphs.eval.data import ADVERSARIAL, Sample, category_name, load_samples
from workmem.graphs.eval.metrics import question_keywords, ratio

SEARCH_LIMIT = 12
STYLES: dict[str, Callable[[str, tuple[str, ...]], str]] = {
    "keywords": lambda question, speakers: " ".join(question_keywords(question, speakers)),
    "question": lambda question, speakers: question,
}


def measure_search_recall(data: str | Path | dict[str, Any] | list[Any], *,
                          root: str | Path | None = None) -> dict[str, Any]:
    """Ingest every sample, commit all of it, and measure recall@12 of both query styles.

    → `{"styles": {style: {"overall": row, "1": row, …}}, "samples": [{sample_id, styles}], "limit": 12}`,
    each row `{"evidence", "found", "recall"}`. Without `root` a temporary root is used and removed.
    """
    from workmem.graphs.engine import WorkingMemoryEngine
    from workmem.graphs.eval.run import ingest_sample

    samples = load_samples(data)
    pooled = _empty()
    per_sample = []
    with ExitStack() as stack:
        root_path = Path(root) if root is not None else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="workmem-recall-")))
        engine = stack.enter_context(WorkingMemoryEngine(root_path, durable=False))
        for sample in samples:
            ingested = ingest_sample(engine, sample, threshold=sys.maxsize, keep=0)
            engine.commit(sample.session_id, keep_recent_count=0, wait=True)
            counts = _empty()
            for style, query_of in STYLES.items():
                _measure(engine, sample, ingested.dia_seq, query_of, counts[style])
                _add(pooled[style], counts[style])
            per_sample.append({"sample_id": sample.sample_id, "styles": _tables(counts)})
    return {"limit": SEARCH_LIMIT, "styles": _tables(pooled), "samples": per_sample}


def _measure(engine: Any, sample: Sample, dia_seq: dict[str, int],
             query_of: Callable[[str, tuple[str, ...]], str], counts: dict[str, list[int]]) -> None:
    for qa in sample.qa:
        if qa.category == ADVERSARIAL or not qa.evidence:
            continue
        query = query_of(qa.question, sample.speakers)
        hits = engine.archive_search(sample.session_id, query, limit=SEARCH_LIMIT) if query.strip() else []
        found = {h["seq"] for h in hits}
        for dia in qa.evidence:
            for key in (str(qa.category), "overall"):
                row = counts.setdefault(key, [0, 0])
                row[0] += 1
                row[1] += dia_seq.get(dia) in found
    return None


def _empty() -> dict[str, dict[str, list[int]]]:
    return {style: {} for style in STYLES}


def _add(total: dict[str, list[int]], part: dict[str, list[int]]) -> None:
    for key, (evidence, found) in part.items():
        row = total.setdefault(key, [0, 0])
        row[0] += evidence
        row[1] += found


def _tables(counts: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, dict[str, Any]]]:
    out = {}
    for style, rows in counts.items():
        keys = [*sorted((k for k in rows if k != "overall"), key=int), *(["overall"] if "overall" in rows else [])]
        out[style] = {k: {"evidence": rows[k][0], "found": rows[k][1], "recall": ratio(rows[k][1], rows[k][0])}
                      for k in keys}
    return out


def recall_table(results: dict[str, Any]) -> Any:
    """A rich table: one row per category (and overall), one recall column per query style."""
    from rich.table import Table

    table = Table(title=f"archive_search recall@{results['limit']}")
    table.add_column("category")
    table.add_column("evidence", justify="right")
    for style in results["styles"]:
        table.add_column(style, justify="right")
    first = next(iter(results["styles"].values()))
    for key, row in first.items():
        name = "overall" if key == "overall" else category_name(int(key))
        cells = [_pct(results["styles"][s].get(key, {}).get("recall")) for s in results["styles"]]
        table.add_row(name, str(row["evidence"]), *cells)
    for sample in results["samples"]:
        cells = [_pct(sample["styles"][s].get("overall", {}).get("recall")) for s in results["styles"]]
        table.add_row(f"  {sample['sample_id']}", str(next(iter(sample["styles"].values()))
                                                       .get("overall", {}).get("evidence", 0)), *cells)
    return table


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def main(argv: list[str] | None = None) -> int:
    """`python -m workmem.graphs.eval.recall <data.json>`: print the recall table."""
    from rich.console import Console

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        Console(stderr=True).print("usage: python -m workmem.graphs.eval.recall <locomo.json>")
        return 2
    Console().print(recall_table(measure_search_recall(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
