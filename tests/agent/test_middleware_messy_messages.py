"""Review of issue 14: messages a real agent or client produces that the middleware must not choke on, and
`trim_state` with a commit that covers the run itself."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import scripted
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text)]}


# -- trim_state ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [("tokens", 50), ("messages", 0)], ids=["tokens-keep-smaller-than-reply", "keep-0"])
def test_trim_state_never_removes_the_answer_the_run_just_returned(root, keep):
    """With `commit_mode="sync"` a commit can cover the run's own messages, its user message included;
    `trim_state` must still leave the run its answer (an earlier build returned `{"messages": []}`)."""
    long_reply = "The deployment finished without errors. " * 30
    model = scripted("Hello.", long_reply, "You are welcome.")
    with WorkingMemoryEngine(root, durable=False, trigger=("tokens", 100), keep=keep) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(),
                             middleware=[WorkingMemoryMiddleware(engine, commit_mode="sync", trim_state=True)])
        agent.invoke(ask("hello"), thread("trim"))
        out = agent.invoke(ask("Deploy the service to production and report back."), thread("trim"))
        assert out["messages"] and out["messages"][-1].text == long_reply
        # the next run's call commits (the long reply is past the trigger), trims, and still answers
        out = agent.invoke(ask("Thanks."), thread("trim"))
        assert engine.session_info("trim")["commit_count"] >= 1
        assert out["messages"] and out["messages"][-1].text == "You are welcome."
        assert long_reply not in [m.text for m in agent.get_state(thread("trim")).values["messages"]]
        assert engine.session_info("trim")["total_message_count"] == 6


# -- messages a model or a user really produces ----------------------------------------------------------


def test_a_malformed_tool_call_without_a_name_does_not_brick_the_thread(root):
    """LangChain's `invalid_tool_call` may have `name=None` (a streamed call whose name never arrived). The
    middleware normalises the whole state before every model call, so one such message made every later
    run of the thread raise InvalidInput."""
    broken = AIMessage(content="Let me look.", invalid_tool_calls=[
        {"name": None, "args": "{\"path\": ", "id": "call_x", "error": "truncated", "type": "invalid_tool_call"}])
    model = scripted(broken, "Hello again.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        agent.invoke(ask("Read the config."), thread("broken"))
        out = agent.invoke(ask("Hello?"), thread("broken"))
        assert out["messages"][-1].text == "Hello again."
        assert engine.session_info("broken")["total_message_count"] == len(out["messages"])


def test_an_image_only_user_message_does_not_brick_the_thread(root):
    """A multimodal user message with no text (just an image) normalised to no parts → InvalidInput("empty
    message") on every model call of the thread, forever (the state keeps it). It is stored with one empty
    text part and its block in `meta.content_blocks`; the model gets the image back, without an empty text
    block (providers refuse those)."""
    model = scripted("A cat on a sofa.", "You are welcome.")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=InMemorySaver())
        image = HumanMessage(content=[{"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}])
        out = agent.invoke({"messages": [image]}, thread("img"))
        assert out["messages"][-1].text == "A cat on a sofa."
        assert agent.invoke(ask("Thanks!"), thread("img"))["messages"][-1].text == "You are welcome."
        sent_back = model.prompts[-1][0]  # nothing out of view: no system note before it
        assert sent_back.content == [image.content[0]], "the stored image comes back as the same block"


# -- odd input shapes: typed errors only ----------------------------------------------------------------


@pytest.mark.parametrize("message", [
    {"type": "ai", "content": "", "tool_calls": "not a list"},
    {"role": ["user"], "content": "x"},
    {"role": {"user": 1}, "content": "x"},
    {"role": "user", "content": "x", "name": ["not", "a", "name"]},
    {"role": "assistant", "content": "x", "name": 5},
], ids=["lc-tool-calls-str", "role-list", "role-dict", "name-list", "name-int"])
def test_odd_dict_shapes_get_a_typed_error_and_never_poison_the_session(root, message):
    """Untyped AttributeError / TypeError on input, or a `name` that is stored and then makes every
    `assemble` of the session raise pydantic's ValidationError."""
    with WorkingMemoryEngine(root, durable=False) as engine:
        engine.add_messages("odd", [{"role": "user", "content": "first"}])
        with pytest.raises(InvalidInput):
            engine.add_messages("odd", [message])
        assert len(engine.assemble("odd")["messages"]) == 2


def test_a_state_message_that_cannot_be_stored_is_named_with_the_way_out(root):
    """A legacy `FunctionMessage` in the input: the run fails with `InvalidInput` naming the message's place and id
    and the remedy (the checkpointed state holds it, so every later run would fail too); once the caller removes
    it, the thread goes on and nothing stored before was touched."""
    from langchain_core.messages import FunctionMessage, RemoveMessage

    model = scripted("A1", "A2")
    with WorkingMemoryEngine(root, durable=False) as engine:
        agent = create_agent(model, checkpointer=InMemorySaver(), middleware=[WorkingMemoryMiddleware(engine)])
        agent.invoke(ask("Q1"), thread("legacy"))
        before = list(engine.iter_messages("legacy"))
        legacy = FunctionMessage(content="42", name="lookup", id="legacy-1")
        with pytest.raises(InvalidInput, match=r"message 2 \(id 'legacy-1'\).*RemoveMessage"):
            agent.invoke({"messages": [legacy]}, thread("legacy"))
        assert list(engine.iter_messages("legacy")) == before

        agent.update_state(thread("legacy"), {"messages": [RemoveMessage(id="legacy-1")]})
        agent.invoke(ask("Q2"), thread("legacy"))
        assert [m["parts"][0]["text"] for m in engine.iter_messages("legacy")] == ["Q1", "A1", "Q2", "A2"]
