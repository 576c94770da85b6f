"""The handoff checks of the replay (tests/benchmarks/handoff_checks.py) on small literal sessions and memories."""

from __future__ import annotations

import sys

from paths import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))

from handoff_checks import (  # noqa: E402
    check,
    edited_files_missing,
    entry_path,
    files_touched,
    first_line,
    goals_hold_task,
    probes_in_memory,
    title_names_task,
)

from workmem.state.memory import render_sections  # noqa: E402

TASK = "Pytest 6: Dynamically adding xfail marker in test no longer ignores failure\n<!--\r\nThanks!\r\n-->"
MESSAGES = [
    {"role": "user", "content": "Consider the following PR description:\n" + TASK},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -F"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "CODE_OF_CONDUCT.md\nsrc/\ntox.ini"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c2", "type": "function", "function": {
            "name": "bash", "arguments": '{"command": "sed -i \'s/a/b/\' src/_pytest/skipping.py"}'}},
        {"id": "c3", "type": "function", "function": {
            "name": "Read", "arguments": '{"file_path": "/repo/docs/notes.md"}'}}]},
]
PROBES = [
    {"kind": "task_title", "text": "Pytest 6: Dynamically adding xfail marker in test no longer ignores failure"},
    {"kind": "file_edited", "text": "src/_pytest/skipping.py"},
    {"kind": "file_edited", "text": "/repo/src/_pytest/terminal.py"},
    {"kind": "last_command", "text": "pytest   testing/test_skipping.py -x"},
]


def memory(**sections: str) -> str:
    names = {"title": "Session Title", "goals": "Task & Goals", "files": "Files & Context", "facts":
             "Key Facts & Decisions"}
    return render_sections({names[k]: v for k, v in sections.items()})


def test_the_first_line_is_the_first_non_empty_one():
    assert first_line("\n\n  Fix the loader \nmore") == "Fix the loader"


def test_a_title_names_the_task_with_two_words_of_four_letters():
    assert title_names_task(TASK, memory(title="Dynamically adding an XFAIL marker"))
    assert not title_names_task(TASK, memory(title="Consider the following PR description"))
    assert not title_names_task(TASK, memory(title="A test in 6 boxes"))  # one word; `in`, `6` too short
    assert not title_names_task(TASK, memory(goals="Dynamically adding xfail"))  # only the title counts


def test_title_words_are_whole_words_of_letters():
    assert title_names_task("Add SCRIPT_NAME support to STATIC_URL", memory(title="Support script name"))
    assert not title_names_task("Support caching", memory(title="Supported cachingly"))


def test_task_and_goals_holds_the_first_forty_normalised_characters():
    assert goals_hold_task(TASK, memory(goals="- PYTEST 6:  Dynamically adding xfail\nmarker in test"))
    assert not goals_hold_task(TASK, memory(goals="- Pytest 6: dynamically adding"))
    assert not goals_hold_task(TASK, memory(title=first_line(TASK)))
    assert not goals_hold_task("", memory(goals="- anything"))


def test_entry_paths_are_the_first_path_like_token():
    assert entry_path("src/_pytest/skipping.py (edited, lines 230-260: pytest_runtest_makereport)") == (
        "src/_pytest/skipping.py")
    assert entry_path("`setup.cfg` (read)") == "setup.cfg"
    assert entry_path("the build log") is None


def test_files_touched_counts_entries_named_in_a_tool_call_argument():
    wm = memory(files="- src/_pytest/skipping.py (edited)\n- notes.md\n- CODE_OF_CONDUCT.md\n- tox.ini\n"
                      "- no path here\n- [archived] 3 older items — archive_search finds them")
    share = files_touched(MESSAGES, wm)
    # skipping.py by path, notes.md by basename; the listing's files and the pathless entry were never touched
    assert (share.touched, share.entries) == (2, 5)
    assert share.share == 0.4
    assert files_touched(MESSAGES, memory()).share == 1.0


def test_probes_count_by_their_first_forty_normalised_characters():
    wm = memory(facts="- Ran PYTEST testing/test_skipping.py -x, 3 failed", files="- src/_pytest/skipping.py")
    found = probes_in_memory(PROBES, wm)
    assert [p["kind"] for p in found] == ["file_edited", "last_command"]


def test_an_edited_file_is_present_as_written_or_relative():
    wm = memory(files="- src/_pytest/terminal.py (edited)\n- src/_pytest/skipping.py")
    assert edited_files_missing(PROBES, wm) == []
    assert edited_files_missing(PROBES, memory(files="- src/_pytest/skipping.py")) == ["/repo/src/_pytest/terminal.py"]
    assert edited_files_missing(PROBES, memory(facts="- src/_pytest/terminal.py")) == [
        "src/_pytest/skipping.py", "/repo/src/_pytest/terminal.py"]


def test_check_gathers_all_four():
    wm = memory(title="Dynamically adding xfail marker", goals="- " + first_line(TASK),
                files="- src/_pytest/skipping.py (edited)")
    result = check({"task": TASK, "messages": MESSAGES, "probes": PROBES}, wm)
    assert result.title and result.goals
    assert (result.files.touched, result.files.entries) == (1, 1)
    assert result.probes == 2  # the task title and skipping.py
    assert result.edited_missing == ("/repo/src/_pytest/terminal.py",)
