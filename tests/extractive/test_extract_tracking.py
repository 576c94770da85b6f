"""Task & Goals and Open Issues: goals close when done or corrected, questions resolve on a reply, bounds hold."""

from __future__ import annotations

from fakes import stored_messages

from workmem.nodes.extractive.tracking import (
    GOAL_TOKENS,
    MAX_GOALS,
    corrections,
    goal_lines,
    goals_op,
    issue_lines,
    issues_op,
)
from workmem.nodes.extractive.transcript import lines_of, parse_transcript
from workmem.nodes.formatting import format_messages
from workmem.state.memory import bullet_items
from workmem.state.tokens import count_tokens


def lines(*raw: tuple[str, str]):
    return lines_of(parse_transcript(format_messages(stored_messages([{"role": r, "content": c} for r, c in raw]))))


def test_requests_become_goals_and_a_done_report_closes_them():
    said = lines(("user", "Please add a test for BOM headers. Also rename the loader module."),
                 ("assistant", "Added a test for BOM headers in tests/test_bom.py."))
    assert [g for _, g in goal_lines(said)] == ["Add a test for BOM headers.", "Rename the loader module."]
    assert goals_op("", said, corrections(said)) == {"op": "APPEND", "items": ["Rename the loader module."]}


def test_old_goals_are_rewritten_to_the_open_ones():
    old = "- Add a test for BOM headers.\n- Rename the loader module."
    said = lines(("assistant", "Renamed the loader module to feeds.py."))
    assert goals_op(old, said, []) == {"op": "UPDATE", "content": "- Add a test for BOM headers."}
    assert goals_op(old, lines(("assistant", "Looking at the tests.")), []) == {"op": "KEEP"}


def test_a_correction_supersedes_the_goal_naming_what_it_rejects():
    old = "- The endpoint should return 422 for malformed rows."
    said = lines(("user", "Actually, return 400, not 422."))
    fixes = corrections(said)
    assert [w for _, w in fixes] == ["User correction: Actually, return 400, not 422."]
    assert goals_op(old, said, fixes) == {"op": "UPDATE", "content": "- Return 400, not 422."}


def test_dialogue_plans_are_goals_and_only_the_newest_stay():
    chat = [("user", "[session 1 — 3 March, 2031]")]
    chat += [("user", f"Ada: I'm planning to visit lighthouse number {i} with my cousin Oskar.") for i in range(25)]
    chat += [("user", "Bram: Sounds fun."), ("user", "Bram: Let me know.")]
    said = lines(*chat)
    items = goals_op("", said, [])["items"]
    assert len(items) <= MAX_GOALS and count_tokens("\n".join(items)) <= GOAL_TOKENS
    assert items[-1] == "3 March, 2031 — Ada: I'm planning to visit lighthouse number 24 with my cousin Oskar."
    assert not any("number 0 " in i for i in items)


def test_unanswered_questions_and_todos_are_issues():
    said = lines(("user", "What is the maximum upload size? TODO: check the staging logs tomorrow."),
                 ("assistant", "Let me look."))
    assert [i for _, i in issue_lines(said)] == ["TODO: check the staging logs tomorrow."]  # a reply answers
    quiet = lines(("user", "What is the maximum upload size? TODO: check the staging logs tomorrow."))
    assert [i for _, i in issue_lines(quiet)] == [
        "User asked: What is the maximum upload size?", "TODO: check the staging logs tomorrow."
    ]


def test_issues_resolve_then_drop():
    old = "- User asked: What is the maximum upload size?\n- TODO: check the staging logs for duplicate warnings."
    said = lines(("assistant", "The limit is 5 MB."), ("assistant", "Checked the staging logs: no duplicate warnings."))
    op = issues_op(old, said)
    assert op == {"op": "UPDATE", "content": "- [resolved] User asked: What is the maximum upload size?\n"
                                             "- [resolved] TODO: check the staging logs for duplicate warnings."}
    assert issues_op(op["content"], lines(("user", "Thanks."))) == {"op": "UPDATE", "content": ""}


def test_an_open_issue_stays_until_something_answers_it():
    old = "- TODO: confirm with Priya whether reports count skipped rows."
    assert issues_op(old, lines(("assistant", "Updated docs/importing.md."))) == {"op": "KEEP"}
    restored = "- [silently dropped, restored] User asked: Which encoding does Oakes use?"
    assert bullet_items(issues_op(restored, lines(("assistant", "Oakes sends UTF-8.")))["content"]) == [
        "[resolved] [silently dropped, restored] User asked: Which encoding does Oakes use?"
    ]
