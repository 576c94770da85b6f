"""Which model a commit uses: `model=` / `WORKMEM_MODEL` checked at construction, built at the first commit."""

from __future__ import annotations

import logging

import pytest
from fakes import scripted

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.models import LazyModel, check_model, model_kwargs_setting, model_spec
from workmem.state.errors import InvalidInput

# Building ChatOpenAI probes socket options with a throwaway socket (no connection is made).
SOCKET_PROBE = pytest.mark.allow_hosts(["127.0.0.1"])
MESSAGES = [{"role": "user", "content": "Rotate the TLS certificates before 2024-06-01."},
            {"role": "assistant", "content": "Certificates get rotated on 2024-05-30."}]


@pytest.mark.parametrize("bad", [5, 3.5, object(), {"model": "openai:x"}, ["openai:x"], ExtractiveChatModel,
                                 "my-local-model", "openai:", ":gpt", "nope:model", "  ", "openai::x",
                                 "openai:gpt\x00"])
def test_model_of_the_wrong_kind_is_refused_at_construction(root, bad):
    if bad == "  ":
        assert check_model(bad) == "extractive"  # blank means the offline default
        return
    with pytest.raises(InvalidInput, match="model"):
        WorkingMemoryEngine(root=root, model=bad)
    assert not root.exists(), "nothing is written before the model is accepted"


def test_a_bad_workmem_model_is_refused_at_construction(root, monkeypatch):
    monkeypatch.setenv("WORKMEM_MODEL", "my-local-model")
    with pytest.raises(InvalidInput, match="WORKMEM_MODEL"):
        WorkingMemoryEngine(root=root)


def test_specs():
    given = scripted()
    assert model_spec(given) is given
    assert model_spec(None, env={}) == "extractive"
    assert model_spec(None, env={"WORKMEM_MODEL": "openai:gpt-4.1-mini"}) == "openai:gpt-4.1-mini"
    assert model_spec("anthropic: claude-sonnet-4-5", env={}) == "anthropic:claude-sonnet-4-5"
    assert LazyModel("openai:gpt-4.1-mini").name == "openai:gpt-4.1-mini"
    assert LazyModel("extractive").name == "workmem-extractive"


def test_a_bare_model_name_gets_the_provider_init_chat_model_infers():
    assert model_spec("gpt-4.1-mini", env={}) == "openai:gpt-4.1-mini"
    assert model_spec(None, env={"WORKMEM_MODEL": "claude-sonnet-4-5"}) == "anthropic:claude-sonnet-4-5"
    assert model_spec("mistral-large-latest", env={}) == "mistralai:mistral-large-latest"
    assert model_spec("ollama:llama3:8b", env={}) == "ollama:llama3:8b"  # a given provider is kept
    with pytest.raises(InvalidInput, match="unknown provider .llama3"):
        model_spec("llama3:8b", env={})  # neither a known provider nor a name it can infer


@pytest.mark.parametrize("bad", [[("temperature", None)], {"not a name": 1}, {1: 2}, "temperature=None"])
def test_model_kwargs_must_be_a_mapping_of_names(root, bad):
    with pytest.raises(InvalidInput, match="model_kwargs"):
        WorkingMemoryEngine(root=root, model="openai:gpt-4.1-mini", model_kwargs=bad)
    assert not root.exists()


def test_model_kwargs_are_refused_with_a_model_object_and_read_from_the_environment(root, monkeypatch):
    with pytest.raises(InvalidInput, match="model object"):
        WorkingMemoryEngine(root=root, model=scripted(), model_kwargs={"temperature": None})
    monkeypatch.setenv("WORKMEM_MODEL_KWARGS", "{temperature: none}")
    with pytest.raises(InvalidInput, match="WORKMEM_MODEL_KWARGS"):
        WorkingMemoryEngine(root=root, model="openai:gpt-4.1-mini")
    monkeypatch.setenv("WORKMEM_MODEL_KWARGS", '{"temperature": null, "top_p": 0.5}')
    assert model_kwargs_setting() == {"temperature": None, "top_p": 0.5}
    assert model_kwargs_setting({"seed": 1}) == {"seed": 1}  # the argument wins over the environment


def test_the_offline_model_does_not_read_the_providers_keywords(root, monkeypatch):
    """`workmem demo` and every offline engine run whatever WORKMEM_MODEL_KWARGS holds for a provider's model."""
    monkeypatch.setenv("WORKMEM_MODEL_KWARGS", "{temperature: none}")
    with WorkingMemoryEngine(root=root, model="extractive", durable=False) as engine:
        engine.add_messages("s", MESSAGES)
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"


