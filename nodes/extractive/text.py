"""Text helpers of the extractive model: dates, sentences, one-line items, comparison keys, keyword overlap."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from workmem.nodes.extractive.words import KEYWORD_STOPWORDS, NEGATIONS, WEEKDAYS
from workmem.nodes.guards import path_tokens
from workmem.state.search.words import MONTH_NAMES

MAX_ITEM_CHARS = 300


def alternation(entries: Iterable[str]) -> str:
    """A regex alternation of literal `entries`, in table order (each escaped; the caller groups it)."""
    return "|".join(map(re.escape, entries))


_MONTH = rf"(?:{alternation(name[:3] for name in MONTH_NAMES)})[a-z]*\.?"  # `Sep`, `Sept.`, `September`
DATE_RE = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTH},? \d{{4}}\b|\b{_MONTH} \d{{1,2}}"
    rf"(?:st|nd|rd|th)?\b(?:,? \d{{4}})?|\b(?:{alternation(WEEKDAYS)})\b",
    re.I,
)
FULL_DATE_RE = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTH},? \d{{4}}\b|\b{_MONTH} \d{{1,2}}"
    r"(?:st|nd|rd|th)?,? \d{4}\b",
    re.I,
)
_WORD = r"[A-Za-z][A-Za-z0-9'’-]*"
_NEGATED_CLAUSE_RE = re.compile(rf"\b(?:{alternation(NEGATIONS)})\b[^,.;]*", re.I)
_FENCE_RE = re.compile(r"```.*?(```|$)", re.DOTALL)
_SENT_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'`(\[]?[A-Z0-9])|(?<=\w[!?])\s+(?=[a-z])")  # `fix it? please …`
_MARKER_RE = re.compile(r"^\s*(?:#+\s*|>\s*|[-*+](?:\s+|$)|\d+[.)](?:\s+|$))+")


# A dialogue speaker's name as a message or a fact starts with it: `Ada`, `Mary Ann`, `O'Brien`.
SPEAKER_NAME = r"[A-Z][\w'’.-]{1,30}(?: [A-Z][\w'’.-]{1,30}){0,2}"
# A shared photo as `workmem eval` stores a LoCoMo turn: `<text> [image: <caption>]`, at the end.
_CAPTION_RE = re.compile(r"\s*\[image: (?:[^\[\]]|\[[^\]]*\])*\]\s*$")


def without_caption(sent: str) -> str:
    """The sentence without the caption of a photo shared with it."""
    return _CAPTION_RE.sub("", sent)


def is_question(sent: str) -> bool:
    """The sentence asks something."""
    return sent.rstrip().rstrip(")]").endswith("?")


def clean(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    """One line, no markdown markers or header hashes, at most `limit` characters."""
    text = " ".join(text.split())
    text = _MARKER_RE.sub("", text).replace("**", "").strip()
    text = text.lstrip("#").strip()
    if len(text) > limit:
        text = text[: limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return text


def sentences(text: str) -> list[str]:
    """Sentences of prose (fenced code left out), one list across lines, list markers removed."""
    text = _FENCE_RE.sub("\n", text)
    out: list[str] = []
    for line in text.split("\n"):
        line = _MARKER_RE.sub("", line).strip()
        for sent in _SENT_SPLIT_RE.split(line):
            sent = sent.strip()
            if sent:
                out.append(sent)
    return out


def capitalised(text: str) -> str:
    """`text` with its first letter upper-case."""
    return text[:1].upper() + text[1:]


def as_sentence(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    """`text` cleaned and ending with sentence punctuation."""
    text = clean(text, limit)
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def norm(text: str) -> str:
    """Comparison form: emphasis and backticks removed, lowercase, spaces collapsed, end punctuation off."""
    return " ".join(re.sub(r"[`*_]", "", text).lower().split()).rstrip(".,;:!?")


@lru_cache(maxsize=4096)
def keywords(text: str) -> frozenset[str]:
    """Content words of 4+ letters (and numbers), lowercased, cut to a 5-letter stem; markers ignored."""
    text = re.sub(r"\[[^\]]*\]", " ", text)
    words = {w.lower() for w in re.findall(_WORD, text) if len(w) >= 4 and w.lower() not in KEYWORD_STOPWORDS}
    numbers = set(re.findall(r"(?<![\w.])\d+(?:[.,]\d+)?", text))
    return frozenset({w[:5] for w in words} | numbers)


@lru_cache(maxsize=4096)
def identifiers(text: str) -> frozenset[str]:
    """Numbers and path-like tokens: what tells one similar item from another (`module_7.py`, `42`)."""
    return frozenset(path_tokens(text) | set(re.findall(r"(?<![\w.])\d+(?:[.,]\d+)?", DATE_RE.sub(" ", text))))


def overlaps(item: str, text: str, share: float = 0.4) -> bool:
    """`text` is about `item`: two of the item's keywords and `share` of them, and one of its identifiers
    (those in a `not …` / `instead of …` clause of the item do not count)."""
    keys = keywords(item)
    shared = keys & keywords(text)
    ids = identifiers(_NEGATED_CLAUSE_RE.sub(" ", item))
    same_target = not ids or bool(ids & identifiers(text))
    return len(keys) >= 2 and len(shared) >= 2 and len(shared) >= share * len(keys) and same_target
