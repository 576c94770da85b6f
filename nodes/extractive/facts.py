"""Key Facts & Decisions for the extractive model: fact items, date groups, newest-wins consolidation.

A fact is one copied sentence with who said it and the conversation date it was said on. Facts of one date
share one bullet, each speaker's together and each voice named once (`7 May, 2023 — Ann: … … Ann replied: …
Bo: …`); undated facts are a bullet each. In a reply to another speaker's question, the first sentence past a
bare reaction is the answer to it, and says so (`Bo replied: …`): what people are later asked about is what
they were asked then. While the section is not oversized and every new fact fits in it, new facts are
appended. Once it is oversized or full, or a newer fact or a correction supersedes one of its facts, the model
rewrites it: one bullet per subject, newest value wins (a fact restated or given a new value replaces the
older one, a fact a correction rejects leaves), then the facts worth most per token are kept within 25
bullets and the section's budget (3 000 tokens at the section table), filled pass after pass. The rewrite is
checked against the Key Facts guard before it is sent (bullet ratio and anchor coverage), keeping back old
facts that carry names, dates and numbers until it passes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from workmem.nodes.extractive.cues import mentions, negated_terms
from workmem.nodes.extractive.text import (
    DATE_RE,
    SPEAKER_NAME,
    alternation,
    as_sentence,
    keywords,
    norm,
    sentences,
    without_caption,
)
from workmem.nodes.extractive.words import COPULAS, SUBJECT_DETERMINERS, SUBJECT_PRONOUNS
from workmem.nodes.extractive.worth import (
    ANSWER_MIN_WORDS,
    MIN_WORDS,
    coding_worth,
    content_words,
    fact_worth,
    sentence_worth,
    strip_meta_talk,
    trim_filler,
)
from workmem.nodes.guards import lexical_anchors
from workmem.nodes.spill import pointer_tokens
from workmem.state.memory import FULL_BUDGETS, MAX_BULLETS, Budgets, bullet_items, read_pointer
from workmem.state.tokens import count_tokens

MIN_WORTH = 2.5
_MIN_RATIO = 0.16
_DENSITY_EXPONENT = 0.7  # rank by worth / tokens**0.7: dense facts first, long rich ones not starved
_SPECIFIC_WORD_WORTH = 0.3
_REPLY_WORTH = 1.0  # the answer to a question raises a dialogue fact's worth
_REPLIED = " replied"
_MIN_COVERAGE = 0.72
_MAX_PASSES = 6
_GROUP_SEP = " — "
_GROUP_RE = re.compile(r"^(.{4,40}?) — (.+)$")
_SPEAKER_HEAD_RE = re.compile(rf"^({SPEAKER_NAME}): (?=\S)")
_REPLY_HEAD_RE = re.compile(rf"^({SPEAKER_NAME}){_REPLIED}: (?=\S)")
_HEAD_LIKE_RE = re.compile(rf"^{SPEAKER_NAME}(?:{_REPLIED})?: (?=\S)")  # a text a parser would read as a head
_SUBJECT_RE = re.compile(
    rf"^(?:(?:{alternation(SUBJECT_DETERMINERS)})\s+)?((?:[\w'.-]+\s+){{0,3}}?[\w'.-]+)\s+"
    rf"(?:{alternation(COPULAS)})\s+\S",
    re.I,
)


@dataclass(frozen=True)
class Fact:
    """One kept sentence: its text, who said it, the conversation date, its position and its worth."""

    text: str
    speaker: str | None
    label: str | None
    order: int
    coding: bool = False  # said in a coding agent's session: ranked by `coding_worth`
    replied: bool = False  # the answer in a reply to another speaker's question (see `answers`)

    @property
    def said_in_dialogue(self) -> bool:
        """Said by a named speaker of a conversation between people (not a user, an assistant or an agent)."""
        return self.speaker is not None and not self.coding

    @property
    def answers(self) -> bool:
        """A dialogue speaker's answer to another speaker's question: it ranks higher and says it replied."""
        return self.replied and self.said_in_dialogue

    @property
    def worth(self) -> float:
        """The worth of the sentence itself: `coding_worth` in a coding session, `fact_worth` in a conversation
        between people (more for the answer to a question), else `sentence_worth`."""
        if self.coding:
            return coding_worth(self.text)
        if not self.said_in_dialogue:
            return sentence_worth(self.text)
        if not self.answers:
            return fact_worth(self.text)
        worth = fact_worth(self.text, ANSWER_MIN_WORDS)
        return worth + _REPLY_WORTH if worth else 0.0


def fact_line(fact: Fact) -> str:
    """The fact as a standalone line: `Speaker: text`, `Speaker replied: text` for the answer to a question."""
    if not fact.speaker:
        return fact.text
    return f"{fact.speaker}{_REPLIED if fact.answers else ''}: {fact.text}"


def parse_facts(body: str, speakers: Iterable[str] = (), coding: bool = False) -> list[Fact]:
    """The facts of a Key Facts body (date-group bullets are split back into their sentences); `coding`: of a
    coding agent's session."""
    items = [i for i in bullet_items(body) if not i.startswith(("[archived]", "[⚠"))]
    dialogue = set(speakers)  # only a known dialogue speaker's head can say `replied`
    known = dialogue | _bullet_speakers(items)
    facts: list[Fact] = []
    for item in items:
        label, rest = None, item
        group = _GROUP_RE.match(item)
        if group and DATE_RE.search(group.group(1)):
            label, rest = group.group(1), group.group(2)
        voices_once = not (label and _heads_per_answer(rest, dialogue))
        speaker, replied = None, False  # a sentence without a head continues the voice before it
        for sent in sentences(rest) if label else [rest]:
            head = _SPEAKER_HEAD_RE.match(sent)
            reply = None if coding else _REPLY_HEAD_RE.match(sent)
            if reply and reply.group(1) in dialogue:
                speaker, replied, sent = reply.group(1), True, sent[reply.end() :]
            elif head and head.group(1) in known:
                speaker, replied, sent = head.group(1), False, sent[head.end() :]
            elif not label:
                speaker, replied = None, False
            elif not voices_once:
                replied = False  # written before voices were grouped: only a `replied` head marks an answer
            facts.append(Fact(sent, speaker, label, len(facts), coding, replied))
    return facts


