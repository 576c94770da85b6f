"""Large tool results in the view as their synopsis, read back by reference."""

from __future__ import annotations

import json

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.synopsis import kind_of, synopsis
from workmem.state.tokens import count_tokens

LOG = "\n".join(f"2026-11-30 10:{i // 60:02d}:{i % 60:02d} INFO request {i} served in {i % 97} ms"
                for i in range(12_000)) + "\nERROR worker 7 crashed: KeyError 'tenant_id' at billing/export.py:88"


@pytest.mark.parametrize(("text", "kind"), [
    (json.dumps({"rows": [{"id": i, "name": f"n{i}"} for i in range(50)]}), "json"),
    ("id,name,score\n" + "\n".join(f"{i},n{i},{i * 3}" for i in range(50)), "csv"),
    (LOG, "log"),
    ("import os\n\ndef main():\n    return os.getcwd()\n\nclass A:\n    pass\n", "code"),
    ("name: svc\nreplicas: 3\nimage: app:1.2\nport: 8080\n", "yaml"),
    ("<?xml version='1.0'?><root><a/></root>", "xml"),
    ("\x00\x01\x02binary" * 50, "binary"),
    ("The deploy went fine. Nothing else to report, the logs are clean.", "text"),
])
def test_the_kind_of_a_result(text, kind):
    assert kind_of(text) == kind


def test_a_synopsis_is_deterministic_bounded_and_shows_head_tail_and_reference():
    first = synopsis(LOG, tool="read_log", ref="seq:7", limit_tokens=1_000)
    assert first == synopsis(LOG, tool="read_log", ref="seq:7", limit_tokens=1_000), "same result, same bytes"
    assert count_tokens(first) <= 1_000
    assert "\n[… tool result seq:7 · read_log · log · " in first
    assert "request 0 served" in first and first.endswith("billing/export.py:88"), "head and tail (the error)"
    assert 'read_tool_result(ref="seq:7", offset=' in first and "request 6000 served" not in first
    binary = synopsis("\x00\x01" * 5_000, tool="dump", ref="seq:2", limit_tokens=500)
    assert "\x00" not in binary and "never shown raw" in binary


