"""Errors & Corrections of a coding session (nodes/extractive/errors.py): once each, latest place, what fixed it."""

from __future__ import annotations

import json

from fakes import stored_messages
from test_extract_trail import session

from workmem.nodes.extractive.errors import error_key, is_error_line, latest_status, new_error_items, seen_errors
from workmem.nodes.extractive.steps import steps
from workmem.nodes.extractive.trail import Trail
from workmem.nodes.extractive.transcript import parse_transcript
from workmem.nodes.formatting import format_messages


def errors_of(raw: list[dict]) -> list[str]:
    msgs = parse_transcript(format_messages(stored_messages(raw)))
    found = steps(msgs)
    return [e.item() for e in seen_errors(found, msgs, Trail(found))]


def trace(line: int) -> str:
    return f'Traceback (most recent call last):\n  File "/repo/src/term.py", line {line}, in f\nTypeError: no len()'


def test_the_same_error_at_another_line_is_one_item_at_its_latest_place():
    raw = session(("python run.py", trace(1251)), ("python run.py", trace(1257)))
    assert errors_of(raw) == ["TypeError: no len() (at /repo/src/term.py:1257) — when running run.py"]
    # the file the trail knows as `src/term.py` is written so
    assert errors_of(session(("cat src/term.py", "x"), ("python run.py", trace(9)))) == [
        "TypeError: no len() (at src/term.py:9) — when running run.py"]


def test_a_fixed_error_says_which_edit_fixed_it():
    raw = session(("cat src/term.py", "x"), ("python run.py", trace(12)), ("sed -i 's/a/b/' src/other.py", ""),
                  ("sed -i '12c\\    x' src/term.py", ""), ("python run.py", "ok"))
    assert errors_of(raw) == ["TypeError: no len() (at src/term.py:12) — fixed: edited src/term.py"]


def test_an_error_the_trail_names_relative_is_written_so():
    raw = session(("cd /repo && cat src/term.py", "x"), ("python run.py", trace(3)))
    assert errors_of(raw) == ["TypeError: no len() (at src/term.py:3) — when running run.py"]


def test_an_error_line_must_say_it_is_one():
    assert is_error_line("ValueError: bad") and is_error_line("FAILED tests/a.py::b") and is_error_line("error: x")
    assert not is_error_line("error=exc,")


def test_keys_ignore_place_digits_fix_notes_and_tool_names():
    a = "run_tests: ValueError: bad row 12 (at app/x.py:31)"
    b = "ValueError: bad row 40 (at app/x.py:90) — fixed: edited app/x.py"
    assert error_key(a.split(": ", 1)[1]) == error_key(b)
    assert error_key("Error: cannot load /tmp/tmpab12cd/src") == error_key("Error: cannot load /tmp/tmpzz93/src")


def test_an_error_already_held_comes_back_only_as_fixed():
    old = ["bash: TypeError: no len() (at a.py:3)"]
    assert new_error_items(old, ["TypeError: no len() (at a.py:9)"]) == []
    fixed = "TypeError: no len() (at a.py:9) — fixed: edited a.py"
    assert new_error_items(old, [fixed]) == [fixed]
    assert new_error_items([fixed], [fixed.replace(":9", ":10")]) == []


def test_a_runners_label_does_not_make_another_error():
    assert error_key("TypeError: object of type 'Array' has no len()") == error_key(
        "ERROR: object of type 'Array' has no len() — fixed: edited pvlib/pvsystem.py")
    assert error_key("ERROR: TypeError: no len() (at a.py:3)") == error_key("TypeError: no len() (at a.py:9)")
    assert error_key("TypeError: no len()") != error_key("TypeError: no attribute")


def test_among_the_items_a_commit_adds_each_error_is_one_item_with_its_latest_status():
    open_item = "FAILED tests/t.py::test_pkg - AssertionError — when running tests/t.py"
    fixed_item = "FAILED tests/t.py::test_pkg - AssertionError — fixed: edited src/main.py"
    other = "IndentationError: expected an indented block (at src/main.py:588) — when running tests/t.py"
    assert latest_status([open_item, other, fixed_item]) == [fixed_item, other]


def test_a_coding_agents_tool_refusal_is_an_error_and_its_edit_changed_nothing():
    edit = {"file_path": "/repo/src/term.py", "old_string": "return p", "new_string": "return q"}
    raw = [{"role": "user", "content": "Fix the parser."},
           {"role": "assistant", "content": "", "tool_calls": [
               {"id": "e1", "type": "function", "function": {"name": "Edit", "arguments": json.dumps(edit)}}]},
           {"role": "tool", "tool_call_id": "e1", "name": "Edit",
            "content": "<tool_use_error>String to replace not found in file.\nString: return p</tool_use_error>"}]
    msgs = parse_transcript(format_messages(stored_messages(raw)))
    found = steps(msgs)
    assert errors_of(raw) == ["Edit: String to replace not found in file."]
    assert [t.kind for t in found[0].touches] == []  # not edited: the tool refused


FAILED_RUN = ("FAILED tests/test_cli.py::test_version_flag - AssertionError: assert '0.0.0' == '2.4.1'\n"
              "1 failed, 31 passed")


def test_a_failed_test_is_fixed_by_a_later_clean_run_of_the_suite_or_its_folder():
    """The run need not repeat the command line: the whole suite, or a folder holding the test file, covers it;
    with no edit between, the item says it is no longer seen."""
    for clean_run in ("pytest -q", "python -m pytest tests/", "pip install -e . && pytest"):
        raw = session(("pytest -q tests/test_cli.py", FAILED_RUN), (clean_run, "32 passed in 2.01s"))
        assert errors_of(raw) == [f"{FAILED_RUN.splitlines()[0]} — no longer seen running tests/test_cli.py"], \
            clean_run


def test_a_run_that_picks_tests_fixes_only_the_ones_it_picks():
    other = ("pytest tests/test_cli.py::test_help", "1 passed")
    assert errors_of(session(("pytest tests/test_cli.py", FAILED_RUN), other)) == [
        f"{FAILED_RUN.splitlines()[0]} — when running tests/test_cli.py"]
    assert errors_of(session(("pytest tests/", FAILED_RUN), ("pytest -k version tests/", "1 passed"))) == [
        FAILED_RUN.splitlines()[0]]
    same = ("pytest tests/test_cli.py::test_version_flag", "1 passed")
    assert errors_of(session(("pytest tests/test_cli.py", FAILED_RUN), same)) == [
        f"{FAILED_RUN.splitlines()[0]} — no longer seen running tests/test_cli.py"]


def test_a_script_error_is_not_fixed_by_a_passing_test_suite():
    raw = session(("python repro.py", trace(7)), ("pytest -q", "32 passed"))
    assert errors_of(raw) == ["TypeError: no len() (at /repo/src/term.py:7) — when running repro.py"]


def test_an_old_failed_test_is_fixed_by_a_clean_suite_run_after_its_last_showing():
    from workmem.nodes.extractive.errors import fixed_since

    old = [f"{FAILED_RUN.splitlines()[0]}"]
    raw = session(("pytest -q", "32 passed"), ("sed -i 's/a/b/' src/cli.py", ""), ("pytest -q", FAILED_RUN),
                  ("sed -i 's/b/c/' src/cli.py", ""), ("pytest -q", "32 passed"))
    msgs = parse_transcript(format_messages(stored_messages(raw)))
    found = steps(msgs)
    assert fixed_since(old, found, Trail(found)) == [f"{old[0]} — fixed: edited src/cli.py"]
