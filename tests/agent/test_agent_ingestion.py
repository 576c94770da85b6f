"""The middleware in real applications: alignment decides what is stored,
the thread's state decides what the model sees, sessions follow threads, own tool traffic stays out of
the index. Every test runs a real `create_agent` with a scripted model."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from typing import Any

import pytest
from engine_helpers import ask, call, pairing_problems, prompt_texts, read_file, stored, texts, thread
from fakes import create_call, scripted
from langchain.agents import create_agent
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
    messages_to_dict,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.agent.tools import make_archive_tools
from workmem.graphs.cli import main
from workmem.graphs.commit import build_commit_graph
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.context import CommitContext
from workmem.state.errors import InvalidInput
from workmem.state.tokens import count_tokens

# -- alignment decides what is stored --------------------------------------------------------------------


@pytest.mark.parametrize("removed", [1, 3], ids=["older-stored-message", "newest-stored-message"])
def test_after_removing_a_stored_message_the_next_turn_is_stored_exactly_once(backend, removed):
    """The first build's stored count pointed past a removed message and skipped the next user message."""
    model = scripted("A1", "A2", "A3")
    with backend.engine(durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke(ask("Q1"), thread("t"))
        state = agent.invoke(ask("Q2"), thread("t"))
        agent.update_state(thread("t"), {"messages": [RemoveMessage(id=state["messages"][removed].id)]})
        agent.invoke(ask("Q3"), thread("t"))

        assert texts(stored(engine, "t")) == ["Q1", "A1", "Q2", "A2", "Q3", "A3"]
        gone = ["Q1", "A1", "Q2", "A2"][removed]
        assert gone not in prompt_texts(model) and "Q3" in prompt_texts(model)
        assert engine.storage.sessions.hidden("t") == {removed + 1}
        assert gone not in [m.text for m in engine.assemble("t")["messages"]], "hidden from other readers too"


@pytest.mark.parametrize("naming", ["thread_id", "context"])
def test_a_stateless_client_resending_the_whole_history_stores_each_message_once(root, naming):
    model = scripted(*(f"Answer {i}." for i in range(6)))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])  # no checkpointer
        history: list[dict[str, str]] = []
        for i in range(6):
            history.append({"role": "user", "content": f"Question {i}?"})
            if naming == "thread_id":
                out = agent.invoke({"messages": history}, thread("web-1"))
            else:
                out = agent.invoke({"messages": history}, context={"session_id": "web-1"})
            history.append({"role": "assistant", "content": out["messages"][-1].text})

        assert engine.session_info("web-1")["total_message_count"] == 12
        assert texts(stored(engine, "web-1")) == [m["content"] for m in history]
        assert prompt_texts(model).count("Question 0?") == 1
        assert prompt_texts(model)[-1] == "Question 5?"


def test_a_stateless_client_resending_history_after_a_commit_stores_each_message_once(root):
    """The live run is found right after the newest archived message (anchored fingerprints)."""
    model = scripted(*(f"Answer {i}." for i in range(6)))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        history: list[dict[str, str]] = []
        for i in range(6):
            history.append({"role": "user", "content": f"Question {i}?"})
            out = agent.invoke({"messages": history}, thread("web-2"))
            history.append({"role": "assistant", "content": out["messages"][-1].text})
            if i == 2:
                assert engine.commit("web-2", keep=("messages", 2))["status"] == "completed"
        assert texts(stored(engine, "web-2")) == [m["content"] for m in history]
        last = prompt_texts(model)
        assert last[0].startswith("[Session History Summary]") and "Question 0?" not in last[1:]


