"""Retention in the user's unit and the commit trigger."""

from __future__ import annotations

import itertools
import logging

import pytest
from fakes import ScriptedToolModel, create_call, scripted, valid_update_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.retention import keep_value, resolve_keep, trigger_messages, trigger_tokens, trigger_value
from workmem.state.turns import choose_covered_range


def msg(seq: int, role: str, tokens: int, *, calls: tuple[str, ...] = (), answers: str | None = None) -> dict:
    if role == "tool":
        parts = [{"type": "tool_result", "tool_call_id": answers, "name": "f", "content": "r", "is_error": False}]
    elif calls:
        parts = [{"type": "tool_call", "id": c, "name": "f", "arguments": {}} for c in calls]
    else:
        parts = [{"type": "text", "text": "x"}]
    return {"seq": seq, "turn_id": "t1", "role": role, "parts": parts, "tokens": tokens}


# Three turns: t1 = 1-2 (30 tokens), t2 = 3-6 with a tool group 4-5 (10+40+40+10), t3 = 7-8 (20).
CONVERSATION = [
    msg(1, "user", 10), msg(2, "assistant", 20),
    msg(3, "user", 10), msg(4, "assistant", 40, calls=("call_0",)), msg(5, "tool", 40, answers="call_0"),
    msg(6, "assistant", 10),
    msg(7, "user", 10), msg(8, "assistant", 10),
]


@pytest.mark.parametrize(("keep", "covered"), [
    (("messages", 0), (1, 8)),
    (("messages", 2), (1, 6)),
    (("messages", 3), (1, 5)),
    (("messages", 4), (1, 3)),  # the cut would split 4|5: it moves before the call
    (("messages", 8), None),
    (("turns", 0), (1, 8)),
    (("turns", 1), (1, 6)),
    (("turns", 2), (1, 2)),
    (("turns", 3), None),
    (("turns", 9), None),
    (("tokens", 0), (1, 8)),
    (("tokens", 19), (1, 7)),  # the newest turn (20) does not fit: cut inside it, before its last message
    (("tokens", 20), (1, 6)),  # exactly the newest turn
    (("tokens", 119), (1, 6)),  # t2 + t3 = 120 does not fit: turns are never split
    (("tokens", 120), (1, 2)),
    (("tokens", 149), (1, 2)),
    (("tokens", 150), None),
], ids=lambda v: ":".join(map(str, v)) if isinstance(v, tuple) and isinstance(v[0], str) else str(v))
def test_each_keep_unit_at_its_boundary(keep, covered):
    assert choose_covered_range(CONVERSATION, keep) == covered


@pytest.mark.parametrize(("keep", "covered"), [
    (("tokens", 60), (1, 4)),  # 5-8 hold 60: the cut lands after the tool group 5-7
    (("tokens", 59), (1, 7)),  # 8-9 = 20 fit, 5-9 = 80 do not: the newest tool-group boundary that fits
    (("tokens", 9), (1, 9)),  # not even the last message fits: the whole turn is covered
])
def test_a_turn_larger_than_the_token_keep_is_cut_at_its_newest_tool_group_boundary_that_fits(keep, covered):
    # one long turn: user 4 (10), call 5 (20) + result 6 (20) + result 7 (0)… as a two-call group, then 8, 9
    turn = [msg(1, "user", 5), msg(2, "assistant", 5), msg(3, "user", 5), msg(4, "assistant", 10),
            msg(5, "assistant", 20, calls=("a", "b")), msg(6, "tool", 20, answers="a"), msg(7, "tool", 0, answers="b"),
            msg(8, "assistant", 10), msg(9, "user", 10)]
    turn[8]["role"] = "assistant"  # 9 is an assistant message of the same turn
    assert choose_covered_range(turn, keep) == covered


def test_keep_and_trigger_forms():
    assert keep_value("turns:3") == ("turns", 3) and keep_value(["tokens", 4000]) == ("tokens", 4000)
    assert keep_value(("messages", 99_999)) == ("messages", 10_000)
    assert keep_value(("tokens", 99_999_999)) == ("tokens", 10_000_000)
    assert trigger_value(("fraction", 0.8)) == ("fraction", 0.8) and trigger_value(5000) == ("tokens", 5000)
    for bad in (10, "10", ("hours", 1), ("turns", -1), ("turns", 2.5), ("messages",), None):
        with pytest.raises(InvalidInput, match="keep"):
            keep_value(bad)
    for bad in (("fraction", 0), ("fraction", 1.5), ("tokens", 0), ("messages", 0), ("hours", 1), "soon", True,
                [], [("tokens", 10), ("messages", 2.5)], [[("tokens", 10)]]):
        with pytest.raises(InvalidInput, match="trigger"):
            trigger_value(bad)


