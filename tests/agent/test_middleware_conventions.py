"""The middleware's LangChain conventions: built from engine settings like `SummarizationMiddleware(model=…)`,
a `session_id` function of the run's `Runtime`, the working memory inside the system message, and its place
among other middleware that edit `request.messages` (`ContextEditingMiddleware`), in a real `create_agent`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from engine_helpers import call, read_file, stored, thread
from fakes import scripted
from langchain.agents import create_agent
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.runtime import Runtime

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.context.assemble import SUMMARY_PREFIX, SYSTEM_ADDITION
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput

AGENT_PROMPT = "You are a careful file assistant."


def spy_close(engine: WorkingMemoryEngine) -> list[int]:
    """Count the engine's `close()` calls (the real close still runs)."""
    calls: list[int] = []
    real = engine.close

    def counted() -> None:
        calls.append(1)
        real()

    engine.close = counted  # type: ignore[method-assign]
    return calls


# -- built from engine settings ----------------------------------------------------------------------------

def test_model_and_root_build_an_engine_the_middleware_owns_and_closes(root):
    with WorkingMemoryMiddleware(model="extractive", root=root, durable=False, context_window=50_000,
                                 keep=("turns", 2), session_id="s") as mw:
        engine = mw.engine
        assert isinstance(engine, WorkingMemoryEngine)
        assert engine.root == root and engine.context_window == 50_000
        assert engine.keep == ("turns", 2) == mw.settings.keep, "keep reaches the built engine and the middleware"
        closes = spy_close(engine)
        agent = create_agent(scripted("hello"), tools=[], middleware=[mw])
        agent.invoke({"messages": [HumanMessage(content="hi", id="u1")]})
        assert [m["meta"]["lc_id"] for m in stored(engine, "s")][0] == "u1"
    assert closes == [1], "leaving the with block closes the engine it built"
    mw.close()
    assert closes == [1], "close() is idempotent"


def test_an_engine_given_to_the_middleware_stays_open(make_engine):
    engine = make_engine(None)
    closes = spy_close(engine)
    for mw in (WorkingMemoryMiddleware(engine), WorkingMemoryMiddleware(lambda: engine)):
        mw.close()
        assert mw.engine is not None
    assert closes == [], "the caller owns an engine it passed (or a factory returned)"


def test_no_engine_and_no_settings_builds_the_default_engine(root):
    with WorkingMemoryMiddleware() as mw:  # WORKMEM_HOME (the fixture's root), WORKMEM_MODEL or offline
        assert mw.engine.root == root


@pytest.mark.parametrize("settings", [
    {"model": "extractive"},
    {"root": "elsewhere"},
    {"database_url": "postgresql://localhost/db"},
    {"context_window": 50_000},
], ids=["model", "root", "database_url", "context_window"])
def test_an_engine_and_engine_settings_together_are_refused(make_engine, settings):
    with pytest.raises(InvalidInput) as err:
        WorkingMemoryMiddleware(make_engine(None), **settings)
    assert err.value.field == "engine" and next(iter(settings)) in str(err.value)


@pytest.mark.parametrize("engine", [5, "notanengine"])
def test_an_engine_that_is_no_engine_is_refused_at_construction(engine):
    with pytest.raises(InvalidInput) as err:
        WorkingMemoryMiddleware(engine)
    assert err.value.field == "engine"


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"memory_message": "user"}, "memory_message"),
    ({"low_water": 2}, "low_water"),
    ({"session_id": 42}, "session_id"),
    ({"context_window": 0}, "context_window"),
    ({"model": 42}, "model"),
    ({"no_such_setting": 1}, "no_such_setting"),
    ({"tools": "no"}, "tools"),
    ({"default_session_id": 5}, "default_session_id"),
    ({"default_session_id": ""}, "default_session_id"),
    ({"database_schema": "Bad Schema!"}, "database_schema"),
    ({"session_id": "x" * 10_000}, "session_id"),
    ({"session_id": "\ud800"}, "session_id"),
], ids=["memory_message", "low_water", "session_id", "engine-setting", "model", "unknown-setting", "tools",
        "default_session_id", "empty-default_session_id", "database_schema", "long-session_id",
        "surrogate-session_id"])
def test_bad_arguments_fail_before_the_built_engine_touches_the_disk(tmp_path, kwargs, field):
    where = tmp_path / "never"
    with pytest.raises(InvalidInput) as err:
        WorkingMemoryMiddleware(root=where, **kwargs)
    assert err.value.field == field
    assert not where.exists(), "nothing is written before every argument is checked"


# -- session_id as a function of the runtime ------------------------------------------------------------------

@dataclass
class UserContext:
    user_id: str


def search_then_answer(query: str) -> list[Any]:
    return [call("archive_search", {"query": query}, "call_search"), AIMessage(content="found it")]


