"""An agent run whose user and model text look like workmem's memory message: all of it is conversation."""

from __future__ import annotations

from engine_helpers import stored_pairing_problems
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.context.injected import SUMMARY_MARKER
from workmem.graphs.engine import WorkingMemoryEngine


@tool
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    return "42"


def test_a_run_whose_messages_start_with_the_summary_marker_keeps_every_message(root):
    question = f"{SUMMARY_MARKER} my notes: DB is pg15. What is 6*7?"
    model = scripted(
        AIMessage(f"{SUMMARY_MARKER} says pg15.", tool_calls=[{"id": "c1", "name": "calc",
                                                               "args": {"expression": "6*7"}}]),
        AIMessage(f"{SUMMARY_MARKER} 6*7 = 42."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[calc], middleware=[WorkingMemoryMiddleware(engine, session_id="look")])
        agent.invoke({"messages": [HumanMessage(question)]})
        first, second = model.prompts
        assert [m.text for m in first if isinstance(m, HumanMessage)] == [question], "the question reached the model"
        assert [type(m).__name__ for m in second] == ["HumanMessage", "AIMessage", "ToolMessage"], "no WM, no note"
        live = engine.live_messages("look")
        assert [m["role"] for m in live] == ["user", "assistant", "tool", "assistant"]
        assert stored_pairing_problems(live) == []
