"""Sentence cues, case by case: requests, plans, corrections and what they reject, issues, done reports."""

from __future__ import annotations

import pytest

from workmem.nodes.extractive.cues import (
    as_task,
    is_correction,
    is_issue,
    is_next_step,
    is_plan,
    is_polite_request,
    is_request,
    negated_terms,
    reports_done,
)


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("Please add a test for BOM headers.", True),
        ("Can you fix the failing import?", True),
        ("Also the endpoint should return 422 instead of 500.", True),
        ("Step 3: please update module_3.py.", True),
        ("Keep it up!", False),
        ("Check it out!", False),
        ("Tell me more about the trip.", False),
        ("Thanks!", False),
        ("The loader splits on tabs.", False),
    ],
)
def test_is_request(sent, expected):
    assert is_request(sent) is expected


@pytest.mark.parametrize(
    ("sent", "task"),
    [
        ("Can you fix the failing CSV import?", "Fix the failing CSV import."),
        ("Actually, return 400, not 422", "Return 400, not 422"),
        ("Step 0: please update module_0.py", "Update module_0.py"),
    ],
)
def test_as_task(sent, task):
    assert as_task(sent) == task


def test_polite_request_is_a_question_asking_for_work():
    assert is_polite_request("Could you write the PR summary?")
    assert not is_polite_request("Should empty rows be skipped?")
    assert not is_polite_request("Please write the PR summary.")


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("I'm planning to repaint the shed next month.", True),
        ("My goal is to run a half marathon in October.", True),
        ("We want to visit the northern lakes.", True),
        ("I'll definitely check it out!", False),
        ("I'm going to be honest.", False),
        ("I'm going through some difficult times now.", False),
        ("Are you planning to come?", False),
    ],
)
def test_is_plan(sent, expected):
    assert is_plan(sent) is expected


@pytest.mark.parametrize(
    ("sent", "after_question", "expected"),
    [
        ("No, the delimiter is a semicolon, not a tab.", False, True),
        ("No, leave billing alone.", True, False),  # an answer to a question
        ("No, but it sounds fun!", False, False),  # "No, but …" answers, it does not correct
        ("Actually, return 400, not 422.", False, True),
        ("Actually, I liked it a lot.", False, False),  # no contrast: not a correction
        ("Don't touch config/settings.toml.", False, True),
        ("Don't worry about it.", False, False),
        ("That's not right: the key is `api_base`.", False, True),
    ],
)
def test_is_correction(sent, after_question, expected):
    assert is_correction(sent, after_question) is expected


@pytest.mark.parametrize(
    ("sent", "terms"),
    [
        ("No, the delimiter is a semicolon, not a tab.", {"tab"}),
        ("Actually, return 400, not 422.", {"422"}),
        ("Don't touch config/settings.toml.", {"config/settings.toml"}),
        ("Use Decimal instead of float.", {"float"}),
        ("The loader no longer reads the config value.", {"config"}),
        ("It's not that bad.", set()),
    ],
)
def test_negated_terms(sent, terms):
    assert negated_terms(sent) == terms


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("TODO: check the staging logs.", True),
        ("We still need to confirm with Priya whether reports count them.", True),
        ("See you later!", False),
    ],
)
def test_is_issue(sent, expected):
    assert is_issue(sent) is expected


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("Added SUPPLIER_ENCODINGS in the loader.", True),
        ("docs/importing.md is updated.", True),
        ("The delimiter is detected now.", True),
        ("All 9 tests pass now.", True),
        ("The header row is not split at all.", False),
        ("Let me read the route.", False),
    ],
)
def test_reports_done(sent, expected):
    assert reports_done(sent) is expected


@pytest.mark.parametrize(
    ("sent", "expected"),
    [("Let me read the route.", True), ("Now the 500 → 422 part.", True), ("Remaining before merge: deploy.", True),
     ("The route returns 400.", False)],
)
def test_is_next_step(sent, expected):
    assert is_next_step(sent) is expected


def test_a_label_prefix_is_dropped_only_when_it_is_a_label():
    assert as_task("Step 12: please update module_12.py") == "Update module_12.py"
    assert as_task("About test_reports: leave it alone") == "About test_reports: leave it alone"