def test_a_stateless_client_keeping_what_the_agent_returned_stores_each_message_once(root):
    """The client re-sends the agent's output as plain dicts (fresh ids every run) with sync commits: the state
    the agent returned lost the archived messages it knew by id, and kept the ones it had matched by content."""
    replies = []
    for i in range(6):
        replies += [call("cat", {"path": f"f{i}"}, f"c{i}").model_copy(update={"content": f"Reading f{i}."}),
                    f"Answer {i}."]
    model = scripted(*replies)

    def cat(path: str) -> str:
        """Read a file."""
        return f"contents of {path}\n" + "\n".join(f"line {n}: value {n * 3}" for n in range(30))

    with WorkingMemoryEngine(root, durable=False, keep=("messages", 4)) as engine:
        agent = create_agent(model, tools=[cat], middleware=[WorkingMemoryMiddleware(
            engine, trigger=("tokens", 1000), commit_mode="sync")])
        history: list[Any] = []
        said: list[str] = []
        for i in range(6):
            history.append({"role": "user", "content": f"Task {i}."})
            out = agent.invoke({"messages": history}, thread("web-3"))
            said += [m.text for m in out["messages"] if m.text not in said]
            history = convert_to_openai_messages(out["messages"])
        kept = [m["parts"][0].get("text") or m["parts"][0].get("content") for m in stored(engine, "web-3")]
        assert engine.session_info("web-3")["commit_count"] >= 2
        assert len(kept) == len(set(kept)) == 24, "6 turns of user, call, result, answer, each stored once"


@pytest.mark.parametrize("client", ["checkpointed", "stateless"])
def test_a_system_message_the_state_starts_with_goes_out_first_on_every_call_after_commits(root, client):
    """Instructions passed as the first message (`{"messages": [SystemMessage(…), …]}`) instead of
    `system_prompt=`: a commit archives them; they went out on no later call and left the agent's state."""
    rules = "You are PirateBot. Answer in pirate speak."
    model = scripted(*(f"Arr, answer {i} " + "yo ho " * 60 for i in range(6)))
    with WorkingMemoryEngine(root, durable=False, keep=("messages", 2)) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 600),
                                                                         commit_mode="sync")],
                             checkpointer=InMemorySaver() if client == "checkpointed" else None)
        history: list[Any] = [SystemMessage(content=rules, id="rules")]
        for i in range(6):
            question = HumanMessage(content=f"Question {i}?", id=f"q{i}")
            if client == "checkpointed":
                state = agent.invoke({"messages": [*history, question]}, thread("pirate"))
                history = []
            else:
                history.append(question)
                state = agent.invoke({"messages": history}, thread("pirate"))
                history.append(state["messages"][-1])
        assert engine.session_info("pirate")["commit_count"] >= 2
        for prompt in model.prompts:
            assert [m.text.count(rules) for m in prompt] == [1] + [0] * (len(prompt) - 1), "first, once"
            assert isinstance(prompt[0], SystemMessage)
        assert any(isinstance(m, SystemMessage) for m in state["messages"]), "it never leaves the state"
        assert texts(stored(engine, "pirate")).count(rules) == 1


@pytest.mark.parametrize("case", ["split-by-the-keep", "edited-after-the-commit"])
def test_leading_system_messages_go_out_together_in_the_system_message_once_one_is_archived(root, case):
    """A commit that archived the first of two leading system messages sent the second after the memory's human
    message; an archived one edited by id went after it too (providers refuse a system message mid-conversation)."""
    model = scripted(*(f"Answer {i}." for i in range(6)))
    first, second = SystemMessage(content="S1: be a pirate.", id="s1"), SystemMessage(content="S2: no emoji.", id="s2")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke({"messages": [first, second, HumanMessage(content="Q0", id="q0")]}, thread("sys"))
        keep = ("messages", 3) if case == "split-by-the-keep" else ("messages", 1)
        assert engine.commit("sys", keep=keep)["status"] == "completed"
        if case == "edited-after-the-commit":
            agent.update_state(thread("sys"), {"messages": [SystemMessage(content="S1: be a parrot.", id="s1")]})
        agent.invoke({"messages": [HumanMessage(content="Q1", id="q1")]}, thread("sys"))
        prompt = model.prompts[-1]
        assert [isinstance(m, SystemMessage) for m in prompt] == [True] + [False] * (len(prompt) - 1)
        rules = prompt[0].text
        said = "S1: be a pirate." if case == "split-by-the-keep" else "S1: be a parrot."
        assert rules.index(said) < rules.index("S2: no emoji.") and rules.count("S2: no emoji.") == 1