def _heads_per_answer(group_text: str, dialogue: set[str]) -> bool:
    """A date group's text (past its label) was written with a head before every answer (before each voice was
    named once per date): one voice's head twice, or a speaker's statement after the same speaker's answer."""
    heads: list[tuple[str, bool]] = []
    for sent in sentences(group_text):
        reply, head = _REPLY_HEAD_RE.match(sent), _SPEAKER_HEAD_RE.match(sent)
        if _HEAD_LIKE_RE.match(sent[(reply or head).end():] if reply or head else ""):
            continue  # a head written again before a text that would read as one (`Jo: Animal Crossing: …`)
        if reply and reply.group(1) in dialogue:
            heads.append((reply.group(1), True))
        elif head and head.group(1) in dialogue:
            heads.append((head.group(1), False))
    return len(set(heads)) < len(heads) or any(
        (name, True) in heads[:i] for i, (name, answer) in enumerate(heads) if not answer)


def _bullet_speakers(items: list[str]) -> set[str]:
    heads = [m.group(1) for i in items for s in sentences(i) if (m := _SPEAKER_HEAD_RE.match(s.split(" — ")[-1]))]
    return {h for h in heads if heads.count(h) >= 2}


def new_fact(text: str, speaker: str | None, label: str | None, order: int, coding: bool = False,
             replied: bool = False) -> Fact | None:
    """A fact for a transcript sentence worth keeping, else None (`coding`: a coding agent's sentence; `replied`:
    a dialogue speaker's answer to a question)."""
    if speaker is not None and not coding:
        text = said_words(text)
        if not text:
            return None
    fact = Fact(as_sentence(trim_filler(text)), speaker, label, order, coding, replied)
    return fact if fact.worth >= MIN_WORTH else None


def said_words(text: str) -> str:
    """What a speaker of a dialogue said, as a fact keeps it: without the caption of a photo shared with it when the
    words, fillers aside, say enough by themselves (`MIN_WORDS`), and without what it says about the talk itself
    (`since we last talked`, `see ya`)."""
    bare = without_caption(text)
    return strip_meta_talk(bare if len(trim_filler(bare).split()) >= MIN_WORDS else text)


def render(facts: list[Fact]) -> list[str]:
    """Bullet items: facts of one date in one bullet (in first-seen date order), undated facts one each."""
    groups: dict[str, list[Fact]] = {}
    items: list[tuple[int, str | list[Fact]]] = []
    for fact in sorted(facts, key=lambda f: f.order):
        if fact.label is None:
            items.append((fact.order, fact_line(fact)))
        elif fact.label in groups:
            groups[fact.label].append(fact)
        else:
            groups[fact.label] = [fact]
            items.append((fact.order, groups[fact.label]))
    return [item if isinstance(item, str) else _group_line(item) for _, item in items]


