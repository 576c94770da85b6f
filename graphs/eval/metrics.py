"""No-model metrics of `workmem eval`: normalisation, question keywords, WM presence, aggregation.

Rules (deterministic, documented in the README's evaluation section):

- **Normalised text**: NFKC, lowercase, every character that is not a letter, digit or whitespace
  replaced by a space, the articles a/an/the removed, whitespace collapsed.
- **Answer present** in a text: the normalised answer occurs in the normalised text on word
  boundaries; an answer that is a list (it contains `,` or `;`) also counts when every item (split on
  `,`, `;` and `and`) occurs.
- **Question keywords** (for `archive_search`): the question's words (lowercase letter/digit runs,
  a possessive `'s` dropped) of 3+ characters, minus `STOPWORDS` and the speakers' names (every turn
  starts with one, so they match everything), deduplicated; when more than 6 remain, the 6 longest
  (ties: first in the question), kept in question order.
- **Turn in the WM**: some run of min(6, n) consecutive normalised words of the turn (n = its word
  count, speaker prefix left out) that occurs in no other turn appears in the normalised WM text.
  Turns under 3 words never count. A verbatim test: it finds copied text, not paraphrase (answer
  retention covers paraphrase).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SEARCH_LIMIT = 12  # hits an evaluation asks archive_search for: the k of recall@k

SPAN_WORDS = 6
MIN_SPAN_WORDS = 3
MAX_KEYWORDS = 6
MIN_KEYWORD_CHARS = 3
ARTICLES = frozenset({"a", "an", "the"})
STOPWORDS = frozenset(
    """a an the and or but if then so as of to in on at by for with from into onto about over under after
    before between during through up down out off again further once is are was were be been being am do does
    did doing done has have had having get gets got getting will would shall should can could may might must
    i me my mine myself we us our ours you your yours he him his she her hers it its they them their theirs
    this that these those there here what when where which who whom whose why how not no nor yes all any both
    each few more most other some such only own same than too very just also kind type sort thing things""".split()
)
_NON_WORD = re.compile(r"[^\w\s]|_")
_WORD = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"['’]s\b")
_LIST_SPLIT = re.compile(r"[,;]|\band\b")


def normalize_text(text: Any) -> str:
    """Lowercase, punctuation → space, articles dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    return " ".join(w for w in _NON_WORD.sub(" ", text).split() if w not in ARTICLES)


def answer_items(answer: Any) -> list[str]:
    """Normalised forms an answer is looked for by: the whole answer, then its list items if it is a list."""
    raw = unicodedata.normalize("NFKC", str(answer)).lower()
    whole = normalize_text(raw)
    if not whole:
        return []
    items = [normalize_text(p) for p in _LIST_SPLIT.split(raw)] if re.search(r"[,;]", raw) else []
    return [whole, *[i for i in items if i]]


def padded(text: str) -> str:
    """Normalised text wrapped in spaces, ready for word-boundary substring tests."""
    return f" {normalize_text(text)} "


def answer_present(answer: Any, padded_text: str) -> bool:
    """Whether a gold answer occurs in `padded_text` (from `padded`): whole, or every list item."""
    forms = answer_items(answer)
    if not forms:
        return False
    if f" {forms[0]} " in padded_text:
        return True
    items = forms[1:]
    return len(items) > 1 and all(f" {item} " in padded_text for item in items)


def question_keywords(question: str, speakers: Iterable[str] = ()) -> list[str]:
    """Up to 6 search keywords of a question (the rule in the module docstring)."""
    names = {w for s in speakers for w in _WORD.findall(s.lower())}
    words: list[str] = []
    for word in _WORD.findall(_POSSESSIVE.sub("", unicodedata.normalize("NFKC", question).lower())):
        if len(word) >= MIN_KEYWORD_CHARS and word not in STOPWORDS and word not in names and word not in words:
            words.append(word)
    if len(words) <= MAX_KEYWORDS:
        return words
    ranked = sorted(range(len(words)), key=lambda i: (-len(words[i]), i))[:MAX_KEYWORDS]
    return [words[i] for i in sorted(ranked)]


