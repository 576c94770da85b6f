"""assemble(): golden context across commits and a restart, the budget rules, commits in flight."""

from __future__ import annotations

import pytest
from engine_helpers import GatedModel, assistant, pairing_problems, shape, tool, user
from fakes import create_call, scripted, valid_update_call
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.graphs.context.assemble import (
    SUMMARY_PREFIX,
    SYSTEM_ADDITION,
    message_units,
    newest_turn_start,
    reserve_for_reply,
)
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.tokens import count_tokens

SYSTEM = ("system", SYSTEM_ADDITION, "system")

CREATE_SECTIONS = {
    "Session Title": "March invoice export",
    "Current State": "The exporter writes UTF-8 CSV; the delimiter is being changed.",
    "Task & Goals": "- Export the March invoices to CSV",
    "Key Facts & Decisions": "- Encoding is UTF-8",
    "Files & Context": "- src/export.py",
    "Errors & Corrections": "",
    "Open Issues": "- Which delimiter?",
}
WM1 = """# Working Memory

## Session Title
March invoice export

## Current State
The exporter writes UTF-8 CSV; the delimiter is being changed.

## Task & Goals
- Export the March invoices to CSV

## Key Facts & Decisions
- Encoding is UTF-8

## Files & Context
- src/export.py

## Errors & Corrections

## Open Issues
- Which delimiter?
"""
WM2 = WM1.replace("The exporter writes UTF-8 CSV; the delimiter is being changed.",
                  "Delimiter and header row are done.").replace(
    "- Encoding is UTF-8\n", "- Encoding is UTF-8\n- Delimiter is a semicolon\n- The CSV has a header row\n")
WM3 = WM2.replace("- Which delimiter?\n", "- Which delimiter? [resolved]\n- April export\n")


def golden_batch_1() -> list[dict]:
    return [
        user("Export the March invoices to CSV."),                                      # 1  t1
        assistant(calls=[("call_1", "read_file", '{"path": "src/export.py"}')]),        # 2
        tool("call_1", "def export(rows): ...", "read_file"),                           # 3
        assistant("The exporter writes UTF-8 with a comma delimiter."),                 # 4
        user("Use a semicolon as delimiter."),                                          # 5  t2
        assistant(calls=[("call_2", "edit_file", '{"path": "src/export.py"}'),          # 6
                         ("call_3", "run_tests", "{}")]),
        tool("call_2", "ok", "edit_file"),                                              # 7
        tool("call_3", "12 passed", "run_tests"),                                       # 8
        assistant("Done: the delimiter is now ';' and the tests pass."),                # 9
    ]


def golden_batch_2() -> list[dict]:
    return [
        user("Now add a header row."),                                                  # 10 t3
        assistant(calls=[("call_4", "edit_file", '{"path": "src/export.py"}')]),        # 11
        tool("call_4", "ok", "edit_file"),                                              # 12
        assistant("Header row added."),                                                 # 13
        user("Thanks, what is left?"),                                                  # 14 t4
        assistant("Only the April export."),                                            # 15
    ]


def sent_to_model(messages: list) -> list:
    """What a chat model actually receives when called with `messages`."""
    model = scripted("ok")
    model.invoke(messages)
    return model.prompts[0]