def test_a_client_sending_its_system_prompt_and_each_new_turn_sees_its_whole_history(root):
    """The re-sent prompt, taken for the live stored copy, made the state look like a whole history: every earlier
    turn was hidden from the model and from the next commit."""
    model = scripted(*(f"Answer {i}." for i in range(4)))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])  # no checkpointer
        for i in range(4):
            agent.invoke({"messages": [{"role": "system", "content": "Be terse."},
                                       {"role": "user", "content": f"Question {i}?"}]}, thread("prompted"))
        assert not engine.hidden("prompted")
        last = [m.text for m in model.prompts[-1]]
        assert all(f"Question {i}?" in last and f"Answer {i}." in last for i in range(3)) and "Question 3?" in last


def test_a_client_sending_only_new_turns_stores_a_repeated_turn_twice_and_sees_its_tail(root):
    model = scripted("Hello!", "Fine, thanks.", "Hello!")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)])
        for text in ("hi", "how are you?", "hi"):
            agent.invoke({"messages": [{"role": "user", "content": text}]}, thread("chat"))
        assert texts(stored(engine, "chat")) == ["hi", "Hello!", "how are you?", "Fine, thanks.", "hi", "Hello!"]
        assert prompt_texts(model) == ["hi", "Hello!", "how are you?", "Fine, thanks.", "hi"]


def test_messages_stored_by_another_writer_are_not_hidden_but_stay_out_of_the_threads_view(backend):
    model = scripted("First.", "Second.")
    with backend.engine(durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke(ask("one"), thread("w"))
        engine.add_messages("w", [{"role": "system", "content": "An operator note."}])
        agent.invoke(ask("two"), thread("w"))
        assert texts(stored(engine, "w")) == ["one", "First.", "An operator note.", "two", "Second."]
        assert "An operator note." not in prompt_texts(model)
        assert engine.storage.sessions.hidden("w") == set()


# -- the thread's state decides what the model sees ---------------------------------------------------


def test_removing_an_uncommitted_message_changes_what_the_model_sees_and_commits(backend):
    model = scripted("The code is RED-7.", "Noted.", "Done.")
    committer = scripted(create_call({"Current State": "Remembering a code."}))
    with backend.engine(model=committer, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        first = agent.invoke(ask("What is the code?"), thread("edit"))
        agent.invoke(ask("Remember BLUE-9."), thread("edit"))
        agent.update_state(thread("edit"), {"messages": [RemoveMessage(id=m.id) for m in first["messages"][:2]]})
        agent.invoke(ask("Go on."), thread("edit"))
        assert prompt_texts(model) == ["Remember BLUE-9.", "Noted.", "Go on."]

        assert engine.commit("edit", keep=("messages", 0))["status"] == "completed"
        transcript = committer.prompt_text(0)
        assert "RED-7" not in transcript and "BLUE-9" in transcript, "hidden messages stay out of the transcript"
        assert engine.archive_search("edit", "RED-7"), "the log keeps them: still searchable"


def test_a_fork_from_an_earlier_checkpoint_sees_its_branch_and_the_main_thread_sees_its_own(backend):
    model = scripted("A1", "A2", "A3", "Fork answer.", "Main answer.")
    with backend.engine(durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for text in ("Q1", "Q2", "Q3"):
            agent.invoke(ask(text), thread("f"))
        history = list(agent.get_state_history(thread("f")))
        main_tip = history[0].config
        after_first = next(s.config for s in history if [m.text for m in s.values.get("messages", [])] == ["Q1", "A1"])

        agent.invoke(ask("Fork question?"), after_first)
        assert prompt_texts(model) == ["Q1", "A1", "Fork question?"]

        agent.invoke(ask("Main question?"), main_tip)
        assert prompt_texts(model) == ["Q1", "A1", "Q2", "A2", "Q3", "A3", "Main question?"]
        assert "Fork question?" not in prompt_texts(model)
        assert texts(stored(engine, "f"))[-4:] == ["Fork question?", "Fork answer.", "Main question?", "Main answer."]
        assert engine.storage.sessions.hidden("f") == {7, 8}, "the branch not followed is hidden, the other shown again"


def test_two_threads_never_see_each_others_facts(root):
    def answer(messages):
        return "I know: " + " | ".join(m.text for m in messages[1:])

    model = scripted(*([answer] * 8))
    with WorkingMemoryEngine(root, durable=False, commit_token_threshold=60, keep=("messages", 2)) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync")],
                             checkpointer=InMemorySaver())
        for text in ("My locker code is ALPHA-1.", "My car is blue.", "My dog is Rex."):
            agent.invoke(ask(text), thread("alice"))
        reply = agent.invoke(ask("What do you know about me?"), thread("bob"))
        assert "ALPHA-1" not in reply["messages"][-1].text and "Rex" not in model.prompts[-1][0].text
        assert engine.storage.sessions.list_archives("alice"), "alice's turns were committed"
        assert engine.archive_search("alice", "ALPHA-1")
        assert not engine.storage.sessions.session_exists("bob") or not engine.working_memory("bob")


def test_twenty_turns_reusing_call_0_commit_down_to_the_keep_window(root):
    script = [step for i in range(20) for step in (call("read_file", {"path": f"f{i}.py"}), f"Read f{i}.py.")]
    model = scripted(*script)
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_file], middleware=[WorkingMemoryMiddleware(engine)],
                             checkpointer=InMemorySaver())
        for i in range(20):
            agent.invoke(ask(f"Read f{i}.py"), thread("ids"))
        assert engine.session_info("ids")["total_message_count"] == 80
        assert engine.commit("ids", keep=("messages", 4))["status"] == "completed"
        live = engine.storage.sessions.live_messages("ids")
        assert [m["seq"] for m in live] == [77, 78, 79, 80]
        assert pairing_problems(engine.assemble("ids")["messages"]) == []
        for prompt in model.prompts:
            assert pairing_problems(prompt) == []


