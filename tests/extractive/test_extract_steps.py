"""Tool calls paired with their results, and what each did to files (nodes/extractive/steps.py)."""

from __future__ import annotations

import json

from fakes import stored_messages

from workmem.nodes.extractive.steps import call_arguments, call_touches, steps
from workmem.nodes.extractive.transcript import CALL_CUT, parse_transcript
from workmem.nodes.formatting import format_messages


def call(name: str, **args: object) -> dict:
    return {"id": f"c-{name}-{len(json.dumps(args))}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def test_arguments_are_json_or_what_survived_a_clip():
    assert call_arguments('{"path": "a.py"}') == {"path": "a.py"}
    clipped = '{"command": "cat > f.py <<EOF\\nimport os' + CALL_CUT + 'print(1)\\nEOF\\npython f.py"}'
    assert call_arguments(clipped) == {"command": "cat > f.py <<EOF\nimport os\nprint(1)\nEOF\npython f.py"}
    assert call_arguments("ls -la") == "ls -la"


def test_tools_are_read_by_their_names_and_arguments():
    assert [(t.path, t.kind, t.lines) for t in call_touches("Read", {"file_path": "/r/a.py", "offset": 95,
                                                                     "limit": 30})] == [("/r/a.py", "read", (95, 124))]
    edit = call_touches("Edit", {"file_path": "/r/a.py", "old_string": "def load(x):\n    pass", "new_string": "x"})
    assert [(t.kind, t.detail) for t in edit] == [("edited", "load")]
    assert call_touches("Write", {"file_path": "docs/plan.md", "content": "# Plan"})[0].kind == "created"
    assert call_touches("run_tests", {"path": "tests/a.py tests/b.py"})[0].kind == "tested"
    assert [t.path for t in call_touches("run_tests", {"path": "tests/a.py tests/b.py"})] == ["tests/a.py",
                                                                                             "tests/b.py"]
    assert call_touches("Grep", {"pattern": "x", "path": "src"}) == []  # a directory searched
    assert call_touches("TodoWrite", {"todos": []}) == []


def test_an_editor_tool_with_sub_commands():
    viewed = call_touches("str_replace_editor", {"command": "view", "path": "a.py", "view_range": [10, 20]})
    assert [(t.kind, t.lines) for t in viewed] == [("read", (10, 20))]
    assert call_touches("str_replace_editor", {"command": "create", "path": "b.py"})[0].kind == "created"
    assert call_touches("str_replace_editor", {"command": "str_replace", "path": "b.py"})[0].kind == "edited"


def test_a_shell_tool_reads_its_command():
    assert [(t.path, t.kind) for t in call_touches("bash", {"command": "cat a.py"})] == [("a.py", "read")]
    assert [(t.path, t.kind) for t in call_touches("Bash", {"command": "pytest t.py", "description": "x"})] == [
        ("t.py", "tested")]


def test_steps_pair_each_call_with_its_result():
    msgs = parse_transcript(format_messages(stored_messages([
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "", "tool_calls": [call("read_file", path="a.py"),
                                                            call("bash", command="pytest t.py")]},
        {"role": "tool", "tool_call_id": "c-read_file-17", "name": "read_file", "content": "A"},
        {"role": "tool", "tool_call_id": "c-bash-26", "name": "bash", "content": "FAILED t.py::x"},
    ])))
    found = steps(msgs)
    assert [(s.name, s.result.lines[0] if s.result else None) for s in found] == [
        ("read_file", "A"), ("bash", "FAILED t.py::x")]
    assert found[1].command == "pytest t.py"


def test_a_path_argument_with_spaces_is_one_path_and_backslashes_are_folders():
    windows = call_touches("edit_file", {"target_file": r"C:\Users\Ana\My Projects\invoice tool\src\totals.py"})
    assert [(t.path, t.kind) for t in windows] == [("C:/Users/Ana/My Projects/invoice tool/src/totals.py", "edited")]
    assert [t.path for t in call_touches("Read", {"file_path": "/home/ana/My Files/notes.md"})] == [
        "/home/ana/My Files/notes.md"]
    assert [t.path for t in call_touches("read_file", {"path": r"tests\test_totals.py"})] == ["tests/test_totals.py"]
    assert [t.path for t in call_touches("run_tests", {"path": "/r/tests/a.py /r/tests/b.py"})] == [
        "/r/tests/a.py", "/r/tests/b.py"]
