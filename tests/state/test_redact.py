"""Secret redaction of stored errors and logs."""

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
        ("OpenAI sk-proj-AbCdEf0123456789_ghIJkl-mnOP", "AbCdEf0123456789"),
        ("Anthropic sk-ant-api03-AbCdEf0123456789ghIJ", "AbCdEf0123456789"),
        ("GitHub gho_0123456789abcdefghijABCDEFGHIJ", "0123456789abcdef"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "0123456789_abcdef"),
        ("GitLab glpat-AbCdEf0123456789xyZW", "AbCdEf0123456789"),
        ("Hugging Face hf_AbCdEfGhIjKlMnOpQrStUvWxYz01", "AbCdEfGhIjKlMnOp"),
        ("npm npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123", "AbCdEfGhIjKlMnOp"),
        ("Stripe sk_live_51AbCdEfGhIjKlMnOpQr", "51AbCdEfGhIjKlMnOp"),
        ("Stripe rk_live_51AbCdEfGhIjKlMnOpQr", "51AbCdEfGhIjKlMnOp"),
        ("Slack xoxe-1234567890-abcdefghij", "1234567890-abcdef"),
        ("Google AIzaSyA0123456789abcdefghijklmnopqrstuv", "0123456789abcdef"),
        ("token=abcd1234efgh", "abcd1234efgh"),
        ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI"),
        ("AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "wJalrXUtnFEMI"),
        ("secret_key = 'hunter2hunter2'", "hunter2"),
        ("DB_PASSWORD=correct-horse-battery", "correct-horse"),
        ("x-api-key: 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
        ("authorization=opaque-credential-42", "opaque-credential"),
        ("temporary ASIAIOSFODNN7EXAMPLE", "IOSFODNN7"),
        ("postgresql://app:s3cr3tpass@db:5432/x", "s3cr3tpass"),
    ],
)
def test_redact_secrets(text, leak):
    assert leak not in redact_secrets(text)


def test_redact_keeps_ordinary_text():
    assert redact_secrets("tokens: 12, the task-runner failed") == "tokens: 12, the task-runner failed"
    assert redact_secrets("max_tokens=4000 and secrets_found: none") == "max_tokens=4000 and secrets_found: none"


def test_a_stored_error_with_a_lone_surrogate_encodes_as_utf8():
    """An exception's text may carry a file name read with `surrogateescape`; the task store and a log file encode
    what `clean_error` returns as UTF-8."""
    from workmem.state.redact import clean_error

    cleaned = clean_error("cannot open caf\udce9.txt: token=abcdef123456")
    assert cleaned.encode("utf-8") == b"cannot open caf\\udce9.txt: token=***"
