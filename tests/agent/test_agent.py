"""LangChain integration: create_agent + WorkingMemoryMiddleware + archive tools, commit_node, the demo agent."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, TypedDict

import pytest
from engine_helpers import pairing_problems, stored_pairing_problems
from fakes import ScriptedToolModel
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from oracles import validate_message

from workmem.graphs.agent.commit_node import commit_node
from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.agent.tools import make_archive_tools
from workmem.graphs.context.assemble import SYSTEM_ADDITION, reserve_for_reply
from workmem.graphs.demo.agent import build_demo_agent, demo_engine
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.tokens import count_tokens

AGENT_PROMPT = "You are a careful file assistant."
TURNS = 30


ReactiveScript = ScriptedToolModel  # its script may hold functions of the prompt


def code(i: int) -> str:
    return f"KX-{i:02d}-{(i * 7919) % 1000:03d}"


@tool
def read_file(path: str) -> str:
    """Read a text file of the project."""
    i = int(path.split("_")[1].split(".")[0])
    return f"{path} says: the access code is {code(i)}. " + "Background paragraph. " * 25


def turn_script(i: int) -> list[Any]:
    return [
        AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": f"notes/file_{i}.txt"},
                                           "id": f"call_read_{i}", "type": "tool_call"}]),
        AIMessage(content=f"file_{i}.txt holds access code {code(i)}."),
    ]


def search_call(messages: list[BaseMessage]) -> AIMessage:
    assert messages[-1].text == "Which access code did file_3.txt hold?"
    return AIMessage(content="", tool_calls=[{"name": "archive_search", "args": {"query": "file_3.txt access code"},
                                              "id": "call_search", "type": "tool_call"}])


def answer_from_search(messages: list[BaseMessage]) -> AIMessage:
    result = messages[-1]
    assert isinstance(result, ToolMessage) and result.name == "archive_search"
    first_hit = result.text.split("\n\n")[1]
    return AIMessage(content=f"According to the archive: {first_hit}")


def agent_with(engine: WorkingMemoryEngine, model: Any, session: str | None = "agent-s",
               checkpointer: Any = None, trim_state: bool = True) -> Any:
    return create_agent(model, tools=[read_file], system_prompt=AGENT_PROMPT, checkpointer=checkpointer,
                        middleware=[WorkingMemoryMiddleware(engine, session_id=session, trim_state=trim_state)])


def test_thirty_turns_with_tool_calls_and_automatic_commits(root):
    script: list[Any] = [step for i in range(TURNS) for step in turn_script(i)]
    script += [search_call, answer_from_search]
    model = ReactiveScript(messages=iter(script))
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=6, commit_token_threshold=1_200) as engine:
        # the whole history stays in the state, to compare it with what was stored
        agent = agent_with(engine, model, checkpointer=InMemorySaver(), trim_state=False)
        config = {"configurable": {"thread_id": "agent-s"}}
        commit_tasks = []
        for i in range(TURNS):
            state = agent.invoke({"messages": [HumanMessage(content=f"Turn {i}: what is in notes/file_{i}.txt?")]},
                                 config)
            commit_tasks.append(agent.get_state(config).values.get("workmem_commit_task"))
            engine.wait()  # keep the run deterministic; test_engine proves the commit does not block the turn
        state = agent.invoke({"messages": [HumanMessage(content="Which access code did file_3.txt hold?")]}, config)
        commit_tasks.append(agent.get_state(config).values.get("workmem_commit_task"))
        engine.wait()

        archives = engine.storage.sessions.list_archives("agent-s")
        started = list(dict.fromkeys(t for t in commit_tasks if t))  # the state keeps the last one a call started
        assert len(archives) >= 2 and len(started) == len(archives)
        assert all(engine.task(t)["status"] == "completed" for t in started)

        final = state["messages"][-1]
        assert final.content.startswith("According to the archive: [archive_001 ") and code(3) in final.content
        search_result = state["messages"][-2]
        assert search_result.artifact[0]["archive_id"] == "archive_001"

        # what the model was sent: the assembled context, never orphaned, far shorter than the history
        assert model.calls == 2 * TURNS + 2
        for prompt in model.prompts:
            assert isinstance(prompt[0], SystemMessage) and prompt[0].text.startswith(AGENT_PROMPT)
            assert pairing_problems(prompt) == []
        noted = [SYSTEM_ADDITION in p[0].text for p in model.prompts]
        first = noted.index(True)
        assert model.prompts[first][1].additional_kwargs.get("workmem") == "summary"
        assert not any(noted[:first]) and all(noted[first:]), "workmem's note joins with the first memory, and stays"
        assert max(len(p) for p in model.prompts) < engine.session_info("agent-s")["total_message_count"] / 2
        assert any(p[1].additional_kwargs.get("workmem") == "summary" for p in model.prompts[-10:])
        question_prompt = model.prompts[-2]
        assert code(3) not in "\n".join(m.text for m in question_prompt[2:]), "file_3's turn is only in the archive"

        # what was stored: every message of the agent history exactly once, in order, tool pairs intact
        info = engine.session_info("agent-s")
        stored = engine.storage.sessions.messages_in_range("agent-s", 1, info["next_seq"] - 1)
        assert [m["meta"]["lc_id"] for m in stored] == [m.id for m in state["messages"]]
        assert len(state["messages"]) == info["total_message_count"]
        assert stored_pairing_problems(stored) == []
        assert pairing_problems(engine.assemble("agent-s")["messages"]) == []


def test_without_a_checkpointer_the_history_comes_from_workmem(root):
    model = ReactiveScript(messages=iter(["First answer.", "Second answer.", "Third answer."]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[], middleware=[WorkingMemoryMiddleware(engine)])
        for text in ("My name is Ada.", "I live in Lyon.", "Where do I live?"):
            agent.invoke({"messages": [HumanMessage(content=text)]}, {"configurable": {"session_id": "stateless"}})
        last_prompt = model.prompts[-1]
        assert [m.text for m in last_prompt] == ["My name is Ada.", "First answer.", "I live in Lyon.",
                                                 "Second answer.", "Where do I live?"], "nothing out of view: no note"
        assert engine.session_info("stateless")["total_message_count"] == 6


def test_messages_stored_by_someone_else_between_turns_do_not_cause_duplicates(root):
    model = ReactiveScript(messages=iter(["First.", "Second."]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = agent_with(engine, model, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "agent-s"}}
        agent.invoke({"messages": [HumanMessage(content="one")]}, config)
        engine.add_messages("agent-s", [{"role": "system", "content": "A note logged by another writer."}])
        state = agent.invoke({"messages": [HumanMessage(content="two")]}, config)
        stored = engine.storage.sessions.live_messages("agent-s")
        assert [m["parts"][0]["text"] for m in stored] == ["one", "First.", "A note logged by another writer.",
                                                           "two", "Second."]
        assert len(state["messages"]) == 4
        assert engine.storage.sessions.hidden("agent-s") == set(), "only messages that came from the agent are hidden"


def test_a_run_stored_before_a_crash_is_not_stored_again(root):
    """A crash after after_turn stored the run but before the agent's checkpoint: the state comes back
    without the count of stored messages; alignment by id still stores each message once."""
    model = ReactiveScript(messages=iter(["First.", "Second."]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        saver = InMemorySaver()
        agent = agent_with(engine, model, checkpointer=saver)
        config = {"configurable": {"thread_id": "agent-s"}}
        state = agent.invoke({"messages": [HumanMessage(content="one")]}, config)
        # the same run again from a fresh process: nothing is new
        middleware = WorkingMemoryMiddleware(engine, session_id="agent-s")
        middleware.after_agent(state, None)
        assert engine.session_info("agent-s")["total_message_count"] == 2, "the same run again stores nothing"
        agent.invoke({"messages": [HumanMessage(content="two")]}, config)
        assert [m["parts"][0]["text"] for m in engine.storage.sessions.live_messages("agent-s")] == [
            "one", "First.", "two", "Second."]
        assert [m.text for m in model.prompts[-1][1:]] == ["one", "First.", "two"]


def test_the_middleware_leaves_the_agent_history_alone(root):
    model = ReactiveScript(messages=iter(["ok"]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("h", [{"role": "user", "content": "stored earlier"}])
        agent = create_agent(model, tools=[], middleware=[WorkingMemoryMiddleware(engine, session_id="h")])
        state = agent.invoke({"messages": [HumanMessage(content="hello")]})
        assert [m.text for m in state["messages"]] == ["hello", "ok"]
        assert [m.text for m in model.prompts[0]] == ["stored earlier", "hello"]


HUGE_OUTPUT_BYTES = DEFAULT_MAX_MESSAGE_BYTES + 100


@tool
def dump_log() -> str:
    """Return the whole server log."""
    lines = "".join(f"line {i:06d}: request served\n" for i in range(HUGE_OUTPUT_BYTES // 27 + 1))
    return ("LOG-HEAD\n" + lines)[: HUGE_OUTPUT_BYTES - 9] + "\nLOG-TAIL"


@pytest.mark.parametrize("max_payload_bytes", [None, HUGE_OUTPUT_BYTES // 2], ids=["payload", "over-max-payload"])
def test_a_tool_output_over_the_message_cap_is_stored_whole_or_clipped_past_the_payload_limit(
        root, caplog, max_payload_bytes):
    model = ReactiveScript(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "dump_log", "args": {}, "id": "call_dump", "type": "tool_call"}]),
        AIMessage(content="The log ends with LOG-TAIL."),
        AIMessage(content="Second answer."),
    ]))
    limits = {} if max_payload_bytes is None else {"max_payload_bytes": max_payload_bytes}
    with WorkingMemoryEngine(root, durable=False, **limits) as engine:
        agent = create_agent(model, tools=[dump_log], checkpointer=InMemorySaver(), middleware=[
            WorkingMemoryMiddleware(engine, session_id="huge", token_budget=1_000_000)])
        config = {"configurable": {"thread_id": "huge"}}
        with caplog.at_level(logging.WARNING):
            agent.invoke({"messages": [HumanMessage(content="Show me the log.")]}, config)
            state = agent.invoke({"messages": [HumanMessage(content="Thanks. Anything else?")]}, config)

        stored = engine.storage.sessions.live_messages("huge")
        assert [m["meta"]["lc_id"] for m in stored] == [m.id for m in state["messages"]], "both turns stored"
        assert len(state["messages"]) == 6
        assert stored_pairing_problems(stored) == []
        result = stored[2]["parts"][0]
        assert (stored[2]["role"], result["tool_call_id"], result["name"]) == ("tool", "call_dump", "dump_log")
        assert result["content"].startswith("LOG-HEAD\nline 000000") and result["content"].endswith("\nLOG-TAIL")
        assert validate_message(stored[2]) <= DEFAULT_MAX_MESSAGE_BYTES, "the line refers to the payload"
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "max_" in r.getMessage()]
        if max_payload_bytes is None:
            assert result["content"] == dump_log.invoke({}), "stored whole, beyond the message cap"
            assert ["workmem_clipped_bytes" in m["meta"] for m in stored] == [False] * 6 and warnings == []
        else:
            assert "…[workmem: clipped " in result["content"] and "exceeded max_payload_bytes]…" in result["content"]
            assert stored[2]["meta"]["workmem_clipped_bytes"] == HUGE_OUTPUT_BYTES
            assert result["size"] <= max_payload_bytes
            assert ["workmem_clipped_bytes" in m["meta"] for m in stored] == [False, False, True, False, False, False]
            assert len(warnings) == 1

        # what the model saw: the result's synopsis right after its call (head, tail, its reference), the
        # same bytes in the turn and on the next turn
        assert model.calls == 3
        for prompt in model.prompts:
            assert pairing_problems(prompt) == []
        shown = []
        for prompt in model.prompts[1:]:
            sent = [m for m in prompt if isinstance(m, ToolMessage)]
            assert [m.tool_call_id for m in sent] == ["call_dump"]
            shown.append(sent[0].content)
        assert shown[0] == shown[1] and "\n[… tool result seq:3 · dump_log · " in shown[0]
        assert shown[0].startswith("LOG-HEAD\nline 000000") and shown[0].endswith("\nLOG-TAIL"), "its own head and tail"
        assert "read_tool_result(ref=\"seq:3\"" in shown[0] and count_tokens(shown[0]) <= 3_000

        # direct callers get the typed error for any other message over the cap
        with pytest.raises(InvalidInput):
            engine.after_turn("huge", [HumanMessage(content=dump_log.invoke({}))])


def test_a_turn_too_large_for_the_window_is_shown_as_its_synopsis(root):
    """With the default 128 000-token budget the clipped 1 MiB output cannot fit: the model sees its synopsis
    (head, tail, reference), the turn goes on, and the stored copy keeps its full size."""
    model = ReactiveScript(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "dump_log", "args": {}, "id": "call_dump", "type": "tool_call"}]),
        AIMessage(content="The log ends with LOG-TAIL."),
    ]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[dump_log], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, session_id="window")])
        state = agent.invoke({"messages": [HumanMessage(content="Show me the log.")]},
                             {"configurable": {"thread_id": "window"}})

        assert state["messages"][-1].content == "The log ends with LOG-TAIL."
        sent = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
        assert len(sent) == 1 and "\n[… tool result seq:3 · dump_log" in sent[0].content
        assert sent[0].content.startswith("LOG-HEAD\n") and sent[0].content.endswith("LOG-TAIL")
        assert count_tokens(sent[0].content) <= 3_000
        assert sum(count_tokens(m.text) for m in model.prompts[1]) <= 128_000 - reserve_for_reply(128_000)
        stored = engine.storage.sessions.live_messages("window")[2]["parts"][0]["content"]
        assert len(stored.encode()) > 4 * len(sent[0].content.encode())  # the view only: storage keeps more


def test_archive_tools_answer_errors_instead_of_raising(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("t", [{"role": "user", "content": "The staging port is 5433."},
                                  {"role": "assistant", "content": "Noted."}])
        engine.commit("t", keep_recent_count=0)
        search, expand = make_archive_tools(engine, "t")
        message = search.invoke({"type": "tool_call", "id": "c1", "name": "archive_search",
                                 "args": {"query": "staging port"}})
        assert message.content.startswith("1 match, ") and "[archive_001 #1 t1 user · exact]" in message.content
        assert message.artifact[0]["seq"] == 1
        assert "No archived message matches" in search.invoke({"query": "zebra"})
        missing = search.invoke({"type": "tool_call", "id": "c2", "name": "archive_search",
                                 "args": {"query": "port", "archive_id": "archive_404"}})
        assert missing.status == "error" and "archive_404" in missing.content
        whole = expand.invoke({"archive_id": "archive_001"})
        assert "[#1 user]" in whole and "The staging port is 5433." in whole
        assert "archive_404" in expand.invoke({"archive_id": "archive_404"})


# -- commit_node ---------------------------------------------------------------------------------------

class Parent(TypedDict, total=False):
    session_id: str
    workmem_commit: dict


def test_commit_node_inside_a_parent_graph(root):
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=1) as engine:
        engine.add_messages("p", [{"role": "user", "content": f"message {i}"} for i in range(5)])
        builder = StateGraph(Parent)
        builder.add_node("commit", commit_node(engine))
        builder.add_edge(START, "commit")
        builder.add_edge("commit", END)
        graph = builder.compile(checkpointer=InMemorySaver())
        out = graph.invoke({"session_id": "p"}, {"configurable": {"thread_id": "parent-1"}})
        assert out["workmem_commit"]["status"] == "completed"
        assert [m["seq"] for m in engine.storage.sessions.live_messages("p")] == [5]
        nothing = graph.invoke({"session_id": "never-seen"}, {"configurable": {"thread_id": "parent-2"}})
        assert nothing["workmem_commit"]["status"] == "skipped"


class AgentWithCommit(MessagesState, total=False):
    workmem_commit: dict


class AgentWithCommitAndTask(AgentWithCommit, total=False):
    workmem_commit_task: str | None


@pytest.mark.parametrize("parent_state", [AgentWithCommit, AgentWithCommitAndTask])
def test_agent_then_commit_node_in_one_parent_graph(root, parent_state):
    """Whether or not the parent carries the middleware's fields, each message is stored once."""
    model = ReactiveScript(messages=iter(["Noted the first.", "Noted the second."]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        builder = StateGraph(parent_state)
        builder.add_node("agent", agent_with(engine, model, session=None))
        builder.add_node("commit", commit_node(engine, keep_recent_count=0))
        builder.add_edge(START, "agent")
        builder.add_edge("agent", "commit")
        builder.add_edge("commit", END)
        graph = builder.compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "combo"}}
        first = graph.invoke({"messages": [HumanMessage(content="Remember alpha.")]}, config)
        assert first["workmem_commit"]["archive_id"] == "archive_001"
        second = graph.invoke({"messages": [HumanMessage(content="Remember beta.")]}, config)
        assert second["workmem_commit"]["archive_id"] == "archive_002"
        assert engine.session_info("combo")["total_message_count"] == 4
        assert len(second["messages"]) == 4
        assert model.prompts[-1][1].additional_kwargs.get("workmem") == "summary"


