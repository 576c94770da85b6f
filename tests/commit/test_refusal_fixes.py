"""A model API that refuses the request: known refusals are fixed and retried once, the rest degrade loudly.

Against the loopback OpenAI-compatible stub, with langchain-openai as a user would configure it
(`model="openai:stub-model"`, `OPENAI_BASE_URL`).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace
from typing import Any

import pytest
from fakes import CREATE, keep_all
from openai_stub import Reply, tool_call

from workmem.graphs.cli import EXIT_DEGRADED, main
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import SECTIONS

STUB = pytest.mark.allow_hosts(["127.0.0.1"])
SCHEMA_REFUSAL = "Grammar compilation failed: JSON schema keyword '$ref' is not supported (see #/$defs/op)"
TEMPERATURE_REFUSAL = "Unsupported parameter: 'temperature' is not supported with this model."
LENGTH_REFUSAL = "This model's maximum context length is 8192 tokens. Authorization: Bearer sk-live-abcdef0123456789"


def turns(n: int, start: int = 0) -> list[dict[str, str]]:
    return [m for i in range(start, start + n) for m in (
        {"role": "user", "content": f"Step {i}: rename config/settings_{i}.yaml and rerun the tests."},
        {"role": "assistant", "content": f"Renamed config/settings_{i}.yaml; 12 tests pass."})]


def answering(refuse) -> Any:
    """A stub handler: `refuse(body)` names why a request is refused (400), else a valid tool call."""

    def handle(body: dict[str, Any]) -> Reply:
        message = refuse(body)
        if message:
            return 400, {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
        name = body["tools"][0]["function"]["name"]
        if name == CREATE:
            return tool_call(json.dumps({"sections": {s: f"{s}: the settings files get renamed." for s in SECTIONS}}),
                             name)
        ops = {**keep_all(), "Current State": {"op": "UPDATE", "content": "Renaming the settings files."}}
        return tool_call(json.dumps({"sections": ops}), name)

    return handle


def schema_of(body: dict[str, Any]) -> str:
    return json.dumps(body.get("tools") or [])


@pytest.fixture
def stub_engine(stub, root, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("WORKMEM_TOOL_SCHEMA", raising=False)

    def make(**kwargs: Any) -> WorkingMemoryEngine:
        engine = WorkingMemoryEngine(root=root, model="openai:stub-model", durable=False, **kwargs)
        engine.runner.context = replace(engine.runner.context, retry_backoff_s=0.0)
        return engine

    return make


def commit_more(engine: WorkingMemoryEngine, session: str, start: int) -> dict[str, Any]:
    engine.add_messages(session, turns(3, start))
    return engine.commit(session, keep_recent_count=0, wait=True)


@STUB
def test_a_ref_refusal_is_retried_once_inline_recorded_and_remembered(stub, stub_engine):
    stub.handler = answering(lambda body: SCHEMA_REFUSAL if "$ref" in schema_of(body) else None)
    with stub_engine() as engine:
        first = commit_more(engine, "s", 0)  # the create prompt's tool has no $ref
        assert first["status"] == "completed" and not first["degraded"]
        sent = len(stub.requests)
        second = commit_more(engine, "s", 3)
        assert second["status"] == "completed" and not second["degraded"], second
        refused = [r for r in stub.requests[sent:] if "$ref" in schema_of(r["body"])]
        assert len(refused) == 1 and len(stub.requests) == sent + 2, "one refusal, one retry"
        archive = engine.storage.sessions.read_archive("s", second["archive_id"])
        assert archive["model"]["fixes"] == ["inline_tool_schema"] and not archive["model"]["degraded"]
        assert second["model_fixes"] == ["inline_tool_schema"]
        sent = len(stub.requests)
        third = commit_more(engine, "s", 6)
        assert not third["degraded"]
        assert len(stub.requests) == sent + 1, "the engine remembers the fix: no refusal first"
        assert "$ref" not in schema_of(stub.requests[-1]["body"])
        third_archive = engine.storage.sessions.read_archive("s", third["archive_id"])
        assert third_archive["model"]["fixes"] == ["inline_tool_schema"]
    with stub_engine() as fresh:  # a new engine learns afresh (the fix is recorded, not a setting)
        sent = len(stub.requests)
        assert not commit_more(fresh, "s", 9)["degraded"]
        assert len(stub.requests) == sent + 2


@STUB
def test_a_temperature_refusal_is_retried_once_without_it_and_recorded(stub, stub_engine):
    stub.handler = answering(lambda body: TEMPERATURE_REFUSAL if "temperature" in body else None)
    with stub_engine() as engine:
        first = commit_more(engine, "s", 0)
        assert first["status"] == "completed" and not first["degraded"], first
        assert ["temperature" in r["body"] for r in stub.requests] == [True, False]
        archive = engine.storage.sessions.read_archive("s", first["archive_id"])
        assert archive["model"]["fixes"] == ["without_temperature"]
        second = commit_more(engine, "s", 3)
        assert not second["degraded"]
        assert len(stub.requests) == 3 and "temperature" not in stub.requests[-1]["body"]


@STUB
def test_two_commits_refused_at_once_both_use_the_fix_one_of_them_learnt(stub, stub_engine):
    """Both send `temperature` before either learns it is refused: the second finds the fix already learnt by the
    first and retries with it, instead of degrading."""
    both_sent = threading.Barrier(2, timeout=20)
    refuse = answering(lambda body: TEMPERATURE_REFUSAL if "temperature" in body else None)

    def handle(body: dict[str, Any]) -> Any:
        if "temperature" in body:
            both_sent.wait()  # the two refused requests are in flight together
        return refuse(body)

    stub.handler = handle
    with stub_engine(model_kwargs={"temperature": 0.3}, max_workers=2) as engine:
        for session in ("a", "b"):
            engine.add_messages(session, turns(3))
        started = [engine.commit(session, keep_recent_count=0, wait=False) for session in ("a", "b")]
        engine.wait()
        results = [engine.task(s["task_id"]) for s in started]
        assert [r["status"] for r in results] == ["completed", "completed"], results
        assert [bool((r.get("result") or {}).get("degraded")) for r in results] == [False, False], results
        assert [("temperature" in r["body"]) for r in stub.requests].count(True) == 2, "each sent it once"
        for session in ("a", "b"):
            assert engine.storage.sessions.read_archive(session, "archive_001")["model"]["fixes"] == [
                "without_temperature"]


@STUB
def test_model_kwargs_set_what_a_string_model_sends(stub, stub_engine):
    stub.handler = answering(lambda body: TEMPERATURE_REFUSAL if "temperature" in body else None)
    with stub_engine(model_kwargs={"temperature": None, "top_p": 0.25}) as engine:
        assert not commit_more(engine, "s", 0)["degraded"]
    (request,) = stub.requests  # never refused: nothing to fix
    assert "temperature" not in request["body"] and request["body"]["top_p"] == 0.25


@STUB
def test_a_refusal_no_retry_can_fix_degrades_with_its_reason_one_warning_and_exit_3(
        stub, stub_engine, root, caplog, capsys, monkeypatch):
    stub.handler = answering(lambda body: LENGTH_REFUSAL)
    with stub_engine() as engine, caplog.at_level(logging.WARNING, logger="workmem"):
        first = commit_more(engine, "s", 0)
        second = commit_more(engine, "s", 3)
        other = commit_more(engine, "t", 0)
        info = engine.session_info("s")
        task = engine.task(second["task_id"])
    for result in (first, second, other):
        assert result["status"] == "completed" and result["degraded"]
        assert "maximum context length is 8192" in result["reason"] and "openai:stub-model" in result["reason"]
        assert "sk-live-abcdef0123456789" not in result["reason"], "the reason is redacted"
    warnings = [r.getMessage() for r in caplog.records if "degraded" in r.getMessage()]
    assert len(warnings) == 2, "one WARNING per session and cause"
    assert {"'s'" in w for w in warnings} == {True, False}
    assert info["last_degradation"]["task_id"] == second["task_id"]
    assert info["last_degradation"]["reason"] == task["error"] and "maximum context length" in task["error"]
    archive = engine_archive(root, "s", second["archive_id"])
    assert archive["model"]["degraded"] and "maximum context length" in archive["model"]["error"]

    capsys.readouterr()
    monkeypatch.setenv("WORKMEM_MODEL", "openai:stub-model")
    command = ["--root", str(root), "commit", "s", "--keep", "messages:0"]
    add_turns(root, "s", 20)
    assert main(command) == EXIT_DEGRADED
    out = capsys.readouterr().out
    assert "degraded: openai:stub-model failed" in " ".join(out.split()) and "maximum context" in out
    add_turns(root, "s", 30)
    assert main([*command, "--allow-degraded"]) == 0
    add_turns(root, "s", 40)
    capsys.readouterr()
    assert main([*command, "--json"]) == EXIT_DEGRADED
    assert json.loads(capsys.readouterr().out)["degraded"] is True


@STUB
def test_a_server_error_after_the_retry_loop_degrades_with_its_reason(stub, stub_engine):
    stub.handler = lambda body: (503, {"error": {"message": "upstream overloaded", "type": "server_error"}})
    with stub_engine() as engine:
        result = commit_more(engine, "s", 0)
        info = engine.session_info("s")
    assert result["status"] == "completed" and result["degraded"]
    assert len(stub.requests) == 3, "the graph's retry loop: three attempts, then the extractive model"
    assert "upstream overloaded" in result["reason"] and "503" in result["reason"]
    assert info["last_degradation"]["archive_id"] == result["archive_id"]


@STUB
def test_a_ref_refusal_with_the_inline_schema_already_set_is_not_retried(stub, stub_engine, monkeypatch):
    monkeypatch.setenv("WORKMEM_TOOL_SCHEMA", "inline")
    stub.handler = answering(lambda body: SCHEMA_REFUSAL if body["tools"][0]["function"]["name"] != CREATE else None)
    with stub_engine() as engine:
        commit_more(engine, "s", 0)
        sent = len(stub.requests)
        result = commit_more(engine, "s", 3)
    assert result["degraded"] and "$ref" in result["reason"]
    assert len(stub.requests) == sent + 1, "nothing left to fix: no retry"


def add_turns(root, session: str, start: int) -> None:
    with WorkingMemoryEngine(root=root, durable=False) as engine:
        engine.add_messages(session, turns(2, start))


def engine_archive(root, session: str, archive_id: str) -> dict[str, Any]:
    with WorkingMemoryEngine(root=root, durable=False) as engine:
        return engine.storage.sessions.read_archive(session, archive_id)


MANY_REFUSAL = "Unsupported parameters: 'temperature', 'top_p' and 'seed' are not supported with this model."


@STUB
def test_a_refusal_naming_several_parameters_drops_them_all_in_one_retry(stub, stub_engine):
    refused = ("temperature", "top_p", "seed")
    stub.handler = answering(lambda body: MANY_REFUSAL if any(p in body for p in refused) else None)
    with stub_engine(model_kwargs={"top_p": 0.5, "seed": 1, "presence_penalty": 0.1}) as engine:
        result = commit_more(engine, "s", 0)
    assert not result["degraded"] and len(stub.requests) == 2, "one refusal, one retry"
    assert result["model_fixes"] == ["without_seed", "without_temperature", "without_top_p"]
    assert stub.requests[1]["body"]["presence_penalty"] == 0.1, "a parameter the refusal did not name stays"


@STUB
def test_a_fix_whose_retry_is_refused_too_is_not_kept_nor_tried_again(stub, stub_engine):
    stub.handler = answering(lambda body: TEMPERATURE_REFUSAL)  # refuses whatever is sent
    with stub_engine() as engine:
        first = commit_more(engine, "s", 0)
        assert first["degraded"] and first["model_fixes"] == [], "nothing kept that fixed nothing"
        assert len(stub.requests) == 2 and "temperature" not in stub.requests[1]["body"]
        second = commit_more(engine, "s", 3)
    assert second["degraded"] and len(stub.requests) == 3, "the useless fix is not retried on the next commit"
    assert "temperature" in stub.requests[2]["body"]


@STUB
def test_a_400_that_only_quotes_a_parameter_is_not_taken_for_its_refusal(stub, stub_engine):
    stub.handler = answering(lambda body: "Request too large: temperature=0, max_tokens=4096, 9000 tokens > 8192")
    with stub_engine() as engine:
        result = commit_more(engine, "s", 0)
    assert result["degraded"] and len(stub.requests) == 1, "no retry: nothing refused a parameter"


@STUB
def test_every_engine_on_the_root_sees_the_last_degradation(stub, stub_engine, root):
    stub.handler = answering(lambda body: LENGTH_REFUSAL)
    with WorkingMemoryEngine(root=root, durable=False) as other:
        other.add_messages("s", turns(1))
        assert other.session_info("s")["last_degradation"] is None
        with stub_engine() as engine:
            degraded = commit_more(engine, "s", 1)
        assert other.session_info("s")["last_degradation"]["task_id"] == degraded["task_id"], "not a stale cache"
        other.add_messages("s", turns(3, 10))
        assert other.commit("s", keep_recent_count=0)["degraded"] is False
        assert other.session_info("s")["last_degradation"]["task_id"] == degraded["task_id"], "kept after a success"


@STUB
def test_a_secret_in_the_model_name_never_reaches_the_reason_or_the_log(stub, root, monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    stub.handler = answering(lambda body: LENGTH_REFUSAL)
    secret = "hunter2secretpw"
    with caplog.at_level(logging.WARNING, logger="workmem"), WorkingMemoryEngine(
            root=root, model=f"openai:https://bob:{secret}@llm.internal/v1", durable=False) as engine:
        result = commit_more(engine, "s", 0)
    assert result["degraded"] and "llm.internal" in result["reason"]
    assert secret not in result["reason"] and secret not in caplog.text


def test_workmem_resume_exits_3_when_a_resumed_commit_was_degraded(root, monkeypatch, capsys):
    resumed = [{"status": "completed", "task_id": "t" * 32, "archive_id": "archive_001", "degraded": True,
                "reason": "openai:x failed, the extractive model stood in: APITimeoutError: timed out"}]
    monkeypatch.setattr(WorkingMemoryEngine, "resume_all", lambda self: resumed)
    with WorkingMemoryEngine(root) as engine:  # a data root to resume in (other commands than add refuse none)
        engine.add_messages("s", [{"role": "user", "content": "hello"}])
    assert main(["--root", str(root), "resume"]) == EXIT_DEGRADED
    assert "degraded: task tttttttt" in capsys.readouterr().out
    assert main(["--root", str(root), "resume", "--allow-degraded"]) == 0
