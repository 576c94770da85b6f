"""Task & Goals and Open Issues of a coding session (nodes/extractive/agent_goals.py)."""

from __future__ import annotations

from fakes import stored_messages
from test_extract_trail import session

from workmem.nodes.extractive.agent_goals import goals, goals_op, is_agentic, issues
from workmem.nodes.extractive.steps import steps
from workmem.nodes.extractive.tracking import corrections
from workmem.nodes.extractive.transcript import lines_of, parse_transcript
from workmem.nodes.formatting import format_messages
from workmem.state.tokens import count_tokens

REQUEST = ("<pr_description>\nConsider the following PR description:\nLoader drops the last row of a feed\n"
           "The loader must keep every row; see `app.loader.read_rows`.\n</pr_description>")


def read(raw: list[dict], first_seq: int = 1):
    msgs = parse_transcript(format_messages(stored_messages(raw, first_seq=first_seq)))
    lines = lines_of(msgs)
    return msgs, lines, corrections(lines)


def test_a_first_commit_states_the_task_its_names_and_constraints():
    msgs, lines, fixes = read([{"role": "user", "content": REQUEST}, *session(("cat app/loader.py", "x"))[1:]])
    assert is_agentic(msgs)
    assert goals("", msgs, lines, fixes, 1500) == [
        "Task: Loader drops the last row of a feed", "Names in the task: `app.loader.read_rows`",
        "The loader must keep every row; see `app.loader.read_rows`."]


def test_the_task_is_kept_until_the_user_speaks_and_then_their_words_are_added():
    old = "- Task: Loader drops the last row of a feed"
    msgs, lines, fixes = read(session(("cat a.py", "x"))[1:], first_seq=10)
    assert goals_op(old, msgs, lines, fixes, 1500) == {"op": "KEEP"}
    spoke = [{"role": "user", "content": "Thanks. Now can you also add a test for empty feeds?"}]
    msgs, lines, fixes = read(spoke, first_seq=20)
    assert goals_op(old, msgs, lines, fixes, 1500) == {
        "op": "APPEND", "items": ["User: Now can you also add a test for empty feeds?"]}


def test_a_request_reported_done_is_marked_and_one_a_correction_rejects_is_left_out():
    raw = [{"role": "user", "content": "Please switch the parser to tabs."},
           {"role": "user", "content": "No, not tabs - use semicolons."},
           {"role": "user", "content": "Please add a test for the parser."},
           {"role": "assistant", "content": "Added a test for the parser, it passes."}]
    msgs, lines, fixes = read(raw, first_seq=5)
    items = goals("- Task: Fix the parser", msgs, lines, fixes, 1500)
    assert items == ["Task: Fix the parser", "User: No, not tabs - use semicolons.",
                     "User: Please add a test for the parser. (done)"]


def test_a_full_section_keeps_the_task_and_the_newest_words():
    old = "- Task: Fix the parser\n" + "\n".join(f"- User: Please look at module_{i}.py first." for i in range(30))
    msgs, lines, fixes = read([{"role": "user", "content": "Please ship it now."}], first_seq=99)
    items = goals(old, msgs, lines, fixes, 60)
    assert items[0] == "Task: Fix the parser" and items[-1] == "User: Please ship it now."
    assert count_tokens("\n".join(f"- {i}" for i in items)) <= 60


def test_open_issues_are_the_todo_list_and_the_question_the_agent_ended_with():
    todo = {"role": "assistant", "content": "", "tool_calls": [{"id": "t1", "type": "function", "function": {
        "name": "TodoWrite", "arguments": '{"todos": [{"content": "Write the fix", "status": "completed"}, '
                                          '{"content": "Run the tests", "status": "in_progress"}]}'}}]}
    raw = [{"role": "user", "content": "Go."}, todo, {"role": "tool", "tool_call_id": "t1", "content": "ok"},
           {"role": "assistant", "content": "Is the cache in scope? Should I also bump the version?"}]
    msgs, lines, _ = read(raw)
    old = "- To do: Write the fix\n- Check the CI config"
    assert issues(old, msgs, lines, steps(msgs)) == [
        "[resolved] To do: Write the fix", "Check the CI config", "In progress: Run the tests",
        "Agent asked: Is the cache in scope?", "Agent asked: Should I also bump the version?"]


