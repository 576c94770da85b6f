"""Files and errors the extractive model copies: paths from text, tool arguments and results; error lines."""

from __future__ import annotations

from fakes import stored_messages

from workmem.nodes.extractive.artifacts import error_items, files, paths_in, tool_errors
from workmem.nodes.extractive.transcript import Result, parse_transcript
from workmem.nodes.formatting import format_messages


def test_paths_in_text():
    text = "See app/importers/csv_loader.py, docs/a.md and https://example.org/x?y=1; not and/or."
    assert paths_in(text) == ["app/importers/csv_loader.py", "docs/a.md", "https://example.org/x?y=1"]


def test_error_items_prefer_failed_lines_then_the_exception_with_its_frame():
    failed = Result("run_tests", True, ["FAILED tests/test_a.py::test_x - ValueError: bad"])
    assert error_items(failed) == ["FAILED tests/test_a.py::test_x - ValueError: bad"]
    trace = Result("run", True, ['  File "app/x.py", line 3, in f', "KeyError: 'sku'"])
    assert error_items(trace) == ["KeyError: 'sku' (at app/x.py:3)"]
    assert error_items(Result("run", True, [])) == ["failed without output"]
    assert error_items(Result("run", False, ["all good"])) == []


def test_files_and_tool_errors_of_a_transcript():
    msgs = parse_transcript(format_messages(stored_messages([
        {"role": "user", "content": "Fix app/x.py please."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path": "/srv/app/x.py"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "is_error": True, "content": "OSError: gone"},
    ])))
    assert files(msgs, "") == ["app/x.py (read_file)"]  # the absolute twin is folded into the relative path
    assert tool_errors(msgs) == ["read_file: OSError: gone"]