def texts_of(stored: dict[str, Any]) -> str:
    return json.dumps(stored["parts"])


def call_of(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])


@pytest.mark.parametrize("commit_mode", ["sync", "background"])
def test_a_subagent_run_from_a_tool_keeps_its_own_session(root, commit_mode):
    """An agent invoked inside another agent's tool inherits its thread id; with workmem on both, each keeps its
    own conversation: nothing of the subagent is stored into, or shown from, the parent's session."""
    parent_model = ScriptedToolModel(messages=iter([
        call_of("read_file", {"path": "app/file_1.py"}, "p1"), call_of("delegate", {"task": "audit lib"}, "p2"),
        AIMessage(content="Parent done.")]))
    sub_model = ScriptedToolModel(messages=iter([call_of("read_file", {"path": "lib/file_2.py"}, "s1"),
                                                 AIMessage(content="Sub done: lib is clean.")]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        sub = create_agent(sub_model, tools=[read_file], middleware=[
            WorkingMemoryMiddleware(engine, commit_mode=commit_mode)])

        @tool
        def delegate(task: str) -> str:
            """Hand a task to the subagent."""
            return sub.invoke({"messages": [HumanMessage(task)]})["messages"][-1].text

        memory = WorkingMemoryMiddleware(engine, commit_mode=commit_mode)
        parent = create_agent(parent_model, tools=[read_file, delegate], checkpointer=InMemorySaver(),
                              middleware=[memory])
        out = parent.invoke({"messages": [HumanMessage("Audit everything.")]}, {"configurable": {"thread_id": "t"}})
        engine.join_commits()
        assert out["messages"][-1].text == "Parent done."
        sessions = sorted(s["session_id"] for s in engine.list_sessions())
        assert sessions[0] == "t" and len(sessions) == 2 and sessions[1].startswith("t/subagent/tools:")
        parent_log = [texts_of(m) for m in engine.iter_messages("t")]
        sub_log = [texts_of(m) for m in engine.iter_messages(sessions[1])]
        assert len(parent_log) == 6 and "Sub done: lib is clean." in parent_log[-2]
        assert "audit lib" in sub_log[0] and len(sub_log) == 4, "the subagent's messages, stored once"
        assert not any("file_2" in text for text in parent_log), "nothing the subagent did"
        shown_to_parent = {c["id"] for prompt in parent_model.prompts for m in prompt
                           for c in getattr(m, "tool_calls", None) or ()}
        assert shown_to_parent == {"p1", "p2"}
        forgotten = memory.forget("t")
        assert forgotten["deleted"] and forgotten["subagent_sessions_deleted"] == [sessions[1]]
        assert engine.list_sessions() == []


# -- the demo agent -------------------------------------------------------------------------------------

def assert_answered_from_memory(messages: list[BaseMessage], fact: str) -> None:
    """The demo agent's last answer cites `fact`: from the working memory it was shown, or after a search."""
    answer = messages[-1]
    assert fact in answer.content
    if answer.content.startswith("From the archive (archive_"):
        call, result = messages[-3:-1]
        assert call.tool_calls[0]["name"] == "archive_search" and result.name == "archive_search"
    else:
        assert answer.content.startswith("From our conversation")


def test_demo_agent_answers_from_its_memory(root):
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=2, commit_token_threshold=60) as engine:
        demo = build_demo_agent(engine, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "demo-s"}}
        statements = ["The staging database listens on port 5433.", "Alice owns the billing service.",
                      "The deploy script lives in ops/deploy.sh.", "Lunch is at noon on Fridays.",
                      "The office plant is called Gerald.", "Backups run nightly.", "The logo is teal.",
                      "Tickets go to the ops queue."]
        for text in statements:
            demo.invoke({"messages": [HumanMessage(content=text)]}, config)
            engine.wait()
        assert len(engine.storage.sessions.list_archives("demo-s")) >= 2
        state = demo.invoke({"messages": [HumanMessage(content="What is the plant called?")]}, config)
        assert_answered_from_memory(state["messages"], "Gerald")
        assert engine.archive_search("demo-s", "plant Gerald")[0]["turn_id"] == "t5"
        unknown = demo.invoke({"messages": [HumanMessage(content="What colour is the submarine?")]}, config)
        assert "don't know" in unknown["messages"][-1].content


