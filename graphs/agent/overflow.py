"""A provider's refusal of a call as too long: how it is recognised, and the input limit it teaches."""

from __future__ import annotations

OVERFLOW_MARGIN = 0.9  # an overflowing call's size less 10 %: the session's input limit from then on
OVERFLOW_CODE = "context_length_exceeded"  # OpenAI's error code


def is_context_overflow(exc: BaseException) -> bool:
    """LangChain's `ContextOverflowError`, or a provider error whose code is OpenAI's `context_length_exceeded`."""
    try:
        from langchain_core.exceptions import ContextOverflowError
    except ImportError:  # pragma: no cover - older langchain-core
        ContextOverflowError = ()  # type: ignore[assignment]  # noqa: N806
    if ContextOverflowError and isinstance(exc, ContextOverflowError):
        return True
    code = getattr(exc, "code", None)
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        code = code or body.get("code") or (body.get("error") or {}).get("code")
    return code == OVERFLOW_CODE


def lowered_limit(call_tokens: int) -> int:
    """The input limit a session keeps after a call of `call_tokens` overflowed."""
    return max(int(call_tokens * OVERFLOW_MARGIN), 1)