def test_the_langchain_forms_of_trigger_and_keep():
    assert trigger_value(("messages", 50)) == ("messages", 50) and trigger_value("messages:50") == ("messages", 50)
    both = trigger_value([("tokens", 3000), ("messages", 6)])
    assert both == (("tokens", 3000), ("messages", 6))
    assert trigger_tokens(both, 100_000) == 3000 and trigger_messages(both) == 6
    assert trigger_tokens([("fraction", 0.5), ("tokens", 90_000)], 100_000) == 50_000, "the lowest of a list"
    assert trigger_tokens(("messages", 6), 8000) == 8000, "a messages-only trigger still commits before an overflow"
    assert trigger_messages(("tokens", 10)) is None
    assert keep_value(("fraction", 0.1)) == ("fraction", 0.1)
    assert resolve_keep(("fraction", 0.1), 128_000) == ("tokens", 12_800)
    assert resolve_keep(("turns", 3), 128_000) == ("turns", 3)
    for bad in (("fraction", 0), ("fraction", 1), ("fraction", "half")):
        with pytest.raises(InvalidInput, match="keep"):
            keep_value(bad)


def test_errors_speak_the_syntax_the_caller_used():
    with pytest.raises(InvalidInput) as as_text:
        keep_value("messages:abc", "--keep")
    assert "messages:10" in str(as_text.value) and "('messages'" not in str(as_text.value)
    with pytest.raises(InvalidInput) as as_pair:
        keep_value(("messages",))
    assert "('messages', 10)" in str(as_pair.value)
    with pytest.raises(InvalidInput) as as_text:
        trigger_value("soon")
    assert "tokens:60000" in str(as_text.value)


def test_a_fraction_keep_is_taken_of_the_context_window(backend):
    with backend.engine(durable=False, keep=("fraction", 0.25), context_window=8000) as engine:
        assert engine.keep == ("tokens", 2000)


def test_a_messages_trigger_or_a_list_of_triggers_starts_a_commit(backend):
    turns = [{"role": r, "content": f"step {i}: edit src/mod_{i}.py"} for i in range(4) for r in ("user", "assistant")]
    with backend.engine(durable=False, keep=("messages", 2), trigger=("messages", 6)) as engine:
        first = engine.after_turn("m", turns[:4], wait=True)
        assert first["commit"] is None, "4 messages: under the trigger"
        second = engine.after_turn("m", turns[4:], wait=True)
        assert second["commit"]["status"] == "completed", "8 messages reach ('messages', 6)"
        assert engine.session_info("m")["message_count"] == 2
    with backend.engine(durable=False, keep=("messages", 2),
                        trigger=[("tokens", 1_000_000), ("messages", 6)]) as engine:
        assert engine.after_turn("l", turns, wait=True)["commit"]["status"] == "completed", "any of the list"
    with backend.engine(durable=False, keep=("messages", 2), trigger=("tokens", 1_000_000)) as engine:
        assert engine.after_turn("n", turns, wait=True)["commit"] is None, "the control: tokens alone stay under"


def test_engine_keep_arguments(backend):
    with pytest.raises(InvalidInput, match="not both"):
        backend.engine(keep=("turns", 2), keep_recent_count=3)
    with pytest.raises(InvalidInput, match="not both"):
        backend.engine(trigger=("tokens", 100), commit_token_threshold=100)
    with backend.engine(durable=False, keep=("turns", 2)) as engine:
        engine.add_messages("k", [{"role": r, "content": f"m{i}"} for i in range(8) for r in ("user", "assistant")])
        assert engine.session_info("k")["keep"] == ["turns", 2]
        with pytest.raises(InvalidInput, match="not both"):
            engine.commit("k", keep_recent_count=2, keep=("turns", 1))
        result = engine.commit("k", keep=("turns", 3))
        assert result["status"] == "completed"
        assert [m["seq"] for m in engine.storage.sessions.live_messages("k")] == list(range(11, 17))
        archive = engine.working_memory("k")
        assert archive["preserved_tail"]["keep"] == ["turns", 3] and archive["preserved_tail"]["message_count"] == 6


