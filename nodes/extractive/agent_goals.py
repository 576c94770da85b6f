"""Task & Goals and Open Issues of a session where an agent works with tools (a coding session).

Task & Goals holds the task (`Task: …`, from the first request, pinned first), the constraints that
request states, and the user's later messages as they were written (`User: …`, newest kept when the
section is full): in such a session every user turn steers the work, and a correction is a change of
goal. The section changes only when the covered messages hold a user message, so a session whose user
spoke once keeps its Task & Goals unchanged. Open Issues holds what is open at the end of the covered
messages: the agent's to-do list as its todo tool last wrote it (items done there are resolved), TODOs
it wrote, and the questions it asked the user (not those it asked itself while working).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from workmem.nodes.extractive.cues import is_ack, is_issue, is_request, reports_done
from workmem.nodes.extractive.prose import is_prose, strip_label
from workmem.nodes.extractive.steps import Step
from workmem.nodes.extractive.task import (
    NAMES_PREFIX,
    TASK_PREFIX,
    constraints,
    first_request,
    fit_tokens,
    names_item,
    task_names,
    task_of,
)
from workmem.nodes.extractive.text import clean, is_question, norm, overlaps, sentences
from workmem.nodes.extractive.tracking import list_op, rejected, resolved
from workmem.nodes.extractive.transcript import Line, Msg, unwrapped
from workmem.nodes.guard_words import RESOLVED_TAG
from workmem.nodes.spill import POINTER_TOKENS
from workmem.state.memory import bullet_items, split_pointer
from workmem.state.tokens import count_tokens

USER_PREFIX = "User: "
MIN_CUT_TOKENS = 16  # a user's item cut to fit Task & Goals keeps at least this much
_BULLET_TOKENS = 3  # "- " and the line end, as `_tokens` counts a bullet beyond its text
TRAIL_SEPARATOR = " — "  # between a Files & Context entry's path and what was done to it (`files_section`)
DONE_MARK = " (done)"
TODO_PREFIXES = {"pending": "To do: ", "in_progress": "In progress: "}
MAX_CONSTRAINTS = 3
MAX_USER_CHARS = 220
_NOTE_RE = re.compile(r"^\[[^\]]*\]$")
_TODO_RE = re.compile(r"^(?:To do|In progress): ")
_SELF_RE = re.compile(r"^(?:let me|let's|i'll|i will|i'm going to|now i)\b", re.I)  # the agent's own next action


def is_agentic(msgs: Sequence[Msg], old_files: str = "") -> bool:
    """An agent works with tools here: the transcript has tool calls or results, or the memory's Files &
    Context holds the trail of earlier ones (`path — what was done`)."""
    entries = bullet_items(split_pointer(old_files)[0])
    return any(m.calls or m.results for m in msgs) or any(TRAIL_SEPARATOR in i for i in entries)


def _user_item(msg: Msg, fixes: list[tuple[Line, str]]) -> str | None:
    """A user message as a goal item, in the user's words: its requests (`Please …`, `… should …`), else
    its opening sentences; a request a later correction rejects is left out (the correction says instead)."""
    body = " ".join(unwrapped(msg.body).split())
    if not body or is_ack(body) or _NOTE_RE.match(body):
        return None
    sents = sentences(body)
    asked = [s for s in sents if is_request(s) and not is_ack(s)]
    order = msg.seq * 1000
    kept = [s for s in asked if not rejected(s, order, fixes)] if asked else sents
    if asked and not kept:
        return None
    return USER_PREFIX + clean(" ".join(kept), MAX_USER_CHARS)


def _revised(item: str, reports: list[Line], fixes: list[tuple[Line, str]]) -> str | None:
    """An earlier user item after these messages: the requests a correction here rejects left out (the item
    goes when none is left), marked done when the agent reports it done here."""
    if item.endswith(DONE_MARK):
        return item
    sents = sentences(item[len(USER_PREFIX):])
    others = [(line, text) for line, text in fixes if norm(line.text) not in norm(item)]  # not its own words
    kept = [s for s in sents if not rejected(s, -1, others)]
    if not kept:
        return None
    text = USER_PREFIX + " ".join(kept) if len(kept) < len(sents) else item
    return f"{text}{DONE_MARK}" if _done(text, -1, reports) else text


def _reports(lines: list[Line]) -> list[Line]:
    """The agent's sentences that report something done."""
    return [x for x in lines if x.msg.role == "assistant" and reports_done(x.text)]


