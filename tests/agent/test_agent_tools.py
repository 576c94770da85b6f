"""The archive tools' hand-written schemas: what every agent call pays for them, and bad arguments come back
to the model as the tool's error text (the engine checks values; the schema does not)."""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool

from workmem.graphs.agent.tools import EXPAND_ARGS, SEARCH_ARGS, make_archive_tools
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.tokens import count_tokens

SCHEMA_BUDGET = 200  # both tools as the provider receives them; the pydantic form cost 308


@pytest.fixture
def tools(tmp_path):
    engine = WorkingMemoryEngine(root=str(tmp_path), durable=False)
    engine.add_messages("t", [{"role": "user", "content": "The access code is 4471."},
                              {"role": "assistant", "content": "Noted."}])
    engine.commit("t")
    yield make_archive_tools(engine, "t")
    engine.close()


def _call(tool, args):
    return tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})


def test_both_schemas_cost_at_most_the_budget():
    sent = [convert_to_openai_tool(t) for t in make_archive_tools(lambda: None, "t")]
    assert sum(count_tokens(json.dumps(tool)) for tool in sent) <= SCHEMA_BUDGET
    assert [tool["function"]["parameters"] for tool in sent] == [SEARCH_ARGS, EXPAND_ARGS]
    assert "anyOf" not in json.dumps(sent) and "default" not in json.dumps(sent)


def test_valid_calls_answer(tools):
    search, expand = tools
    assert "4471" in _call(search, {"query": "access code", "context": 1}).content
    assert "4471" in _call(search, {"query": "access code", "archive_id": None}).content
    assert "4471" in _call(expand, {"start_seq": 1, "end_seq": 2}).content
    assert "4471" in asyncio.run(search.ainvoke({"query": "access code"}))
    assert "4471" in asyncio.run(expand.ainvoke({"archive_id": "archive_001"}))


@pytest.mark.parametrize(("which", "args", "says"), [
    (0, {"query": "code", "context": "x"}, "context"),
    (0, {"query": "code", "context": 9}, "context"),
    (0, {}, "query"),
    (0, {"query": "code", "limit": 3}, "limit"),
    (1, {"start_seq": "a"}, "start_seq"),
    (1, {"archive_id": "archive_404"}, "archive_404"),
    (1, {"path": "x"}, "path"),
], ids=["context-not-int", "context-out-of-range", "no-query", "unknown-search-arg", "seq-not-int",
        "unknown-archive", "unknown-expand-arg"])
def test_bad_arguments_come_back_as_error_text(tools, which, args, says):
    answer = _call(tools[which], args)
    assert answer.status == "error"
    assert says in answer.content


def test_a_search_index_damaged_under_a_running_agent_comes_back_as_error_text(tmp_path, monkeypatch):
    """SQLite's own errors (here one no check names) never fail the agent's run: the tool answers with text."""
    import sqlite3

    def fails(*_args, **_kwargs):
        raise sqlite3.OperationalError("database disk image is malformed in an unusual way")

    with WorkingMemoryEngine(root=str(tmp_path), durable=False) as engine:
        engine.add_messages("t", [{"role": "user", "content": "The access code is 4471."}])
        monkeypatch.setattr(engine, "archive_search", fails)
        answer = _call(make_archive_tools(engine, "t")[0], {"query": "access code"})
    assert answer.status == "error" and "storage error" in answer.content and "malformed" in answer.content