def test_cli_keep_units(root, tmp_path, capsys):
    import json

    from workmem.graphs.cli import main

    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": r, "content": f"m{i}"} for i in range(6) for r in ("user", "assistant")]))
    assert main(["--root", str(root), "add", "c", str(path)]) == 0
    assert main(["--root", str(root), "commit", "c", "--keep", "turns:2", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["covered"] == {"start_seq": 1, "end_seq": 8, "messages": 8}
    with pytest.raises(SystemExit) as exit_info:
        main(["--root", str(root), "commit", "c", "--keep", "weeks:2"])
    assert exit_info.value.code == 2 and "unit must be one of" in capsys.readouterr().err


# -- the trigger ---------------------------------------------------------------------------------------------


def chat_turns(n: int, words: int = 3) -> list[tuple[str, str]]:
    return [(" ".join(f"q{i}w{j}" for j in range(words)), f"ok {i}") for i in range(n)]


def test_with_a_working_memory_larger_than_the_trigger_commits_wait_for_the_pending_floor(backend, caplog):
    """The first build compared pending tokens alone: once the WM outgrew the trigger, every turn committed."""
    facts = "\n".join(f"- Decision {i}: the service number {i} listens on port {8000 + i}." for i in range(40))
    committer = ScriptedToolModel(messages=itertools.chain([create_call({"Key Facts & Decisions": facts})],
                                                           itertools.repeat(valid_update_call({}))))
    with backend.engine(model=committer, durable=False, keep=("messages", 4), memory_budget=2_000,
                        trigger=("tokens", 200)) as engine:  # a memory budget the 40 facts fit, over the trigger
        engine.add_messages("big", [{"role": "user", "content": "Here are the decisions."}] * 40)
        engine.commit("big")
        wm_tokens = engine.memory_of("big").tokens
        assert wm_tokens > 200, "the premise: the WM alone exceeds the trigger"
        started, left_window = 0, 0
        with caplog.at_level(logging.WARNING, logger="workmem.engine"):
            for question, answer in chat_turns(50):
                before = engine.session_info("big")["pending_tokens"]
                result = engine.after_turn("big", [{"role": "user", "content": question},
                                                   {"role": "assistant", "content": answer}], wait=True)
                left_window += result["pending_tokens"] - before if not result["commit"] else 0
                started += result["commit"] is not None
        floor = 200 // 4
        total_tokens = sum(m["tokens"] for m in engine.storage.sessions.messages_in_range("big", 41, 140))
        assert 1 <= started <= total_tokens // floor + 1, (started, total_tokens)
        assert started < 25, "never a commit on every turn"
        warnings = [r for r in caplog.records if "keep window" in r.getMessage()]
        assert len(warnings) == 1 and "'big'" in warnings[0].getMessage()


@pytest.mark.parametrize(("profile", "threshold"), [(None, 1_000), ({"max_input_tokens": 1_200}, 600)],
                         ids=["context-window", "model-profile"])
def test_a_fraction_trigger_uses_the_model_profile_else_the_context_window(root, profile, threshold):
    model = scripted(*(f"Answer number {i} with a few words." for i in range(12)))
    model.profile = profile
    with WorkingMemoryEngine(root, durable=False, context_window=2_000, keep=("messages", 2)) as engine:
        middleware = WorkingMemoryMiddleware(engine, trigger=("fraction", 0.5), commit_mode="sync")
        agent = create_agent(model, middleware=[middleware], checkpointer=InMemorySaver())
        calls = []  # (trigger, tokens of the call sent, commits so far) per run (one model call each)
        for i in range(12):
            question = f"Question {i}: " + " ".join(f"word{i}x{j}" for j in range(20))
            agent.invoke({"messages": [HumanMessage(content=question)]}, {"configurable": {"thread_id": "frac"}})
            last = agent.get_state({"configurable": {"thread_id": "frac"}}).values["workmem_last_call"]
            calls.append((last["trigger"], last["call_tokens"], engine.session_info("frac")["commit_count"]))
        assert {trigger for trigger, _, _ in calls} == {threshold}
        first = next(i for i, (_, _, commits) in enumerate(calls) if commits)
        assert all(sent < threshold for _, sent, _ in calls[:first]), "no commit while the calls stay under it"
        assert engine.session_info("frac")["commit_count"] >= 1


def test_a_json_pair_is_one_trigger_and_storage_refuses_an_unresolved_fraction(backend):
    from workmem.state.retention import as_keep

    assert trigger_value(["messages", 5]) == ("messages", 5), "the form a JSON or YAML config gives"
    assert trigger_value(["tokens:100", "messages:5"]) == (("tokens", 100), ("messages", 5))
    with pytest.raises(InvalidInput, match="item 1"):
        trigger_value([("tokens", 1), ("hours", 2)])
    with pytest.raises(InvalidInput, match="resolve"):
        as_keep(("fraction", 0.5))
    with backend.engine(durable=False) as engine:
        engine.add_messages("f", [{"role": "user", "content": "one"}])
        with pytest.raises(InvalidInput, match="resolve"):
            engine.storage.sessions.set_keep("f", ("fraction", 0.5))
        assert engine.session_info("f")["keep"] == ["messages", 10], "stored data intact"
