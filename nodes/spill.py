"""Section budgets with explicit spill: pure, after the guards and ops.

A section still over its budget after a merge moves its oldest items into the archive being written
(`spilled`), leaving a pointer item that counts them (`state.memory.with_pointer`). Who spills:
- Task & Goals, Files & Context, Errors & Corrections, Open Issues: oldest items first (Open
  Issues: `[resolved]` items first) until the body fits;
- Key Facts & Decisions, under the section table alone (a bare merge): only when the caller says it may (the
  sentinel stood through two commits): down to ≤ 25 bullets and ≤ 1 500 tokens, the sentinel removed; and
  always, the items of an APPEND that take it past its budget (a salvaged rejected UPDATE) at once;
- Session Title never spills: an over-budget title keeps the old one (or is cut when there is none);
- Current State never spills items: it is cut at the last sentence end that fits, the rest spilled.

Under a memory budget (`Budgets.document`, what a commit runs with) the budget is a hard bound: Key
Facts spills its oldest items too, after any op (the sentinel stays as the model's signal and is never an
item); the new items a size rule refused (`guards.REFUSED`: the oversized-APPEND cap, a sentinel round) go
to the archive instead of vanishing; and `fit_document` spills until the rendered document fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workmem.nodes.guard_words import RESOLVED_TAG
from workmem.nodes.guards import REFUSED, SALVAGE, TO_ARCHIVE, note
from workmem.state.commit_state import GuardNote
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    FULL_BUDGETS,
    MAX_BULLETS,
    Archived,
    Budgets,
    body_tokens,
    bullet_items,
    pointer_item,
    render_sections,
    split_lines,
    with_pointer,
)
from workmem.state.tokens import count_tokens

SPILL_OLDEST_FIRST = ("Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues")
KEY_FACTS = "Key Facts & Decisions"
LIST_SECTIONS = (*SPILL_OLDEST_FIRST[:1], KEY_FACTS, *SPILL_OLDEST_FIRST[1:])  # document order
NO_POINTER = ("Session Title", "Current State")  # cut, never itemised: what they spill is found by search
_MANY = 10**9  # a count with as many digits as a pointer will ever show


def pointer_tokens(refused: int = 0) -> int:
    """Tokens a pointer line and its newline can take: the older-items count at its widest, and `refused`."""
    return count_tokens("- " + pointer_item(Archived(_MANY, refused))) + 1


POINTER_TOKENS = pointer_tokens()
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\S+")


@dataclass
class Budgeted:
    """The bodies after the budgets, what they spilled (`{section, item}` in order) and the notes."""

    bodies: dict[str, str]
    spilled: list[dict[str, str]] = field(default_factory=list)
    notes: list[GuardNote] = field(default_factory=list)
    refused: dict[str, int] = field(default_factory=dict)  # per section: how many spilled items were new ones

    def spill(self, section: str, items: list[str], detail: str, *, new: bool = False) -> None:
        """Move `items` of `section` to the archive with a note; `new` items were refused, not moved out."""
        if items:
            self.spilled.extend({"section": section, "item": item} for item in items)
            self.notes.append(note(section, "budget", "spilled", f"{len(items)} item(s) {detail}"))
            if new:
                self.refused[section] = self.refused.get(section, 0) + len(items)

    def archived(self, section: str) -> Archived:
        """What this merge moved out of `section` (older items) and refused (new items)."""
        moved = sum(1 for item in self.spilled if item["section"] == section)
        refused = self.refused.get(section, 0)
        return Archived(moved - refused, refused)


def _lines(body: str) -> list[str]:
    return [line for line in split_lines(body) if line.strip()]


def _item(line: str) -> str:
    found = bullet_items(line)
    return found[0] if found else line.strip()


def _fits(lines: list[str], budget: int, pointer_tokens: int) -> bool:
    return count_tokens("\n".join(lines)) + pointer_tokens <= budget


def _spill_oldest(section: str, body: str, budget: int, pointer_tokens: int) -> tuple[str, list[str]]:
    """Drop the fewest oldest lines (Open Issues: resolved ones first) so the body fits; return it and them.

    The consolidation sentinel is never an item: it stays (or, when even it does not fit, goes unarchived).
    How many is found by a binary search over exact counts: a long section costs a few encodes.
    """
    lines = _lines(body)
    if _fits(lines, budget, pointer_tokens):
        return body, []
    if any(CONSOLIDATION_SENTINEL in line for line in lines):
        rest, spilled = _spill_oldest(section, "\n".join(ln for ln in lines if CONSOLIDATION_SENTINEL not in ln),
                                      budget - count_tokens("- " + CONSOLIDATION_SENTINEL) - 1, pointer_tokens)
        with_sentinel = "\n".join([*_lines(rest), "- " + CONSOLIDATION_SENTINEL])
        return (with_sentinel if _fits(_lines(with_sentinel), budget, pointer_tokens) else rest), spilled
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
    """Spill the oldest Key Facts (and the sentinel) down to ≤ 25 bullets and ≤ `max_tokens` (1 500 at the section
    table)."""
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
    n = _most_that_fit(len(sentences), lambda k: count_tokens(" ".join(sentences[:k])) <= budget)
    if not n:  # one sentence longer than the budget: cut after the last word that fits
        text = text.strip()
        ends = [word.end() for word in _WORD.finditer(text)]
        words = _most_that_fit(len(ends), lambda k: count_tokens(text[:ends[k - 1]]) <= budget)
        cut = ends[words - 1] if words else 0
        return text[:cut], text[cut:].strip()
    return " ".join(sentences[:n]), " ".join(sentences[n:])


def _most_that_fit(count: int, fits: Callable[[int], bool]) -> int:
    """The largest k ≤ `count` whose first k pieces fit (`fits(k)`; 0 always does), by bisection: a model's one
    40,000-word sentence is cut in a few dozen counts, not one count per word."""
    low, high = 0, count
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _marked_items(op: Mapping[str, Any], mark: str) -> list[str]:
    items = op.get(mark)
    return [str(item) for item in items] if isinstance(items, list) else []


def apply_budgets(old: Mapping[str, str], new: Mapping[str, str], facts_op: Mapping[str, Any],
                  pointer_counts: Mapping[str, int | Archived], *, key_facts_may_spill: bool = False,
                  limits: Budgets = FULL_BUDGETS) -> Budgeted:
    """Enforce the section budgets on `new` (the merged bodies, pointers taken out), given the `old`
    bodies, the decided Key Facts op (with the guard's marks) and each section's pointer count so far;
    `limits` are the commit's memory budget's (default the section table; with a document bound, a hard one)."""
    out = Budgeted(dict(new))
    budget_of = limits.sections
    hard = limits.document is not None

    def spill_oldest(name: str) -> None:
        before = _archived(pointer_counts.get(name))
        refused = before.refused + out.refused.get(name, 0)
        has_pointer = before.total or refused or body_tokens(out.bodies[name]) > budget_of[name]
        reserve = pointer_tokens(refused) if has_pointer else 0
        out.bodies[name], items = _spill_oldest(name, out.bodies[name], budget_of[name], reserve)
        out.spill(name, items, "over the budget moved to the archive")

    for name in () if hard else SPILL_OLDEST_FIRST:
        spill_oldest(name)
    facts = new[KEY_FACTS]
    if key_facts_may_spill and CONSOLIDATION_SENTINEL in facts:
        out.bodies[KEY_FACTS], items = _consolidate_key_facts(facts, limits.oversized_tokens)
        out.spill(KEY_FACTS, items, "moved to the archive: the consolidation sentinel stood through two commits")
    elif facts_op.get(SALVAGE) and body_tokens(facts) > budget_of[KEY_FACTS]:
        out.bodies[KEY_FACTS], items = _overflow_of_append(old[KEY_FACTS], facts, budget_of[KEY_FACTS])
        out.spill(KEY_FACTS, items, "salvaged past the budget moved to the archive at once", new=True)
    out.spill(KEY_FACTS, _marked_items(facts_op, TO_ARCHIVE), "of an UPDATE rejected at emergency size moved to "
                                                              "the archive", new=True)
    if hard:
        out.spill(KEY_FACTS, _marked_items(facts_op, REFUSED), "refused for size moved to the archive", new=True)
    for name in LIST_SECTIONS if hard else ():
        spill_oldest(name)
    title, title_budget = new["Session Title"], budget_of["Session Title"]
    if body_tokens(title) > title_budget:
        kept = old["Session Title"] or _cut_at_sentence(title, title_budget)[0]
        if hard and body_tokens(kept) > title_budget:  # even the old one is over: cut it, archive the rest
            kept, rest = _cut_at_sentence(kept, title_budget)
            out.spill("Session Title", [rest] if rest else [], "past the budget cut at a sentence end")
        elif hard and not old["Session Title"]:
            rest = _cut_at_sentence(title, title_budget)[1]
            out.spill("Session Title", [rest] if rest else [], "past the budget cut at a sentence end")
        out.bodies["Session Title"] = kept
        out.notes.append(note("Session Title", "budget", "rejected", "the new title is over its budget"))
    state = new["Current State"]
    if body_tokens(state) > budget_of["Current State"]:
        out.bodies["Current State"], rest = _cut_at_sentence(state, budget_of["Current State"])
        out.spill("Current State", [rest] if rest else [], "past the budget cut at a sentence end")
    return out


def _archived(count: int | Archived | None) -> Archived:
    return count if isinstance(count, Archived) else Archived(max(int(count or 0), 0))


def pointed_bodies(budgeted: Budgeted, pointer_counts: Mapping[str, int | Archived]) -> dict[str, str]:
    """The bodies with their pointers back: what the section held before plus what this merge archived."""
    return {name: with_pointer(body, _archived(pointer_counts.get(name)) + budgeted.archived(name))
            if name not in NO_POINTER else body for name, body in budgeted.bodies.items()}


def fit_document(budgeted: Budgeted, pointer_counts: Mapping[str, int | Archived], limit: int) -> str:
    """The rendered document within `limit` tokens: while it is over, the list section with the most tokens
    spills its oldest item (the section budgets leave room for the headings, so this only absorbs what the
    tokenizer does at section boundaries); Current State is cut last."""
    while True:
        markdown = render_sections(pointed_bodies(budgeted, pointer_counts))
        over = count_tokens(markdown) - limit
        if over <= 0:
            return markdown
        candidates = [name for name in LIST_SECTIONS if _lines(budgeted.bodies[name])]
        if candidates:
            name = max(candidates, key=lambda n: body_tokens(budgeted.bodies[n]))
            lines = _lines(budgeted.bodies[name])
            oldest = next((i for i, line in enumerate(lines) if CONSOLIDATION_SENTINEL not in line), 0)
            gone = lines.pop(oldest)
            budgeted.bodies[name] = "\n".join(lines)
            if CONSOLIDATION_SENTINEL not in gone:  # the sentinel is a signal, not an item: it just goes
                budgeted.spill(name, [_item(gone)], "moved to the archive so the whole memory fits its budget")
            continue
        state = budgeted.bodies["Current State"]
        if not state:
            return markdown
        head, cut = _cut_at_sentence(state, max(body_tokens(state) - over, 0))
        head, cut = (head, cut) if cut else ("", state)
        budgeted.bodies["Current State"] = head
        budgeted.spill("Current State", [cut], "cut so the whole memory fits its budget")