def _group_line(facts: list[Fact]) -> str:
    """One date's facts, each speaker's together (statements, then answers), a head only where who speaks or
    whether it is an answer changes: `7 May, 2023 — Ann: … … Ann replied: … Bo: …`. Facts said by no one come
    first (after a head they would read as its speaker's)."""
    first_seen: dict[str | None, int] = {None: -1}
    for fact in facts:
        first_seen.setdefault(fact.speaker, len(first_seen))
    parts, voice = [], (None, False)
    for fact in sorted(facts, key=lambda f: (first_seen[f.speaker], f.answers, f.order)):
        same_voice = (fact.speaker, fact.answers) == voice and not _HEAD_LIKE_RE.match(fact.text)
        parts.append(fact_line(fact) if fact.speaker and not same_voice else fact.text)
        if fact.speaker:
            voice = (fact.speaker, fact.answers)
    return f"{facts[0].label}{_GROUP_SEP}{' '.join(parts)}"


def body_of(items: list[str]) -> str:
    """A section body from bullet items."""
    return "\n".join(f"- {item}" for item in items)


def _cost(fact: Fact) -> int:
    return count_tokens(fact_line(fact)) + 2


def _frame(fact: Fact) -> str:
    return re.sub(r"\d+(?:[.,]\d+)?", "#", norm(fact.text))


def _subject(fact: Fact) -> str | None:
    found = _SUBJECT_RE.match(fact.text)
    if not found:
        return None
    words = found.group(1).lower().split()
    return None if words[-1] in SUBJECT_PRONOUNS or not content_words(found.group(1)) else " ".join(words)


def newest_wins(facts: list[Fact]) -> list[Fact]:
    """Drop a fact when a newer one by the same speaker restates it or gives its subject a new value."""
    kept: list[Fact] = []
    seen_frames: set[tuple[str | None, str]] = set()
    seen_subjects: set[tuple[str | None, str]] = set()
    newer_words: list[tuple[str | None, set[str]]] = []
    for fact in sorted(facts, key=lambda f: -f.order):
        frame, subject = (fact.speaker, _frame(fact)), _subject(fact)
        words = {w.lower() for w in content_words(fact.text)}
        if frame in seen_frames or (subject and (fact.speaker, subject) in seen_subjects):
            continue
        if words and any(s == fact.speaker and words <= other for s, other in newer_words):
            continue
        seen_frames.add(frame)
        if subject:
            seen_subjects.add((fact.speaker, subject))
        newer_words.append((fact.speaker, words))
        kept.append(fact)
    return sorted(kept, key=lambda f: f.order)


def superseded(fact: Fact, corrections: Sequence[tuple[int, str]]) -> bool:
    """A later correction rejects this fact: the fact names a term it negates and shares its topic."""
    return any(order > fact.order and _rejects(text, fact.text) for order, text in corrections)


def _rejects(correction: str, text: str) -> bool:
    for term in negated_terms(correction):
        if mentions(text, term) and (keywords(text) - keywords(term)) & (
            keywords(correction) - keywords(term)
        ):
            return True
    return False


def _rank(facts: list[Fact], among: Sequence[Fact]) -> list[Fact]:
    """`facts` best first by worth per token. In a conversation between people each content word no other fact
    of `among` says adds `_SPECIFIC_WORD_WORTH` (a specific detail: a name, a dish, a place, rather than a
    feeling said again)."""
    words = {f: {w.lower() for w in content_words(f.text)} for f in (*among, *facts)}
    said = Counter(w for f in words for w in words[f])

    def density(fact: Fact) -> float:
        specific = sum(1 for w in words[fact] if said[w] == 1) if fact.said_in_dialogue else 0
        return (fact.worth + _SPECIFIC_WORD_WORTH * specific) / _cost(fact) ** _DENSITY_EXPONENT

    return sorted(facts, key=lambda f: (-density(f), -f.order))


def select(facts: list[Fact], budget: int, max_bullets: int, pinned: Sequence[Fact] = ()) -> list[Fact]:
    """The pinned facts plus the best of `facts` (worth per token) within `budget` tokens and `max_bullets`."""
    chosen = list(pinned)
    taken = set(chosen)
    ranked = [(f, _cost(f)) for f in _rank([f for f in facts if f not in taken], among=chosen)]
    for _ in range(_MAX_PASSES):  # estimates count a speaker name per fact; each pass spends what grouping saved
        room = budget - count_tokens(body_of(render(chosen)))
        labels = {f.label for f in chosen}
        bullets = len(render(chosen))
        added = len(chosen)
        for fact, cost in ranked:
            new_label = fact.label is None or fact.label not in labels
            cost += count_tokens(fact.label or "") + 3 if new_label else 0
            if fact in taken or cost > room or (new_label and bullets >= max_bullets):
                continue
            chosen.append(fact)
            taken.add(fact)
            room -= cost
            bullets += new_label
            labels.add(fact.label)
        if len(chosen) == added:
            break
    while len(chosen) > len(pinned) and count_tokens(body_of(render(chosen))) > budget:
        chosen.pop()  # an estimate fell short: the last fact taken, the least worth of its pass, goes
    return sorted(chosen, key=lambda f: f.order)


