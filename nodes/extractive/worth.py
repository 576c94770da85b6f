"""How much a sentence is worth keeping as a fact, for the extractive model; decided by wording only.

Names, numbers, quoted titles, dates, events and decisions raise the worth, and so does each content
word; questions, very short lines, reactions, feelings and lines about the listener lower it. Key
Facts keeps the sentences worth most per token.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.code_words import FINDING_CUES, HEDGES, RESULT_CUES
from workmem.nodes.extractive.text import DATE_RE, alternation, capitalised, is_question
from workmem.nodes.extractive.words import (
    CONTENT_STOPWORDS,
    DECISION_CUES,
    EVENT_VERBS,
    FAREWELLS,
    FEELING_WORDS,
    FILLERS,
    FIRST_PERSON,
    LONG_WHILES,
    PREFERENCES,
    REACTIONS,
    SECOND_PERSON,
    SIDE_NOTE_KINDS,
    TALK_VERBS,
    TIME_WORDS,
)

MIN_WORDS = 4  # a shorter line is chatter, unless it answers a question (`ANSWER_MIN_WORDS`)
ANSWER_MIN_WORDS = 2  # `The Minnesota Wolves!` answers `Which team did you sign with?`
_DECISION_RE = re.compile(rf"\b({alternation(DECISION_CUES)})\b", re.I)
_NUMBER_RE = re.compile(r"(?<![\w/.])\$?\d[\d,]*(?:\.\d+)?%?(?![\w/])")
_NAME_RE = re.compile(r"(?<=[a-z0-9,;:)] )[A-Z][a-zA-Z]{2,}")
_FILLER_RE = re.compile(
    rf"^(?:(?:{alternation(FILLERS)}|on (?:a |an )?(?:{alternation(SIDE_NOTE_KINDS)}) note)\b[,!.:;]?\s*"
    r"(?:-\s*)?)+",
    re.I,
)
_QUOTED_RE = re.compile(r'"[^"]{2,}"|“[^”]{2,}”')
_EVENT_RE = re.compile(rf"\b(?:{alternation(EVENT_VERBS)}|[a-z]{{3,}}ed)\b", re.I)
_FEELING_RE = re.compile(rf"\b(?:{alternation(FEELING_WORDS)})\b", re.I)
_FIRST_PERSON_RE = re.compile(rf"\b(?:{alternation(FIRST_PERSON)})\b")
_SECOND_PERSON_RE = re.compile(rf"\b(?:{alternation(SECOND_PERSON)})\b", re.I)
REACTION_RE = re.compile(rf"^(?:{alternation(REACTIONS)}|aw+)\b", re.I)
_TIME_RE = re.compile(rf"\b(?:{alternation(TIME_WORDS)})\b", re.I)
_FINDING_RE = re.compile(rf"\b(?:{alternation(FINDING_CUES)})\b", re.I)
_RESULT_RE = re.compile(rf"\b(?:{alternation(RESULT_CUES)})\b", re.I)
HEDGE_RE = re.compile(rf"^(?:{alternation(HEDGES)})\b", re.I)
_CODE_SPAN_RE = re.compile(r"`[^`]+`")
_PREFERENCE_RE = re.compile(rf"\b(?:{alternation(PREFERENCES)})\b", re.I)
# Talk about the talk itself, as `strip_meta_talk` takes it out: the phrases, then a clause opening with how
# long it has been, then a line that is only a farewell.
_META_TALK_RE = re.compile(
    rf",?\s*\bsince we(?: last)? (?:{alternation(TALK_VERBS)})\b|\blong time no (?:see|chat|talk)\b", re.I)
_LONG_WHILE_RE = re.compile(
    rf"^(?:[A-Z]\w+, )?(?:it's |it has )?been (?:{alternation(LONG_WHILES)})\b(?=\s*(?:[.!,;:-]|$))", re.I)
_FAREWELL_RE = re.compile(rf"^(?:{alternation(FAREWELLS)})\b(?:\s+[\w']+){{0,2}}?(?:,?\s+[A-Z]\w+)?\W*$", re.I)
_LOOSE_ENDS = " ,;:-–—"
_DANGLING_RE = re.compile(r"^(?:and|but|so)\s+", re.I)


def is_decision(sent: str) -> bool:
    """The sentence states a decision or its reason."""
    return bool(_DECISION_RE.search(sent))


def content_words(sent: str) -> list[str]:
    """Words that carry content (3+ letters, not a function or filler word)."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", re.sub(r"\b\w+'s\b", "", sent))
    return [w for w in words if len(w) > 2 and w.lower() not in CONTENT_STOPWORDS]


