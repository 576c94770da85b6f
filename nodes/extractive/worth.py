"""How much a sentence is worth keeping as a fact, for the extractive model; decided by wording only.

Names, numbers, quoted titles, dates, events and decisions raise the worth, and so does each content
word; questions, very short lines, reactions, feelings and lines about the listener lower it. Key
Facts keeps the sentences worth most per token.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.text import DATE_RE, is_question

_DECISION_RE = re.compile(
    r"\b(decided|decide|decision|chose|choose|chosen|because|agreed|settled on|going with|go with|"
    r"we'll use|will use|switch(?:ed)? to|prefer|instead of|caused|broke|root cause|due to)\b",
    re.I,
)
_NUMBER_RE = re.compile(r"(?<![\w/.])\$?\d[\d,]*(?:\.\d+)?%?(?![\w/])")
_NAME_RE = re.compile(r"(?<=[a-z0-9,;:)] )[A-Z][a-zA-Z]{2,}")
_FILLER_RE = re.compile(
    r"^(?:(?:wow|oh|hey|yeah|yes|yep|so|well|anyway|btw|by the way|also|as for me|honestly|guess what|"
    r"on (?:a |an )?(?:other|another|different|related|side) note|speaking of which|you know what)\b[,!.:;]?\s*"
    r"(?:-\s*)?)+",
    re.I,
)
_QUOTED_RE = re.compile(r'"[^"]{2,}"|“[^”]{2,}”')
_EVENT_RE = re.compile(
    r"\b(?:went|got|made|started|finished|bought|took|visited|joined|won|tried|learned|found|saw|met|adopted|"
    r"painted|wrote|ran|moved|played|built|gave|lost|left|sold|[a-z]{3,}ed)\b",
    re.I,
)
_FEELING_RE = re.compile(
    r"\b(?:feel|feels|felt|feeling|emotions?|happy|proud|excited|grateful|glad|thrilled|stoked|blessed)\b", re.I
)
_FIRST_PERSON_RE = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|My|we|We|our|Our|us)\b")
_SECOND_PERSON_RE = re.compile(r"\b(?:you|your|you're|you've)\b", re.I)
REACTION_RE = re.compile(
    r"^(?:wow|oh|aw+|haha|yeah|yes|yep|thanks|thank you|congrats|congratulations|that's|that is|that sounds|"
    r"sounds|what a|so glad|hey|hi|hello|glad|good luck|great|awesome|cool|nice|amazing|sure|no worries|"
    r"take care|bye|see you|you|your)\b",
    re.I,
)
_TIME_RE = re.compile(
    r"\b(?:yesterday|today|tomorrow|tonight|last|ago|next|week|weekend|month|year|since|until)\b", re.I
)
_CONTENT_STOP = frozenset(
    """the a an and or but if then so as of to in on at by for with from into about over after before is are
    was were be been being am do does did done has have had having will would shall should can could may might
    must i me my mine we us our you your he him his she her it its they them their this that these those there
    here what when where which who why how not no yes all any both each more most other some such only own same
    than too very just also really much many lot lots thing things something anything everything stuff get got
    getting go going gone went make made making take took feel felt think thought know knew see saw look
    looking love loved like liked want wanted need needed way time day great good nice cool awesome amazing
    wow yeah oh hey hi thanks thank glad happy fun sounds sound always never ever still even again back new
    old big little one two""".split()
)



def is_decision(sent: str) -> bool:
    """The sentence states a decision or its reason."""
    return bool(_DECISION_RE.search(sent))


def content_words(sent: str) -> list[str]:
    """Words that carry content (3+ letters, not a function or filler word)."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", re.sub(r"\b\w+'s\b", "", sent))
    return [w for w in words if len(w) > 2 and w.lower() not in _CONTENT_STOP]


def trim_filler(sent: str) -> str:
    """The sentence without leading discourse fillers (`Wow,`, `By the way,`, `Guess what -`)."""
    trimmed = _FILLER_RE.sub("", sent).strip()
    return trimmed[:1].upper() + trimmed[1:] if len(trimmed.split()) >= 3 else sent


def fact_worth(sent: str) -> float:
    """How much a sentence is worth keeping as a fact: decisions, dates, numbers, names, events, content words.

    Chatter scores low: questions, short lines, reactions, feelings, and lines about the listener.
    """
    if is_question(sent) or len(sent.split()) < 4:
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