# -- inputs -----------------------------------------------------------------------------------------------


def langchain_dict_forms() -> list[dict[str, Any]]:
    """Each LangChain dict form: `{"type": …, "content": …}` and the `messages_to_dict` shape."""
    short = [{"type": "human", "content": "Read the config."},
             {"type": "ai", "content": "",
              "tool_calls": [{"id": "c1", "name": "read_file", "args": {"path": "a.toml"}}]},
             {"type": "tool", "content": "port = 8080", "tool_call_id": "c1", "name": "read_file"}]
    full = messages_to_dict([AIMessage(content="It listens on 8080.", id="lc-ai-1"),
                             HumanMessage(content="Thanks.", id="lc-h-1")])
    return [*short, *full]


def check_dict_forms(messages: list[dict[str, Any]]) -> None:
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[1]["parts"][0] == {"type": "tool_call", "id": "c1", "name": "read_file",
                                       "arguments": {"path": "a.toml"}}
    assert messages[2]["parts"][0]["tool_call_id"] == "c1" and messages[2]["parts"][0]["content"] == "port = 8080"
    assert messages[3]["meta"]["lc_id"] == "lc-ai-1" and messages[4]["parts"][0]["text"] == "Thanks."


def test_langchain_dict_forms_through_the_api_the_cli_and_the_studio_input(root, tmp_path, capsys):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("api", langchain_dict_forms())
        check_dict_forms(engine.storage.sessions.live_messages("api"))

    path = tmp_path / "forms.json"
    path.write_text(json.dumps(langchain_dict_forms()), encoding="utf-8")
    assert main(["--root", str(root), "add", "cli", str(path), "--json"]) == 0
    capsys.readouterr()

    graph = build_commit_graph(with_lease=True).compile(checkpointer=InMemorySaver())
    out = graph.invoke({"session_id": "studio", "keep": "messages:5", "messages": langchain_dict_forms()},
                       thread("studio-forms"), context=CommitContext(root=str(root)))
    assert out["status"] == "skipped" and out["reason"] == "all_within_keep_window"

    with WorkingMemoryEngine(root, durable=False) as engine:
        check_dict_forms(engine.storage.sessions.live_messages("cli"))
        check_dict_forms(engine.storage.sessions.live_messages("studio"))
        with pytest.raises(InvalidInput, match=r"messages\[0\]"):
            engine.add_messages("api", [{"type": "text", "text": "a content block is not a message"}])
        assert engine.session_info("api")["total_message_count"] == 5