def big_session(engine: WorkingMemoryEngine) -> int:
    engine.add_messages("s", [
        {"role": "user", "content": "Why did billing crash?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "read_log", "content": LOG},
    ])
    return 3


def test_reading_a_result_by_windows_gives_back_every_character(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        seq = big_session(engine)
        text, offset = [], 0
        while True:
            window = engine.read_tool_result("s", f"seq:{seq}", offset=offset, max_tokens=2_000)
            assert count_tokens(window["text"]) <= 2_000 and window["offset"] == offset
            text.append(window["text"])
            offset = window["end"]
            if offset >= window["chars"]:
                break
        assert "".join(text) == LOG
        engine.commit("s", keep_recent_count=0)  # archived: read the same way
        assert engine.read_tool_result("s", seq, offset=0, limit=40)["text"] == LOG[:40]


def test_a_query_finds_the_line_and_shows_the_window_around_it(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        seq = big_session(engine)
        found = engine.read_tool_result("s", f"seq:{seq}", query="keyerror 'tenant_id'")["matches"]
        assert len(found) == 1 and "worker 7 crashed" in found[0]["text"] and "request 11999" in found[0]["text"]
        everywhere = engine.read_tool_result("s", query="worker 7 crashed")["matches"]
        assert [m["ref"] for m in everywhere] == [f"seq:{seq}"]
        listed = engine.read_tool_result("s")["results"]
        assert [(r["ref"], r["tool"], r["kind"]) for r in listed] == [(f"seq:{seq}", "read_log", "log")]


@pytest.mark.parametrize("query", ["request", "\n".join(LOG.splitlines()[:300])], ids=["many matches", "long query"])
def test_a_query_read_keeps_the_read_cap_its_windows_cut_in_their_own_text(root, query):
    with WorkingMemoryEngine(root, durable=False) as engine:
        seq = big_session(engine)
        for found in (engine.read_tool_result("s", f"seq:{seq}", query=query, max_tokens=160)["matches"],
                      engine.read_tool_result("s", query=query, max_tokens=160)["matches"]):
            assert found and sum(count_tokens(m["text"]) for m in found) <= 160
            assert all(LOG[m["offset"]:m["end"]] == m["text"] for m in found), "each window is the result's text"


def test_the_listing_and_a_search_of_every_result_leave_workmem_s_own_answers_out(root):
    """A read's answer is itself a large tool result: `read_tool_result()` listed it among the session's results."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        seq = big_session(engine)
        window = engine.read_tool_result("s", f"seq:{seq}", offset=0, max_tokens=2_000)["text"]
        engine.add_messages("s", [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "r1", "type": "function", "function": {"name": "read_tool_result", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "r1", "name": "read_tool_result", "content": window + window}])
        assert [r["ref"] for r in engine.read_tool_result("s", max_tokens=500)["results"]] == [f"seq:{seq}"]
        assert [m["ref"] for m in engine.read_tool_result("s", query="request 0 served")["matches"]] == [f"seq:{seq}"]


@pytest.mark.parametrize(("args", "field"), [
    ({"ref": "seq:1"}, "ref"), ({"ref": "nope"}, "ref"), ({"ref": "seq:99"}, "ref"),
    ({"ref": "seq:3", "offset": -1}, "offset"), ({"ref": "seq:3", "offset": 10**9}, "offset"),
    ({"ref": "seq:3", "limit": 0}, "limit"), ({"ref": "seq:3", "query": " "}, "query"),
])
def test_bad_reads_are_typed_errors_and_change_nothing(root, args, field):
    with WorkingMemoryEngine(root, durable=False) as engine:
        big_session(engine)
        ref = args.pop("ref")
        with pytest.raises(InvalidInput) as info:
            engine.read_tool_result("s", ref, **args)
        assert info.value.field == field
        assert engine.session_info("s")["total_message_count"] == 3


READ_CALL = AIMessage(content="", tool_calls=[{"name": "read_log", "args": {}, "id": "c0", "type": "tool_call"}])


@tool
def read_log() -> str:
    """Read the service log."""
    return LOG


def test_an_agent_sees_the_synopsis_on_every_call_and_reads_the_result_through_its_tool(root):
    def call(name: str, args: dict, i: int) -> AIMessage:
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{i}", "type": "tool_call"}])

    model = scripted(call("read_log", {}, 0), call("read_tool_result", {"ref": "seq:3", "offset": 0, "limit": 500}, 1),
                     call("read_tool_result", {"query": "tenant_id"}, 2), AIMessage(content="KeyError in export."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_log], checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 16_000))])
        agent.invoke({"messages": [HumanMessage("Why did billing crash?")]}, {"configurable": {"thread_id": "s"}})
        shown = [[m.content for m in p if isinstance(m, ToolMessage) and m.tool_call_id == "c0"][0]
                 for p in model.prompts[1:]]
        assert len(set(shown)) == 1 and "\n[… tool result seq:3 · read_log · log" in shown[0], "same bytes"
        assert count_tokens(shown[0]) <= 373  # (16 000 − 2 000) / 37.5
        page = [m.content for m in model.prompts[2] if isinstance(m, ToolMessage) and m.tool_call_id == "c1"][0]
        assert LOG[:500] in page and "more characters: offset=500" in page
        hit = [m.content for m in model.prompts[3] if isinstance(m, ToolMessage) and m.tool_call_id == "c2"][0]
        assert "worker 7 crashed: KeyError 'tenant_id'" in hit and hit.startswith("[seq:3 chars ")
        stored = engine.live_messages("s")[2]["parts"][0]["content"]
        assert stored == LOG, "the log keeps the whole result"


def checkpointed_agent(engine: WorkingMemoryEngine, model: object) -> tuple[object, dict]:
    """An agent reading the log, checkpointed on thread "s", trigger 16k."""
    agent = create_agent(model, tools=[read_log], checkpointer=InMemorySaver(),
                         middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 16_000))])
    return agent, {"configurable": {"thread_id": "s"}}


def test_the_agent_state_holds_a_stored_large_result_as_its_synopsis_and_the_log_holds_it_whole(root):
    model = scripted(READ_CALL, AIMessage(content="KeyError in export."), READ_CALL.model_copy(update={
        "tool_calls": [{"name": "read_log", "args": {}, "id": "c1", "type": "tool_call"}]}),
        AIMessage(content="Yes, worker 7."), AIMessage(content="Done."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, config = checkpointed_agent(engine, model)
        agent.invoke({"messages": [HumanMessage("Why did billing crash?")]}, config)
        agent.invoke({"messages": [HumanMessage("Read it again.")]}, config)
        state = agent.invoke({"messages": [HumanMessage("Thanks.")]}, config)
        in_state = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        assert len(in_state) == 2 and all("\n[… tool result seq:" in m.content for m in in_state)
        assert all(len(m.content) < len(LOG) // 20 for m in in_state), "the checkpoints carry synopses, not logs"
        stored = engine.live_messages("s")
        assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool",
                                               "assistant", "user", "assistant"], "each message stored once"
        assert stored[2]["parts"][0]["content"] == LOG and stored[6]["parts"][0]["content"] == LOG
        shown = {m.content for p in model.prompts[1:] for m in p
                 if isinstance(m, ToolMessage) and m.tool_call_id == "c0"}
        assert len(shown) == 1, "the model sees the same bytes on every call"


def test_a_stateless_client_re_sending_the_history_stores_nothing_twice(root):
    from langchain_core.messages import convert_to_openai_messages

    model = scripted(READ_CALL, AIMessage(content="KeyError in export."), AIMessage(content="Worker 7."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_log],
                             middleware=[WorkingMemoryMiddleware(engine, trigger=("tokens", 16_000))])
        config = {"configurable": {"thread_id": "web"}}
        out = agent.invoke({"messages": [{"role": "user", "content": "Why did billing crash?"}]}, config)
        history = [*convert_to_openai_messages(out["messages"]), {"role": "user", "content": "Which worker?"}]
        agent.invoke({"messages": history}, config)
        assert [m["role"] for m in engine.live_messages("web")] == ["user", "assistant", "tool", "assistant", "user",
                                                                    "assistant"]


def test_an_edited_synopsis_copy_is_an_edit_and_a_grown_limit_shows_the_whole_result(root):
    model = scripted(READ_CALL, AIMessage(content="KeyError."), AIMessage(content="ok"), AIMessage(content="ok2"))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent, config = checkpointed_agent(engine, model)
        agent.invoke({"messages": [HumanMessage("Why?")]}, config)
        agent.invoke({"messages": [HumanMessage("And?")]}, config)
        copy = next(m for m in agent.get_state(config).values["messages"] if isinstance(m, ToolMessage))
        assert "\n[… tool result seq:3" in copy.content
        agent.update_state(config, {"messages": [copy.model_copy(update={"content": "REDACTED by the user"})]})
        agent.invoke({"messages": [HumanMessage("Now?")]}, config)
        assert "REDACTED by the user" in [m.text for m in model.prompts[-1]]
        assert "REDACTED by the user" in [m["parts"][0].get("content") for m in engine.live_messages("s")
                                          if m["role"] == "tool"], "the edit is stored"
        assert LOG in [m["parts"][0].get("content") for m in engine.storage.sessions.messages_in_range("s", 3, 3)]


def test_a_bad_reference_from_the_model_is_the_tools_answer(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        big_session(engine)
        for ref in ("seq:²", "seq:1e3", "seq:" + "9" * 40):
            with pytest.raises(InvalidInput):
                engine.read_tool_result("s", ref)


def test_trim_state_off_keeps_the_whole_result_in_the_state(root):
    model = scripted(READ_CALL,
                     AIMessage(content="KeyError in export."))
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, tools=[read_log], checkpointer=InMemorySaver(), middleware=[
            WorkingMemoryMiddleware(engine, trigger=("tokens", 16_000), trim_state=False)])
        state = agent.invoke({"messages": [HumanMessage("Why?")]}, {"configurable": {"thread_id": "s"}})
        assert [m.content for m in state["messages"] if isinstance(m, ToolMessage)] == [LOG]


@pytest.mark.parametrize("max_tokens", [1, 2])
def test_a_read_of_a_token_or_two_always_moves_on(root, max_tokens):
    """An emoji takes several tokens: a read capped below it still returns its first character."""
    text = "🎉🚀✨" * 40
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "party", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "name": "party", "content": text}])
        pieces, offset = [], 0
        while offset < len(text):
            window = engine.read_tool_result("s", "seq:2", offset=offset, max_tokens=max_tokens)
            assert window["end"] > offset and window["text"], "never an empty window"
            pieces.append(window["text"])
            offset = window["end"]
        assert "".join(pieces) == text


def test_an_empty_result_refuses_an_offset_past_its_end(root):
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("s", [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "noop", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "name": "noop", "content": ""}])
        assert engine.read_tool_result("s", "seq:2")["text"] == ""
        with pytest.raises(InvalidInput) as info:
            engine.read_tool_result("s", "seq:2", offset=5)
        assert info.value.field == "offset"


def test_the_listing_and_the_expansions_read_no_payload(root, monkeypatch):
    """Memory follows what is read: the listing comes from the stored records, the archive tool and the CLI show a
    payload's stored preview with how to read it whole; only a read by reference loads the payload."""
    from workmem.graphs.agent.tools import format_expansion, make_archive_tools
    from workmem.state.files import payload_files

    with WorkingMemoryEngine(root, durable=False) as engine:
        seq = big_session(engine)
        engine.add_messages("s", [{"role": "assistant", "content": "The billing worker crashed."}])
        engine.commit("s", keep_recent_count=0)
        engine.storage.sessions._payload_texts.forget("s")
        reads = []
        real = payload_files.read
        monkeypatch.setattr(payload_files, "read", lambda *a: reads.append(a) or real(*a))
        listed = engine.read_tool_result("s")["results"]
        assert [(r["ref"], r["kind"], r["chars"]) for r in listed] == [(f"seq:{seq}", "log", len(LOG))]
        expand = make_archive_tools(engine, "s")[1]
        shown = expand.invoke({"archive_id": "archive_001"})
        assert LOG[:500] in shown and LOG[-50:] in shown and "request 6000 served" not in shown
        assert f'read_tool_result(ref="seq:{seq}", offset=0) reads it by windows' in shown
        assert reads == [], "no payload was read"
        found = engine.archive_expand("s", start_seq=seq, end_seq=seq)  # the API reads it whole
        assert LOG in found["content"] and len(reads) == 1
        cut = format_expansion(found, max_chars=1_000)
        assert f'read_tool_result(ref="seq:{seq}", offset=…)' in cut, "one long message: read it by reference"
