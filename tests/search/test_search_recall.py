"""recall@12 of archive search on the LoCoMo dev conversations: both query styles ≥ 75 %.

Reads `../shared/data/locomo_dev.json` (never copied into the repository) and skips when it is absent.
The module's own logic is checked on a small synthetic conversation that always runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from paths import REPO

from workmem.graphs.eval.recall import main, measure_search_recall, recall_table

DEV_DATA = Path(os.environ.get("WORKMEM_LOCOMO_DEV", REPO.parent / "shared" / "data" / "locomo_dev.json"))
TARGET = 0.75

TINY = {
    "sample_id": "tiny-1",
    "conversation": {
        "speaker_a": "Ana", "speaker_b": "Bo",
        "session_1_date_time": "1:00 pm on 3 March, 2024",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound called Pixel last week!"},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely. Which shelter was it?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "The one by the river, near the old mill."},
            {"speaker": "Bo", "dia_id": "D1:4", "text": "I started pottery classes on Tuesdays."},
        ],
    },
    "qa": [
        {"question": "What dog did Ana adopt?", "answer": "a greyhound", "evidence": ["D1:1"], "category": 4},
        {"question": "Which shelter did Pixel come from?", "answer": "by the river", "evidence": ["D1:3"],
         "category": 4},
        {"question": "What class does Bo take?", "answer": "pottery", "evidence": ["D1:4", "D1:9"], "category": 1},
        {"question": "Would Ana like cats?", "adversarial_answer": "no", "evidence": ["D1:1"], "category": 5},
    ],
}


def test_measure_search_recall_on_a_tiny_conversation(tmp_path):
    results = measure_search_recall(TINY, root=tmp_path / "wm")
    keywords = results["styles"]["keywords"]
    assert keywords["overall"]["turns"] == 4  # D1:1, D1:3, D1:4 and the unmapped D1:9; adversarial left out
    assert keywords["overall"]["citations"] == 4
    assert keywords["overall"]["found"] == 3 and keywords["overall"]["recall"] == pytest.approx(0.75)
    assert set(keywords) == {"1", "4", "overall"}
    assert results["samples"][0]["sample_id"] == "tiny-1"
    assert set(results["styles"]) == {"keywords", "question"}
    assert recall_table(results).row_count == 4


def test_the_command_line_needs_one_path(capsys):
    assert main([]) == 2


@pytest.fixture(scope="module")
def dev_results(tmp_path_factory):
    if not DEV_DATA.is_file():
        pytest.skip(f"LoCoMo dev data not found at {DEV_DATA} (see shared/data/README.md)")
    return measure_search_recall(DEV_DATA, root=tmp_path_factory.mktemp("recall") / "wm")


@pytest.mark.slow
@pytest.mark.parametrize("style", [
    "question",
    "keywords",
])
def test_recall_at_12_on_the_dev_conversations(dev_results, style):
    overall = dev_results["styles"][style]["overall"]
    assert overall["recall"] >= TARGET, overall


PG_SAMPLES = (0, 1, 2)  # three of the dev conversations: the suite's time budget, one ingest and commit each


def pooled(tables: list[dict], style: str) -> float:
    """recall@12 pooled over per-sample tables (their evidence turns are distinct: they carry the sample id)."""
    rows = [t["styles"][style]["overall"] for t in tables]
    return sum(r["found"] for r in rows) / sum(r["turns"] for r in rows)


@pytest.fixture(scope="module")
def pg_dev_results(request):
    if not DEV_DATA.is_file():
        pytest.skip(f"LoCoMo dev data not found at {DEV_DATA} (see shared/data/README.md)")
    server = request.getfixturevalue("pg_server")
    url = server.create_database()
    try:
        yield [measure_search_recall(DEV_DATA, sample=i, database_url=url)["samples"][0] for i in PG_SAMPLES]
    finally:
        server.drop_database(url)


@pytest.mark.slow
@pytest.mark.parametrize("style", ["question", "keywords"])
def test_postgres_recall_at_12_is_within_two_points_of_the_file_backend(dev_results, pg_dev_results, style):
    """The same ranking over the database's candidates; recall@12 within 2 points of the files'
    on the same conversations (`python -m workmem.graphs.eval.recall --database-url URL` measures all)."""
    ids = [t["sample_id"] for t in pg_dev_results]
    files = pooled([t for t in dev_results["samples"] if t["sample_id"] in ids], style)
    assert len(ids) == len(PG_SAMPLES)
    assert abs(pooled(pg_dev_results, style) - files) <= 0.02, (files, pooled(pg_dev_results, style))
