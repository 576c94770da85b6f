"""The task of a session (nodes/extractive/task.py): its first request without boilerplate, the title, names."""

from __future__ import annotations

import pytest
from fakes import stored_messages

from workmem.nodes.extractive.task import constraints, is_wrapped, salient_lines, task_names, task_of, title_of
from workmem.nodes.extractive.transcript import parse_transcript
from workmem.nodes.formatting import format_messages

SWE = """<pr_description>
Consider the following PR description:
Pytest 6: Dynamically adding xfail marker in test no longer ignores failure
<!--
Thanks for submitting an issue!
-->

## Description

With pytest 5.x, we can dynamically add an xfail using `request.node.add_marker(mark)`. The marker should be honoured.
</pr_description>

<instructions>
Your task is to make changes to non-test files.
</instructions>"""


def msgs_of(text: str) -> list:
    return parse_transcript(format_messages(stored_messages([{"role": "user", "content": text}])))


def test_boilerplate_lines_are_skipped():
    assert salient_lines(SWE)[:2] == [
        "Pytest 6: Dynamically adding xfail marker in test no longer ignores failure", "## Description"]
    wrapped = "<system-reminder>\nRemember the rules.\n</system-reminder>\nHi!\n/testbed\nHere is the issue:\nFix it"
    assert salient_lines(wrapped) == ["Fix it"]


@pytest.mark.parametrize(("text", "task"), [
    (SWE, "Pytest 6: Dynamically adding xfail marker in test no longer ignores failure"),
    ("@claude-code-prompt.md really ULTRATHINK this", "@claude-code-prompt.md really ULTRATHINK this"),
    ("Hi! Our import fails since May. Can you fix the CSV import in the Flask app? It returns 500.",
     "Fix the CSV import in the Flask app."),
    ("The loader crashes on empty files. It should skip them.", "It should skip them."),
])
def test_the_task_is_a_headline_as_written_or_the_first_request(text, task):
    assert task_of(msgs_of(text)) == task


@pytest.mark.parametrize(("task", "budget", "title"), [
    ("Regression in 5.2.3: pytest tries to collect random __init__.py files", 60,
     "Regression in 5.2.3: pytest tries to collect random __init__.py files"),
    # the first clause that fits and names two words of the task
    ("astroid 2.9.1 breaks pylint with missing __init__.py: F0010: error while code parsing", 20,
     "astroid 2.9.1 breaks pylint with missing __init__.py: F0010"),
    # no such clause (`Regression in 5.2.3` names one): glue words and versions left out, cut to fit
    ("Regression in 5.2.3: pytest tries to collect random __init__.py files", 12,
     "Regression pytest tries collect random __init__.py files"),
    ("Regression in 5.2.3: pytest tries to collect random __init__.py files", 3, "Regression pytest tries"),
])
def test_the_title_fits_its_budget_and_names_the_task(task, budget, title):
    assert title_of(task, budget) == title


def test_the_names_of_the_task_and_its_constraints():
    msgs = msgs_of(SWE)
    task = task_of(msgs)
    assert task_names(msgs, task) == ["request.node.add_marker(mark)"]
    assert constraints(msgs, task) == ["The marker should be honoured."]


def test_a_task_prompt_is_wrapped_a_chat_message_is_not():
    assert is_wrapped(msgs_of(SWE))
    assert is_wrapped(msgs_of("Here is the issue:\nThe parser drops rows"))
    assert not is_wrapped(msgs_of("Hi!\nCan you fix the parser? It drops rows."))
    assert not is_wrapped(msgs_of("@claude-code-prompt.md really ULTRATHINK this"))
