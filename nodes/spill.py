"""Section budgets with explicit spill (§5 *Section budgets and spill*): pure, after the guards and ops.

A section still over its budget after a merge moves its oldest items into the archive being written
(`spilled`), leaving a pointer item that counts them (`state.memory.with_pointer`). Who spills:
- Task & Goals, Files & Context, Errors & Corrections, Open Issues: oldest items first (Open
  Issues: `[resolved]` items first) until the body fits;
- Key Facts & Decisions: only when the caller says it may (the sentinel stood through two commits):
  down to ≤ 25 bullets and ≤ 1 500 tokens, the sentinel removed; and always, the items of an APPEND
  that take it past its 3 000-token budget (a salvaged rejected UPDATE) are spilled at once;
  (the numbers of §5's table; a smaller memory budget — `state.memory.budgets` — scales them);
- Session Title never spills: an over-budget title keeps the old one (or is cut when there is none);
- Current State never spills items: it is cut at the last sentence end that fits, the rest spilled.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workmem.nodes.guard_words import RESOLVED_TAG
from workmem.nodes.guards import SALVAGE, TO_ARCHIVE, note
from workmem.state.commit_state import GuardNote
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    FULL_BUDGETS,
    MAX_BULLETS,
    POINTER_ITEM,
    Budgets,
    body_tokens,
    bullet_items,
    split_lines,
)
from workmem.state.tokens import count_tokens

SPILL_OLDEST_FIRST = ("Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues")
KEY_FACTS = "Key Facts & Decisions"
POINTER_TOKENS = count_tokens("- " + POINTER_ITEM.format(n=10**9)) + 1  # the pointer line and its newline
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\S+")


@dataclass
class Budgeted:
    """The bodies after the budgets, what they spilled (`{section, item}` in order) and the notes."""

    bodies: dict[str, str]
    spilled: list[dict[str, str]] = field(default_factory=list)
    notes: list[GuardNote] = field(default_factory=list)

    def spill(self, section: str, items: list[str], detail: str) -> None:
        if items:
            self.spilled.extend({"section": section, "item": item} for item in items)
            self.notes.append(note(section, "budget", "spilled", f"{len(items)} item(s) {detail}"))


def _lines(body: str) -> list[str]:
    return [line for line in split_lines(body) if line.strip()]


def _item(line: str) -> str:
    found = bullet_items(line)
    return found[0] if found else line.strip()


def _fits(lines: list[str], budget: int, pointer_tokens: int) -> bool:
    return count_tokens("\n".join(lines)) + pointer_tokens <= budget


def _spill_oldest(section: str, body: str, budget: int, pointer_tokens: int) -> tuple[str, list[str]]:
    """Drop the fewest oldest lines (Open Issues: resolved ones first) so the body fits; return it and them.

    How many is found by a binary search over exact counts: a long section costs a few encodes.
    """
    lines = _lines(body)
    if _fits(lines, budget, pointer_tokens):
        return body, []
    order = list(range(len(lines)))
    if section == "Open Issues":
        order.sort(key=lambda i: (RESOLVED_TAG not in lines[i].lower(), i))

    def kept_after(k: int) -> list[str]:
        gone = set(order[:k])
        return [line for j, line in enumerate(lines) if j not in gone]

    lo, hi = 1, len(lines)  # the body without all its lines fits (only the pointer is left)
    while lo < hi:
        mid = (lo + hi) // 2
        if _fits(kept_after(mid), budget, pointer_tokens):
            hi = mid
        else:
            lo = mid + 1
    return "\n".join(kept_after(lo)), [_item(lines[i]) for i in sorted(order[:lo])]


def _consolidate_key_facts(body: str, max_tokens: int) -> tuple[str, list[str]]:
    """Spill the oldest Key Facts (and the sentinel) down to ≤ 25 bullets and ≤ `max_tokens` (1 500 at §5's table)."""
    lines = [line for line in _lines(body) if CONSOLIDATION_SENTINEL not in line]
    spilled: list[str] = []
    while lines and (len(lines) > MAX_BULLETS or count_tokens("\n".join(lines)) > max_tokens):
        spilled.append(_item(lines.pop(0)))
    return "\n".join(lines), spilled


def _overflow_of_append(old_body: str, new_body: str, budget: int) -> tuple[str, list[str]]:
    """The appended lines that take a body past `budget`, spilled; the lines that fit stay."""
    old_lines, new_lines = _lines(old_body), _lines(new_body)
    appended = new_lines[len(old_lines):] if new_lines[:len(old_lines)] == old_lines else []
    kept = list(old_lines)
    spilled = []
    for line in appended:
        if not spilled and count_tokens("\n".join([*kept, line])) <= budget:
            kept.append(line)
        else:
            spilled.append(_item(line))
    return ("\n".join(kept), spilled) if spilled else (new_body, [])


def _cut_at_sentence(text: str, budget: int) -> tuple[str, str]:
    """`text` cut at the last sentence end that fits `budget` tokens, and the rest."""
    sentences = _SENTENCE_END.split(text.strip())
    kept: list[str] = []
    for sentence in sentences:
        if count_tokens(" ".join([*kept, sentence])) > budget:
            break
        kept.append(sentence)
    if not kept:  # one sentence longer than the budget: cut after the last word that fits
        text = text.strip()
        ends = [word.end() for word in _WORD.finditer(text)]
        while ends and count_tokens(text[:ends[-1]]) > budget:
            ends.pop()
        cut = ends[-1] if ends else 0
        return text[:cut], text[cut:].strip()
    head = " ".join(kept)
    return head, " ".join(sentences[len(kept):])


def apply_budgets(old: Mapping[str, str], new: Mapping[str, str], facts_op: Mapping[str, Any],
                  pointer_counts: Mapping[str, int], *, key_facts_may_spill: bool = False,
                  limits: Budgets = FULL_BUDGETS) -> Budgeted:
    """Enforce the section budgets on `new` (the merged bodies, pointers taken out), given the `old`
    bodies, the decided Key Facts op (with the guard's marks) and each section's pointer count so far;
    `limits` are the commit's memory budget's (default §5's table)."""
    out = Budgeted(dict(new))
    budget_of = limits.sections
    for name in SPILL_OLDEST_FIRST:
        has_pointer = pointer_counts.get(name) or body_tokens(new[name]) > budget_of[name]
        reserve = POINTER_TOKENS if has_pointer else 0
        out.bodies[name], items = _spill_oldest(name, new[name], budget_of[name], reserve)
        out.spill(name, items, "over the budget moved to the archive")
    facts = new[KEY_FACTS]
    if key_facts_may_spill and CONSOLIDATION_SENTINEL in facts:
        out.bodies[KEY_FACTS], items = _consolidate_key_facts(facts, limits.oversized_tokens)
        out.spill(KEY_FACTS, items, "moved to the archive: the consolidation sentinel stood through two commits")
    elif facts_op.get(SALVAGE) and body_tokens(facts) > budget_of[KEY_FACTS]:
        out.bodies[KEY_FACTS], items = _overflow_of_append(old[KEY_FACTS], facts, budget_of[KEY_FACTS])
        out.spill(KEY_FACTS, items, "salvaged past the budget moved to the archive at once")
    rejected = facts_op.get(TO_ARCHIVE)
    if isinstance(rejected, list) and rejected:
        out.spill(KEY_FACTS, [str(item) for item in rejected], "of an UPDATE rejected at emergency size moved to "
                                                               "the archive")
    title = new["Session Title"]
    if body_tokens(title) > budget_of["Session Title"]:
        kept = old["Session Title"] or _cut_at_sentence(title, budget_of["Session Title"])[0]
        out.bodies["Session Title"] = kept
        out.notes.append(note("Session Title", "budget", "rejected", "the new title is over its budget"))
    state = new["Current State"]
    if body_tokens(state) > budget_of["Current State"]:
        out.bodies["Current State"], rest = _cut_at_sentence(state, budget_of["Current State"])
        out.spill("Current State", [rest] if rest else [], "past the budget cut at a sentence end")
    return out
