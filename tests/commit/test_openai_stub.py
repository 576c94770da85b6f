"""The real-model path end to end, offline: langchain-openai against a local OpenAI-compatible stub."""

from __future__ import annotations

import json

import pytest
from fakes import scripted, transport_error, valid_update_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from openai_stub import Stub

from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.models import bind_commit_tool, is_transport_error, model_name, resolve_model
from workmem.nodes.prompts import update_prompt
from workmem.state.errors import InvalidInput, ModelUnavailable
from workmem.state.ops import UPDATE_TOOL, UPDATE_TOOL_INLINE

STUB = pytest.mark.allow_hosts(["127.0.0.1"])
VALID_OPS = {
    "Session Title": {"op": "KEEP"},
    "Current State": {"op": "UPDATE", "content": "Tests pass again."},
    "Task & Goals": {"op": "KEEP"},
    "Key Facts & Decisions": {"op": "APPEND", "items": ["Delimiter is detected per file."]},
    "Files & Context": {"op": "KEEP"},
    "Errors & Corrections": {"op": "KEEP"},
    "Open Issues": {"op": "KEEP"},
}
BROKEN = '{"sections": {"Session Title": {"op": "KEEP"}, "Current State": {"op": "UPDATE", "content": "half'
PROMPT = update_prompt("# Working Memory\n\n## Session Title\nCSV fix\n", "[#1 user]\nfix it")


def stub_model(stub: Stub, **extra: str):
    env = {"WORKMEM_MODEL": "openai:stub-model", "OPENAI_BASE_URL": stub.base_url, **extra}
    return bind_commit_tool(resolve_model(env=env), UPDATE_TOOL)


@STUB
def test_valid_tool_call_is_parsed_and_the_request_forces_the_tool(stub):
    stub.tool_call_reply(json.dumps({"sections": VALID_OPS}))
    reply = stub_model(stub).invoke(PROMPT)
    assert isinstance(reply, AIMessage)
    assert reply.invalid_tool_calls == []
    assert reply.tool_calls[0]["name"] == "update_working_memory"
    assert reply.tool_calls[0]["args"] == {"sections": VALID_OPS}
    (request,) = stub.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["model"] == "stub-model"
    assert body["temperature"] == 0
    assert body["tool_choice"] == {"type": "function", "function": {"name": "update_working_memory"}}
    assert [t["function"]["name"] for t in body["tools"]] == ["update_working_memory"]
    assert body["tools"][0]["function"]["parameters"] == UPDATE_TOOL["function"]["parameters"]
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["authorization"] == "Bearer not-needed"  # base URL without a key → placeholder


@STUB
def test_malformed_arguments_land_in_invalid_tool_calls_with_the_raw_string(stub):
    stub.tool_call_reply(BROKEN)
    reply = stub_model(stub, OPENAI_API_KEY="sk-test-key").invoke(PROMPT)
    assert reply.tool_calls == []
    (bad,) = reply.invalid_tool_calls
    assert bad["name"] == "update_working_memory"
    assert bad["args"] == BROKEN
    headers = {k.lower(): v for k, v in stub.requests[0]["headers"].items()}
    assert headers["authorization"] == "Bearer sk-test-key"


@STUB
@pytest.mark.parametrize("arguments", ["[1, 2]", '"just a string"', "42"])
def test_arguments_that_are_not_an_object_are_malformed_output_not_transport(stub, arguments):
    stub.tool_call_reply(arguments)
    try:
        reply = stub_model(stub).invoke(PROMPT)
    except Exception as exc:  # the client refuses a non-object: a validation error
        assert not is_transport_error(exc)
    else:
        assert reply.tool_calls == [] or reply.tool_calls[0]["args"] in ({}, None)
        assert reply.invalid_tool_calls or not reply.tool_calls or not reply.tool_calls[0]["args"]
    assert len(stub.requests) == 1


@STUB
@pytest.mark.parametrize(
    ("status", "retryable"), [(503, True), (500, True), (429, True), (400, False), (401, False)]
)
def test_http_errors_are_classified_and_never_retried_by_the_client(stub, status, retryable):
    stub.replies.append((status, {"error": {"message": "nope", "type": "x", "code": None}}))
    with pytest.raises(Exception) as caught:
        stub_model(stub, OPENAI_API_KEY="sk-test-key").invoke(PROMPT)
    assert is_transport_error(caught.value) is retryable
    assert len(stub.requests) == 1  # max_retries=0: the graph's RetryPolicy owns retries


@STUB
def test_unreachable_server_is_a_transport_error(stub):
    url = stub.base_url
    stub.server.shutdown()
    stub.server.server_close()
    model = bind_commit_tool(
        resolve_model(env={"WORKMEM_MODEL": "openai:stub-model", "OPENAI_BASE_URL": url}), UPDATE_TOOL
    )
    with pytest.raises(Exception) as caught:
        model.invoke(PROMPT)
    assert is_transport_error(caught.value)