@SOCKET_PROBE
def test_everything_but_commit_works_without_the_models_key(root, monkeypatch, caplog):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with WorkingMemoryEngine(root=root, model="openai:gpt-4o-mini", durable=False) as engine:
        engine.add_messages("s", MESSAGES)
        assert len(engine.assemble("s")["messages"]) == 3
        assert engine.archive_expand("s", start_seq=1, end_seq=2)["message_count"] == 2
        assert engine.session_info("s")["message_count"] == 2

        with caplog.at_level(logging.WARNING, logger="workmem"):
            first = engine.commit("s", keep_recent_count=0)
            second = engine.commit("s", keep_recent_count=0)
        assert first["status"] == second["status"] == "failed"
        assert "OPENAI_API_KEY" in first["reason"]
        assert engine.task(first["task_id"])["status"] == "failed"
        assert "OPENAI_API_KEY" in engine.task(first["task_id"])["error"]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "OPENAI_API_KEY" in r.getMessage()]
        assert len(warnings) == 1, "one warning per session"
        assert engine.archive_search("s", "certificates") == []  # nothing was archived
        assert len(engine.storage.sessions.live_messages("s")) == 2, "the messages stay live"


@SOCKET_PROBE
def test_a_model_given_as_a_string_is_built_at_the_first_commit(root, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0000")
    engine = WorkingMemoryEngine(root=root, model="openai:gpt-4o-mini", durable=False)
    try:
        assert engine.model._model is None, "not built at construction"
        model = engine.model.get()
        assert model is engine.model.get(), "built once"
        assert (model.temperature, model.max_retries, model.request_timeout) == (0, 0, 60)
    finally:
        engine.close()


def test_a_missing_provider_package_fails_the_commit_it_never_degrades(root):
    with WorkingMemoryEngine(root=root, model="mistralai:mistral-small-latest", durable=False) as engine:
        engine.add_messages("s", MESSAGES)
        result = engine.commit("s", keep_recent_count=0)
        assert result["status"] == "failed" and not result.get("degraded")
        assert "langchain-mistralai" in result["reason"] and result["archive_id"] is None
        assert len(engine.storage.sessions.live_messages("s")) == 2, "nothing archived"


@pytest.mark.parametrize(("spec", "package"), [("bedrock:x", "langchain-aws"), ("azure_ai:x", "langchain-azure-ai"),
                                               ("google_genai:x", "langchain-google-genai")])
def test_a_missing_package_is_named_as_pip_knows_it(spec, package):
    from workmem.nodes.models import build_model
    from workmem.state.errors import ModelUnavailable

    with pytest.raises(ModelUnavailable, match=f"pip install {package}\\)"):
        build_model(spec)


def test_a_client_that_starts_without_its_key_fails_the_commit_naming_the_variable(root, monkeypatch):
    """ChatAnthropic starts with an empty key and fails every call: the commit fails and asks for the key, it
    does not degrade after three connection errors."""
    pytest.importorskip("langchain_anthropic")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with WorkingMemoryEngine(root=root, model="anthropic:claude-sonnet-4-5", durable=False) as engine:
        engine.add_messages("s", MESSAGES)
        result = engine.commit("s", keep_recent_count=0)
        assert result["status"] == "failed" and not result.get("degraded")
        assert "set ANTHROPIC_API_KEY" in result["reason"]
        assert len(engine.storage.sessions.live_messages("s")) == 2, "nothing archived"


@SOCKET_PROBE
def test_a_keyword_the_client_refuses_is_named_beside_the_key(monkeypatch):
    from workmem.nodes.models import build_model
    from workmem.state.errors import ModelUnavailable

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0000")
    refused = r"could not be built \(TypeError: Invalid timeout.*model_kwargs \['timeout'\]"
    with pytest.raises(ModelUnavailable, match=refused):
        build_model("openai:gpt-4o-mini", model_kwargs={"timeout": "abc"})


def test_a_client_that_authenticates_another_way_is_built_without_a_key(monkeypatch):
    """Azure with an Entra ID token, Anthropic behind a gateway that takes its own header: no key, and built."""
    from workmem.nodes.models import build_model

    for name in ("AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
    monkeypatch.setenv("AZURE_OPENAI_AD_TOKEN", "eyJ0eXAi.fake.token")
    assert type(build_model("azure_openai:gpt-4o")).__name__ == "AzureChatOpenAI"
    pytest.importorskip("langchain_anthropic")
    gateway = build_model("anthropic:claude-sonnet-4-5", model_kwargs={"default_headers": {"Authorization": "x"}})
    assert type(gateway).__name__ == "ChatAnthropic"
    monkeypatch.setenv("ANTHROPIC_API_URL", "http://proxy.internal:4000")  # the SDK's variable, read first
    assert type(build_model("anthropic:claude-sonnet-4-5")).__name__ == "ChatAnthropic"


def test_a_setting_that_still_sends_no_key_is_no_way_around_it(monkeypatch):
    from workmem.nodes.models import build_model
    from workmem.state.errors import ModelUnavailable

    pytest.importorskip("langchain_anthropic")
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_API_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_CUSTOM_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    for kwargs in (None, {"default_headers": {"anthropic-beta": "x"}}):
        with pytest.raises(ModelUnavailable, match="set ANTHROPIC_API_KEY"):
            build_model("anthropic:claude-sonnet-4-5", model_kwargs=kwargs)