def trim_filler(sent: str) -> str:
    """The sentence without leading discourse fillers (`Wow,`, `By the way,`, `Guess what -`)."""
    trimmed = _FILLER_RE.sub("", sent).strip()
    return capitalised(trimmed) if len(trimmed.split()) >= 3 else sent


def strip_meta_talk(sent: str) -> str:
    """The sentence without what it says about the talk itself (`since we last talked`, `long time no see`,
    `it's been ages`): '' for a farewell or when no content word is left, the sentence as it was when the rest
    would be too short to stand alone (`I got married since we last talked!`)."""
    if _FAREWELL_RE.match(sent.strip()):
        return ""
    rest = _META_TALK_RE.sub("", sent).strip(_LOOSE_ENDS)
    rest = _LONG_WHILE_RE.sub("", rest).strip(_LOOSE_ENDS)
    if rest == sent.strip(_LOOSE_ENDS):
        return sent
    rest = _DANGLING_RE.sub("", rest).strip(_LOOSE_ENDS)
    if len(rest.split()) >= MIN_WORDS:
        return capitalised(rest)
    return sent if content_words(rest) and _EVENT_RE.search(rest) else ""


def fact_worth(sent: str, min_words: int = MIN_WORDS) -> float:
    """How much a sentence of a conversation between people is worth keeping as a fact: `sentence_worth`, and
    more when it says what someone likes (a favourite dish or film is asked about later)."""
    worth = sentence_worth(sent, min_words)
    return worth + 1.0 * bool(_PREFERENCE_RE.search(sent)) if worth else 0.0


def sentence_worth(sent: str, min_words: int = MIN_WORDS) -> float:
    """How much a sentence is worth keeping: decisions, dates, numbers, names, events, content words.

    Chatter scores low: questions, lines under `min_words` words, reactions, feelings, and lines about the listener.
    """
    if is_question(sent) or len(sent.split()) < min_words:
        return 0.0
    worth = 0.5
    worth += 3.0 * bool(_DECISION_RE.search(sent))
    worth += 2.0 * bool(DATE_RE.search(sent))
    worth += 2.5 * bool(_NUMBER_RE.search(sent))
    worth += 2.5 * bool(_QUOTED_RE.search(sent))
    worth += 1.5 * min(len(set(_NAME_RE.findall(sent))), 2)
    worth += 0.8 * bool(_TIME_RE.search(sent))
    worth += 0.8 * bool(_EVENT_RE.search(sent))
    worth += 0.5 * bool(_FIRST_PERSON_RE.search(sent))
    worth -= 1.0 * bool(_SECOND_PERSON_RE.search(sent))
    worth -= 1.0 * bool(_FEELING_RE.search(sent))
    worth -= 0.8 * bool(REACTION_RE.match(sent))
    worth += 0.35 * len(content_words(sent))
    return max(worth, 0.0)


def coding_worth(sent: str) -> float:
    """`sentence_worth` for a coding agent's sentence: findings and results raise it, and so do the code names it
    quotes; thinking aloud (`Wait,`, `Maybe`, `I suspect`) lowers it."""
    worth = sentence_worth(sent)
    if worth == 0.0:
        return 0.0
    worth += 2.0 * bool(_FINDING_RE.search(sent))
    worth += 1.5 * bool(_RESULT_RE.search(sent))
    worth += 0.8 * min(len(_CODE_SPAN_RE.findall(sent)), 2)
    worth -= 1.5 * bool(HEDGE_RE.match(sent))
    return max(worth, 0.0)
