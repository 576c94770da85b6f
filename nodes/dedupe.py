"""Dedupe of new bullet items against a section's items: by normalised token runs.

An item is already present when its token sequence equals, or is a contiguous run inside, an existing
item's — unless the existing item's *other* tokens hold a reversal or status word or a status marker:
"Using Redis for sessions" is not in "No longer using Redis for sessions", and "Login fails on
Safari" is not in "[resolved] Login fails on Safari" (a reopened issue). Equal sequences are always
duplicates. The same rule holds within one batch (the same item twice is added once).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from workmem.nodes.guard_words import RESOLVED_TAG, RESTORED_TAG, REVERSAL_WORDS
from workmem.state.memory import ARCHIVED_TAG

STATUS_MARKERS = (RESOLVED_TAG, RESTORED_TAG, ARCHIVED_TAG)
_EMPHASIS = re.compile(r"[*`~]+")
# `_word_` at a word's edges is emphasis; an underscore inside a name is the name (`__main__`, `_cache`, `src/_x`)
_UNDERSCORE_EMPHASIS = re.compile(r"(?<![\w/.'\\])_([^\s_/.][^\s_]*?)_(?![\w/])")
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'"})


def normalize_item_tokens(item: str) -> list[str]:
    """Tokens used by dedupe: lowercase, emphasis/backticks removed, split, trailing punctuation dropped."""
    text = _UNDERSCORE_EMPHASIS.sub(r"\1", _EMPHASIS.sub("", (item or "").lower().translate(_APOSTROPHES)))
    tokens = (token.rstrip(".,;:!?") for token in text.split())
    return [token for token in tokens if token]


def _run_at(haystack: list[str], needle: list[str]) -> int:
    """Index of the first contiguous occurrence of `needle` in `haystack`, -1 when absent."""
    n = len(needle)
    for i in range(len(haystack) - n + 1):
        if haystack[i:i + n] == needle:
            return i
    return -1


def _reverses(tokens: list[str]) -> bool:
    """Whether tokens (the part of an item around a matched run) carry a reversal, status word or marker."""
    text = " ".join(tokens)
    return any(token.strip("[]()\"'") in REVERSAL_WORDS for token in tokens) or any(
        marker in text for marker in STATUS_MARKERS) or "[silently" in text


def contains_item(existing: list[str], new: list[str]) -> bool:
    """Is the new item (tokens) already said by the existing one (tokens)? See the module docstring."""
    if existing == new:
        return True
    at = _run_at(existing, new)
    if at < 0:
        return False
    return not _reverses(existing[:at] + existing[at + len(new):])


def dedupe_items(existing_items: Iterable[str], new_items: Iterable[str]) -> list[str]:
    """The new items not already present among the existing ones nor earlier in the batch; empties dropped."""
    seen = [tokens for tokens in map(normalize_item_tokens, existing_items) if tokens]
    joined = [f" {' '.join(tokens)} " for tokens in seen]  # a cheap substring test before the exact one
    kept = []
    for item in new_items:
        tokens = normalize_item_tokens(item)
        needle = f" {' '.join(tokens)} "
        if not tokens or any(needle in text and contains_item(other, tokens) for other, text in zip(seen, joined,
                                                                                                     strict=True)):
            continue
        seen.append(tokens)
        joined.append(needle)
        kept.append(item)
    return kept
