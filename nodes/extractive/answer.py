"""The extractive model's answer to a commit prompt: read it, build each section, pick KEEP / APPEND / UPDATE.

It never paraphrases, so it cannot invent; it reads no clock and no random state, so the same prompt
always yields the same tool arguments. `model.py` wraps it as a chat model. The section rules live in
`facts` (Key Facts), `tracking` (Task & Goals, Open Issues), `current_state` (Session Title, Current
State) and `artifacts` (files, errors); sentence cues are in `cues`, fact worth in `worth`, text
helpers in `text`, the word tables in `words`, and the prompt and transcript are read by `transcript`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workmem.nodes.extractive.artifacts import files, tool_errors
from workmem.nodes.extractive.cues import is_ack, is_issue, is_next_step
from workmem.nodes.extractive.current_state import SESSION_DATE_RE, current_state, known_speakers, title
from workmem.nodes.extractive.facts import Fact, create_facts, key_facts_op, new_fact, parse_facts
from workmem.nodes.extractive.text import clean, is_question, norm, sentences
from workmem.nodes.extractive.tracking import (
    GOAL_SHARE,
    corrections,
    create_issues,
    goal_lines,
    goals_op,
    issue_lines,
    issues_op,
)
from workmem.nodes.extractive.transcript import Line, Msg, block, dialogue_speakers, lines_of, parse_transcript, untag
from workmem.nodes.extractive.worth import is_decision
from workmem.nodes.guards import path_tokens
from workmem.nodes.prompts import SECTIONS_HEADING
from workmem.state.errors import InvalidInput
from workmem.state.memory import FULL_BUDGETS, SECTIONS, Budgets, bullet_items, parse_sections
from workmem.state.ops import CREATE_TOOL_NAME, UPDATE_TOOL_NAME

EXTRACTIVE_MODEL_NAME = "workmem-extractive"
MAX_NEW_ERRORS = 10
MAX_NEW_FILES = 20
_BUDGET_LINE = re.compile(r"^\d\. (.+?) \((\d{1,6})\): ")


@dataclass
class Reading:
    """What one commit prompt holds: the transcript's messages and sentences, corrections, legacy text."""

    msgs: list[Msg]
    lines: list[Line]
    fixes: list[tuple[Line, str]]
    legacy: str
    known: tuple[str, ...] = ()

    @property
    def speakers(self) -> list[str]:
        """Dialogue speakers: those the memory already knew, then the transcript's own."""
        return list(dict.fromkeys([*self.known, *dialogue_speakers(self.msgs)]))


def read(transcript: str, legacy: str = "", start_date: str | None = None, known: Sequence[str] = ()) -> Reading:
    """Parse the transcript once for every section builder (`known`: speakers the memory already names)."""
    msgs = parse_transcript(transcript, start_date, known)
    lines = lines_of(msgs)
    return Reading(msgs, lines, corrections(lines), legacy, tuple(known))


def _take(items: Sequence[str], limit: int, known: Callable[[str], bool] | None = None) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        item = clean(item)
        key = norm(item)
        if key and key not in seen and not (known and known(item)):
            seen.add(key)
            out.append(item)
        if len(out) >= limit:
            break
    return out


def new_facts(reading: Reading) -> list[Fact]:
    """Facts of the transcript: sentences worth keeping that are not goals, issues or plain corrections."""
    used = {line.order for line, _ in goal_lines(reading.lines) + issue_lines(reading.lines)}
    fixed = {line.order for line, _ in reading.fixes}
    legacy = sentences(reading.legacy)  # older than every transcript line, so ordered before them
    facts: list[Fact] = [f for i, s in enumerate(legacy) if (f := new_fact(s, None, None, i - len(legacy)))]
    for line in reading.lines:
        text = line.text
        if line.order in used or is_question(text) or is_ack(text) or is_issue(text) or is_next_step(text):
            continue
        if line.order in fixed and not is_decision(text):
            continue
        fact = new_fact(text, line.msg.speaker, line.msg.date, line.order)
        if fact:
            facts.append(fact)
    return facts


def _fix_orders(reading: Reading) -> list[tuple[int, str]]:
    return [(line.order, line.text) for line, _ in reading.fixes]


def _errors(reading: Reading) -> list[str]:
    return tool_errors(reading.msgs) + [wording for _, wording in reading.fixes]


def prompt_budgets(system: str) -> Budgets:
    """The section budgets the instructions (the system message, never the data) state under their
    heading (`N. Name (budget): …`), as the size rules they come from; §5's table when it states none."""
    stated: dict[str, int] = {}
    _, heading, rest = system.partition(SECTIONS_HEADING)
    for line in rest.splitlines()[1:len(SECTIONS) + 1] if heading else ():
        found = _BUDGET_LINE.match(line)
        if found and found.group(1) in SECTIONS:
            stated[found.group(1)] = int(found.group(2))
    if len(stated) < len(SECTIONS) or stated == dict(FULL_BUDGETS.sections):
        return FULL_BUDGETS
    return Budgets.of_sections(stated)


def _goal_tokens(limits: Budgets) -> int:
    """80 % of the Task & Goals budget (1 200 of 1 500 at §5's table)."""
    return limits.sections["Task & Goals"] * GOAL_SHARE // 100


