"""Surface cues of one sentence for the extractive model: request, plan, correction, issue, completion, next step.

Each function reads one sentence (no context beyond a flag or two) and decides by wording only, so
the rules stay the same for any conversation: imperative verbs and polite forms make a request,
first-person intentions make a plan, `No,` / `Actually, … not …` / `don't touch …` make a
correction, and a past-tense report or `… is updated` marks something done.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.text import alternation, capitalised, is_question
from workmem.nodes.extractive.words import (
    ACKS,
    CORRECTION_OPENERS,
    DONE_PARTICIPLES,
    DONE_WORDS,
    DONT_ACTIONS,
    FINISHED_FORMS,
    FUTURE_PLANS,
    IMPERATIVES,
    ISSUE_CUES,
    LEAD_WORDS,
    NEXT_ANYWHERE,
    NEXT_OPENERS,
    NOT_DONE_AFTER,
    OPENERS,
    PICTURES,
    PLAN_NOUNS,
    PLAN_PERIODS,
    PLAN_VERBS,
    PLANNING,
    POLITE_OPENERS,
    REPORTS,
    SOCIAL_PHRASES,
    THAT_IS_WRONG,
    WANT_CUES,
    WEAK_TERMS,
)
from workmem.nodes.extractive.worth import REACTION_RE, content_words

LEAD_RE = re.compile(rf"^(?:(?:{alternation(LEAD_WORDS)})\b[,!.:]?\s*)+", re.I)
POLITE_RE = re.compile(rf"^(?:{alternation(POLITE_OPENERS)})\b[\s,]*", re.I)
_IMPERATIVE_RE = re.compile(rf"^(?:{alternation(IMPERATIVES)})\b", re.I)
_LABEL_RE = re.compile(r"[A-Z][\w-]*(?: #?\d+)?")
_OPENER_RE = re.compile(rf"^(?:{alternation(OPENERS)})\b[,.!]?\s*", re.I)
_WANT_RE = re.compile(rf"\b(?:{alternation(WANT_CUES)})\b", re.I)
_SOCIAL_RE = re.compile(
    rf"^(?:{alternation(SOCIAL_PHRASES)}|send (?:me )?(?:a |some )?(?:{alternation(PICTURES)})s?)\b", re.I
)
ACK_RE = re.compile(rf"^(?:{alternation(ACKS)})\b", re.I)
_PLAN_RE = re.compile(
    rf"\b(?:i|we)(?:'m| am| are|'re) (?:{alternation(PLANNING)})\b(?! to be)|"
    rf"\b(?:i|we) (?:{alternation(PLAN_VERBS)}) to\b|"
    rf"\b(?:my|our) (?:{alternation(PLAN_NOUNS)}) (?:is|was)\b|"
    rf"\b(?:i|we)(?:'ll| will) (?:{alternation(FUTURE_PLANS)})\b|"
    rf"\bi'm gonna\b|\bnext (?:{alternation(PLAN_PERIODS)})\b",
    re.I,
)
_CORRECTION_OPEN_RE = re.compile(
    rf"^(?:{alternation(CORRECTION_OPENERS)})\b[,.!:](?!\s*but\b)|^that(?:'s| is) (?:{alternation(THAT_IS_WRONG)})\b",
    re.I,
)
_CONTRAST_RE = re.compile(r",\s*not\b|\bnot\s+[\w./-]+\s*[,;-]|\binstead\b|\brather than\b", re.I)
_ACTIONS = rf"(?:{alternation(DONT_ACTIONS)})"
_DONT_RE = re.compile(rf"^(?:and |but |also |please )?(?:don'?t|do not|never) {_ACTIONS}\b", re.I)
_NEGATED_RES = (
    re.compile(r"\bnot (?:a |an |the |to |in |on )?([\w./-]+)", re.I),
    re.compile(r"\binstead of (?:a |an |the )?([\w./-]+)", re.I),
    re.compile(r"\brather than (?:a |an |the )?([\w./-]+)", re.I),
    re.compile(rf"\b(?:don'?t|do not|never) {_ACTIONS} (?:a |an |the |it in |anything in )?([\w./-]+)", re.I),
    re.compile(r"\bno longer (?:use |using |read |reads |call |calls )?(?:a |an |the )?([\w./-]+)", re.I),
)
ISSUE_RE = re.compile(rf"\b({alternation(ISSUE_CUES)})\b", re.I)
_NEXT_RE = re.compile(rf"^(?:{alternation(NEXT_OPENERS)}|next\b)|\b(?:{alternation(NEXT_ANYWHERE)})\b", re.I)
_DONE_RE = re.compile(
    rf"\b({alternation(DONE_WORDS)}|(?:is|are) (?:now )?(?:{alternation(DONE_PARTICIPLES)})|[a-z]{{3,}}ed now|"
    rf"(?:is|are|was|were) (?:now )?(?:[a-z]{{3,}}ed|{alternation(FINISHED_FORMS)})"
    rf"(?! (?:{alternation(NOT_DONE_AFTER)})\b))\b",
    re.I,
)
_REPORT_RE = re.compile(rf"^(?:i |we )?(?:{alternation(REPORTS)})\b", re.I)


def is_ack(sent: str) -> bool:
    """A short acknowledgement (`Thanks!`, `Sounds good.`)."""
    return bool(ACK_RE.match(sent)) and len(sent.split()) <= 3


def is_bare_reaction(sent: str) -> bool:
    """An acknowledgement or a reaction with nothing after it (`Thanks!`, `Oh yeah!`, `Wow, really?`)."""
    return is_ack(sent) or (bool(REACTION_RE.match(sent)) and len(sent.split()) <= 3)


def core(sent: str) -> str:
    """The sentence without greeting lead words and polite openers."""
    return POLITE_RE.sub("", LEAD_RE.sub("", sent).strip()).strip()


def is_request(sent: str) -> bool:
    """An instruction to whoever does the work (imperative or `please`/`I need`), not small talk."""
    lead = _OPENER_RE.sub("", LEAD_RE.sub("", sent).strip())
    if _SOCIAL_RE.match(lead) or is_ack(sent):
        return False
    clauses = [lead] + [c.strip() for c in lead.split(": ")[1:]]
    return any(_IMPERATIVE_RE.match(c) for c in clauses) or bool(_WANT_RE.search(lead))


def is_polite_request(sent: str) -> bool:
    """A request phrased as a question (`Can you fix X?`, `Could you …?`)."""
    return is_question(sent) and bool(POLITE_RE.match(_OPENER_RE.sub("", LEAD_RE.sub("", sent).strip())))


def as_task(sent: str) -> str:
    """A request phrased as a task: `Can you fix X?` → `Fix X.`; `Actually, return 400` → `Return 400`."""
    task = core(_OPENER_RE.sub("", sent))
    head, _, rest = task.partition(": ")
    if rest and _LABEL_RE.fullmatch(head) and (_IMPERATIVE_RE.match(rest) or POLITE_RE.match(rest)):
        task = core(rest)
    if task != sent and task.endswith("?"):
        task = task[:-1].rstrip() + "."
    return capitalised(task)


def is_plan(sent: str) -> bool:
    """A first-person intention with some content (`I'm planning to …`, `My goal is …`)."""
    return bool(_PLAN_RE.search(sent)) and not is_question(sent) and len(content_words(sent)) >= 3 and not (
        REACTION_RE.match(sent)
    )


def is_correction(sent: str, after_question: bool) -> bool:
    """The speaker contradicts what was said before (an answer `No, …` to a question is not a correction)."""
    if after_question:
        return False
    lead = LEAD_RE.sub("", sent).strip()
    if _CORRECTION_OPEN_RE.match(sent):
        return True
    if re.match(r"^actually\b", lead, re.I):
        return bool(_CONTRAST_RE.search(lead[8:]))
    return bool(_DONT_RE.match(lead))


def is_prohibition(sent: str) -> bool:
    """The sentence forbids an action on something (`Do not modify the tests.`, `Never push to main.`)."""
    return bool(_DONT_RE.match(LEAD_RE.sub("", sent).strip()))


def negated_terms(sent: str) -> set[str]:
    """What a correction rejects: the word after `not`, `instead of`, `rather than`, `don't touch`, …"""
    found = set()
    for pattern in _NEGATED_RES:
        for match in pattern.finditer(sent):
            term = match.group(1).strip("./-").lower()
            if term and term not in WEAK_TERMS and not term.endswith("n't"):
                found.add(term)
    return found


def mentions(text: str, term: str) -> bool:
    """Whether `term` occurs in `text` as a whole word (case-insensitive)."""
    return bool(re.search(rf"(?<![\w]){re.escape(term)}(?![\w])", text, re.I))


def is_issue(sent: str) -> bool:
    """A TODO or an explicitly open point."""
    return bool(ISSUE_RE.search(sent))


def reports_done(sent: str) -> bool:
    """The sentence reports something as done, fixed or answered."""
    return bool(_DONE_RE.search(sent) or _REPORT_RE.match(LEAD_RE.sub("", sent).strip()))


def is_next_step(sent: str) -> bool:
    """The speaker announces what comes next (`Let me …`, `I'll …`, `Remaining: …`)."""
    return bool(_NEXT_RE.search(sent) or _NEXT_RE.search(LEAD_RE.sub("", sent).strip()))