class SpanIndex:
    """Distinctive word runs of every turn of a conversation, to test which turns a text carries."""

    def __init__(self, turns: Mapping[str, str]) -> None:
        self.words = {key: normalize_text(text).split() for key, text in turns.items()}
        self._grams: Counter[tuple[str, ...]] = Counter()
        for words in self.words.values():
            self._grams.update(set(_ngrams(words, SPAN_WORDS)))
        self._joined = [f" {' '.join(w)} " for w in self.words.values()]

    def spans(self, key: str) -> list[str]:
        """The runs of min(6, n) words of turn `key` that no other turn contains."""
        words = self.words.get(key) or []
        if len(words) < MIN_SPAN_WORDS:
            return []
        if len(words) >= SPAN_WORDS:
            return [" ".join(g) for g in dict.fromkeys(_ngrams(words, SPAN_WORDS)) if self._grams[g] == 1]
        whole = " ".join(words)
        return [whole] if sum(f" {whole} " in j for j in self._joined) == 1 else []

    def present(self, key: str, padded_text: str) -> bool:
        """Whether turn `key` has a distinctive run inside `padded_text` (from `padded`)."""
        return any(f" {span} " in padded_text for span in self.spans(key))


def _ngrams(words: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def ratio(part: int, whole: int) -> float | None:
    """part / whole, or None when there is nothing to divide."""
    return part / whole if whole else None


def reachability_table(questions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per category and overall: evidence turns in the tail, in the WM, found by search, reachable (recall@12)."""
    groups: dict[str, dict[str, int]] = {}
    for q in questions:
        for key in (str(q["category"]), "overall"):
            row = groups.setdefault(key, dict.fromkeys(
                ("questions", "fully_reachable", "evidence", "unresolved", "in_tail", "archived", "in_wm",
                 "search_hits", "reachable"), 0))
            row["questions"] += 1
            found = [e for e in q["evidence"] if e["where"] != "unknown"]
            row["unresolved"] += len(q["evidence"]) - len(found)
            row["evidence"] += len(found)
            row["in_tail"] += sum(e["where"] == "tail" for e in found)
            row["archived"] += sum(e["where"] == "archived" for e in found)
            row["in_wm"] += sum(e["wm"] for e in found)
            row["search_hits"] += sum(e["search"] for e in found)
            row["reachable"] += sum(e["reachable"] for e in found)
            row["fully_reachable"] += bool(found) and all(e["reachable"] for e in found)
    for row in groups.values():
        row["search_recall"] = ratio(row["search_hits"], row["archived"])
        row["recall_at_12"] = ratio(row["reachable"], row["evidence"])
    return _ordered(groups)


def retention_table(questions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per category and overall: gold answers in the assembled context vs anywhere in the transcript."""
    groups: dict[str, dict[str, Any]] = {}
    for q in questions:
        if q["in_context"] is None:  # adversarial items have no gold answer string
            continue
        for key in (str(q["category"]), "overall"):
            row = groups.setdefault(key, {"questions": 0, "in_context": 0, "in_transcript": 0})
            row["questions"] += 1
            row["in_context"] += q["in_context"]
            row["in_transcript"] += q["in_transcript"]
    for row in groups.values():
        row["retention"] = ratio(row["in_context"], row["questions"])
        row["ceiling"] = ratio(row["in_transcript"], row["questions"])
    return _ordered(groups)


def accuracy_table(questions: Sequence[Mapping[str, Any]], mode: str) -> dict[str, Any]:
    """Per category and overall for one answer mode: correct, accuracy, QA tokens, tokens per correct answer."""
    groups: dict[str, dict[str, Any]] = {}
    for q in questions:
        result = (q.get("answers") or {}).get(mode)
        if result is None:
            continue
        for key in (str(q["category"]), "overall"):
            row = groups.setdefault(key, {"questions": 0, "correct": 0, "qa_tokens": 0})
            row["questions"] += 1
            row["correct"] += bool(result["correct"])
            row["qa_tokens"] += result["tokens"]
    for row in groups.values():
        row["accuracy"] = ratio(row["correct"], row["questions"])
        row["tokens_per_correct"] = ratio(row["qa_tokens"], row["correct"])
    return _ordered(groups)


def _ordered(groups: dict[str, Any]) -> dict[str, Any]:
    keys = sorted((k for k in groups if k != "overall"), key=int)
    return {k: groups[k] for k in [*keys, *(["overall"] if "overall" in groups else [])]}