def test_a_session_id_function_names_the_session_from_the_runtime_for_the_middleware_and_its_tools(root):
    model = scripted("noted", "noted too", *search_then_answer("heron"))
    with WorkingMemoryMiddleware(root=root, durable=False,
                                 session_id=lambda runtime: runtime.context.user_id) as mw:
        agent = create_agent(model, tools=[], middleware=[mw], context_schema=UserContext,
                             checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage(content="The blue heron is my password hint.")]}, thread("t1"),
                     context=UserContext(user_id="alice"))
        agent.invoke({"messages": [HumanMessage(content="Remember the red fox.")]}, thread("t2"),
                     context=UserContext(user_id="bob"))
        engine = mw.engine
        assert not engine.session_exists("t1") and not engine.session_exists("t2"), "the thread ids name nothing"
        assert [m["role"] for m in stored(engine, "alice")] == ["user", "assistant"]
        assert [m["role"] for m in stored(engine, "bob")] == ["user", "assistant"]
        engine.commit("alice", keep_recent_count=0)
        out = agent.invoke({"messages": [HumanMessage(content="What was my hint?")]}, thread("t1"),
                           context=UserContext(user_id="alice"))
        result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
        assert result.artifact and {h["archive_id"] for h in result.artifact} == {"archive_001"}, \
            "the archive tool resolved the same function to alice's session"
        assert "heron" in result.text


def test_a_session_id_function_serves_the_async_path_and_its_tools(root):
    model = scripted("noted", *search_then_answer("heron"))
    mw = WorkingMemoryMiddleware(root=root, durable=False, session_id=lambda runtime: runtime.context.user_id)
    agent = create_agent(model, tools=[], middleware=[mw], context_schema=UserContext)

    async def run() -> dict[str, Any]:
        await agent.ainvoke({"messages": [HumanMessage(content="The blue heron.")]}, context=UserContext("alice"))
        await asyncio.to_thread(mw.engine.commit, "alice", keep_recent_count=0)
        out = await agent.ainvoke({"messages": [HumanMessage(content="My hint?")]}, context=UserContext("alice"))
        await mw.aclose()
        return out

    out = asyncio.run(run())
    result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert {h["archive_id"] for h in result.artifact} == {"archive_001"}


@pytest.mark.parametrize("resolve", [
    lambda runtime: None,
    lambda runtime: 42,
    lambda runtime: "",
    lambda runtime: runtime.context.user_id,  # the run has no context: the function raises
], ids=["none", "int", "empty", "raises"])
def test_a_session_id_function_that_gives_no_session_id_is_invalid_input(root, resolve):
    with WorkingMemoryMiddleware(root=root, durable=False, session_id=resolve) as mw:
        with pytest.raises(InvalidInput) as err:
            mw.before_agent({"messages": [HumanMessage(content="hi", id="u1")]}, Runtime(context=None))
        assert err.value.field == "session_id" and "session_id function" in str(err.value)
        assert not mw.engine.session_exists("u1")


def test_a_session_id_string_still_pins_one_session(root):
    with WorkingMemoryMiddleware(root=root, durable=False, session_id="pinned") as mw:
        create_agent(scripted("ok"), tools=[], middleware=[mw]).invoke(
            {"messages": [HumanMessage(content="hi")]}, thread("any-thread"))
        assert mw.engine.session_exists("pinned") and not mw.engine.session_exists("any-thread")


def test_forget_with_a_session_id_function_takes_the_session_it_names(root):
    with WorkingMemoryMiddleware(root=root, durable=False, session_id=lambda runtime: runtime.context.user_id) as mw:
        create_agent(scripted("ok"), tools=[], middleware=[mw], context_schema=UserContext).invoke(
            {"messages": [HumanMessage(content="hi")]}, thread("t1"), context=UserContext(user_id="alice"))
        with pytest.raises(InvalidInput) as err:
            mw.forget("t1")
        assert err.value.field == "session_id"
        assert mw.forget("t1", session_id="alice")["deleted"] is True
        assert not mw.engine.session_exists("alice")


# -- memory_message="system" --------------------------------------------------------------------------------

def run_with_memory(root: Any, memory_message: str) -> tuple[Any, WorkingMemoryMiddleware]:
    """Turn 1, a commit, then turn 2 with a tool call (two model calls, no commit between them), a second
    commit, and turn 3. Returns the agent model (its prompts) and the middleware (still open)."""
    model = scripted("Noted: the import fails since the deploy.",
                     call("read_file", {"path": "loader.py"}, "call_1"), "loader.py reads the CSV.",
                     "The fix goes in loader.py.")
    mw = WorkingMemoryMiddleware(root=root, durable=False, session_id="s", memory_message=memory_message)
    agent = create_agent(model, tools=[read_file], system_prompt=AGENT_PROMPT, middleware=[mw],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage(content="The CSV import fails since the deploy on 2024-05-14.")]},
                 thread("t"))
    mw.engine.commit("s", keep_recent_count=0)
    agent.invoke({"messages": [HumanMessage(content="Read loader.py.")]}, thread("t"))
    mw.engine.commit("s", keep_recent_count=0)
    agent.invoke({"messages": [HumanMessage(content="Where does the fix go?")]}, thread("t"))
    return model, mw


