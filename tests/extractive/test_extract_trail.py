"""The artifact trail (nodes/extractive/trail.py): touched files, their line ranges and definitions, ranked."""

from __future__ import annotations

import json

from fakes import stored_messages

from workmem.nodes.extractive.steps import steps
from workmem.nodes.extractive.trail import Trail, entry
from workmem.nodes.extractive.transcript import parse_transcript
from workmem.nodes.formatting import format_messages


def session(*commands: tuple[str, str]) -> list[dict]:
    """A coding session: each (command, output) is one bash call and its result."""
    out: list[dict] = [{"role": "user", "content": "Fix the parser."}]
    for i, (command, output) in enumerate(commands):
        out.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "name": "bash", "content": output})
    return out


def trail_of(raw: list[dict]) -> Trail:
    return Trail(steps(parse_transcript(format_messages(stored_messages(raw)))))


LISTING = "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(
    ["import re", "", "def parse(text):", "    return text.split(',')", "", "def load(path):", "    pass"], 1))


def test_files_are_ranked_edited_first_and_a_listed_path_is_no_entry():
    trail = trail_of(session(("ls", "src/parser.py\nsrc/other.py\nREADME.md"),
                             ("cat src/parser.py", "x"), ("pytest tests/test_parser.py", "1 passed"),
                             ("sed -i 's/,/;/' src/parser.py", ""), ("cat > repro.py <<EOF\nprint(1)\nEOF", "")))
    assert [f.path for f in trail.entries()] == ["src/parser.py", "repro.py", "tests/test_parser.py"]


def test_numbered_lines_name_the_definition_an_edit_or_a_read_sits_in():
    trail = trail_of(session(("nl -ba src/parser.py", LISTING),
                             ("sed -i '4c\\    return re.split(x)' src/parser.py", ""),
                             ("sed -n '6,7p' src/parser.py", "def load(path):\n    pass")))
    assert entry(trail.files["src/parser.py"]) == "src/parser.py — edited L4 in parse; read L6-7 in load"


def test_a_definition_is_named_only_when_every_line_up_to_the_edit_was_shown():
    trail = trail_of(session(("sed -n '1,3p' src/parser.py", "import re\n\ndef parse(text):"),
                             ("sed -i '40c\\    pass' src/parser.py", "")))
    assert entry(trail.files["src/parser.py"]) == "src/parser.py — edited L40; read L1-3 in parse"


def test_paths_under_a_directory_the_agent_changed_into_are_relative_and_twins_are_one_file():
    trail = trail_of(session(("cd /srv/app && cat src/a.py", "x"), ("cat /srv/app/src/a.py", "x")))
    assert list(trail.files) == ["src/a.py"]
    assert trail.relative("/srv/app/src/a.py") == "src/a.py"
    both = trail_of(session(("pytest tests/t.py", "ok"), ("sed -i 's/a/b/' /repo/tests/t.py", "")))
    assert list(both.files) == ["/repo/tests/t.py"]  # the absolute form names the file wherever the agent stands
    home = trail_of(session(("cat ~/.claude/plans/p.md", "x"), ("sed -i 's/a/b/' /home/jim/.claude/plans/p.md", "")))
    assert list(home.files) == ["/home/jim/.claude/plans/p.md"]  # the user's home written out or as `~`: one file


def test_a_git_diff_shows_what_changed_and_writing_over_a_known_file_is_an_edit():
    trail = trail_of(session(("cat a.py", "x"), ("git diff", "diff --git a/b.py b/b.py\n+++ b/b.py\n+x"),
                             ("echo y >> a.py", "")))
    assert entry(trail.files["b.py"]) == "b.py — changed (git diff)"
    assert entry(trail.files["a.py"]) == "a.py — edited; read"


def test_the_short_form_keeps_what_matters():
    trail = trail_of(session(("cat a.py", "x"), ("sed -i 's/a/b/' a.py", ""), ("grep -n x a.py", "1:x")))
    assert entry(trail.files["a.py"], brief=True) == "a.py — edited"
    only_read = trail_of(session(("cat b.py", "x"), ("grep -n x b.py", "1:x")))
    assert entry(only_read.files["b.py"], brief=True) == "b.py — read"


def test_a_dotted_test_name_finds_its_file():
    trail = trail_of(session(("cat tests/test_mod.py", "x"), ("python -m unittest tests.test_mod.TestA -v", "OK")))
    assert entry(trail.files["tests/test_mod.py"]) == (
        "tests/test_mod.py — tested: python -m unittest tests.test_mod.TestA -v; read")
    assert "tests.test_mod.TestA" not in trail.files