@STUB  # building ChatOpenAI probes socket options with a throwaway socket (no connection is made)
def test_resolve_model_from_the_environment():
    assert isinstance(resolve_model(env={}), ExtractiveChatModel)
    assert isinstance(resolve_model(env={"WORKMEM_MODEL": "  "}), ExtractiveChatModel)
    assert isinstance(resolve_model(env={"WORKMEM_MODEL": "extractive"}), ExtractiveChatModel)
    given = scripted()
    assert resolve_model(given, env={"WORKMEM_MODEL": "openai:x"}) is given
    for bad in ("openai:", "my-local-model", "nope:model", ":x"):
        with pytest.raises(InvalidInput, match="WORKMEM_MODEL"):
            resolve_model(env={"WORKMEM_MODEL": bad})
    with pytest.raises(ModelUnavailable, match="langchain-mistralai"):  # a known provider, not installed
        resolve_model(env={"WORKMEM_MODEL": "mistralai:mistral-large-latest"})
    model = resolve_model(env={"WORKMEM_MODEL": "openai:gpt-4o-mini", "OPENAI_API_KEY": "sk-abc"})
    assert model_name(model) == "openai:gpt-4o-mini"
    assert (model.temperature, model.max_retries, model.request_timeout) == (0, 0, 60)
    assert model.openai_api_key.get_secret_value() == "sk-abc"


def test_model_name():
    assert model_name(ExtractiveChatModel()) == "workmem-extractive"
    assert model_name(bind_commit_tool(ExtractiveChatModel(), UPDATE_TOOL)) == "workmem-extractive"
    assert model_name(scripted()) == "generic-fake-chat-model"


def test_is_transport_error_classification():
    import httpx
    import httpx2
    from langchain_core.exceptions import OutputParserException
    from pydantic import BaseModel, ValidationError

    class Strict(BaseModel):
        x: int

    try:
        Strict(x="nope")
    except ValidationError as err:
        validation = err
    request = httpx.Request("POST", "http://127.0.0.1/v1")
    retryable = [
        transport_error(),
        ConnectionResetError(),
        TimeoutError(),
        httpx.ConnectTimeout("t", request=request),
        httpx2.ReadError("r"),
        httpx.RemoteProtocolError("p", request=request),
    ]
    final = [
        ValueError("bad"),
        json.JSONDecodeError("x", "{", 0),
        validation,
        OutputParserException("o"),
        InvalidInput("x"),
        KeyError("k"),
        RuntimeError("r"),
    ]
    assert all(is_transport_error(e) for e in retryable)
    assert not any(is_transport_error(e) for e in final)


def test_bind_commit_tool_falls_back_without_tool_choice():
    class NoChoice(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):  # noqa: ANN001, ANN003
            if kwargs:
                raise TypeError("unexpected keyword argument 'tool_choice'")
            return self.bind(tools=tools)

    model = NoChoice(messages=iter([valid_update_call({})]))
    reply = bind_commit_tool(model, UPDATE_TOOL).invoke(PROMPT)
    assert reply.tool_calls[0]["name"] == "update_working_memory"
    plain = GenericFakeChatModel(messages=iter(["text only"]))
    assert bind_commit_tool(plain, UPDATE_TOOL) is plain  # no tool calling: the prompt asks for JSON text


def test_scripted_model_records_prompts_and_raises_scripted_errors():
    model = scripted(valid_update_call({}), transport_error())
    bound = bind_commit_tool(model, UPDATE_TOOL)
    assert bound.invoke(PROMPT).tool_calls[0]["args"]["sections"]["Open Issues"] == {"op": "KEEP"}
    with pytest.raises(Exception) as caught:
        bound.invoke(PROMPT)
    assert is_transport_error(caught.value)
    with pytest.raises(AssertionError, match="unexpected call #3"):
        bound.invoke(PROMPT)
    assert model.calls == 3 and len(model.prompts) == 3
    assert model.bound[0]["tool_choice"] == "update_working_memory"
    assert "<current_working_memory>" in model.prompt_text(0)


CREATE_BODIES = {"Session Title": "CSV import", "Current State": "Reading the loader.", "Task & Goals": "- fix it",
                 "Key Facts & Decisions": "", "Files & Context": "", "Errors & Corrections": "", "Open Issues": ""}


@STUB
@pytest.mark.parametrize("setting", ["", "inline"], ids=["ref_by_default", "inline_setting"])
def test_the_update_schema_sent_to_the_server_follows_the_tool_schema_setting(stub, monkeypatch, tmp_path, setting):
    """`$ref` by default; `WORKMEM_TOOL_SCHEMA=inline` writes the op out per section, and the
    commit parses the answer the same way."""
    from workmem.graphs.engine import WorkingMemoryEngine

    monkeypatch.setenv("WORKMEM_MODEL", "openai:stub-model")
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    monkeypatch.setenv("WORKMEM_TOOL_SCHEMA", setting)
    stub.tool_call_reply(json.dumps({"sections": CREATE_BODIES}), name="create_working_memory")
    stub.tool_call_reply(json.dumps({"sections": VALID_OPS}))
    with WorkingMemoryEngine(root=tmp_path, durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "The CSV import fails."}])
        assert engine.commit("s")["status"] == "completed"
        engine.add_messages("s", [{"role": "assistant", "content": "The delimiter is detected per file now."}])
        assert engine.commit("s")["status"] == "completed"
        wm = engine.working_memory("s")["working_summary"]["markdown"]
    sent = stub.requests[1]["body"]["tools"][0]["function"]["parameters"]
    expected = UPDATE_TOOL_INLINE if setting == "inline" else UPDATE_TOOL
    assert sent == expected["function"]["parameters"]
    assert ("$ref" in json.dumps(sent)) is (setting != "inline")
    assert "Tests pass again." in wm and "- Delimiter is detected per file." in wm


def test_an_unknown_tool_schema_setting_is_refused(monkeypatch):
    from workmem.nodes.context import CommitContext

    monkeypatch.setenv("WORKMEM_TOOL_SCHEMA", "flat")
    with pytest.raises(InvalidInput, match="WORKMEM_TOOL_SCHEMA"):
        CommitContext()
