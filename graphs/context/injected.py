"""Recognise what workmem itself injected into a model's context, by the marker it set (docs/hostile-input.md).

workmem tags every message it adds to a call — the system addition, the memory message, a system message it
combined with the agent's — with `additional_kwargs={"workmem": <kind>}`. That tag, never the text, says a
message is workmem's: a user who pastes `[Session History Summary]`, a model reply that echoes the format, or a
`<relevant-memories>` block a host put into a prompt is conversation, stored and shown like any other text.
One rule (`clean_messages`) serves `after_turn`, `assemble`'s pending messages and the middleware's view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, normalize_message
from workmem.state.payloads import PayloadLimits

SUMMARY_MARKER = "[Session History Summary]"  # the memory message's first line as workmem renders it
TAG = "workmem"  # the `additional_kwargs` key (or a workmem dict's `meta` key) marking workmem's own messages


def is_tagged(message: Any) -> bool:
    """True for messages workmem tagged: `additional_kwargs={"workmem": …}` (or the same key in a dict's meta)."""
    if isinstance(message, dict):
        kwargs = message.get("additional_kwargs")
        meta = message.get("meta")
        meta_kwargs = meta.get("additional_kwargs") if isinstance(meta, dict) else None
        return any(isinstance(d, dict) and TAG in d for d in (kwargs, meta, meta_kwargs))
    kwargs = getattr(message, "additional_kwargs", None)
    return isinstance(kwargs, dict) and TAG in kwargs


def clean_messages(
    messages: list[Any], *, offset: int = 0, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    normalize: Callable[..., dict[str, Any]] = normalize_message, payloads: PayloadLimits | None = None,
) -> list[tuple[int, dict[str, Any], bool]]:
    """`(index, normalised message, changed)` for every message that is not workmem's own.

    Every message is validated first (a bad one raises InvalidInput naming `messages[offset + i]`), so a batch
    is cleaned only when all of it is valid. Dropped: the messages workmem tagged (`is_tagged`), whatever their
    text. Kept whole: everything else, text that merely looks like workmem's included, so `changed` is always
    False (the field stays for callers that send a changed message as a fresh object). `normalize` may be a
    caching stand-in for `normalize_message` (same signature; its results are not modified here).
    """
    normalized = [normalize(m, field=f"messages[{offset + i}]", max_bytes=max_bytes, payloads=payloads)
                  for i, m in enumerate(messages)]
    return [(i, msg, False) for i, (message, msg) in enumerate(zip(messages, normalized, strict=True))
            if not (is_tagged(message) or TAG in msg["meta"])]


def strip_injected(messages: list[Any], *, offset: int = 0, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                   payloads: PayloadLimits | None = None) -> list[dict[str, Any]]:
    """Normalise `messages`, dropping the ones workmem tagged as its own."""
    return [msg for _, msg, _ in clean_messages(messages, offset=offset, max_bytes=max_bytes, payloads=payloads)]