def test_the_async_path_stores_and_searches_too(root):
    async def conversation(demo: Any) -> list[BaseMessage]:
        config = {"configurable": {"thread_id": "async-s"}}
        for text in ("Backups run nightly.", "The office plant is called Gerald.", "The logo is teal.",
                     "Tickets go to the ops queue.", "Lunch is at noon."):
            await demo.ainvoke({"messages": [HumanMessage(content=text)]}, config)
            await asyncio.to_thread(engine.wait)  # deterministic commit points
        state = await demo.ainvoke({"messages": [HumanMessage(content="What is the plant called?")]}, config)
        return state["messages"]

    with WorkingMemoryEngine(root, durable=False, keep_recent_count=1, commit_token_threshold=20) as engine:
        messages = asyncio.run(conversation(build_demo_agent(engine, checkpointer=InMemorySaver())))
        ids = [m["meta"]["lc_id"] for a in engine.list_archives("async-s")
               for m in engine.archive_messages("async-s", a["archive_id"])]
        ids += [m["meta"]["lc_id"] for m in engine.live_messages("async-s")]
        assert engine.session_info("async-s")["total_message_count"] == len(ids) == len(set(ids)), "each once"
        assert {m.id for m in messages} <= set(ids), "the state (trimmed) holds only stored messages"
        assert_answered_from_memory(messages, "Gerald")


