"""Recognise and strip what workmem itself injected into a model's context (SPEC §7 after_turn)."""

from __future__ import annotations

import re
from typing import Any

from graphs.assemble import SUMMARY_PREFIX
from state.messages import normalize_message

_RELEVANT_MEMORIES = re.compile(r"<relevant-memories>.*?</relevant-memories>", re.DOTALL)


def _tagged(message: Any) -> bool:
    kwargs = message.get("additional_kwargs") if isinstance(message, dict) else getattr(
        message, "additional_kwargs", None)
    meta = message.get("meta") if isinstance(message, dict) else None
    return bool((isinstance(kwargs, dict) and "workmem" in kwargs) or (isinstance(meta, dict) and "workmem" in meta))


def strip_injected(messages: list[Any]) -> list[dict[str, Any]]:
    """Normalise `messages`, dropping workmem-tagged ones, summaries and <relevant-memories> blocks."""
    kept: list[dict[str, Any]] = []
    for message in messages:
        if _tagged(message):
            continue
        normalized = normalize_message(message)
        parts = []
        for part in normalized["parts"]:
            if part.get("type") == "text":
                if part["text"].startswith(SUMMARY_PREFIX.strip()):
                    continue
                text = _RELEVANT_MEMORIES.sub("", part["text"]).strip()
                if not text:
                    continue
                part = {**part, "text": text}
            parts.append(part)
        if parts:
            kept.append({**normalized, "parts": parts})
    return kept