def consecutive_humans(prompt: list[Any]) -> bool:
    pairs = zip(prompt, prompt[1:], strict=False)
    return any(isinstance(a, HumanMessage) and isinstance(b, HumanMessage) for a, b in pairs)


def test_memory_message_system_carries_the_working_memory_in_the_system_message(root):
    model, mw = run_with_memory(root, "system")
    with mw:
        wm = mw.engine.summary_of("s")[0]
        last = model.prompts[-1]
        assert last[0].content == f"{AGENT_PROMPT}\n\n{SYSTEM_ADDITION}\n\n{SUMMARY_PREFIX}{wm}"
        for prompt in model.prompts:
            assert isinstance(prompt[0], SystemMessage) and not consecutive_humans(prompt)
            assert not any(m.additional_kwargs.get("workmem") == "summary" for m in prompt[1:])
            assert sum(isinstance(m, SystemMessage) for m in prompt) == 1
        assert [m.text for m in last[1:]] == ["Where does the fix go?"]
        assert len(stored(mw.engine, "s")) == 8, "the working memory in the system message is never stored"


def test_memory_message_system_is_byte_stable_between_commits(root):
    model, mw = run_with_memory(root, "system")
    with mw:
        before_commit, tool_step, after_commit = (model.prompts[i][0].content for i in (1, 2, 3))
        assert tool_step == before_commit, "two calls without a commit send the same system message"
        assert after_commit != before_commit, "a commit that changes the working memory changes it"
        assert SUMMARY_PREFIX in before_commit and "loader.py" in after_commit


def test_memory_message_human_is_the_default_a_summary_message_of_its_own(root):
    model, mw = run_with_memory(root, "human")
    with mw:
        assert WorkingMemoryMiddleware(mw.engine).settings.memory_message == "human"
        prompt = model.prompts[1]
        assert prompt[0].content == f"{AGENT_PROMPT}\n\n{SYSTEM_ADDITION}"
        assert prompt[1].additional_kwargs.get("workmem") == "summary" and prompt[1].text.startswith(SUMMARY_PREFIX)
        assert consecutive_humans(prompt), "the default sends the summary and the user's message in a row"


# -- composing with middleware that edits request.messages --------------------------------------------------

@tool
def read_big(path: str) -> str:
    """Read a long file."""
    return f"{path}: " + "line of text. " * 60


def reads(n: int) -> list[Any]:
    return [call("read_big", {"path": f"f{i}.txt"}, f"c{i}") for i in range(1, n + 1)]


def agent_with_editor(root: Any, workmem_first: bool) -> tuple[Any, WorkingMemoryMiddleware, dict[str, Any]]:
    model = scripted(*reads(3), AIMessage(content="done"))
    mw = WorkingMemoryMiddleware(root=root, durable=False, session_id="s")
    editor = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=200, keep=1)])
    agent = create_agent(model, tools=[read_big], middleware=[mw, editor] if workmem_first else [editor, mw],
                         checkpointer=InMemorySaver())
    out = agent.invoke({"messages": [HumanMessage(content="Read three files.", id="u1")]}, thread("t"))
    return model, mw, out


def tool_texts(prompt: list[Any]) -> list[str]:
    return [m.text for m in prompt if isinstance(m, ToolMessage)]


def test_workmem_first_stores_full_tool_results_while_the_editor_clears_what_the_model_sees(root):
    model, mw, out = agent_with_editor(root, workmem_first=True)
    with mw:
        full = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
        assert all(len(t) > 500 for t in full), "the agent's state keeps the full results"
        assert tool_texts(model.prompts[-1]) == ["[cleared]", "[cleared]", full[2]], \
            "the editor, inside workmem, edits the context workmem assembled"
        log = stored(mw.engine, "s")
        assert [m["meta"]["lc_id"] for m in log] == [m.id for m in out["messages"]], "each message stored once"
        assert [p["content"] for m in log for p in m["parts"] if p["type"] == "tool_result"] == full, \
            "the session keeps every tool result whole"


def test_an_editor_placed_before_workmem_has_no_effect_on_what_the_model_sees(root):
    model, mw, out = agent_with_editor(root, workmem_first=False)
    with mw:
        full = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
        assert tool_texts(model.prompts[-1]) == full, "workmem rebuilds the messages from the state"
        assert len(stored(mw.engine, "s")) == len(out["messages"])
