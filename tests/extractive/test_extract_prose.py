"""Which of an agent's sentences are prose (nodes/extractive/prose.py): no commands, code, fragments, headings."""

from __future__ import annotations

import pytest

from workmem.nodes.extractive.prose import is_code, is_command, is_fragment, is_heading, is_prose, strip_label


@pytest.mark.parametrize("sentence", [
    "The test failed as expected.",
    "This confirms that it is using the cached value (which was `None` because there was no marker).",
    "So `xfailed` is `None` when `makereport` runs for the `call` phase.",
    "Nordhavn also writes prices with a decimal comma (89,00), which float() cannot parse.",
    "The fix sets x = 1 when the flag is on and keeps the rest.",
    "I made 5 kites with my friend Kalomi at Harrow Bay last week.",
])
def test_prose(sentence):
    assert is_prose(sentence)


@pytest.mark.parametrize(("sentence", "why"), [
    ("Echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached.", is_command),
    ("cd /app && pytest -x tests/test_a.py", is_command),
    ("x = evaluate_xfail_marks(item)", is_code),
    ("(self, report: TestReport) -> None:/a\\ if hasattr(report, \"wasxfail\"):", is_code),
    ("def load(rows):", is_code),
    ("If `xfailed` is Xfail object,.", is_fragment),
    ("_fixture_xfail.py` might be unrelated or due to some weird state.", is_fragment),
    ("But `src/project` shouldn't be checked because we're looking for a.", is_fragment),
    ("The result is (partial", is_fragment),
    ("Manual Session Resumption Test", is_heading),
    ("Step 1: Create a Test Project Directory", is_heading),
])
def test_not_prose(sentence, why):
    assert why(sentence)
    assert not is_prose(sentence)


def test_short_lines_and_bare_code_spans_have_no_words_of_their_own():
    assert not is_prose("`DEBUG: skipped list len=1`.")
    assert not is_prose("Yes!")


def test_reasoning_labels_are_dropped():
    assert strip_label("THOUGHT: The loader splits on tabs.") == "The loader splits on tabs."
    assert strip_label("Analysis:  it works") == "it works"
    assert strip_label("Result: it works") == "Result: it works"  # a label of content stays