# -- tools ---------------------------------------------------------------------------------------------------


def test_a_search_after_a_search_returns_the_original_message_first(backend):
    def answer_from(messages):
        return "It is " + messages[-1].artifact[0]["content"].split()[-1]

    model = scripted(call("archive_search", {"query": "staging database port"}), answer_from)
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "The staging database listens on port 5433."},
                                  {"role": "assistant", "content": "Noted."}])
        engine.commit("s")
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke(ask("What was that number again?"), thread("s"))
        engine.commit("s")

        search_turn = engine.storage.sessions.archive_messages("s", "archive_002")
        flags = [[p.get("internal", False) for p in m["parts"]] for m in search_turn]
        assert flags == [[False], [True], [True], [False]], "own call and result flagged, the rest not"
        hits = engine.archive_search("s", "staging database port")
        assert hits[0]["seq"] == 1
        assert all(h["seq"] not in (4, 5) for h in hits), "the earlier search and its copy are not indexed"
        memory_prompt = engine.working_memory("s")["working_summary"]["markdown"]
        assert "archive_search" not in memory_prompt


def test_the_middleware_alone_gives_the_model_working_archive_tools_per_thread(root):
    def answer_from(messages):
        result = messages[-1]
        assert isinstance(result, ToolMessage) and result.name == "archive_search"
        return "Found: " + (result.artifact[0]["content"] if result.artifact else "nothing")

    model = scripted(call("archive_search", {"query": "favourite colour"}), answer_from,
                     call("archive_search", {"query": "favourite colour"}), answer_from)
    with WorkingMemoryEngine(root, durable=False) as engine:
        for session, colour in (("u1", "green"), ("u2", "orange")):
            engine.add_messages(session, [{"role": "user", "content": f"My favourite colour is {colour}."}])
            engine.commit(session)
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        assert {t.name for t in agent.nodes["tools"].bound.tools_by_name.values()} == {
            "archive_search", "archive_expand", "read_tool_result"}
        one = agent.invoke(ask("What is my favourite colour?"), thread("u1"))
        two = agent.invoke(ask("What is my favourite colour?"), thread("u2"))
        assert one["messages"][-1].text == "Found: My favourite colour is green."
        assert two["messages"][-1].text == "Found: My favourite colour is orange."


