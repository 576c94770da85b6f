"""Recognise and strip what workmem itself injected into a model's context (SPEC §7 after_turn)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, normalize_message
from workmem.state.payloads import PayloadLimits

SUMMARY_MARKER = "[Session History Summary]"
_RELEVANT_MEMORIES = re.compile(r"<relevant-memories>.*?</relevant-memories>", re.DOTALL)


def is_tagged(message: Any) -> bool:
    """True for messages workmem tagged: `additional_kwargs={"workmem": …}` (or the same key in a dict's meta)."""
    if isinstance(message, dict):
        kwargs = message.get("additional_kwargs")
        meta = message.get("meta")
        meta_kwargs = meta.get("additional_kwargs") if isinstance(meta, dict) else None
        return any(isinstance(d, dict) and "workmem" in d for d in (kwargs, meta, meta_kwargs))
    kwargs = getattr(message, "additional_kwargs", None)
    return isinstance(kwargs, dict) and "workmem" in kwargs


def clean_messages(
    messages: list[Any], *, offset: int = 0, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    normalize: Callable[..., dict[str, Any]] = normalize_message, payloads: PayloadLimits | None = None,
) -> list[tuple[int, dict[str, Any], bool]]:
    """`(index, normalised message, changed)` for every message that survives stripping.

    Every message is validated first (a bad one raises InvalidInput naming `messages[offset + i]`),
    so a batch is stripped only when all of it is valid. Dropped: tagged messages, messages whose
    text starts with `[Session History Summary]`, and messages left empty once their
    `<relevant-memories>` blocks are removed. `changed` is True when a block was cut out. `normalize` may
    be a caching stand-in for `normalize_message` (same signature; its results are not modified here).
    """
    normalized = [normalize(m, field=f"messages[{offset + i}]", max_bytes=max_bytes, payloads=payloads)
                  for i, m in enumerate(messages)]
    kept: list[tuple[int, dict[str, Any], bool]] = []
    for i, (message, msg) in enumerate(zip(messages, normalized, strict=True)):
        if is_tagged(message) or "workmem" in msg["meta"]:
            continue
        texts = [p["text"] for p in msg["parts"] if p["type"] == "text"]
        if texts and texts[0].lstrip().startswith(SUMMARY_MARKER):
            continue
        parts, changed = [], False
        for part in msg["parts"]:
            if part["type"] == "text" and "<relevant-memories>" in part["text"]:
                text = _RELEVANT_MEMORIES.sub("", part["text"]).strip()
                changed = True
                if not text:
                    continue
                part = {**part, "text": text}
            parts.append(part)
        if parts:
            kept.append((i, {**msg, "parts": parts}, changed))
    return kept


def strip_injected(messages: list[Any], *, offset: int = 0, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                   payloads: PayloadLimits | None = None) -> list[dict[str, Any]]:
    """Normalise `messages`, dropping workmem-tagged ones, summaries and <relevant-memories> blocks."""
    return [msg for _, msg, _ in clean_messages(messages, offset=offset, max_bytes=max_bytes, payloads=payloads)]