def _done(item: str, order: int, reports: list[Line]) -> bool:
    return any(x.order > order and overlaps(item, x.text) for x in reports)


def _tokens(items: Sequence[str]) -> int:
    """An upper bound of the tokens of the items as bullets: each bullet line counted on its own."""
    return sum(count_tokens(f"- {i}\n") for i in items)


def _fit(ranked: list[str], order: list[str], budget: int) -> list[str]:
    """The items of `ranked` (most important first) that fit in `budget` together, in the order of `order`;
    the task's names item is cut to what fits rather than left out, and so is a user's item while a cut keeps
    `MIN_CUT_TOKENS` of it; once one cannot be kept, no older one is (it must not stand in for the newer words)."""
    kept: list[tuple[str, str]] = []  # (the item, as it is kept)
    used = 0
    users_closed = False
    for item in ranked:
        room = budget - used
        shown: str | None = None
        if item.startswith(USER_PREFIX) and users_closed:
            continue
        if _tokens([item]) <= room:
            shown = item
        elif item.startswith(USER_PREFIX):
            if room - _BULLET_TOKENS >= MIN_CUT_TOKENS:
                shown = fit_tokens(item, room - _BULLET_TOKENS - 1).rstrip(" .,;:") + "…"
            users_closed = True
        elif item.startswith(NAMES_PREFIX):
            names = item[len(NAMES_PREFIX):].split(", ")
            while names and _tokens([NAMES_PREFIX + ", ".join(names)]) > room:
                names.pop()
            shown = NAMES_PREFIX + ", ".join(names) if names else None
        if shown is not None:
            kept.append((item, shown))
            used += _tokens([shown])
    position = {item: i for i, item in enumerate(order)}
    return [shown for item, shown in sorted(kept, key=lambda pair: position.get(pair[0], 0))]


def goals(old_body: str, msgs: list[Msg], lines: list[Line], fixes: list[tuple[Line, str]], budget: int,
          legacy: str = "") -> list[str]:
    """The Task & Goals items after these messages (the old ones when no user message is among them); a
    request the agent reports done is marked `(done)` and leaves first when the section is full."""
    old = bullet_items(split_pointer(old_body)[0])
    task_items = [i for i in old if i.startswith(TASK_PREFIX)]
    users = [m for m in msgs if m.role == "user" and not m.is_note]
    if task_items:  # the request that stated the task, read again, is no new message
        users = [m for m in users if TASK_PREFIX + task_of([m]) not in task_items]
    if task_items and not users:
        return old
    described: list[str] = []
    if not old and not split_pointer(old_body)[1]:  # the section's first items (not one a spill emptied)
        first = first_request(msgs)
        task = task_of(msgs, legacy)
        task_items = [TASK_PREFIX + task] if task else []
        named = names_item(task_names(msgs, task)) if task else ""
        described = [*([named] if named else []), *(constraints(msgs, task)[:MAX_CONSTRAINTS] if task else [])]
        users = [m for m in users if m is not first]
    rest = [i for i in old if i not in task_items]
    described += [i for i in rest if not i.startswith(USER_PREFIX)]
    known = {norm(i) for i in rest}
    new = [(m.seq * 1000, s) for m in users if (s := _user_item(m, fixes)) and norm(s) not in known]
    reports = _reports(lines)
    said = [r for i in rest if i.startswith(USER_PREFIX) and (r := _revised(i, reports, fixes))] + [
        f"{s}{DONE_MARK}" if _done(s, order, reports) else s for order, s in new]
    room = budget - (POINTER_TOKENS if split_pointer(old_body)[1] else 0)
    order = [*task_items, *described, *said]
    open_first = [s for s in reversed(said) if not s.endswith(DONE_MARK)] + [
        s for s in reversed(said) if s.endswith(DONE_MARK)]
    ranked = [*task_items, *described[:1], *open_first, *described[1:]]  # the names, then the newest words
    items = _fit(ranked, order, room)
    if task_items and task_items[0] not in items:  # a task longer than the whole section: its head
        return [fit_tokens(task_items[0], room - _BULLET_TOKENS)]
    return items


