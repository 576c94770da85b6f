"""No secret carried by a model error reaches the checkpoints, the index, the session files or any log."""

from __future__ import annotations

import logging

import pytest
from engine_helpers import assistant, user
from fakes import create_call, scripted, transport_error

import workmem.nodes.generate
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import SECTIONS

KEYS = {
    "openai": "sk-AbCdEf0123456789GhIjKlMnOpQrSt",
    "openai_project": "sk-proj-AbCdEf0123456789_GhIjKlMnOp",
    "anthropic": "sk-ant-api03-AbCdEf0123456789GhIjKl",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.AbCdEf0123456789",
    "github": "ghp_0123456789abcdefghijABCDEFGHIJKLMN",
    "github_oauth": "gho_0123456789abcdefghijABCDEFGHIJKLMN",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "gitlab": "glpat-AbCdEf0123456789xyZWvuts",
    "huggingface": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01",
    "npm": "npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "stripe": "sk_live_51AbCdEfGhIjKlMnOpQrStUv",
    "stripe_restricted": "rk_live_51AbCdEfGhIjKlMnOpQrStUv",
    "slack": "xoxb-1234567890-abcdefghijklmnop",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "google": "AIzaSyA0123456789abcdefghijklmnopqrstuv",
    "api_key": "api_key=SuperSecretValue0123",
    "token": "token=SuperSecretValue0123",
    "password": "password=SuperSecretValue0123",
}


def secret_part(key: str) -> str:
    """The part of a key that must never be stored (the value after any `name=` or scheme)."""
    return key.split("=", 1)[-1].split(" ", 1)[-1][-16:]


@pytest.mark.parametrize("kind", list(KEYS))
def test_a_retried_transport_error_leaves_its_key_nowhere(root, kind, monkeypatch, caplog):
    monkeypatch.setattr(workmem.nodes.generate, "retry_delay", lambda backoff_s, attempt: 0.0)
    key = KEYS[kind]
    base = {name: "" for name in SECTIONS} | {"Session Title": "Secret-free session"}
    model = scripted(transport_error(f"Connection error with {key} while calling"),
                     transport_error(f"Still failing: {key}"), create_call(base),
                     *[transport_error(f"down {key}")] * 3)
    with caplog.at_level(logging.DEBUG), WorkingMemoryEngine(root, model=model, durable=False) as engine:
        engine.add_messages("s", [user("Plan the release."), assistant("Planned it.")])
        first = engine.commit("s", keep_recent_count=0)  # two transport errors, then an answer
        engine.add_messages("s", [user("And the rollback?"), assistant("Rollback planned.")])
        second = engine.commit("s", keep_recent_count=0)  # three transport errors, then the fallback
        assert first["status"] == second["status"] == "completed"
        assert engine.working_memory("s")["model"]["usage"]["failed_attempts"] == 3
    needle = secret_part(key).encode()
    for path in root.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"{kind} key found in {path.relative_to(root)}"
    for record in caplog.records:
        assert secret_part(key) not in record.getMessage(), f"{kind} key logged by {record.name}"