def test_golden_context_across_commits_and_restart(root):
    first_model = scripted(
        create_call(CREATE_SECTIONS),
        valid_update_call({
            "Current State": {"op": "UPDATE", "content": "Delimiter and header row are done."},
            "Key Facts & Decisions": {"op": "APPEND", "items": ["Delimiter is a semicolon",
                                                                "The CSV has a header row"]},
        }),
    )
    with WorkingMemoryEngine(root, first_model, durable=False) as engine:
        engine.add_messages("golden", golden_batch_1())
        # keep 3 would cut between the parallel calls (#6) and their results (#7, #8): the cut moves before #6
        assert engine.commit("golden", keep_recent_count=3)["status"] == "completed"
        assert engine.storage.sessions.list_archives("golden")[0]["end_seq"] == 5
        after_first = sent_to_model(engine.assemble("golden")["messages"])
        assert shape(after_first) == [
            SYSTEM,
            ("human", SUMMARY_PREFIX + WM1, "summary"),
            ("ai", "", [("call_2", "edit_file", {"path": "src/export.py"}), ("call_3", "run_tests", {})]),
            ("tool", "ok", "call_2"),
            ("tool", "12 passed", "call_3"),
            ("ai", "Done: the delimiter is now ';' and the tests pass.", []),
        ]

        engine.add_messages("golden", golden_batch_2())
        assert engine.commit("golden", keep_recent_count=2)["archive_id"] == "archive_002"
        after_second = sent_to_model(engine.assemble("golden")["messages"])
        assert shape(after_second) == [
            SYSTEM,
            ("human", SUMMARY_PREFIX + WM2, "summary"),
            ("human", "Thanks, what is left?", None),
            ("ai", "Only the April export.", []),
        ]

    second_model = scripted(valid_update_call({
        "Open Issues": {"op": "UPDATE", "content": "- Which delimiter? [resolved]\n- April export"}}))
    with WorkingMemoryEngine(root, second_model, durable=False) as engine:
        assert shape(engine.assemble("golden")["messages"]) == shape(after_second)  # the restart changes nothing
        result = engine.commit("golden", keep_recent_count=1)
        assert (result["status"], result["archive_id"]) == ("completed", "archive_003")
        assembled = engine.assemble("golden")
        after_third = sent_to_model(assembled["messages"])
        assert shape(after_third) == [SYSTEM, ("human", SUMMARY_PREFIX + WM3, "summary"),
                                      ("ai", "Only the April export.", [])]
        assert assembled["stats"]["archives_total"] == 3
        assert [a["end_seq"] for a in engine.storage.sessions.list_archives("golden")] == [5, 13, 14]
        for prompt in (after_first, after_second, after_third):
            assert pairing_problems(prompt) == []