def test_module_level_demo_agent_is_importable_without_side_effects():
    from workmem.graphs.demo import agent as module

    assert module.agent.checkpointer is None, "langgraph dev refuses graphs that bring a checkpointer"
    nodes = set(module.agent.get_graph().nodes)
    assert {"model", "tools", "WorkingMemoryMiddleware.after_agent"} <= nodes
    assert demo_engine.cache_info().currsize == 0, "no engine (and no data root) until the agent runs"


@pytest.mark.parametrize("factory", [lambda e: e, lambda e: (lambda: e)])
def test_engine_may_be_given_lazily(root, factory: Callable[[Any], Any]):
    model = ReactiveScript(messages=iter(["hi"]))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[], middleware=[WorkingMemoryMiddleware(factory(engine), session_id="l")])
        agent.invoke({"messages": [HumanMessage(content="hello")]})
        assert engine.session_info("l")["total_message_count"] == 2


def test_the_old_demo_agent_path_still_loads_with_a_deprecation_warning():
    import importlib
    import sys

    sys.modules.pop("workmem.graphs.demo_agent", None)
    with pytest.warns(DeprecationWarning, match="workmem.graphs.demo.agent"):
        old = importlib.import_module("workmem.graphs.demo_agent")
    from workmem.graphs.demo import agent as new

    assert old.agent is new.agent
