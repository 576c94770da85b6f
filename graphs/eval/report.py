"""`workmem eval --report DIR`: the results as files.

- `results.json` — everything `run_eval` returned;
- `questions.csv` — one row per question: category, where its evidence was, retention, answers;
- `recall_retention.png` — per category: recall@12 of `archive_search` (both query styles, when measured),
  evidence reachability, and answer retention beside its ceiling;
- `context_tokens.png` — per conversation, at each commit: the context a model is sent (WM + live) against
  the transcript so far;
- `wm_tokens.png` — per conversation, the working memory's size after each commit.

Plots use matplotlib's Agg backend (no display, no network); matplotlib comes with the `eval` extra.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workmem.graphs.eval.data import category_name
from workmem.state.errors import InvalidInput

CSV_FIELDS = ("sample_id", "index", "category", "question", "answer", "keywords", "evidence", "evidence_where",
              "evidence_reachable", "in_context", "in_transcript", "search_hits", "answers")
PLOTS = ("recall_retention.png", "context_tokens.png", "wm_tokens.png")


def write_report(results: Mapping[str, Any], directory: str | Path) -> list[Path]:
    """Write the JSON, the per-question CSV and the three plots into `directory` (created); returns the paths."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    from workmem.graphs.eval.run import write_results

    written = [write_results(results, folder / "results.json"), write_questions_csv(results, folder / "questions.csv")]
    pyplot = _pyplot()
    written.append(_plot_recall_retention(pyplot, results, folder / PLOTS[0]))
    written.append(_plot_series(pyplot, results, folder / PLOTS[1], "context_tokens", "transcript_tokens",
                                "Context sent to the model vs the transcript", "tokens"))
    written.append(_plot_series(pyplot, results, folder / PLOTS[2], "wm_tokens", None,
                                "Working memory after each commit", "WM tokens"))
    return written


def write_questions_csv(results: Mapping[str, Any], path: Path) -> Path:
    """One row per question (UTF-8 CSV with a header)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for q in results["questions"]:
            evidence = q["evidence"]
            writer.writerow({
                "sample_id": q["sample_id"], "index": q["index"], "category": category_name(q["category"]),
                "question": q["question"], "answer": "" if q["answer"] is None else q["answer"],
                "keywords": " ".join(q["keywords"]), "evidence": " ".join(e["dia_id"] for e in evidence),
                "evidence_where": " ".join(e["where"] + ("+wm" if e["wm"] else "") + ("+search" if e["search"] else "")
                                           for e in evidence),
                "evidence_reachable": sum(e["reachable"] for e in evidence),
                "in_context": q["in_context"], "in_transcript": q["in_transcript"],
                "search_hits": " ".join(map(str, q["search_hits"])),
                "answers": " ".join(f"{mode}:{'correct' if a.get('correct') else 'wrong'}"
                                    for mode, a in sorted(q.get("answers", {}).items())),
            })
    return path


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise InvalidInput("report", None, "plots need matplotlib: pip install 'workmem[eval]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def _plot_recall_retention(pyplot: Any, results: Mapping[str, Any], path: Path) -> Path:
    keys = [k for k in results["retention"] if k != "overall"] + ["overall"]
    labels = [category_name(int(k)) if k != "overall" else "overall" for k in keys]
    bars: dict[str, list[float]] = {}
    recall = results.get("search_recall") or {}
    for style, table in (recall.get("styles") or {}).items():
        bars[f"recall@12 ({style})"] = [_share(table.get(k, {}).get("recall")) for k in keys]
    reach = results["reachability"]
    bars["evidence reachable (tail ∪ WM ∪ search)"] = [_share(reach.get(k, {}).get("recall_at_12")) for k in keys]
    bars["retention (answer in context)"] = [_share(results["retention"][k]["retention"]) for k in keys]
    bars["ceiling (answer in transcript)"] = [_share(results["retention"][k]["ceiling"]) for k in keys]
    figure, axes = pyplot.subplots(figsize=(10, 4.8))
    width = 0.8 / len(bars)
    for i, (name, values) in enumerate(bars.items()):
        axes.bar([x + i * width for x in range(len(keys))], values, width, label=name)
    axes.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))], labels)
    axes.set_ylim(0, 100)
    axes.set_ylabel("%")
    axes.set_title("Search recall, reachability and answer retention per category")
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return path


def _plot_series(pyplot: Any, results: Mapping[str, Any], path: Path, key: str, against: str | None,
                 title: str, ylabel: str) -> Path:
    figure, axes = pyplot.subplots(figsize=(8, 4.5))
    for sample in results["samples"]:
        series = [c for c in sample.get("commit_series", []) if c.get("status") == "completed"]
        xs = [c["after_seq"] for c in series]
        line = axes.plot(xs, [c[key] for c in series], label=sample["sample_id"])[0]
        if against:
            axes.plot(xs, [c[against] for c in series], linestyle=":", color=line.get_color())
    axes.set_xlabel("message (seq) at each commit")
    axes.set_ylabel(ylabel)
    axes.set_title(title + (" (dotted: the transcript)" if against else ""))
    if results["samples"]:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return path


def _share(value: float | None) -> float:
    return 0.0 if value is None else 100 * value
