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


def msgs_of(*texts: str) -> list:
    return parse_transcript(format_messages(stored_messages([{"role": "user", "content": t} for t in texts])))


RULES = "Your response MUST include AT LEAST ONE bash tool call.\nDo not modify the tests."


def pr(title: str, rules: str = RULES) -> str:
    """A task prompt in the shape of the dev sessions': the PR inside its tags, then the harness's rules."""
    return (f"<pr_description>\nConsider the following PR description:\n{title}\nThe loader must skip empty files.\n"
            f"</pr_description>\n\n<instructions>\n{rules}\n</instructions>")


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
    # a request that leans on another sentence for its subject gives way to one that names it
    ("The loader crashes on empty files. It should skip them.", "The loader crashes on empty files."),
    ("Why does reindl() return NaN when GHI is 0? It should return zero. Can you fix it?",
     "Why does reindl() return NaN when GHI is 0?"),
    ("It crashes. Fix it.", "Fix it."),  # nothing names it: the request
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
    # a module path too long for a tight title: its last two parts, never a name cut mid-word
    ("pvlib.irradiance.reindl() model generates NaNs when GHI = 0", 7, "irradiance.reindl()"),
    ("DateFormat.Y() is not zero-padded.", 6, "DateFormat.Y() is not"),
])
def test_the_title_fits_its_budget_and_names_the_task(task, budget, title):
    assert title_of(task, budget) == title


def test_the_names_of_the_task_and_its_constraints():
    msgs = msgs_of(SWE)
    task = task_of(msgs)
    assert task_names(msgs, task) == ["request.node.add_marker(mark)"]
    assert constraints(msgs, task) == ["The marker should be honoured."]


@pytest.mark.parametrize("title", [
    "Loader crashes on empty CSV files",
    "Loader crashes on empty CSV files.",  # an issue title may end like a sentence
    "Why does the loader crash on empty CSV files?",
])
def test_the_title_line_of_a_task_prompt_is_the_task_whatever_its_end(title):
    assert task_of(msgs_of(pr(title))) == title


def test_a_heading_that_only_labels_a_part_is_not_the_task():
    prompt = "# Task\n\nFix `reindl()` so it returns 0 when GHI = 0.\n\n## Notes\n\n- Keep it small."
    assert task_of(msgs_of(prompt)) == "Fix `reindl()` so it returns 0 when GHI = 0."
    assert task_of(msgs_of("## reindl() returns NaN when GHI = 0\n\nIt should return 0.")) == (
        "reindl() returns NaN when GHI = 0")


def test_a_coding_agents_wrapper_messages_are_not_the_task():
    caveat = ("Caveat: The messages below were generated by the user while running local commands. DO NOT respond to "
              "these messages or otherwise consider them in your response unless the user explicitly asks you to.")
    cleared = ("<command-name>/clear</command-name>\n<command-message>clear</command-message>\n"
               "<command-args></command-args>")
    request = "fix reindl: it returns NaN when GHI is 0, it should return 0"
    assert task_of(msgs_of(caveat, cleared, "<local-command-stdout></local-command-stdout>", request)) == request
    command = ("<command-message>fix-issue is running…</command-message>\n<command-name>/fix-issue</command-name>\n"
               "<command-args>reindl() returns NaN when GHI = 0</command-args>")
    assert task_of(msgs_of(command)) == "reindl() returns NaN when GHI = 0"
    merged = f"{caveat}\n<command-name>/fix</command-name>\n<command-args>the login bug in auth.py</command-args>"
    assert task_of(msgs_of(merged)) == "the login bug in auth.py"  # the note came with a request


def test_a_task_prompts_constraints_are_its_tasks_and_its_prohibitions_not_its_harness_rules():
    msgs = msgs_of(pr("Loader crashes on empty CSV files"))
    assert constraints(msgs, task_of(msgs)) == ["The loader must skip empty files.", "Do not modify the tests."]


def test_a_short_first_clause_does_not_stand_for_a_long_title():
    task = ("irradiance.reindl, irradiance.haydavies and irradiance.perez models generate NaNs instead of zero sky "
            "diffuse whenever GHI is zero")
    assert len(title_of(task, 24).split()) > 3


def test_a_task_prompt_is_wrapped_a_chat_message_is_not():
    assert is_wrapped(msgs_of(SWE))
    assert is_wrapped(msgs_of("Here is the issue:\nThe parser drops rows"))
    assert not is_wrapped(msgs_of("Hi!\nCan you fix the parser? It drops rows."))
    assert not is_wrapped(msgs_of("@claude-code-prompt.md really ULTRATHINK this"))


PASTED_LOG = "\n".join([
    "2024-03-14T09:12:01.4411230Z Requested labels: ubuntu-latest",
    "2024-03-14T09:12:04.3712291Z Current runner version: '2.314.1'",
    "2024-03-14T09:12:16.0022561Z ImportError while importing test module 'tests/test_cache.py'.",
    "2024-03-14T09:12:16.0512291Z ##[error]Process completed with exit code 2.",
    "ERROR: Process completed with exit code 2.",
    '  File "/home/runner/work/tilekit/src/tilekit/compat.py", line 3, in <module>',
    "",
    "this is from the 3.12 job on my PR. why is it failing and can you fix the import? please don't bump any "
    "of the pinned deps in pyproject, the pins are there for the conda package.",
])


def test_a_log_pasted_before_the_request_is_not_the_task():
    """Program output pasted first (timestamped lines, a runner's markers, a traceback frame) is skipped; a
    sentence that says what not to do bounds the task and is not it."""
    task = task_of(msgs_of(PASTED_LOG))
    assert task.startswith("this is from the 3.12 job") and task.endswith("can you fix the import?"), task
    assert all("2024-03-14" not in line for line in salient_lines(PASTED_LOG))


def test_a_text_without_spaces_is_cut_by_tokens():
    from workmem.nodes.extractive.task import fit_tokens
    from workmem.state.tokens import count_tokens

    chinese = "Task: 我上传了我们2023年的订阅导出文件。你能找出哪个获客渠道带来的客户12个月收入最高吗？"
    cut = fit_tokens(chinese, 20)
    assert len(cut) > len("Task: ") + 4 and chinese.startswith(cut) and count_tokens(cut) <= 20
