"""`workmem eval --report DIR`: JSON, a CSV row per question, three PNG plots rendered offline."""

from __future__ import annotations

import csv
import json

import pytest
from paths import FIXTURES

from workmem.graphs.cli import main
from workmem.graphs.eval.data import load_samples

FIXTURE = FIXTURES / "locomo_mini.json"
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_report_writes_json_a_csv_row_per_question_and_plots(tmp_path, capsys):
    report = tmp_path / "report"
    code = main(["eval", "--data", str(FIXTURE), "--no-model", "--threshold", "60", "--keep", "4",
                 "--out", "", "--root", str(tmp_path / "root"), "--report", str(report)])
    printed = capsys.readouterr().out
    assert code == 0
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    sample = load_samples(FIXTURE)[0]
    asked = [q for q in sample.qa if q.category != 5]
    with open(report / "questions.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["index"]) for r in rows] == [q.index for q in asked]
    assert rows[0]["evidence"] and rows[0]["evidence_where"]
    for name in ("recall_retention.png", "context_tokens.png", "wm_tokens.png"):
        data = (report / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, name
    series = results["samples"][0]["commit_series"]
    assert series and all(c["context_tokens"] <= c["transcript_tokens"] + 200 for c in series)
    assert [c["transcript_tokens"] for c in series] == sorted(c["transcript_tokens"] for c in series)
    assert results["excluded"]["adversarial"] == len(sample.qa) - len(asked) > 0
    assert f"excluded: {len(sample.qa) - len(asked)} adversarial" in printed
    recall = results["search_recall"]["styles"]
    assert set(recall) == {"keywords", "question"} and recall["question"]["overall"]["turns"] > 0
    assert "recall@12" in printed


def test_without_matplotlib_the_report_says_how_to_get_it(tmp_path, monkeypatch):
    import builtins

    from workmem.graphs.eval.report import write_report
    from workmem.state.errors import InvalidInput

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    results = {"questions": [], "retention": {}, "reachability": {}, "samples": []}
    with pytest.raises(InvalidInput, match=r"workmem\[eval\]"):
        write_report(results, tmp_path / "r")
    assert (tmp_path / "r" / "results.json").exists() and (tmp_path / "r" / "questions.csv").exists()
