"""No tool output crashes the agent run: content nested past the limit and a lone surrogate (a file name read with
`surrogateescape`) are stored in a safe form with a note, one WARNING each, and later runs on the thread work; the
engine's own entries still refuse such input with `InvalidInput`."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.safe_form import SAFE_FORM_META

DEPTH = 80


def nested(depth: int) -> Any:
    value: Any = {"leaf": "bottom"}
    for _ in range(depth):
        value = {"child": value}
    return value


@tool(response_format="content_and_artifact")
def inspect_tree(path: str) -> tuple[list[dict[str, Any]], None]:
    """Inspect a tree."""
    return [{"type": "text", "text": f"tree of {path}", "tree": nested(DEPTH)}], None


@tool
def list_dir(path: str) -> str:
    """List a directory."""
    return "report_\udcff.csv\nnotes.txt"  # a name read with surrogateescape: a lone surrogate


def steps(run: int) -> list[AIMessage]:
    return [AIMessage(content="", tool_calls=[{"name": "inspect_tree", "args": {"path": f"src{run}"},
                                               "id": f"t{run}", "type": "tool_call"}]),
            AIMessage(content="", tool_calls=[{"name": "list_dir", "args": {"path": f"out{run}"},
                                               "id": f"l{run}", "type": "tool_call"}]),
            AIMessage(content=f"Run {run} done.")]


def test_deep_blocks_and_a_surrogate_file_name_never_stop_three_runs(root, caplog):
    model = scripted(*steps(0), *steps(1), *steps(2))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[inspect_tree, list_dir], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync")])
        with caplog.at_level(logging.WARNING, logger="workmem.agent"):
            for run in range(3):
                state = agent.invoke({"messages": [HumanMessage(f"Look around, part {run}.", id=f"h{run}")]},
                                     {"configurable": {"thread_id": "t"}})
                assert state["messages"][-1].content == f"Run {run} done."
        live = engine.live_messages("t")
        # The agent's checkpointer itself rewrites a lone surrogate as "?" when it saves the state: the next run's
        # copy of a listing is still the stored message (not an edit stored again, the first copy hidden).
        assert not [m for m in live if "report_?.csv" in str(m["parts"][0].get("content"))]
        assert len(live) == 3 * 6 and not engine.hidden("t"), "every message stored once"
        checkpointed = agent.get_state({"configurable": {"thread_id": "t"}}).values["messages"]
        assert sum("report_?.csv" in str(m.content) for m in checkpointed) == 3, "the state's copies were rewritten"
        repaired = [m for m in live if SAFE_FORM_META in (m["meta"].get("additional_kwargs") or {})]
        assert len(repaired) == 6, "each deep result and each surrogate name, in its safe form"
        assert all(m["role"] == "tool" for m in repaired)
        warnings = [r for r in caplog.records if "cannot be stored as it is" in r.getMessage()]
        assert len(warnings) == 6, "one WARNING each"
        names = [m for m in repaired if m["parts"][0]["tool_call_id"].startswith("l")]
        assert len(names) == 3 and all("report_\\udcff.csv" in m["parts"][0]["content"] for m in names)


def test_the_engine_still_refuses_such_input(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        with pytest.raises(InvalidInput):
            engine.add_messages("s", [ToolMessage(content="x_\udcff", tool_call_id="c1", name="list_dir")])
        assert not engine.session_exists("s")


LISTINGS = {
    # JSON dumped with ensure_ascii writes an emoji as `\ud83d\ude00` text, beside a real lone surrogate
    "escapes as text and a surrogate": '{"name": "\\ud83d\\ude00 report"}\nreport_\udcff.csv',
    "a surrogate in a result over max_message_bytes": "report_\udcff.csv\n" + "row,1,2,3\n" * 2_000,
}


@pytest.mark.parametrize("listing", list(LISTINGS.values()), ids=list(LISTINGS))
@pytest.mark.parametrize("mode", ["sync", "background"])
def test_a_surrogate_result_is_stored_once_whatever_else_it_holds(root, listing, mode):
    """The checkpointer turns each lone surrogate of the state's copy into "?": that copy must still be the stored
    message (its fingerprint is recorded with the stored form), however the stored form was escaped or clipped."""

    @tool
    def list_out(path: str) -> str:
        """List a directory."""
        return listing

    def steps(run: int) -> list[AIMessage]:
        return [AIMessage(content="", tool_calls=[{"name": "list_out", "args": {"path": f"out{run}"},
                                                   "id": f"l{run}", "type": "tool_call"}]),
                AIMessage(content=f"Run {run} done.")]

    model = scripted(*steps(0), *steps(1), *steps(2))
    with WorkingMemoryEngine(root, durable=False, max_message_bytes=8_000) as engine:
        agent = create_agent(model, tools=[list_out], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode=mode)])
        for run in range(3):
            agent.invoke({"messages": [HumanMessage(f"List part {run}.", id=f"h{run}")]},
                         {"configurable": {"thread_id": "t"}})
        engine.join_commits()
        assert len(engine.live_messages("t")) == 3 * 4 and not engine.hidden("t"), "every message stored once"


@pytest.mark.parametrize("mode", ["sync", "background"])
def test_a_reply_with_a_surrogate_in_its_id_and_text_is_stored_once(root, mode, caplog):
    """The checkpointer rewrites the id too (`run-?0`): the state's copy no longer matches by id, and must still be
    the stored reply by its fingerprint. The warning that names the id can be written to a UTF-8 log file."""
    replies = [AIMessage(content=f"Saw f_\udcfe{run}.", id=f"run-\udcff{run}") for run in range(3)]
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(scripted(*replies), tools=[], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode=mode)])
        for run in range(3):
            agent.invoke({"messages": [HumanMessage(f"Look, part {run}.", id=f"h{run}")]},
                         {"configurable": {"thread_id": "t"}})
        engine.join_commits()
        assert len(engine.live_messages("t")) == 6 and not engine.hidden("t"), "every message stored once"
    warnings = [r.getMessage() for r in caplog.records if "storable form" in r.getMessage()]
    assert warnings and all(w.encode("utf-8") for w in warnings), "the id is logged escaped, not as a lone surrogate"


@pytest.mark.parametrize("budget", [None, 16_000], ids=["whole", "as-its-synopsis"])
def test_a_screenshot_over_max_message_bytes_reaches_the_model_the_store_keeps_it_clipped(root, budget):
    """The store keeps a copy without the image (a note says so); the next call sent that copy, so the model never
    saw the screenshot it had just taken, though the agent's state held it."""
    shot = {"type": "image", "base64": "iVBORw0KGgo" * 4_000, "mime_type": "image/png"}

    @tool
    def screenshot() -> list:
        """Take a screenshot."""
        return [{"type": "text", "text": "screen 1920x1080"}, shot]

    model = scripted(AIMessage(content="", tool_calls=[{"name": "screenshot", "args": {}, "id": "s1",
                                                        "type": "tool_call"}]), "I see the desktop.")
    with WorkingMemoryEngine(root, durable=False, max_message_bytes=20_000) as engine:
        agent = create_agent(model, tools=[screenshot], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, token_budget=budget)])
        agent.invoke({"messages": [HumanMessage("What is on my screen?", id="h0")]},
                     {"configurable": {"thread_id": "t"}})
        result = next(m for m in model.prompts[1] if isinstance(m, ToolMessage))
        assert isinstance(result.content, list) and shot in result.content
        stored = next(m for m in engine.live_messages("t") if m["role"] == "tool")
        assert "workmem_dropped_blocks" in stored["meta"], "the store still keeps the clipped copy"
