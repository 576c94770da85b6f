"""Secret redaction for stored errors and logs."""

from __future__ import annotations

import re

MAX_ERROR_CHARS = 500
MASK = "***"

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
     "-----PRIVATE KEY " + MASK + "-----"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "sk-" + MASK),
    (re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}", re.I), r"\1 " + MASK),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), r"\1" + MASK),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), "gh_" + MASK),
    (re.compile(r"\bxox[a-z]-[A-Za-z0-9\-]{10,}"), "xox-" + MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{16,}"), "glpat-" + MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), "hf_" + MASK),
    (re.compile(r"\bnpm_[A-Za-z0-9]{20,}"), "npm_" + MASK),
    (re.compile(r"\b(sk|rk|pk)_(live|test)_[A-Za-z0-9]{16,}"), r"\1_\2_" + MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), "AIza" + MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), "jwt-" + MASK),
    (re.compile(r"(://[^/\s:@]+):[^/\s@]+@"), r"\1:" + MASK + "@"),
    # key=value and key: value of any name ending in a secret word (aws_secret_access_key, DB_PASSWORD, x-api-key…)
    (re.compile(r"(?i)\b([A-Za-z0-9_.-]*(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|"
                r"access[_-]?token|auth[_-]?token|secret|password|passwd|pwd|token|authorization|credentials?)"
                r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]{4,}"), r"\1" + MASK),
]


def redact_secrets(text: str) -> str:
    """`text` with API keys, bearer tokens, passwords and similar secrets masked."""
    if not isinstance(text, str):
        text = str(text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def clean_error(text: object, limit: int = MAX_ERROR_CHARS) -> str:
    """A stored error: redacted first, then cut to `limit` characters, each lone surrogate written as `\\udcxx`
    (a store or a log file encodes it as UTF-8)."""
    out = redact_secrets(str(text)).encode("utf-8", "backslashreplace").decode("utf-8")
    return out if len(out) <= limit else out[: limit - 1] + "…"


def describe_error(exc: BaseException, limit: int = MAX_ERROR_CHARS) -> str:
    """`ExceptionType: message` of an exception, redacted and capped (what tasks, states and logs keep)."""
    return clean_error(f"{type(exc).__name__}: {exc}", limit)
