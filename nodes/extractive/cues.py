"""Surface cues of one sentence for the extractive model: request, plan, correction, issue, completion, next step.

Each function reads one sentence (no context beyond a flag or two) and decides by wording only, so
the rules stay the same for any conversation: imperative verbs and polite forms make a request,
first-person intentions make a plan, `No,` / `Actually, … not …` / `don't touch …` make a
correction, and a past-tense report or `… is updated` marks something done.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.text import is_question
from workmem.nodes.extractive.worth import REACTION_RE, content_words

LEAD_RE = re.compile(
    r"^(?:(?:hi|hello|hey|ok(?:ay)?|so|also|and|but|now|then|great|good|thanks|one more (?:thing|rule))"
    r"\b[,!.:]?\s*)+",
    re.I,
)
POLITE_RE = re.compile(
    r"^(?:please|can you|could you|would you|i need you to|i want you to|help me|i'd like you to)\b[\s,]*",
    re.I,
)
_IMPERATIVE_RE = re.compile(
    r"^(?:please|can you|could you|would you|let's|let us|make sure|add|fix|implement|create|update|change|"
    r"remove|delete|write|put|use|return|keep|leave|log|deploy|detect|skip|check|run|rename|move|refactor|"
    r"document|investigate|support|handle|find|show|explain|build|migrate|test|switch|send|ask)\b",
    re.I,
)
_LABEL_RE = re.compile(r"[A-Z][\w-]*(?: #?\d+)?")
_OPENER_RE = re.compile(r"^(?:no|nope|actually|instead)\b[,.!]?\s*", re.I)
_WANT_RE = re.compile(r"\b(?:please|i want|i need|we need|i'd like|should|must)\b", re.I)
_SOCIAL_RE = re.compile(
    r"^(?:keep (?:it up|up|going|on|at it|me posted|me updated|in touch|doing|trying|pushing|rocking|that)|"
    r"check (?:it|this|that|them) out|let me know|take care|have fun|have a (?:great|good|nice)|enjoy|"
    r"tell me (?:more|about)|show me|let's (?:catch up|keep|hope|do this)|make sure to (?:take|have|enjoy)|"
    r"send (?:me )?(?:a |some )?(?:pic|photo|picture)s?|don't (?:worry|forget|give up|hesitate|stop))\b",
    re.I,
)
ACK_RE = re.compile(
    r"^(?:thanks|thank you|ok|okay|great|good|cool|perfect|nice|sounds good|go ahead|yes|yep|sure)\b", re.I
)
_PLAN_RE = re.compile(
    r"\b(?:i|we)(?:'m| am| are|'re) (?:planning|going to|hoping|aiming|thinking (?:about|of)|looking to|about to|"
    r"getting ready to|saving (?:up )?for)\b(?! to be)|\b(?:i|we) (?:plan|hope|intend|want|aim) to\b|"
    r"\b(?:my|our) (?:goal|plan|dream|aim|next step) (?:is|was)\b|\b(?:i|we)(?:'ll| will) (?:be (?:starting|going|"
    r"moving|visiting|taking|joining)|start|finally)\b|\bi'm gonna\b|\bnext (?:week|month|year|weekend)\b",
    re.I,
)
_CORRECTION_OPEN_RE = re.compile(
    r"^(?:no|nope|wrong|incorrect|not quite|not really right|correction)\b[,.!:](?!\s*but\b)|"
    r"^that(?:'s| is) (?:not (?:right|correct|true|what)|wrong|incorrect)\b",
    re.I,
)
_CONTRAST_RE = re.compile(r",\s*not\b|\bnot\s+[\w./-]+\s*[,;-]|\binstead\b|\brather than\b", re.I)
_ACTIONS = (
    r"(?:touch|use|change|modify|edit|call|read|add|put|move|remove|delete|commit|push|deploy|merge|rename|run|"
    r"install|upgrade|return|raise|log|send|write|store|cache|hardcode|copy)"
)
_DONT_RE = re.compile(rf"^(?:and |but |also |please )?(?:don'?t|do not|never) {_ACTIONS}\b", re.I)
_NEGATED_RES = (
    re.compile(r"\bnot (?:a |an |the |to |in |on )?([\w./-]+)", re.I),
    re.compile(r"\binstead of (?:a |an |the )?([\w./-]+)", re.I),
    re.compile(r"\brather than (?:a |an |the )?([\w./-]+)", re.I),
    re.compile(rf"\b(?:don'?t|do not|never) {_ACTIONS} (?:a |an |the |it in |anything in )?([\w./-]+)", re.I),
    re.compile(r"\bno longer (?:use |using |read |reads |call |calls )?(?:a |an |the )?([\w./-]+)", re.I),
)
_WEAK_TERMS = frozenset(
    "a an the it that this them there here so yet sure really quite just only very much all now to be "
    "anymore always never too".split()
)
ISSUE_RE = re.compile(
    r"\b(todo|fixme|open question|unresolved|still open|still unclear|tbd|to be decided|follow[- ]up|"
    r"need to (?:check|confirm|decide|verify|find out|ask))\b",
    re.I,
)
_NEXT_RE = re.compile(
    r"^(?:let me|let's|next\b|now (?:the|i|let)|then i|i'll|i will|i'm going to|we'll|remaining|still open|"
    r"todo|for tomorrow|tomorrow)|\b(?:let me|remaining before|next step)\b",
    re.I,
)
_DONE_RE = re.compile(
    r"\b(fixed|resolved|solved|done|works now|working now|pass(?:es)? now|now pass(?:es)?|passing|answered|"
    r"settled|closed|(?:is|are) (?:now )?(?:updated|handled|implemented|added|written|fixed)|completed|finished|"
    r"confirmed|now imports?|now (?:works|handles|detects|returns|means)|[a-z]{3,}ed now|"
    r"(?:is|are|was|were) (?:now )?(?:[a-z]{3,}ed|written|done|rewritten|built)(?! (?:to|by|that|if|when)\b))\b",
    re.I,
)
_REPORT_RE = re.compile(
    r"^(?:i |we )?(?:added|updated|fixed|rewrote|wrote|created|implemented|removed|renamed|moved|replaced|"
    r"switched|changed|made|built|deployed|merged|documented|refactored|finished|completed|checked|verified|"
    r"tested|reviewed|cleaned|answered|resolved|ran)\b",
    re.I,
)
def is_ack(sent: str) -> bool:
    """A short acknowledgement (`Thanks!`, `Sounds good.`)."""
    return bool(ACK_RE.match(sent)) and len(sent.split()) <= 3


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
    return task[:1].upper() + task[1:]


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


def negated_terms(sent: str) -> set[str]:
    """What a correction rejects: the word after `not`, `instead of`, `rather than`, `don't touch`, …"""
    found = set()
    for pattern in _NEGATED_RES:
        for match in pattern.finditer(sent):
            term = match.group(1).strip("./-").lower()
            if term and term not in _WEAK_TERMS and not term.endswith("n't"):
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
