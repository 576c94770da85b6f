"""Task & Goals and Open Issues for the extractive model: what is still open, what got done or answered.

Goals are the user's requests (in a dialogue between people: each speaker's stated plans). A goal
leaves the section when a later message reports it done or a correction rejects it, and only the
newest open goals are kept. Questions nobody answered and TODOs become Open Issues; a later
message that answers or completes one marks it `[resolved]`, and a resolved item is dropped at the
commit after, so the section holds what is open plus what was settled last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from workmem.nodes.extractive.cues import (
    as_task,
    is_ack,
    is_correction,
    is_issue,
    is_plan,
    is_polite_request,
    is_request,
    mentions,
    negated_terms,
    reports_done,
)
from workmem.nodes.extractive.task import TASK_PREFIX, is_task_prompt
from workmem.nodes.extractive.text import (
    alternation,
    as_sentence,
    clean,
    is_question,
    norm,
    overlaps,
    without_caption,
)
from workmem.nodes.extractive.transcript import Line
from workmem.nodes.extractive.words import PAST_WORDS
from workmem.nodes.extractive.worth import content_words
from workmem.nodes.guard_words import RESOLVED_TAG
from workmem.state.memory import bullet_items
from workmem.state.tokens import count_tokens

MAX_GOALS = 20
GOAL_SHARE = 80  # % of the section's budget a rewrite of Task & Goals keeps
GOAL_TOKENS = 1200  # 80 % of 1 500, the section table
_ASKED_RE = re.compile(r"^(?:\[silently dropped, restored\] )?(.{1,40}?) asked: ")
_PAST_RE = re.compile(rf"\b(?:{alternation(PAST_WORDS)}|[a-z]{{3,}}ed)\b", re.I)


def labelled(line: Line, text: str) -> str:
    """A dialogue item keeps who said it and when: `7 May, 2023 — Ann: …`; other items stay as they are."""
    m = line.msg
    if not m.speaker:
        return text
    said = f"{m.speaker}: {text}"
    return f"{m.date} — {said}" if m.date else said


def replies_to_question(lines: list[Line]) -> set[int]:
    """Indexes of messages that answer a question: the message right before, by another party, asks one."""
    party = {line.index: line.msg.party for line in lines}
    asking = {line.index for line in lines if is_question(without_caption(line.text))}
    return {i for i in party if i - 1 in asking and party[i - 1] != party[i]}


def corrections(lines: list[Line]) -> list[tuple[Line, str]]:
    """User corrections (in a dialogue, any speaker's), each with its recorded wording. A task prompt written
    for an agent (`is_task_prompt`) states its instructions; it corrects nothing."""
    replies = replies_to_question(lines)
    said = {id(x.msg): x.msg for x in lines if x.msg.role == "user"}
    prompts = {key for key, msg in said.items() if is_task_prompt(msg)}
    out = []
    for line in lines:
        if id(line.msg) in prompts:
            continue
        if (line.msg.role == "user" or line.msg.speaker) and is_correction(line.text, line.index in replies):
            who = f"Correction by {line.msg.speaker}" if line.msg.speaker else "User correction"
            out.append((line, f"{who}: {clean(line.text)}"))
    return out


def _task(text: str) -> str:
    return as_sentence(re.split(r" - |; ", as_task(text))[0].rstrip(",") or text)


def goal_lines(lines: list[Line]) -> list[tuple[Line, str]]:
    """New goals: requests of the user (a correction phrased as a request replaces a goal), speakers' plans."""
    out = []
    for line in lines:
        m, sent = line.msg, line.text
        if m.speaker:
            if is_plan(sent):
                out.append((line, labelled(line, clean(sent))))
        elif m.role == "user" and is_request(sent) and not is_ack(sent) and not is_issue(sent):
            if not is_question(sent) or is_polite_request(sent):
                out.append((line, _task(sent)))
    return out


def _done(goal: str, order: int, lines: list[Line], dialogue: bool) -> bool:
    for line in lines:
        if line.order <= order or is_question(line.text):
            continue
        if dialogue:
            if _PAST_RE.search(line.text) and overlaps(goal, line.text, 0.5) and line.msg.speaker in goal:
                return True
        elif reports_done(line.text) and overlaps(goal, line.text):
            return True
    return False


def rejected(goal: str, order: int, fixes: list[tuple[Line, str]]) -> bool:
    """A later correction negates a term the goal names."""
    return any(line.order > order and any(mentions(goal, t) for t in negated_terms(line.text)) for line, _ in fixes)


def goals_op(old_body: str, lines: list[Line], fixes: list[tuple[Line, str]],
             max_tokens: int = GOAL_TOKENS, task: str = "") -> dict[str, Any]:
    """Rewrite Task & Goals to the newest goals still open (KEEP or APPEND when none closed or aged out),
    within `max_tokens`. The session's task (`Task: …`, given for a section that holds none yet) stays first."""
    old_items = bullet_items(old_body)
    pinned = [i for i in old_items if i.startswith(TASK_PREFIX)]
    if not pinned and task and not old_items:
        pinned = [TASK_PREFIX + task]
    candidates = [(-len(old_items) + i, item) for i, item in enumerate(old_items) if item not in pinned]
    known = {norm(i) for i in old_items} | {norm(p[len(TASK_PREFIX):]) for p in pinned}
    for line, goal in goal_lines(lines):
        if norm(goal) not in known:
            known.add(norm(goal))
            candidates.append((line.order, goal))
    dialogue = any(line.msg.speaker for line in lines)
    still = [g for order, g in candidates if not _done(g, order, lines, dialogue) and not rejected(g, order, fixes)]
    kept: list[str] = []
    for goal in reversed(still):
        if len(pinned) + len(kept) >= MAX_GOALS or count_tokens("\n".join(pinned + kept + [goal])) > max_tokens:
            break
        kept.insert(0, goal)
    return list_op(old_items, pinned + kept)


def list_op(old_items: list[str], items: list[str]) -> dict[str, Any]:
    """KEEP when the items are the old ones, APPEND when they only add to them, else UPDATE."""
    if items == old_items:
        return {"op": "KEEP"}
    if items[: len(old_items)] == old_items:
        return {"op": "APPEND", "items": items[len(old_items) :]}
    return {"op": "UPDATE", "content": "\n".join(f"- {i}" for i in items)}


def _asker(line: Line) -> str:
    return line.msg.speaker or ("User" if line.msg.role == "user" else "Agent")


def _answered(asker: str, lines: Sequence[Line], after: int) -> bool:
    return any(x.order > after and _asker(x) != asker and not is_question(x.text) for x in lines)


def issue_lines(lines: list[Line]) -> list[tuple[Line, str]]:
    """New open issues: questions no one answered in these messages, and TODOs not completed in them."""
    out = []
    for line in lines:
        sent = line.text
        if is_question(sent) and not is_polite_request(sent) and len(content_words(sent)) >= 2:
            if not _answered(_asker(line), lines, line.order):
                out.append((line, f"{_asker(line)} asked: {clean(sent)}"))
        elif is_issue(sent) and not any(x.order > line.order and reports_done(x.text) and overlaps(sent, x.text)
                                        for x in lines):
            out.append((line, labelled(line, clean(sent))))
    return out


def resolved(item: str, lines: list[Line]) -> bool:
    """An open item settled by these lines: a question answered by another party, a TODO reported done."""
    asked = _ASKED_RE.match(item)
    if asked:
        question = norm(item[asked.end() :])
        after = max((x.order for x in lines if norm(x.text) == question), default=-1)
        return _answered(asked.group(1), lines, after)
    return any(reports_done(x.text) and overlaps(item, x.text) for x in lines)


def issues_op(old_body: str, lines: list[Line]) -> dict[str, Any]:
    """Mark answered or completed issues `[resolved]`, drop those resolved before, add the new ones."""
    old_items = bullet_items(old_body)
    items = []
    for item in old_items:
        if RESOLVED_TAG in item.lower():
            continue
        items.append(f"{RESOLVED_TAG} {item}" if resolved(item, lines) else item)
    known = {norm(i) for i in old_items}
    for _, issue in issue_lines(lines):
        if norm(issue) not in known:
            known.add(norm(issue))
            items.append(issue)
    return list_op(old_items, items)


def create_issues(lines: list[Line]) -> list[str]:
    """Open issues of a first commit."""
    return issues_op("", lines).get("items", [])