def test_tool_result_whose_call_is_not_live_is_never_sent(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("orphans", [
            tool("call_gone", "result of an archived call"),
            user("Read the config."),
            assistant(calls=[("call_a", "read_file", '{"path": "app.toml"}')]),
            tool("call_a", "port = 8080"),
            tool("call_unknown", "stray result"),
            assistant("The port is 8080."),
        ])
        messages = engine.assemble("orphans")["messages"]
        assert pairing_problems(messages) == []
        assert [m.content for m in messages if isinstance(m, ToolMessage)] == ["port = 8080"]
        assert engine.assemble("orphans")["stats"]["messages_dropped"] == 2


def test_a_call_waiting_for_its_result_is_left_out_until_the_result_is_stored(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("mid", [user("Read the config."),
                                    assistant("Let me look.", calls=[("call_a", "read_file", '{"path": "app.toml"}')])])
        waiting = engine.assemble("mid")
        assert shape(waiting["messages"]) == [SYSTEM, ("human", "Read the config.", None)]
        assert waiting["stats"]["messages_dropped"] == 1
        engine.add_messages("mid", [tool("call_a", "port = 8080", "read_file")])
        answered = engine.assemble("mid")
        assert shape(answered["messages"]) == [
            SYSTEM, ("human", "Read the config.", None),
            ("ai", "Let me look.", [("call_a", "read_file", {"path": "app.toml"})]),
            ("tool", "port = 8080", "call_a")]
        assert answered["stats"]["messages_dropped"] == 0


@pytest.mark.parametrize("tail", [
    pytest.param([assistant(calls=[("c1", "a", "{}"), ("c2", "b", "{}")]), tool("c1", "first")], id="partly-answered"),
    pytest.param([assistant(calls=[("c1", "a", "{}")]), user("Never mind."), assistant("OK.")], id="abandoned"),
    pytest.param([assistant(calls=[("c1", "a", "{}")]), tool("c1", "done"), assistant(calls=[("c2", "b", "{}")])],
                 id="second-call-waiting"),
])
def test_a_call_without_all_its_results_is_never_sent(root, tail):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("open", [user("Go."), *tail])
        result = engine.assemble("open")
        sent = sent_to_model(result["messages"])
        assert pairing_problems(sent) == []
        unanswered = {"c1", "c2"} - {m.tool_call_id for m in sent if isinstance(m, ToolMessage)}
        assert not any(c["id"] in unanswered for m in sent if isinstance(m, AIMessage) for c in m.tool_calls)
        assert result["stats"]["messages_dropped"] == len(engine.storage.sessions.live_messages("open")) + 1 - len(sent)


def test_a_pending_call_of_the_current_turn_waits_for_its_result_too(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        ask = HumanMessage(content="Read it.", id="h1")
        call = AIMessage(content="", id="a1", tool_calls=[{"id": "call_p", "name": "read_file", "args": {}}])
        waiting = engine.assemble("pending", pending=[ask, call])
        assert shape(waiting["messages"]) == [SYSTEM, ("human", "Read it.", None)]
        assert waiting["stats"]["messages_dropped"] == 1
        answer = ToolMessage(content="text", tool_call_id="call_p", name="read_file", id="t1")
        answered = engine.assemble("pending", pending=[ask, call, answer])["messages"]
        assert answered[1:] == [ask, call, answer] and pairing_problems(answered) == []


# -- budgets ------------------------------------------------------------------------------------------

def words(n: int, tag: str) -> str:
    """Text of n tokens (`tag` must be one token: each word is the tag and a number below 97)."""
    return " ".join(f"{tag}{i % 97}" for i in range(n // 2))


def big_session(engine: WorkingMemoryEngine, session: str, turns: int, wm_tokens: int, turn_tokens: int) -> None:
    """A committed WM of about `wm_tokens` tokens, then `turns` live turns of ~`turn_tokens` with a tool group."""
    sections = {**CREATE_SECTIONS, "Key Facts & Decisions": "- " + words(wm_tokens, "fact")}
    engine.model.get().messages = iter([create_call(sections)])
    engine.add_messages(session, [user("Start."), assistant("Started.")])
    assert engine.commit(session, keep_recent_count=0)["status"] == "completed"
    for t in range(turns):
        engine.add_messages(session, [
            user(f"Turn {t}: " + words(turn_tokens // 12, "ask")),
            assistant(calls=[(f"call_{t}", "read_file", f'{{"path": "f{t}.py"}}')]),
            tool(f"call_{t}", words(turn_tokens * 3 // 4, "out")),
            assistant(words(turn_tokens // 6, "ans")),
        ])


def check_budget(engine: WorkingMemoryEngine, session: str, budget: int) -> dict:
    """Assemble at `budget` and check every budget rule against an independent computation."""
    live = engine.storage.sessions.live_messages(session)
    wm = engine.working_memory(session)["working_summary"]["markdown"]
    result = engine.assemble(session, budget)
    messages, stats = result["messages"], result["stats"]
    reserve = max(-(-budget * 15 // 100), 20_000) if budget >= 40_000 else -(-budget * 15 // 100)
    available = budget - reserve
    assert (stats["reserve"], stats["available"]) == (reserve, available)

    assert isinstance(messages[0], SystemMessage) and messages[0].additional_kwargs == {"workmem": "system"}
    has_summary = isinstance(messages[1], HumanMessage) and messages[1].additional_kwargs.get("workmem") == "summary"
    by_id = {m["id"]: m for m in live}
    kept = [by_id[m.id] for m in messages[1 + has_summary:]]
    kept_seqs = [m["seq"] for m in kept]
    live_seqs = [m["seq"] for m in live]
    assert kept_seqs == live_seqs[len(live_seqs) - len(kept_seqs):], "older messages: a contiguous newest suffix"

    system_tokens = count_tokens(SYSTEM_ADDITION)
    summary_tokens = count_tokens(SUMMARY_PREFIX + wm)
    total = system_tokens + (summary_tokens if has_summary else 0) + sum(m["tokens"] for m in kept)
    assert total == stats["total_tokens"] <= available

    newest_user = max(i for i, m in enumerate(live) if m["role"] == "user")
    newest_turn = live[newest_user:]
    assert kept_seqs[-len(newest_turn):] == [m["seq"] for m in newest_turn], "the newest user turn is whole"
    newest_tokens = sum(m["tokens"] for m in newest_turn)
    assert has_summary == (system_tokens + newest_tokens + summary_tokens <= available), "WM whole or not at all"

    units = message_units(live)
    first_kept_unit = next(i for i, u in enumerate(units) if u[0]["seq"] == kept_seqs[0])
    if first_kept_unit > 0:
        next_older = sum(m["tokens"] for m in units[first_kept_unit - 1])
        assert total + next_older > available, "stopped although the next older group fits"
    assert pairing_problems(messages) == []
    assert stats["messages_dropped"] == len(live) - len(kept)
    return result


@pytest.mark.parametrize(("budget", "turns", "wm_tokens", "turn_tokens"), [
    (2_000, 10, 400, 300),
    (40_000, 20, 2_000, 2_400),
    (128_000, 60, 6_000, 2_400),
])
def test_budget_never_exceeded_and_priority_followed(root, budget, turns, wm_tokens, turn_tokens):
    with WorkingMemoryEngine(root, scripted(), durable=False) as engine:
        big_session(engine, "big", turns, wm_tokens, turn_tokens)
        result = check_budget(engine, "big", budget)
        live_total = sum(m["tokens"] for m in engine.storage.sessions.live_messages("big"))
        assert live_total > budget, "the session must not fit, or the test proves nothing"
        assert result["stats"]["messages_dropped"] > 0
        assert result["stats"]["summary_included"]
        assert result["stats"]["messages_included"] > 4, "older turns fill the rest of the budget"


def test_wm_that_does_not_fit_is_left_out_whole_and_older_messages_still_fill(root):
    with WorkingMemoryEngine(root, scripted(), durable=False) as engine:
        big_session(engine, "wm-too-big", 0, 2_000, 0)
        engine.add_messages("wm-too-big", [user("Small older question?"), assistant("Small older answer."),
                                           user("Newest question?"), assistant("Newest answer.")])
        result = check_budget(engine, "wm-too-big", 2_000)
        assert not result["stats"]["summary_included"]
        assert not any(m.additional_kwargs.get("workmem") == "summary" for m in result["messages"])
        assert [m.content for m in result["messages"][1:]] == [
            "Small older question?", "Small older answer.", "Newest question?", "Newest answer."]


def test_older_messages_stop_at_the_first_group_that_does_not_fit(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("stop", [
            user("An old small question."),
            assistant(calls=[("call_big", "dump", "{}")]),
            tool("call_big", words(1_700, "dump")),
            user("Newest?"),
        ])
        messages = engine.assemble("stop", 2_000)["messages"]
        assert [type(m) for m in messages] == [SystemMessage, HumanMessage]
        assert messages[1].content == "Newest?", "the small older message must not jump over the group"


def test_a_tool_group_is_sent_whole_or_not_at_all(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("group", [
            user("Run both."),
            assistant(calls=[("c1", "a", "{}"), ("c2", "b", "{}")]),
            tool("c1", "short"),
            tool("c2", words(1_000, "long")),
            user("And now?"),
        ])
        small = engine.assemble("group", 1_000)["messages"]  # 850 available: the group (~1 000) does not fit
        assert [m.content for m in small[1:]] == ["And now?"]
        big = engine.assemble("group", 2_000)["messages"]
        assert sum(isinstance(m, ToolMessage) for m in big) == 2 and pairing_problems(big) == []


def test_budget_too_small_for_the_newest_user_turn_clips_it_or_is_a_typed_error(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("tight", [user("Short question?"), assistant(words(900, "reply"))])
        before = engine.storage.sessions.live_messages("tight")
        clipped = engine.assemble("tight", 1_000)  # 850 available: the turn fits only with its reply clipped
        assert clipped["stats"]["messages_included"] == 2 and "clipped" in clipped["messages"][-1].content
        with pytest.raises(InvalidInput) as err:
            engine.assemble("tight", 200)  # not even the clipped reply fits
        assert err.value.field == "token_budget"
        assert engine.storage.sessions.live_messages("tight") == before
        assert engine.assemble("tight", 2_000)["stats"]["messages_included"] == 2


@pytest.mark.parametrize("budget", [0, -5, 10_000_001, True, 2.5, "128000"])
def test_absurd_budgets_are_rejected(root, budget):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("b", [user("hello")])
        with pytest.raises(InvalidInput) as err:
            engine.assemble("b", budget)
        assert err.value.field == "token_budget"


def test_no_budget_means_the_engines_context_window(root):
    with WorkingMemoryEngine(root, durable=False, context_window=30_000) as engine:
        engine.add_messages("b", [user("hello")])
        assert engine.assemble("b")["stats"]["budget"] == 30_000
        assert engine.assemble("b", None)["stats"]["budget"] == 30_000


def test_reserve_rule():
    assert [reserve_for_reply(b) for b in (2_000, 39_999, 40_000, 128_000, 200_000)] == [
        300, 6_000, 20_000, 20_000, 30_000]


def test_newest_turn_of_a_tail_without_its_user_message_is_the_whole_tail():
    def msg(seq: int, role: str) -> dict:
        return {"seq": seq, "role": role, "tokens": 1, "parts": [{"type": "text", "text": "x"}]}

    assert newest_turn_start(message_units([msg(1, "assistant"), msg(2, "assistant")])) == 0
    assert newest_turn_start(message_units([msg(1, "user"), msg(2, "assistant"), msg(3, "user")])) == 2


# -- a commit in flight -------------------------------------------------------------------------------

def test_messages_of_a_running_commit_appear_raw_until_it_is_done(root):
    model = GatedModel()
    with WorkingMemoryEngine(root, model, durable=False) as engine:
        engine.add_messages("busy", golden_batch_1())
        raw_before = shape(engine.assemble("busy")["messages"])
        started = engine.commit("busy", keep_recent_count=3, wait=False)
        assert model.entered.wait(10), "the commit never reached the model"
        during = engine.assemble("busy")
        archive_dir = engine.storage.sessions.session_dir("busy") / "history" / "archive_001"
        assert not (archive_dir / ".done").exists()
        assert shape(during["messages"]) == raw_before
        assert during["stats"]["archives_total"] == 0 and not during["stats"]["summary_included"]
        assert engine.commit("busy", keep_recent_count=3)["status"] == "busy"
        model.gate.set()
        engine.wait()
        assert engine.task(started["task_id"])["status"] == "completed"
        after = engine.assemble("busy")
        assert (archive_dir / ".done").exists()
        assert after["stats"]["summary_included"] and after["stats"]["archives_total"] == 1
        assert [m.content for m in after["messages"] if isinstance(m, AIMessage)][-1] == \
            "Done: the delimiter is now ';' and the tests pass."
        assert "Export the March invoices to CSV." not in [m.content for m in after["messages"]]
        assert not model.timed_out


def test_a_message_between_parallel_results_goes_after_them(root):
    """A tool returning `Command(update={"messages": [ToolMessage(…), HumanMessage(…)]})` in a parallel call leaves the
    state as call, result, note, result: sent so, a provider refuses the call (its results are not contiguous)."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [user("Look at both."), assistant(calls=[("c1", "a", "{}"), ("c2", "b", "{}")]),
                                  tool("c1", "first"), user("A note the tool added."), tool("c2", "second"),
                                  assistant("Both read.")])
        sent = engine.assemble("s", token_budget=40_000)["messages"]
        assert [m.text for m in sent[1:]] == ["Look at both.", "", "first", "second", "A note the tool added.",
                                              "Both read."]
        assert pairing_problems(sent) == []


def test_a_call_a_tool_added_between_parallel_results_goes_after_them_with_its_own_result(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [user("Look at both."), assistant(calls=[("c1", "a", "{}"), ("c2", "b", "{}")]),
                                  tool("c1", "first"), assistant(calls=[("c9", "c", "{}")]), tool("c9", "nested"),
                                  tool("c2", "second"), assistant("Both read.")])
        sent = engine.assemble("s", token_budget=40_000)["messages"]
        assert [m.text for m in sent[1:]] == ["Look at both.", "", "first", "second", "", "nested", "Both read."]
        assert pairing_problems(sent) == []