def create_sections(reading: Reading, limits: Budgets = FULL_BUDGETS) -> dict[str, str]:
    """Bodies of all seven sections for `create_working_memory`."""
    goals = goals_op("", reading.lines, reading.fixes, _goal_tokens(limits)).get("items", [])
    issues = create_issues(reading.lines)
    return {
        "Session Title": title(reading.msgs, reading.legacy),
        "Current State": current_state(reading.msgs, reading.lines, goals, issues),
        "Task & Goals": _bullets(goals),
        "Key Facts & Decisions": create_facts(new_facts(reading), _fix_orders(reading), limits),
        "Files & Context": _bullets(_take(files(reading.msgs, reading.legacy), MAX_NEW_FILES)),
        "Errors & Corrections": _bullets(_take(_errors(reading), MAX_NEW_ERRORS)),
        "Open Issues": _bullets(issues),
    }


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _append(old_body: str, items: list[str], known: Callable[[str], bool] | None = None) -> dict[str, Any]:
    old = norm(old_body)
    new = [i for i in items if norm(i) not in old and not (known and known(i))]
    return {"op": "APPEND", "items": new} if new else {"op": "KEEP"}


def _after(old_body: str, op: dict[str, Any]) -> list[str]:
    if op["op"] == "UPDATE":
        return bullet_items(op["content"])
    return bullet_items(old_body) + list(op.get("items", []))


def update_sections(reading: Reading, old: dict[str, str],
                    limits: Budgets = FULL_BUDGETS) -> dict[str, dict[str, Any]]:
    """One op per section for `update_working_memory`: KEEP > APPEND > UPDATE, as the prompt asks."""
    ops: dict[str, dict[str, Any]] = {}
    old_title = old.get("Session Title", "")
    new_title = title(reading.msgs, reading.legacy) if not old_title.strip() else ""
    ops["Session Title"] = {"op": "UPDATE", "content": new_title} if new_title else {"op": "KEEP"}
    ops["Task & Goals"] = goals_op(old.get("Task & Goals", ""), reading.lines, reading.fixes, _goal_tokens(limits))
    ops["Open Issues"] = issues_op(old.get("Open Issues", ""), reading.lines)
    goals = _after(old.get("Task & Goals", ""), ops["Task & Goals"])
    issues = [i for i in _after(old.get("Open Issues", ""), ops["Open Issues"]) if not i.startswith("[resolved]")]
    state = current_state(reading.msgs, reading.lines, goals, issues, reading.known) if reading.msgs else ""
    ops["Current State"] = {"op": "UPDATE", "content": state} if state else {"op": "KEEP"}
    old_facts_body = old.get("Key Facts & Decisions", "")
    ops["Key Facts & Decisions"] = key_facts_op(
        old_facts_body, parse_facts(old_facts_body, reading.speakers), new_facts(reading), _fix_orders(reading),
        limits)
    old_paths = path_tokens(old.get("Files & Context", ""))
    ops["Files & Context"] = _append(
        old.get("Files & Context", ""),
        _take(files(reading.msgs, reading.legacy), MAX_NEW_FILES),
        known=lambda item: item.split(" (")[0].lower() in old_paths,
    )
    ops["Errors & Corrections"] = _append(old.get("Errors & Corrections", ""), _take(_errors(reading), MAX_NEW_ERRORS))
    return {name: ops[name] for name in SECTIONS}


def _tool_name(tools: Sequence[dict[str, Any]], tool_choice: Any, has_wm: bool) -> str:
    names = [t.get("function", {}).get("name") or t.get("name") for t in tools]
    forced = tool_choice
    if isinstance(tool_choice, dict):
        forced = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    if not isinstance(forced, str) or forced in ("auto", "any", "required", "none"):
        forced = None
    if forced is None and len(names) == 1:
        forced = names[0]
    if forced is None:
        forced = UPDATE_TOOL_NAME if has_wm and (not names or UPDATE_TOOL_NAME in names) else CREATE_TOOL_NAME
    if forced not in (UPDATE_TOOL_NAME, CREATE_TOOL_NAME):
        raise InvalidInput("tool_choice", forced, "the extractive model only answers the two memory tools")
    return forced


def _conversation_date(old: dict[str, str]) -> str | None:
    """The dialogue date the previous commit ended on: Current State names it, else the newest dated facts."""
    found = SESSION_DATE_RE.search(old.get("Current State", ""))
    facts = [f.label for f in parse_facts(old.get("Key Facts & Decisions", "")) if f.label]
    return found.group(1) if found else (facts[-1] if facts else None)


def memory_tool_call(text: str, tools: Sequence[dict[str, Any]], tool_choice: Any,
                     system: str = "") -> tuple[str, dict[str, Any]]:
    """The memory tool to call and its arguments for a commit prompt rendered as `text` (its human part)
    under the instructions `system` (they state the section budgets)."""
    lines = text.replace("\r\n", "\n").split("\n")
    wm, after_wm = block(lines, "current_working_memory")
    legacy, after_legacy = block(lines, "previous_memory")
    transcript, _ = block(lines, "messages", start=max(after_wm, after_legacy), last_close=True)
    name = _tool_name(tools, tool_choice, wm is not None)
    old = parse_sections(untag(wm or ""))
    known = known_speakers(old.get("Current State", ""))
    reading = read(transcript or "", untag(legacy or ""), _conversation_date(old), known)
    limits = prompt_budgets(system)
    if name == UPDATE_TOOL_NAME:
        return name, {"sections": update_sections(reading, old, limits)}
    return name, {"sections": create_sections(reading, limits)}