def test_questions_the_agent_asks_itself_while_working_are_no_issue():
    raw = [{"role": "user", "content": "Go."},
           {"role": "assistant", "content": "Why does it fail? Maybe the cache.", "tool_calls": [
               {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
           {"role": "tool", "tool_call_id": "c", "content": "a.py"}]
    msgs, lines, _ = read(raw)
    assert issues("", msgs, lines, steps(msgs)) == []


def test_a_later_correction_takes_the_request_it_rejects_out_of_an_earlier_user_item():
    old = ("- Task: Fix the import\n- User: Please add a test. Also the endpoint should return 422 instead of 500.")
    raw = [{"role": "user", "content": "Actually, return 400, not 422 - the client shows 422 as a form error."}]
    msgs, lines, fixes = read(raw, first_seq=40)
    assert goals(old, msgs, lines, fixes, 1500) == [
        "Task: Fix the import", "User: Please add a test.",
        "User: Actually, return 400, not 422 - the client shows 422 as a form error."]


HARNESS_RULES = "\n".join([
    "", "", "<instructions>", "Step 1: Create the patch file.",
    "Your response MUST include AT LEAST ONE bash tool call.",
    "DO NOT MODIFY: Tests, configuration files (pyproject.toml, setup.cfg, etc.)", "Do NOT commit your changes.",
    "</instructions>"])
FORMAT_ERROR = ("Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\n"
                "If you have completed your assignment, please consult the first message about how to submit it.")


def test_a_harness_format_error_is_no_goal_and_a_task_prompts_rules_are_no_correction():
    raw = [{"role": "user", "content": REQUEST + HARNESS_RULES}, *session(("cat app/loader.py", "x"))[1:],
           {"role": "user", "content": FORMAT_ERROR}]
    msgs, lines, fixes = read(raw)
    assert fixes == []
    items = goals("", msgs, lines, fixes, 1500)
    assert items[0] == "Task: Loader drops the last row of a feed"
    assert items[-2:] == ["DO NOT MODIFY: Tests, configuration files (pyproject.toml, setup.cfg, etc.)",
                          "Do NOT commit your changes."]
    assert not [i for i in items if "EXACTLY ONE" in i or "MUST include" in i or "Step 1" in i]
    # a correction the user writes later is still one
    msgs, lines, fixes = read([*raw, {"role": "user", "content": "Don't touch app/feeds.py, it is generated."}])
    assert [text for _, text in fixes] == ["User correction: Don't touch app/feeds.py, it is generated."]


def test_a_chat_message_opening_with_a_lead_in_still_corrects():
    msgs, lines, fixes = read([{"role": "user", "content": "Fix the loader."},
                               {"role": "assistant", "content": "I will use pandas."},
                               {"role": "user", "content": "One more thing:\nDon't use pandas for this, use polars."}])
    assert [text for _, text in fixes] == ["User correction: Don't use pandas for this, use polars."]


def test_a_newer_request_too_long_for_the_room_is_cut_and_no_older_one_stands_in():
    """Change of plans in a full section: the newest request is kept cut to the room (not skipped for an older,
    shorter one that would read as the current goal)."""
    old = "- Task: Rank the acquisition channels by revenue\n- User: Please redo it that way."
    plans = ("OK, change of plans: leadership now cares more about churn than revenue, so I want monthly churn "
             "by signup cohort for 2023 as a cohort table, fiscal quarters, enterprise plans left out.")
    msgs, lines, fixes = read([{"role": "user", "content": plans}], first_seq=30)
    items = goals(old, msgs, lines, fixes, 45)
    assert items[0] == "Task: Rank the acquisition channels by revenue"
    assert items[1].startswith("User: OK, change of plans: leadership now cares more about churn")
    assert items[1].endswith("…") and len(items) == 2
    assert count_tokens("\n".join(f"- {i}" for i in items)) <= 45


def test_a_section_a_spill_emptied_does_not_make_a_later_request_the_task():
    """Only the pointer is left of Task & Goals: the session's task is in the archive, so these messages' request
    is a user's item, not a new `Task:`."""
    old = "- [archived] 2 older items — archive_search finds them"
    msgs, lines, fixes = read([{"role": "user", "content": "Please also export the table as CSV."}], first_seq=40)
    items = goals(old, msgs, lines, fixes, 200)
    assert not any(i.startswith("Task:") for i in items)
    assert "User: Please also export the table as CSV." in items