def goals_op(old_body: str, msgs: list[Msg], lines: list[Line], fixes: list[tuple[Line, str]], budget: int,
             legacy: str = "") -> dict[str, Any]:
    """KEEP, APPEND or UPDATE to the items of `goals`."""
    return list_op(bullet_items(split_pointer(old_body)[0]), goals(old_body, msgs, lines, fixes, budget, legacy))


def _todos(all_steps: list[Step]) -> list[tuple[str, str]] | None:
    """(status, content) of the newest to-do list a todo tool was given, or None when there is none."""
    for step in reversed(all_steps):
        todos = step.args.get("todos") if isinstance(step.args, dict) else None
        if isinstance(todos, list):
            return [(str(t.get("status", "")), clean(str(t.get("content", "")))) for t in todos
                    if isinstance(t, dict) and t.get("content")]
    return None


def _asked_user(msgs: list[Msg]) -> list[str]:
    """The questions the agent ended its turn with (the last message, the agent's, with no tool call): what it
    waits for the user to answer. Questions it asks itself while it works are no open issue."""
    last = msgs[-1] if msgs else None
    if last is None or last.role != "assistant" or last.calls:
        return []
    return [f"Agent asked: {clean(s)}" for s in sentences(last.body) if is_question(s)]


def issues(old_body: str, msgs: list[Msg], lines: list[Line], all_steps: list[Step]) -> list[str]:
    """The Open Issues items after these messages."""
    old = bullet_items(split_pointer(old_body)[0])
    todos = _todos(all_steps)
    still_open = {norm(c): TODO_PREFIXES.get(s, TODO_PREFIXES["pending"]) + c for s, c in todos or []
                  if s != "completed"}
    reports = [s for m in msgs if m.role == "assistant" for s in sentences(m.body) if reports_done(s)]
    items: list[str] = []
    for item in old:
        if RESOLVED_TAG in item.lower():
            continue  # resolved at the commit before: it leaves now
        bare = norm(_TODO_RE.sub("", item))
        if todos is not None and _TODO_RE.match(item):  # the newest list decides: still there, or done
            items.append(item if still_open.pop(bare, None) else f"{RESOLVED_TAG} {item}")
        elif resolved(item, lines) or any(overlaps(item, r) for r in reports):
            items.append(f"{RESOLVED_TAG} {item}")
        else:
            items.append(item)
    written = [clean(t) for m in msgs if m.role == "assistant" for s in sentences(m.body)
               if is_issue(t := strip_label(s)) and is_prose(t) and not _SELF_RE.match(t)]
    known = {norm(i) for i in items}
    for item in [*still_open.values(), *written, *_asked_user(msgs)]:
        if norm(item) not in known:
            known.add(norm(item))
            items.append(item)
    return items


def issues_op(old_body: str, msgs: list[Msg], lines: list[Line], all_steps: list[Step]) -> dict[str, Any]:
    """KEEP, APPEND or UPDATE to the items of `issues`."""
    return list_op(bullet_items(split_pointer(old_body)[0]), issues(old_body, msgs, lines, all_steps))
