"""A coding session committed by the extractive model reads as a handoff: the task as title and in Task & Goals,
the files it touched (edited first, with lines and definitions), each error once with what fixed it, prose facts,
what is open — within the memory budget, the same bytes for the same session."""

from __future__ import annotations

import json

import pytest

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.state.memory import bullet_items, parse_sections
from workmem.state.tokens import count_tokens

PR = """<pr_description>
Consider the following PR description:
CSV loader drops the last row of a feed
The loader must keep every row of `app.loader.read_rows`, also when the file lacks a final newline.
</pr_description>

<instructions>
Make changes to non-test files only.
Step 1: Create the patch file, then submit it in its own command.
</instructions>"""
FORMAT_ERROR = "Please always provide EXACTLY ONE action in triple backticks, found 2 actions."

NUMBERED = "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(
    ["import csv", "", "def read_rows(path):", "    rows = list(csv.reader(open(path)))", "    return rows[:-1]"], 1))
FAIL = ('Traceback (most recent call last):\n  File "/repo/app/loader.py", line {n}, in read_rows\n'
        "AssertionError: expected 3 rows, got 2")


def bash(i: int, thought: str, command: str, output: str) -> list[dict]:
    """One mini-swe-agent step: the thought with its bash call, and the wrapped output."""
    arguments = json.dumps({"command": command})
    call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    result = f"<returncode>0</returncode>\n<output>\n{output}\n</output>"
    return [{"role": "assistant", "content": f"THOUGHT: {thought}", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": "bash", "content": result}]


def turns() -> list[list[dict]]:
    """A mini-swe-agent-shaped session: one user request, then the agent's bash steps, a turn each."""
    steps = [
        ("I will look at the files.", "ls -F", "app/\nREADME.md\nsetup.cfg\ntests/"),
        ("Let me read the loader with line numbers.", "nl -ba app/loader.py", NUMBERED),
        ("I need a reproduction script.", "cat <<'EOF' > repro.py\nfrom app.loader import read_rows\n"
         "assert len(read_rows('feed.csv')) == 3, 'expected 3 rows'\nEOF\npython repro.py", FAIL.format(n=5)),
        ("The slice drops the last row because it assumes a header at the end.",
         "sed -i '5c\\    return rows[:-1] if rows else rows' app/loader.py && python repro.py", FAIL.format(n=6)),
        ("Echo done && git add -A && git diff --cached.", "grep -n 'return' app/loader.py", "5:    return rows"),
        ("The root cause is the slice in read_rows, so I removed it.",
         "sed -i '5c\\    return rows' app/loader.py && python repro.py", "ok"),
        ("Now run the tests.", "python -m pytest tests/test_loader.py -q", "3 passed"),
    ]
    out = [[{"role": "user", "content": PR}]]
    for i, (thought, command, output) in enumerate(steps):
        out.append(bash(i, thought, command, output))
    out[2].append({"role": "user", "content": FORMAT_ERROR})  # the agent loop's note, not the user's
    return out


def replay(root, budget: int | None) -> str:
    """Commit after the agent's fifth step (keeping the newest message raw) and at the end (all of it)."""
    with WorkingMemoryEngine(root=root, model=ExtractiveChatModel(), memory_budget=budget, durable=False) as engine:
        for i, turn in enumerate(turns()):
            engine.add_messages("s", turn)
            if i == 5:
                engine.commit("s", keep_recent_count=1)
        engine.commit("s", keep_recent_count=0)
        return engine.summary_of("s")[0]


@pytest.mark.parametrize("budget", [400, None])
def test_a_coding_session_reads_as_a_handoff(tmp_path, budget):
    memory = replay(tmp_path / "wm", budget)
    sections = parse_sections(memory)
    assert sections["Session Title"] == (
        "CSV loader drops the last row of a feed" if budget is None else "CSV loader drops last row feed")
    goals = bullet_items(sections["Task & Goals"])
    assert goals[0] == "Task: CSV loader drops the last row of a feed"
    files = bullet_items(sections["Files & Context"])
    assert files[0].startswith("app/loader.py — edited L5 in read_rows")  # edited first, where and in what
    assert not any(f.startswith(("README.md", "setup.cfg", "tests/ ")) for f in files)  # only listed by ls
    errors = bullet_items(sections["Errors & Corrections"])
    assert errors == [  # one item per commit: append-only; the second commit saw the run that no longer fails
        "AssertionError: expected 3 rows, got 2 (at app/loader.py:6) — when running repro.py",
        "AssertionError: expected 3 rows, got 2 (at app/loader.py:6) — fixed: edited app/loader.py"]
    facts = sections["Key Facts & Decisions"]
    assert "&&" not in facts and "THOUGHT" not in facts
    assert "Step 1" not in memory and "EXACTLY ONE" not in memory  # the harness's rules and notes
    if budget is None:
        assert "The root cause is the slice in read_rows, so I removed it." in facts
        assert goals[1] == "Names in the task: `app.loader.read_rows`"
        assert any(f.startswith("repro.py — created; ran: ") for f in files)
        assert "tests/test_loader.py — tested: python -m pytest tests/test_loader.py -q" in files
    else:
        assert count_tokens(memory) <= budget


def test_the_same_session_gives_the_same_bytes(tmp_path):
    assert replay(tmp_path / "a", 400) == replay(tmp_path / "b", 400)