def passes_guard(old_body: str, items: list[str], old_anchors: set[str] | None = None) -> bool:
    """The Key Facts UPDATE guard, with a margin: bullet ratio and lexical-anchor coverage (`old_anchors`: those of
    `old_body`, when the caller has them)."""
    n = len(bullet_items(old_body))
    if n and len(items) < _MIN_RATIO * n:
        return False
    anchors = lexical_anchors(old_body) if old_anchors is None else old_anchors
    return not anchors or len(anchors & lexical_anchors(body_of(items))) >= _MIN_COVERAGE * len(anchors)


def _restore_anchors(old_body: str, chosen: list[Fact], dropped: list[Fact]) -> list[Fact]:
    """Take dropped old facts back, those carrying the most missing anchors first, until the guard passes."""
    chosen = list(chosen)
    missing = lexical_anchors(old_body) - lexical_anchors(body_of(render(chosen)))
    pool = sorted(dropped, key=lambda f: (-len(lexical_anchors(fact_line(f)) & missing), -f.order))
    for fact in pool:
        if passes_guard(old_body, render(chosen)):
            break
        if lexical_anchors(fact_line(fact)) & missing or len(render(chosen)) < _MIN_RATIO * len(
            bullet_items(old_body)
        ):
            chosen.append(fact)
            missing -= lexical_anchors(fact_line(fact))
    return sorted(chosen, key=lambda f: f.order)


def target_tokens(limits: Budgets, old_body: str = "") -> int:
    """The token target of a written Key Facts: the section's budget (3 000 at the section table), less the room
    of the archive pointer when the section holds one (the merge keeps the pointer within the budget too)."""
    archived = read_pointer(old_body)[1]
    return limits.sections["Key Facts & Decisions"] - (pointer_tokens(archived.refused) if archived.total else 0)


def _within(old_body: str, chosen: list[Fact], target: int) -> list[Fact]:
    """`chosen` without its least worthy facts while it passes `target` tokens, as long as the guard still passes
    (the facts taken back for the guard's anchors can take a rewrite past its target)."""
    chosen = list(chosen)
    if count_tokens(body_of(render(chosen))) <= target:
        return chosen
    old_anchors = lexical_anchors(old_body)
    for fact in reversed(_rank(chosen, among=())):
        items = render([f for f in chosen if f != fact])
        if passes_guard(old_body, items, old_anchors):
            chosen.remove(fact)
            if count_tokens(body_of(items)) <= target:
                break
    return chosen


def key_facts_op(
    old_body: str, old: list[Fact], new: list[Fact], corrections: Sequence[tuple[int, str]],
    limits: Budgets = FULL_BUDGETS,
) -> dict[str, Any]:
    """APPEND the new facts while they all fit a section that is not oversized; else rewrite it."""
    target = target_tokens(limits, old_body)
    kept_old = [f for f in old if not superseded(f, corrections)]
    known = {norm(fact_line(f)) for f in old}
    fresh = newest_wins([f for f in new if not superseded(f, corrections) and norm(fact_line(f)) not in known])
    pool = newest_wins(kept_old + fresh)
    unchanged = all(f in pool for f in old)
    if unchanged and not limits.oversized(len(bullet_items(old_body)), count_tokens(old_body)):
        added = [f for f in select(fresh, target, MAX_BULLETS, pinned=old) if f not in old]
        kept_body = read_pointer(old_body)[0]
        appended = f"{kept_body}\n{body_of(render(added))}" if kept_body else body_of(render(added))
        # appended as items, a date's label comes again: the section as it will stand must fit the target
        if len(added) == len(fresh) and count_tokens(appended) <= target:
            return {"op": "APPEND", "items": render(added)} if added else {"op": "KEEP"}
    chosen = select(pool, target, MAX_BULLETS)
    if old_body.strip() and not passes_guard(old_body, render(chosen)):
        dropped = [f for f in kept_old if f not in chosen]
        chosen = _within(old_body, _restore_anchors(old_body, chosen, dropped), target)
    items = render(chosen)
    if items == bullet_items(old_body):
        return {"op": "KEEP"}
    return {"op": "UPDATE", "content": body_of(items)}


def create_facts(new: list[Fact], corrections: Sequence[tuple[int, str]], limits: Budgets = FULL_BUDGETS) -> str:
    """The Key Facts body of a create call: the best facts within the size limits."""
    op = key_facts_op("", [], new, corrections, limits)
    return body_of(op["items"]) if op["op"] == "APPEND" else op.get("content", "")
