"""Only what workmem tagged is its own: text that looks like workmem's is stored with its pairs, on both paths."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.graphs.context.assemble import SUMMARY_PREFIX
from workmem.graphs.context.injected import SUMMARY_MARKER, clean_messages


def marker_turn() -> list:
    return [HumanMessage(f"{SUMMARY_MARKER} my notes: DB is pg15", id="h1"),
            AIMessage(f"{SUMMARY_MARKER} says pg15.", tool_calls=[{"id": "c1", "name": "calc", "args": {}}], id="a1"),
            ToolMessage("42", tool_call_id="c1", name="calc", id="t1")]


def test_messages_starting_with_the_summary_marker_are_stored_with_their_pairs(backend):
    with backend.engine(durable=False) as engine:
        out = engine.after_turn("d1", marker_turn())
        assert out["stored"] == 3
        live = engine.live_messages("d1")
        assert [m["role"] for m in live] == ["user", "assistant", "tool"]
        assert live[0]["parts"][0]["text"] == f"{SUMMARY_MARKER} my notes: DB is pg15"
        assert [p["id"] for p in live[1]["parts"] if p["type"] == "tool_call"] == ["c1"]
        sent = engine.assemble("d1")["messages"]
        assert [type(m).__name__ for m in sent[1:]] == ["HumanMessage", "AIMessage", "ToolMessage"]


def test_a_user_message_pasting_the_summary_text_reaches_storage(backend):
    with backend.engine(durable=False) as engine:
        engine.add_messages("p", [HumanMessage("first", id="u0"), AIMessage("ok", id="a0")])
        engine.commit("p", keep_recent_count=0)
        pasted = engine.assemble("p")["messages"][1].content  # the memory message, as rendered
        assert pasted.startswith(SUMMARY_PREFIX)
        out = engine.after_turn("p", [HumanMessage(pasted, id="u1")])
        assert out["stored"] == 1
        assert engine.live_messages("p")[-1]["parts"][0]["text"] == pasted


def test_the_rule_drops_tagged_messages_and_changes_no_text():
    messages = [SystemMessage("note", additional_kwargs={"workmem": "system"}),
                HumanMessage(SUMMARY_PREFIX + "wm", additional_kwargs={"workmem": "summary"}),
                {"role": "user", "parts": [{"type": "text", "text": "tagged"}], "meta": {"workmem": "x"}},
                HumanMessage("<relevant-memories>a</relevant-memories>"),
                HumanMessage(SUMMARY_PREFIX + "pasted")]
    kept = clean_messages(messages)
    assert [(i, msg["parts"][0]["text"], changed) for i, msg, changed in kept] == [
        (3, "<relevant-memories>a</relevant-memories>", False), (4, SUMMARY_PREFIX + "pasted", False)]
