"""`graphs/agent/middleware.py` on its own: its helpers, its settings, which session a run is, the tools it
contributes, what one model call is sent, and what `before_agent` / `after_agent` / `forget` do.

The hooks are called directly with a `ModelRequest`, a state dict and a runtime, on a real root; the agent
model and the commit model are the scripted fakes of tests/fakes.py. The behaviour files
(test_agent.py, test_agent_ingestion.py, test_middleware_messy_messages.py) run the same middleware
inside a real `create_agent`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from engine_helpers import call, read_file
from fakes import create_call, scripted
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langgraph.runtime import Runtime

import workmem.graphs.agent.middleware as middleware_module
import workmem.graphs.agent.view as view_module
import workmem.graphs.context.decision as decision_module
from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.agent.session_cache import ARCHIVE_TAIL
from workmem.graphs.agent.tools import make_archive_tools, schema_tokens
from workmem.graphs.agent.trim import archived_in_state
from workmem.graphs.agent.view import NormalisedCache, StateView, carries_content, clip_oversized, combine_system
from workmem.graphs.context.assemble import SYSTEM_ADDITION
from workmem.graphs.context.injected import SUMMARY_MARKER
from workmem.state.errors import InvalidInput
from workmem.state.messages import CLIPPED_BYTES_META, LC_ID_META
from workmem.state.tokens import count_tokens

ADDITION = SystemMessage(content="workmem note", additional_kwargs={"workmem": "system"})


def runtime(**context: Any) -> Runtime:
    return Runtime(context=context or None)


def committer(*answers: str) -> Any:
    """A scripted commit model: one create answer per expected commit."""
    return scripted(*(create_call({"Session Title": "Unit", "Current State": text}) for text in answers))


def request_for(model: Any, messages: list[Any], *, system: str | None = "Be brief.", tools: list[Any] | None = None,
                state: dict[str, Any] | None = None, **context: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=messages,
                        system_message=SystemMessage(content=system) if system is not None else None,
                        tools=tools or [], state={"messages": messages, **(state or {})},
                        runtime=runtime(**context))


def call_model(mw: WorkingMemoryMiddleware, request: ModelRequest) -> tuple[ModelRequest, Any]:
    """Run `wrap_model_call` with a handler that records the request it was given."""
    seen: list[ModelRequest] = []

    def handler(sent: ModelRequest) -> ModelResponse:
        seen.append(sent)
        return ModelResponse(result=[AIMessage(content="ok")])

    out = mw.wrap_model_call(request, handler)
    return seen[0], out


# -- combine_system -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("own", "content"), [
    (None, "workmem note"),
    (SystemMessage(content="Be brief."), "Be brief.\n\nworkmem note"),
    (SystemMessage(content=""), "workmem note"),
    (SystemMessage(content=[{"type": "text", "text": "Be brief."}]),
     [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "workmem note"}]),
], ids=["no-own-prompt", "text-prompt", "empty-prompt", "content-blocks"])
def test_combine_system_puts_the_agents_prompt_first_and_tags_the_result(own, content):
    combined = combine_system(own, ADDITION)
    assert combined.content == content
    assert combined.additional_kwargs["workmem"] == "system"


def test_combine_system_keeps_the_agents_own_additional_kwargs():
    own = SystemMessage(content="Be brief.", additional_kwargs={"cache_control": {"type": "ephemeral"}})
    combined = combine_system(own, ADDITION)
    assert combined.additional_kwargs == {"cache_control": {"type": "ephemeral"}, "workmem": "system"}
    assert own.additional_kwargs == {"cache_control": {"type": "ephemeral"}}, "the agent's message is untouched"


# -- carries_content ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("message", "expected"), [
    (AIMessage(content=""), False),
    (AIMessage(content="  \n "), False),
    (AIMessage(content="an answer"), True),
    (AIMessage(content="", tool_calls=[{"id": "c", "name": "read_file", "args": {}, "type": "tool_call"}]), True),
    (AIMessage(content="", invalid_tool_calls=[{"id": "c", "name": "x", "args": "{", "error": "bad",
                                                 "type": "invalid_tool_call"}]), True),
    (AIMessage(content=[{"type": "image_url", "image_url": {"url": "data:,"}}]), True),
    (HumanMessage(content=""), False),
    (HumanMessage(content=" "), True),
    (HumanMessage(content=[]), False),
    (HumanMessage(content=[{"type": "text", "text": ""}, ""]), False),
    (HumanMessage(content=[{"type": "text", "text": ""}, {"type": "image_url", "image_url": {"url": "data:,"}}]),
     True),
    ({"role": "assistant", "content": ""}, True),
], ids=["empty-ai", "blank-ai", "ai-text", "ai-tool-call", "ai-invalid-call", "ai-blocks", "empty-human",
        "blank-human", "no-blocks-human", "empty-blocks-human", "image-human", "dict"])
def test_only_an_ai_or_user_message_with_nothing_in_it_carries_no_content(message, expected):
    assert carries_content(message) is expected


# -- clip_oversized -------------------------------------------------------------------------------------

def test_clip_oversized_replaces_only_messages_over_the_cap(caplog):
    small = HumanMessage(content="short", id="h1")
    huge = ToolMessage(content="x" * 20_000, tool_call_id="c1", id="t1")
    broken = {"role": "wizard", "content": "left for the engine to refuse"}
    with caplog.at_level(logging.WARNING, logger="workmem.agent"):
        out = clip_oversized([small, huge, broken], 4_000)
    assert out[0] is small and out[2] is broken
    clipped = out[1]
    assert isinstance(clipped, dict) and clipped["role"] == "tool"
    assert clipped["meta"][CLIPPED_BYTES_META] > 20_000 and clipped["meta"][LC_ID_META] == "t1"
    assert len(clipped["parts"][0]["content"]) < 4_000
    assert caplog.records == [], "no warning unless asked"
    with caplog.at_level(logging.WARNING, logger="workmem.agent"):
        clip_oversized([small, huge, huge], 4_000, warn=True)
    assert len(caplog.records) == 2 and "max_message_bytes (4000)" in caplog.records[0].getMessage()


# -- NormalisedCache ------------------------------------------------------------------------------------

@pytest.fixture
def normalise_calls(monkeypatch):
    calls: list[Any] = []
    real = view_module.prepare_message

    def counting(message, **kwargs):
        calls.append(message)
        return real(message, **kwargs)

    monkeypatch.setattr(view_module, "prepare_message", counting)
    return calls


def test_the_cache_normalises_a_message_with_an_id_once(normalise_calls):
    cache = NormalisedCache()
    first = cache.normalize(HumanMessage(content="hello", id="h1"))
    again = cache.normalize(HumanMessage(content="hello", id="h1"))  # an equal copy, as a checkpoint load gives
    assert again is first and len(normalise_calls) == 1
    assert first["meta"][LC_ID_META] == "h1" and first["parts"] == [{"type": "text", "text": "hello"}]


@pytest.mark.parametrize(("before", "after"), [
    (HumanMessage(content="hello", id="h1"), HumanMessage(content="hello, edited", id="h1")),
    (HumanMessage(content="hello", id="h1"), HumanMessage(content="hello", id="h1", name="someone")),
    (AIMessage(content="", id="a1", tool_calls=[{"id": "c", "name": "f", "args": {"x": 1}, "type": "tool_call"}]),
     AIMessage(content="", id="a1", tool_calls=[{"id": "c", "name": "f", "args": {"x": 2}, "type": "tool_call"}])),
    (ToolMessage(content="r", tool_call_id="c1", id="t1"), ToolMessage(content="r", tool_call_id="c2", id="t1")),
    (ToolMessage(content="r", tool_call_id="c1", id="t1"),
     ToolMessage(content="r", tool_call_id="c1", id="t1", status="error")),
    (HumanMessage(content="hello", id="h1"), HumanMessage(content="hello", id="h1", additional_kwargs={"k": 1})),
], ids=["content", "name", "tool-call-args", "tool-call-id", "tool-status", "additional-kwargs"])
def test_an_edited_message_with_the_same_id_is_normalised_anew(normalise_calls, before, after):
    cache = NormalisedCache()
    first, second = cache.normalize(before), cache.normalize(after)
    assert second is not first and len(normalise_calls) == 2
    assert second == view_module.prepare_message(after)[0]


def test_messages_without_an_id_and_dicts_are_never_cached(normalise_calls):
    cache = NormalisedCache()
    for message in (HumanMessage(content="no id"), {"role": "user", "content": "a dict", "id": "d1"}):
        assert cache.normalize(message) == cache.normalize(message)
    assert len(normalise_calls) == 4


def test_the_cache_is_bounded_and_forgets_the_least_recently_used(normalise_calls):
    cache = NormalisedCache(size=2)
    one, two, three = (HumanMessage(content=f"m{i}", id=f"h{i}") for i in range(3))
    cache.normalize(one)
    cache.normalize(two)
    cache.normalize(one)  # one is now the most recent
    cache.normalize(three)  # evicts two
    before = len(normalise_calls)
    cache.normalize(one)
    cache.normalize(three)
    assert len(normalise_calls) == before, "still cached"
    cache.normalize(two)
    assert len(normalise_calls) == before + 1, "evicted"


# -- settings -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "field"), [
    ({"commit_mode": "later"}, "commit_mode"),
    ({"token_budget": 0}, "token_budget"),
    ({"token_budget": "big"}, "token_budget"),
    ({"keep": 5}, "keep"),
    ({"keep": ("weeks", 2)}, "keep"),
    ({"trigger": ("weeks", 2)}, "trigger"),
    ({"trigger": 0}, "trigger"),
], ids=lambda v: str(v))
def test_bad_settings_are_invalid_input_naming_the_setting(make_engine, settings, field):
    engine = make_engine(scripted())
    with pytest.raises(InvalidInput) as err:
        WorkingMemoryMiddleware(engine, **settings)
    assert err.value.field == field


def test_the_middleware_contributes_its_tools_unless_told_not_to(make_engine):
    engine = make_engine(scripted())
    assert [t.name for t in WorkingMemoryMiddleware(engine).tools] == ["archive_search", "archive_expand",
                                                                       "read_tool_result"]
    assert WorkingMemoryMiddleware(engine, tools=False).tools == []
    assert WorkingMemoryMiddleware(engine).state_schema is middleware_module.WorkmemAgentState


# -- which session a run is -----------------------------------------------------------------------------

@dataclass
class Ctx:
    session_id: str | None = None


@pytest.mark.parametrize(("bound", "default", "context", "expected"), [
    ("pinned", None, {"session_id": "from-context"}, "pinned"),
    (None, None, {"session_id": "from-context"}, "from-context"),
    (None, "fallback", {"session_id": "from-context"}, "from-context"),
    (None, "fallback", {"session_id": ""}, "fallback"),
    (None, "fallback", None, "fallback"),
    (None, None, Ctx("from-dataclass"), "from-dataclass"),
], ids=["bound-wins", "runtime-context", "context-beats-default", "empty-context-id", "default", "context-object"])
def test_the_session_is_the_bound_one_else_the_runtime_contexts_else_the_default(make_engine, bound, default,
                                                                                   context, expected):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine, session_id=bound, default_session_id=default)
    mw.after_agent({"messages": [HumanMessage(content="hello", id="h1")]}, Runtime(context=context))
    assert engine.storage.sessions.list_sessions() == [expected]


@pytest.mark.parametrize(("configurable", "expected"), [
    ({"thread_id": "thread-7"}, "thread-7"),
    ({"thread_id": "thread-7", "session_id": "explicit"}, "explicit"),
], ids=["thread-id", "configurable-session-id"])
def test_inside_a_run_the_config_names_the_session(make_engine, configurable, expected):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    state = {"messages": [HumanMessage(content="hello", id="h1")]}
    RunnableLambda(lambda _: mw.after_agent(state, None)).invoke(None, {"configurable": configurable})
    assert engine.storage.sessions.list_sessions() == [expected]


def test_a_run_without_any_session_is_a_clear_error_and_stores_nothing(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    with pytest.raises(InvalidInput, match="thread_id") as err:
        mw.after_agent({"messages": [HumanMessage(content="hello")]}, runtime())
    assert err.value.field == "session_id"
    with pytest.raises(InvalidInput, match="thread_id"):
        call_model(mw, request_for(scripted(), [HumanMessage(content="hello")]))
    assert engine.storage.sessions.list_sessions() == []


# -- tools bound twice ----------------------------------------------------------------------------------

def test_a_second_copy_of_an_archive_tool_is_invalid_input_naming_it(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    question = [HumanMessage(content="hello", id="h1")]
    for foreign, name in ((make_archive_tools(engine)[0], "archive_search"),
                          ({"name": "archive_expand", "description": "mine", "parameters": {}}, "archive_expand")):
        with pytest.raises(InvalidInput) as err:
            call_model(mw, request_for(scripted(), question, tools=[*mw.tools, foreign], session_id="s"))
        assert (err.value.field, err.value.value) == ("tools", name)
    sent, _ = call_model(mw, request_for(scripted(), question, tools=[*mw.tools, read_file], session_id="s"))
    assert [t.name for t in sent.tools] == ["read_file"], "ours pass (and wait until something is out of view)"
    off = WorkingMemoryMiddleware(engine, tools=False)
    sent, _ = call_model(off, request_for(scripted(), question, tools=make_archive_tools(engine), session_id="s"))
    assert [t.name for t in sent.tools] == ["archive_search", "archive_expand"], "tools=False: the caller's own"


# -- workmem's note and tools join the call once something is out of view ---------------------------------

OWN = ["archive_search", "archive_expand", "read_tool_result"]


def test_until_something_is_archived_the_call_is_the_agents_own(make_engine):
    engine = make_engine(committer("Discussing the orchid greenhouse."))
    mw = WorkingMemoryMiddleware(engine)
    first = [HumanMessage(content="The greenhouse holds orchids.", id="h1")]
    sent, out = call_model(mw, request_for(scripted(), first, tools=[*mw.tools, read_file], session_id="s"))
    assert [t.name for t in sent.tools] == ["read_file"] and sent.system_message.text == "Be brief."
    record = out.command.update["workmem_last_call"]
    assert record["workmem_tools"] is False
    assert record["call_tokens"] == count_tokens("Be brief.") + record["total_tokens"] - count_tokens(
        SYSTEM_ADDITION) + schema_tokens([read_file]), "the record counts what went out"

    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    later = [*first, AIMessage(content="Noted.", id="a1"), HumanMessage(content="What grows there?", id="h2")]
    sent, out = call_model(mw, request_for(scripted(), later, tools=[*mw.tools, read_file], session_id="s"))
    assert [t.name for t in sent.tools] == [*OWN, "read_file"]
    assert sent.system_message.text == f"Be brief.\n\n{SYSTEM_ADDITION}" and out.command.update[
        "workmem_last_call"]["workmem_tools"] is True


def test_a_result_shown_as_its_synopsis_brings_the_reader_before_any_commit(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine, offload_tokens=200)
    step = call("read_file", {"path": "big.py"}, "c1", msg_id="a1")
    small = [HumanMessage(content="Read big.py.", id="h1"), step,
             ToolMessage(content="x = 1\n" * 20, tool_call_id="c1", name="read_file", id="t1")]
    sent, _ = call_model(mw, request_for(scripted(), small, tools=[*mw.tools, read_file], session_id="s"))
    assert [t.name for t in sent.tools] == ["read_file"], "a result shown whole needs no reader"
    large = [*small[:2], ToolMessage(content="".join(f"line_{i} = {i}\n" for i in range(400)), tool_call_id="c1",
                                     name="read_file", id="t1")]
    sent, _ = call_model(mw, request_for(scripted(), large, tools=[*mw.tools, read_file], session_id="t"))
    assert "read_tool_result(" in sent.messages[-1].text, "the premise: the result went out as its synopsis"
    assert [t.name for t in sent.tools] == [*OWN, "read_file"] and SYSTEM_ADDITION in sent.system_message.text
    assert engine.session_info("t")["commit_count"] == 0


def _profiled(limit: int) -> Any:
    model = scripted()
    model.profile = {"max_input_tokens": limit}
    return model


def test_once_joined_workmem_tools_stay_even_when_nothing_is_out_of_view_any_more(make_engine):
    # a result previewed at a 64k limit is shown whole at 200k: the tools stay (the history calls one of them, and
    # a prompt cache breaks on every change of the tools)
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    big = " ".join(f"w{i}" for i in range(3000))
    run = [HumanMessage(content="Read big.py.", id="h1"), call("read_file", {"path": "big.py"}, "c1", msg_id="a1"),
           ToolMessage(content=big, tool_call_id="c1", name="read_file", id="t1")]
    sent, _ = call_model(mw, request_for(_profiled(64_000), run, tools=[*mw.tools, read_file], session_id="s"))
    assert [t.name for t in sent.tools] == [*OWN, "read_file"], "the premise: shown as its synopsis"
    sent, out = call_model(mw, request_for(_profiled(200_000), run, tools=[*mw.tools, read_file], session_id="s"))
    assert big in sent.messages[-1].text, "the premise: shown whole at the larger limit"
    assert [t.name for t in sent.tools] == [*OWN, "read_file"] and out.command.update["workmem_last_call"][
        "workmem_tools"] is True
    # another middleware (a restart) on the thread's state: its last record says they went out
    fresh = WorkingMemoryMiddleware(engine)
    state = {"workmem_last_call": {"workmem_tools": True}}
    sent, _ = call_model(fresh, request_for(_profiled(200_000), run, tools=[*fresh.tools, read_file], session_id="s",
                                            state=state))
    assert [t.name for t in sent.tools] == [*OWN, "read_file"]


def test_a_history_that_calls_a_workmem_tool_carries_the_tools(make_engine):
    # say, an old thread replayed into a new session: a provider refuses a call of a tool the request does not
    # declare
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    run = [HumanMessage(content="What did we decide on retries?", id="h1"),
           call("archive_search", {"query": "retries"}, "c1", msg_id="a1"),
           ToolMessage(content="No matches.", tool_call_id="c1", name="archive_search", id="t1")]
    sent, _ = call_model(mw, request_for(scripted(), run, tools=[*mw.tools], session_id="s"))
    assert [t.name for t in sent.tools] == OWN and SYSTEM_ADDITION in sent.system_message.text


def test_a_result_clipped_to_fit_the_window_brings_the_tools_before_any_commit(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine, token_budget=8_000, exclude_tools=["read_file"])  # never a synopsis
    rows = "\n".join(f"row {i}: value {i * 7} status ok" for i in range(6_000))
    run = [HumanMessage(content="Read big.csv.", id="h1"), call("read_file", {"path": "big.csv"}, "c1", msg_id="a1"),
           ToolMessage(content=rows, tool_call_id="c1", name="read_file", id="t1")]
    sent, _ = call_model(mw, request_for(scripted(), run, tools=[*mw.tools, read_file], session_id="s"))
    assert "row 3000:" not in sent.messages[-1].text, "the premise: clipped in the view (head and tail kept)"
    assert [t.name for t in sent.tools] == [*OWN, "read_file"]
    assert engine.read_tool_result("s", "seq:3", query="row 3000:")["matches"], "what the tools reach"


def test_messages_dropped_to_fit_bring_the_tools_before_any_commit(make_engine, monkeypatch):
    # no commit is due (as when none can be made), so the oldest turns are dropped from the view (stored, and
    # readable with archive_expand by seq)
    monkeypatch.setattr(decision_module, "_due", lambda figures, pending: False)
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine, token_budget=8_000, trigger=("tokens", 100_000))
    run: list[Any] = []
    for i in range(60):
        run += [HumanMessage(content=f"Turn {i}: " + "the exporter retries jobs and " * 40, id=f"h{i}"),
                AIMessage(content=f"Answer {i}.", id=f"a{i}")]
    run.append(HumanMessage(content="Now?", id="hq"))
    sent, out = call_model(mw, request_for(scripted(), run, tools=[*mw.tools, read_file], session_id="s"))
    record = out.command.update["workmem_last_call"]
    assert record["messages_dropped"] > 0 and record["archives_total"] == 0, "the premise: dropped, no commit"
    assert [t.name for t in sent.tools] == [*OWN, "read_file"] and record["workmem_tools"] is True


# -- one model call -------------------------------------------------------------------------------------

def test_a_model_call_gets_the_system_note_the_memory_and_the_new_messages(make_engine):
    engine = make_engine(committer("Discussing the orchid greenhouse."))
    engine.add_messages("s", [{"role": "user", "content": "The greenhouse holds orchids."},
                              {"role": "assistant", "content": "Noted."}])
    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    mw = WorkingMemoryMiddleware(engine)
    question = HumanMessage(content="What grows in the greenhouse?", id="q1")

    sent, out = call_model(mw, request_for(scripted(), [question], session_id="s"))

    assert sent.system_message.text.startswith("Be brief.\n\n") and SYSTEM_ADDITION in sent.system_message.text
    assert sent.system_message.additional_kwargs["workmem"] == "system"
    summary, last = sent.messages[0], sent.messages[-1]
    assert summary.text.startswith(SUMMARY_MARKER) and "orchid greenhouse" in summary.text
    assert summary.additional_kwargs["workmem"] == "summary"
    assert last.text == "What grows in the greenhouse?" and len(sent.messages) == 2
    update = out.command.update["workmem_last_call"]
    assert (update["session_id"], update["unstored_messages"], update["live_messages_shown"],
            update["archives_total"], update["state_messages"]) == ("s", 0, 1, 1, 1), "stored before the call"
    assert update["working_memory_tokens"] > 0 and update["budget"] == engine.context_window - count_tokens("Be brief.")
    assert engine.session_info("s")["total_message_count"] == 3, "the call stored the run's new message"
    assert out.model_response.result[0].text == "ok"


def test_the_state_decides_which_live_messages_a_call_shows(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    history = [HumanMessage(content="first", id="h1"), AIMessage(content="one", id="a1"),
               HumanMessage(content="second", id="h2"), AIMessage(content="two", id="a2")]
    mw.after_agent({"messages": history}, runtime(session_id="s"))
    engine.add_messages("s", [{"role": "user", "content": "written by someone else"}])
    shown, _ = call_model(mw, request_for(scripted(), [history[2], history[3], HumanMessage("third", id="h3")],
                                          session_id="s"))
    assert [m.text for m in shown.messages] == ["second", "two", "third"], "the thread's own tail, in state order"
    assert engine.hidden("s") == {1, 2}, "the agent's messages that state dropped are hidden at that call"
    fresh, _ = call_model(mw, request_for(scripted(), [HumanMessage("only new", id="n1")], session_id="s"))
    assert [m.text for m in fresh.messages] == ["second", "two", "written by someone else", "third",
                                                "only new"], "holding no stored message: every shown live one"


def test_the_budget_is_explicit_else_the_model_profile_else_the_context_window(make_engine):
    engine = make_engine(scripted(), context_window=50_000)
    def with_profile(profile: Any) -> Any:
        return SimpleNamespace(model=SimpleNamespace(profile=profile))

    fixed = WorkingMemoryMiddleware(engine, token_budget=7_000)
    assert fixed._input_limit(with_profile({"max_input_tokens": 3_000}), engine, engine.call_state("s")) == 7_000
    mw = WorkingMemoryMiddleware(engine)
    for profile in (None, {}, {"max_input_tokens": 0}, {"max_input_tokens": True}, {"max_input_tokens": "9"}):
        assert mw._input_limit(with_profile(profile), engine, engine.call_state("s")) == 50_000, profile
    assert mw._input_limit(with_profile({"max_input_tokens": 3_000}), engine, engine.call_state("s")) == 3_000
    assert mw._input_limit(with_profile(None), engine, engine.call_state("s")) == 50_000, \
        "each call's own model: one without a profile after one with (a router swapping models) is not held to it"


def test_tools_built_anew_at_each_call_are_counted_each_and_remembered_boundedly(make_engine):
    from langchain_core.tools import StructuredTool

    mw = WorkingMemoryMiddleware(make_engine(scripted()))
    for i in range(3 * middleware_module.MAX_TOOL_SETS):
        tool = StructuredTool.from_function(lambda q: q, name=f"lookup_{i}", description="x" * (i % 7 + 1))
        request = SimpleNamespace(tools=[tool])
        assert mw._schema_tokens(request) == schema_tokens([tool]), "never another tool set's count"
    assert len(mw._schemas) == middleware_module.MAX_TOOL_SETS


# -- around the run -------------------------------------------------------------------------------------

def test_before_agent_notes_the_runs_newest_input_message(make_engine):
    mw = WorkingMemoryMiddleware(make_engine(scripted()))
    messages = [HumanMessage(content="one", id="h1"), AIMessage(content="two", id="a1")]
    assert mw.before_agent({"messages": messages}, runtime(session_id="s")) == {
        "workmem_run_from": "a1", "workmem_run_seq": 1, "workmem_prior_upto": None}
    assert mw.before_agent({"messages": [], "workmem_stored_upto": 4}, runtime(session_id="s")) == {
        "workmem_run_from": None, "workmem_run_seq": 1, "workmem_prior_upto": 4}


def test_after_agent_stores_a_run_once_and_hides_what_the_state_dropped(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    history = [HumanMessage(content="one", id="h1"), AIMessage(content="two", id="a1"),
               HumanMessage(content="three", id="h2"), AIMessage(content="four", id="a2")]
    assert mw.after_agent({"messages": history}, runtime(session_id="s")) == {"workmem_stored_upto": 5}
    mw.after_agent({"messages": history}, runtime(session_id="s"))
    assert engine.session_info("s")["total_message_count"] == 4, "the same state again stores nothing"
    dropped = [history[0], history[2], history[3], HumanMessage(content="five", id="h3")]
    mw.after_agent({"messages": dropped}, runtime(session_id="s"))
    assert engine.session_info("s")["total_message_count"] == 5
    assert engine.storage.sessions.hidden("s") == {2}, "a1 left the state: hidden, still in the log"
    mw.after_agent({"messages": [*history, dropped[-1]]}, runtime(session_id="s"))
    assert engine.storage.sessions.hidden("s") == set(), "back in the state: shown again"


def test_state_view_leaves_out_what_workmem_injected(make_engine):
    engine = make_engine(scripted())
    messages = [SystemMessage(content="ignored note", additional_kwargs={"workmem": "system"}),
                HumanMessage(content=f"{SUMMARY_MARKER}\nold memory", additional_kwargs={"workmem": "summary"}),
                HumanMessage(content=f"{SUMMARY_MARKER}\npasted by the user", id="h0"),
                HumanMessage(content="real", id="h1"), AIMessage(content="answer", id="a1")]
    view = StateView(engine, "s", messages, list)
    assert view.new_messages() == messages[2:], "only the tagged messages are workmem's"
    assert view.hidden_changes([]) == (set(), set()), "holding no stored message hides nothing"


def test_an_empty_model_reply_is_skipped_and_the_rest_of_the_run_stored(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    state = {"messages": [HumanMessage(content="hello", id="h1"), AIMessage(content="", id="empty")]}
    mw.after_agent(state, runtime(session_id="s"))
    assert [m["meta"]["lc_id"] for m in engine.storage.sessions.live_messages("s")] == ["h1"]


def test_archived_in_state_removes_only_messages_a_commit_archived(make_engine):
    engine = make_engine(committer("Counting."))
    mw = WorkingMemoryMiddleware(engine)
    assert archived_in_state(engine, "s", [HumanMessage(content="x", id="h1")]) == []
    history = [HumanMessage(content="one", id="h1"), AIMessage(content="two", id="a1"),
               HumanMessage(content="three", id="h2"), AIMessage(content="four", id="a2")]
    mw.after_agent({"messages": history}, runtime(session_id="s"))
    assert engine.commit("s", keep_recent_count=2)["status"] == "completed"
    removals = archived_in_state(engine, "s", [*history, HumanMessage(content="no id")])
    assert all(isinstance(r, RemoveMessage) for r in removals) and [r.id for r in removals] == ["h1", "a1"]
    trimmer = WorkingMemoryMiddleware(engine, trim_state=True)
    update = trimmer.before_agent({"messages": history}, runtime(session_id="s"))
    assert [r.id for r in update["messages"]] == ["h1", "a1"] and update["workmem_run_from"] == "a2"


def test_archive_tail_is_the_newest_archives_end_read_once_per_archive(make_engine, monkeypatch):
    engine = make_engine(committer("First.", "Second."))
    mw = WorkingMemoryMiddleware(engine)
    engine.add_messages("s", [{"role": "user", "content": "hi"}])
    assert mw._archive_tail(engine, "s") == []
    engine.add_messages("s", [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"}
                              for i in range(ARCHIVE_TAIL + 9)])
    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    reads: list[str] = []
    real = engine.storage.sessions.archive_messages
    monkeypatch.setattr(engine.storage.sessions, "archive_messages",
                        lambda sid, aid, **kw: reads.append(aid) or real(sid, aid, **kw))
    tail = mw._archive_tail(engine, "s")
    assert len(tail) == ARCHIVE_TAIL and tail == real("s", "archive_001")[-ARCHIVE_TAIL:]
    assert mw._archive_tail(engine, "s") is tail and reads == ["archive_001"], "cached"
    engine.add_messages("s", [{"role": "user", "content": "later"}])
    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    reads.clear()  # the commit itself read its archive back to index it
    assert [m["parts"][0]["text"] for m in mw._archive_tail(engine, "s")] == ["later"]
    assert reads == ["archive_002"], "the new archive, read once"


def test_forget_deletes_the_threads_session_and_says_what_is_left(make_engine):
    engine = make_engine(scripted())
    mw = WorkingMemoryMiddleware(engine)
    unknown = mw.forget("never-seen")
    assert (unknown["session_id"], unknown["deleted"], unknown["thread_deleted"]) == ("never-seen", False, False)
    assert "checkpointer.delete_thread('never-seen')" in unknown["note"], "the caller is told to delete the thread"
    mw.after_agent({"messages": [HumanMessage(content="hi", id="h1")]}, runtime(session_id="t1"))
    deleted: list[str] = []
    out = mw.forget("t1", checkpointer=SimpleNamespace(delete_thread=deleted.append))
    assert out == {"session_id": "t1", "deleted": True, "thread_deleted": True} and deleted == ["t1"]
    assert not engine.storage.sessions.session_exists("t1")
    pinned = WorkingMemoryMiddleware(engine, session_id="fixed")
    pinned.after_agent({"messages": [HumanMessage(content="hi", id="h1")]}, runtime())
    assert pinned.forget("any-thread")["session_id"] == "fixed" and not engine.storage.sessions.session_exists("fixed")


def test_forget_deletes_the_subagents_sessions_of_the_session_and_of_the_thread_only(make_engine):
    engine = make_engine(scripted())
    names = ["s1", "s1/subagent/tools:1", "t/subagent/tools:2|tools:3", "t", "s1/tools:9", "acme/subagent/tools:4"]
    for name in names:
        engine.add_messages(name, [{"role": "user", "content": f"in {name}"}])
    out = WorkingMemoryMiddleware(engine, session_id="s1").forget("t")
    assert out["deleted"] and sorted(out["subagent_sessions_deleted"]) == [names[1], names[2]]
    assert sorted(s["session_id"] for s in engine.list_sessions()) == ["acme/subagent/tools:4", "s1/tools:9", "t"]