def test_binding_the_archive_tools_twice_is_an_error_and_tools_false_turns_ours_off(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        doubled = create_agent(scripted("never"), tools=make_archive_tools(engine),
                               middleware=[WorkingMemoryMiddleware(engine)])
        with pytest.raises(InvalidInput, match="archive_search"):
            doubled.invoke(ask("hi"), thread("d"))
        assert not engine.storage.sessions.session_exists("d")

        mine = create_agent(scripted("fine"), tools=make_archive_tools(engine),
                            middleware=[WorkingMemoryMiddleware(engine, tools=False)])
        assert mine.invoke(ask("hi"), thread("d"))["messages"][-1].text == "fine"


def test_bookkeeping_is_private_and_the_last_call_is_visible_in_the_state(root):
    model = scripted("ok")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        for schema in (agent.get_input_jsonschema(), agent.get_output_jsonschema()):
            assert not [name for name in schema.get("properties", {}) if name.startswith("workmem")]
        out = agent.invoke(ask("hello"), thread("p"))
        assert set(out) == {"messages"}
        last = agent.get_state(thread("p")).values["workmem_last_call"]
        assert last["session_id"] == "p" and last["unstored_messages"] == 0 and last["live_messages_shown"] == 1, \
            "the run's message is stored before the call"
        assert last["budget"] == engine.context_window and last["working_memory_tokens"] == 0


def test_the_budget_comes_from_the_model_profile_else_the_engine(root):
    system = "Be brief."
    with WorkingMemoryEngine(root, durable=False, context_window=50_000) as engine:
        for profile, expected in (({"max_input_tokens": 3_000}, 3_000), (None, 50_000)):
            model = scripted("ok")
            model.profile = profile
            agent = create_agent(model, system_prompt=system, middleware=[WorkingMemoryMiddleware(engine)],
                                 checkpointer=InMemorySaver())
            agent.invoke(ask("hi"), thread(f"b{expected}"))
            last = agent.get_state(thread(f"b{expected}")).values["workmem_last_call"]
            assert last["budget"] == expected - count_tokens(system)


def test_forget_deletes_the_session_and_with_the_checkpointer_the_thread(root):
    saver = InMemorySaver()
    with WorkingMemoryEngine(root, durable=False) as engine:
        middleware = WorkingMemoryMiddleware(engine)
        agent = create_agent(scripted("one", "two"), middleware=[middleware], checkpointer=saver)
        agent.invoke(ask("remember me"), thread("gone"))
        out = middleware.forget("gone")
        assert out["deleted"] and not out["thread_deleted"] and "delete_thread" in out["note"]
        assert not engine.storage.sessions.session_exists("gone")
        agent.invoke(ask("again"), thread("gone"))
        assert engine.session_info("gone")["total_message_count"] == 4, "the thread's history came back"
        assert middleware.forget("gone", checkpointer=saver)["thread_deleted"]
        assert agent.get_state(thread("gone")).values == {}


def test_aforget_deletes_the_session_and_with_an_async_checkpointer_the_thread(root):
    async def scenario(engine):
        saver = InMemorySaver()
        middleware = WorkingMemoryMiddleware(engine)
        agent = create_agent(scripted("one", "two"), middleware=[middleware], checkpointer=saver)
        await agent.ainvoke(ask("remember me"), thread("gone"))
        out = await middleware.aforget("gone")
        assert out["deleted"] and not out["thread_deleted"] and "delete_thread" in out["note"]
        assert not engine.session_exists("gone")
        await agent.ainvoke(ask("again"), thread("gone"))
        out = await middleware.aforget("gone", checkpointer=saver)
        assert out["deleted"] and out["thread_deleted"] and "note" not in out
        assert not engine.session_exists("gone")
        assert (await agent.aget_state(thread("gone"))).values == {}

    with WorkingMemoryEngine(root, durable=False) as engine:
        asyncio.run(scenario(engine))


def test_aforget_with_a_sync_only_checkpointer_deletes_the_thread_through_its_sync_call(root, tmp_path):
    with WorkingMemoryEngine(root, durable=False) as engine, \
            sqlite3.connect(tmp_path / "threads.db", check_same_thread=False) as conn:
        saver = SqliteSaver(conn)
        middleware = WorkingMemoryMiddleware(engine)
        agent = create_agent(scripted("one"), middleware=[middleware], checkpointer=saver)
        agent.invoke(ask("remember me"), thread("gone"))
        out = asyncio.run(middleware.aforget("gone", checkpointer=saver))
        assert out["deleted"] and out["thread_deleted"]
        assert not engine.session_exists("gone") and saver.get_tuple(thread("gone")) is None


def test_trim_state_keeps_the_agent_state_bounded_and_the_archive_reachable(root):
    model = scripted(*(f"Noted fact {i}." for i in range(100)))
    with WorkingMemoryEngine(root, durable=False, trigger=("tokens", 150), keep=("messages", 4)) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync", trim_state=True)])
        sizes = []
        for i in range(100):
            out = agent.invoke(ask(f"Fact {i}: the locker of desk {i} has code Z{i:03d}."), thread("trim"))
            sizes.append(len(out["messages"]))
        assert engine.session_info("trim")["total_message_count"] == 200
        assert max(sizes[10:]) <= 16, sizes
        hits = engine.archive_search("trim", "Z003")
        assert hits and hits[0]["seq"] == 7
        assert len(engine.storage.sessions.list_archives("trim")) >= 10


def test_sync_commit_mode_commits_before_the_call_that_would_cross_the_trigger(root, caplog):
    """The commit runs before the model call, so that call already carries the new working memory; the
    keep is honoured when it fits the low-water mark."""
    def question(n: int) -> str:
        return f"Question {n} about the release plan: " + " ".join(f"word{n} item" for i in range(1_000))

    model = scripted("A first answer.", "A second answer.", "A third answer.")
    with WorkingMemoryEngine(root, durable=False, commit_token_threshold=8_000, keep=("turns", 1)) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync")])
        for n in (1, 2):
            agent.invoke(ask(question(n)), thread("sync"))
        assert engine.session_info("sync")["commit_count"] == 0, "below the trigger"
        agent.invoke(ask(question(3)), thread("sync"))
        info = engine.session_info("sync")
        assert info["commit_count"] == 1 and info["keep"] == ["turns", 1]
        assert texts(engine.storage.sessions.live_messages("sync")) == [question(3), "A third answer."]
        sent = prompt_texts(model)
        assert sent[0].startswith("[Session History Summary]") and sent[1:] == [question(3)], "committed first"
        with caplog.at_level(logging.WARNING):
            with pytest.raises(InvalidInput, match="commit_mode"):
                WorkingMemoryMiddleware(engine, commit_mode="later")


def test_a_long_threads_history_is_normalised_once_not_on_every_model_call(root, monkeypatch):
    import workmem.graphs.agent.view as middleware_module

    real, calls = middleware_module.prepare_message, []

    def counting(message, **kwargs):
        calls.append(getattr(message, "id", None))
        return real(message, **kwargs)

    monkeypatch.setattr(middleware_module, "prepare_message", counting)
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(scripted(*(f"Answer {i}." for i in range(12))), checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine)])
        for i in range(11):
            calls.clear()
            state = agent.invoke(ask(f"Question {i}?"), thread("long"))
        assert len(state["messages"]) == 22
        assert len(calls) <= 3, "only the run's new messages are normalised; the history comes from the cache"
        edited = state["messages"][1].model_copy(update={"content": "Answer 0, corrected."})
        agent.update_state(thread("long"), {"messages": [edited]})
        calls.clear()
        agent.invoke(ask("Question 11?"), thread("long"))
        assert edited.id in calls, "an edited message (same id, new content) is normalised anew"


def test_a_model_that_cannot_bind_tools_keeps_its_memory_without_the_archive_tools(root, caplog):
    """`GenericFakeChatModel` (no `bind_tools`) in an agent with no tools of its own crashed with NotImplementedError
    at the first call after a commit, when workmem's tools joined."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    model = GenericFakeChatModel(messages=iter([AIMessage(content=f"Answer {i}: " + "app/x.py reads rows " * 20)
                                                for i in range(12)]))
    with WorkingMemoryEngine(root, durable=False, keep=("turns", 2)) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 600),
                                                                         commit_mode="sync")],
                             checkpointer=InMemorySaver())
        with caplog.at_level(logging.WARNING, logger="workmem.agent"):
            for i in range(10):
                agent.invoke(ask(f"Question {i} about app/x.py"), thread("plain"))
        last = agent.get_state(thread("plain")).values["workmem_last_call"]
        assert engine.session_info("plain")["commit_count"] >= 1
        assert last["working_memory_tokens"] > 0 and last["workmem_tools"], "the memory and workmem's note went out"
        assert sum("cannot bind tools" in r.getMessage() for r in caplog.records) == 1
