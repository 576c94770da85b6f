"""What the search index holds of a message: the same text on both backends, within what both can match
(docs/search.md).

A phrase (words in sequence) is matched by word positions. SQLite FTS5 keeps every position; a Postgres `tsvector`
keeps positions up to 16 383 and a word's first 256 of them — past that, Postgres misses a phrase FTS5 finds. So
the index never holds text past those limits in order: a message is held verbatim while it has at most
`INDEX_POSITIONS` words, no word more than `INDEX_REPEATS` times and at most `INDEX_CHARS` characters; any other
is held as a *digest* — `DIGEST_MARK`, its head and its tail verbatim (within the same limits), then each further
distinct word once (words without digits first, then ids, hashes and numbers), in order of first use, within
`INDEX_CHARS` characters and the position limit. A phrase is found in a message's verbatim part; a single word
anywhere in the digest. A hit on a digest is shown from the message itself (`search_hits.from_message`).

Words are counted as both tokenizers cut text — runs of letters and digits — and a word's repeats by its first
three characters, lower-cased, so every form one stem takes (`queue`, `queues`, `queued`) counts as one.
"""

from __future__ import annotations

import re
from collections import Counter

INDEX_CHARS = 128 * 1024  # the most of one message the search index holds
INDEX_HEAD_CHARS = 16 * 1024  # of a digest: its head and tail, verbatim, half each
INDEX_POSITIONS = 16_000  # words held in order (Postgres keeps positions up to 16 383)
INDEX_REPEATS = 240  # occurrences of one word held in order (Postgres keeps a word's first 256 positions)
DIGEST_MARK = "\u2063"  # starts an index text that is a digest (invisible, never a word to either tokenizer)
SCAN_CHARS = 1 << 20  # a digest's middle is read in pieces of this size (a 256 MiB text is never copied whole)
_WORDS = re.compile(r"\w+")
_TOKENS = re.compile(r"[^\W_]+")  # a word as FTS5's unicode61 and Postgres' parser (after `[^[:alnum:]]+` → ' ') see it
_DIGIT = re.compile(r"\d")
_MAX_WORD = 64  # longer "words" (hashes, base64) are left out of the digest
_KEY = 3  # a word's repeats are counted by its first three characters


def index_text(text: str) -> str:
    """What the search index holds of a message's text: the text itself, or its digest (see the module doc)."""
    if len(text) <= 2 * INDEX_REPEATS:  # too short to repeat a word past the limit, or to hold 16 000 words
        return text
    if len(text) <= INDEX_CHARS and _in_order_end(text, 0, len(text), Counter(), INDEX_POSITIONS,
                                                  INDEX_REPEATS)[0] == len(text):
        return text
    return _digest(text)


def is_digest(text: str) -> bool:
    """True when an indexed text is a digest of a longer message (see `index_text`)."""
    return text.startswith(DIGEST_MARK)


def _digest(text: str) -> str:
    half = INDEX_HEAD_CHARS // 2
    counts: Counter[str] = Counter()
    head_end, head_words = _in_order_end(text, 0, min(len(text), half), counts, INDEX_POSITIONS // 2,
                                         INDEX_REPEATS // 2)
    tail_start, tail_words = _in_order_start(text, max(head_end, len(text) - half), len(text), counts,
                                             INDEX_POSITIONS // 2, INDEX_REPEATS - 10)
    head, tail = text[:head_end], text[tail_start:]
    seen = set(_WORDS.findall(head.lower())) | set(_WORDS.findall(tail.lower()))
    room = INDEX_CHARS - len(head) - len(tail) - 3
    positions = INDEX_POSITIONS - head_words - tail_words
    plain, numbers = _distinct_words(text, head_end, tail_start, seen, room)
    words = []
    for word in (*plain, *numbers):
        room -= len(word) + 1
        positions -= len(_TOKENS.findall(word))
        if room < 0 or positions < 0:
            break
        words.append(word)
    return f"{DIGEST_MARK}{head}\n{tail}\n{' '.join(words)}"


def _in_order_end(text: str, start: int, end: int, counts: Counter[str], positions: int,
                  repeats: int) -> tuple[int, int]:
    """(where the in-order part of `text[start:end]` ends, its words): before the first word past `positions`
    words or a word's `repeats`-th repeat (`counts` holds the repeats so far, and is updated)."""
    n = 0
    for match in _TOKENS.finditer(text, start, end):
        key = match.group().lower()[:_KEY]
        if n == positions or counts[key] == repeats:
            return match.start(), n
        counts[key] += 1
        n += 1
    return end, n


def _in_order_start(text: str, start: int, end: int, counts: Counter[str], positions: int,
                    repeats: int) -> tuple[int, int]:
    """(where the in-order tail of `text[start:end]` starts, its words), read from the end back, within the same
    limits as `_in_order_end` (`counts` shared with the head's)."""
    tokens = list(_TOKENS.finditer(text, start, end))
    n, begin = 0, end
    for match in reversed(tokens):
        key = match.group().lower()[:_KEY]
        if n == positions or counts[key] >= repeats:
            break
        counts[key] += 1
        n += 1
        begin = match.start()
    return (begin if n else end), n


def _distinct_words(text: str, start: int, end: int, seen: set[str], room: int) -> tuple[list[str], list[str]]:
    """The distinct words of `text[start:end]` not in `seen`, in order of first use: (those without digits, those
    with) — each list only as long as `room` characters can hold (no more of it could enter the digest). Read in
    pieces of `SCAN_CHARS`, each cut after a non-word character, so memory stays bounded at any size."""
    plain: dict[str, None] = {}
    numbers: dict[str, None] = {}
    plain_chars = number_chars = 0
    at = start
    while at < end and plain_chars <= room:
        stop = min(end, at + SCAN_CHARS)
        if stop < end:
            boundary = _NON_WORD.search(text, stop, min(end, stop + 4096))
            stop = boundary.end() if boundary else stop
        for word in dict.fromkeys(_WORDS.findall(text[at:stop].lower())):  # each piece's words once, in order
            if len(word) > _MAX_WORD or word in seen or word in plain or word in numbers:
                continue
            if _DIGIT.search(word):
                if number_chars <= room:
                    numbers[word] = None
                    number_chars += len(word) + 1
            elif plain_chars <= room:
                plain[word] = None
                plain_chars += len(word) + 1
        at = stop
    return list(plain), list(numbers)


_NON_WORD = re.compile(r"\W")
