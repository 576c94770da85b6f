"""Secret redaction of stored errors and logs (§10)."""

from __future__ import annotations

import pytest

from workmem.state.redact import redact_secrets


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("key sk-abc123def456ghi789", "abc123def456"),
        ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.SflKxwRJSM", "SflKxwRJSM"),
        ("api_key=supersecretvalue", "supersecretvalue"),
        ('"password": "hunter2hunter2"', "hunter2"),
        ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ", "0123456789abcdef"),
        ("https://user:pa55word@host/x", "pa55word"),
    ],
)
def test_redact_secrets(text, leak):
    assert leak not in redact_secrets(text)


def test_redact_keeps_ordinary_text():
    assert redact_secrets("tokens: 12, the task-runner failed") == "tokens: 12, the task-runner failed"
