"""The extractive model's answer to a commit prompt: read it, build each section, pick KEEP / APPEND / UPDATE.

It never paraphrases, so it cannot invent; it reads no clock and no random state, so the same prompt
always yields the same tool arguments. `model.py` wraps it as a chat model. A session where an agent
works with tools (a coding session) gets a handoff: the task (`task`) as title and pinned in Task &
Goals with the user's own words (`agent_goals`), the artifact trail in Files & Context (`shell`,
`steps`, `trail`, `files_section`), each error once with what fixed it (`errors`), prose-only facts
(`prose`). Other sessions keep the dialogue and request rules: Key Facts in `facts`, Task & Goals and
Open Issues in `tracking`, Session Title and Current State in `current_state`, files and errors in
`artifacts`; sentence cues are in `cues`, fact worth in `worth`, text helpers in `text`, the word
tables in `words` and `code_words`, and the prompt and transcript are read by `transcript`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workmem.nodes.extractive import agent_goals
from workmem.nodes.extractive.artifacts import files, paths_in, tool_errors
from workmem.nodes.extractive.cues import is_ack, is_bare_reaction, is_issue, is_next_step, is_request
from workmem.nodes.extractive.current_state import (
    SESSION_DATE_RE,
    coding_state,
    current_state,
    known_speakers,
    title,
)
from workmem.nodes.extractive.errors import (
    error_items_of,
    fixed_since,
    latest_status,
    new_error_items,
    seen_errors,
)
from workmem.nodes.extractive.facts import Fact, key_facts_op, new_fact, parse_facts
from workmem.nodes.extractive.files_section import files_op
from workmem.nodes.extractive.prose import is_prose, strip_label
from workmem.nodes.extractive.steps import Step, steps
from workmem.nodes.extractive.task import TASK_PREFIX, is_wrapped, prompt_block, task_of, title_of
from workmem.nodes.extractive.text import clean, is_question, norm, sentences
from workmem.nodes.extractive.tracking import (
    GOAL_SHARE,
    corrections,
    goal_lines,
    goals_op,
    issue_lines,
    issues_op,
    replies_to_question,
)
from workmem.nodes.extractive.trail import Trail
from workmem.nodes.extractive.transcript import Line, Msg, block, dialogue_speakers, lines_of, parse_transcript, untag
from workmem.nodes.extractive.worth import HEDGE_RE, is_decision
from workmem.nodes.guards import path_tokens
from workmem.nodes.prompts import SECTIONS_HEADING
from workmem.state.errors import InvalidInput
from workmem.state.memory import (
    ARCHIVED_TAG,
    FULL_BUDGETS,
    SECTIONS,
    Budgets,
    bullet_items,
    parse_sections,
    split_pointer,
)
from workmem.state.ops import CREATE_TOOL_NAME, UPDATE_TOOL_NAME
from workmem.state.tokens import count_tokens

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
    agentic: bool = False  # an agent works with tools here (a coding session): its own section rules
    steps: list[Step] = field(default_factory=list)
    trail: Trail = field(default_factory=lambda: Trail([]))

    @property
    def speakers(self) -> list[str]:
        """Dialogue speakers: those the memory already knew, then the transcript's own."""
        return list(dict.fromkeys([*self.known, *dialogue_speakers(self.msgs)]))


def read(transcript: str, legacy: str = "", start_date: str | None = None, known: Sequence[str] = (),
         old_files: str = "") -> Reading:
    """Parse the transcript once for every section builder (`known`: speakers the memory already names;
    `old_files`: the memory's Files & Context, which says whether an agent works with tools here)."""
    msgs = parse_transcript(transcript, start_date, known)
    lines = lines_of(msgs)
    if not agent_goals.is_agentic(msgs, old_files):
        return Reading(msgs, lines, corrections(lines), legacy, tuple(known))
    found = steps(msgs)
    return Reading(msgs, lines, corrections(lines), legacy, tuple(known), True, found, Trail(found))


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


def new_facts(reading: Reading, goals: Sequence[str] = ()) -> list[Fact]:
    """Facts of the transcript: sentences worth keeping that are not goals, issues or plain corrections (in a
    coding session: prose sentences only, no thinking aloud, none of them already in Task & Goals)."""
    coding = reading.agentic
    used = set() if coding else {line.order for line, _ in goal_lines(reading.lines) + issue_lines(reading.lines)}
    fixed = {line.order for line, _ in reading.fixes}
    in_goals = norm(" ".join(goals))
    task = {norm(g[len(TASK_PREFIX):]) for g in goals if g.startswith(TASK_PREFIX)}
    legacy = sentences(reading.legacy)  # older than every transcript line, so ordered before them
    facts: list[Fact] = [f for i, s in enumerate(legacy) if (f := new_fact(s, None, None, i - len(legacy), coding))]
    answers = set() if coding else _answers(reading.lines)
    blocks = {id(m): prompt_block(m) for m in reading.msgs} if coding else {}
    for line in reading.lines:
        text = strip_label(line.text) if coding else line.text
        block = blocks.get(id(line.msg))
        if block is not None and norm(text) not in block:  # a task prompt's rules for its harness
            continue
        if line.order in used or is_question(text) or is_ack(text) or is_issue(text) or is_next_step(text):
            continue
        if line.order in fixed and not is_decision(text):
            continue
        if coding and (not is_prose(text) or HEDGE_RE.match(text) or (
                line.msg.role == "user" and (is_request(text) or norm(text) in task) and norm(text) in in_goals)):
            continue
        fact = new_fact(text, line.msg.speaker, line.msg.date, line.order, coding, replied=line.order in answers)
        if fact:
            facts.append(fact)
    return facts


def _answers(lines: list[Line]) -> set[int]:
    """The orders of the lines that answer a question: in a reply to another party's question, the first sentence
    that is neither a question nor a bare reaction (`Oh yeah! It's a mix of drama and romance.`)."""
    replies = replies_to_question(lines)
    first: dict[int, Line] = {}
    for line in lines:
        if line.index in replies and not is_question(line.text) and not is_bare_reaction(line.text):
            first.setdefault(line.index, line)
    return {line.order for line in first.values()}


def _fix_orders(reading: Reading) -> list[tuple[int, str]]:
    return [(line.order, line.text) for line, _ in reading.fixes]


def _errors(reading: Reading) -> list[str]:
    if reading.agentic:
        return error_items_of(seen_errors(reading.steps, reading.msgs, reading.trail), reading.fixes)
    return tool_errors(reading.msgs) + [wording for _, wording in reading.fixes]


def _newest_fitting(items: list[str], budget: int) -> list[str]:
    """The newest items (the last ones) whose bullets fit in `budget` tokens together, in order."""
    kept: list[str] = []
    for item in reversed(items):
        if kept and count_tokens("\n".join(f"- {i}" for i in [item, *kept])) > budget:
            break
        kept.insert(0, item)
    return kept


def _errors_op(reading: Reading, old_body: str, limits: Budgets) -> dict[str, Any]:
    """APPEND the new errors and corrections (a coding session: those the section lacks, newest that fit)."""
    items = _take(_errors(reading), MAX_NEW_ERRORS) if not reading.agentic else _errors(reading)
    if not reading.agentic:
        return _append(old_body, items)
    old_items = bullet_items(split_pointer(old_body)[0])
    items = fixed_since(old_items, reading.steps, reading.trail) + items
    fresh = latest_status(new_error_items(old_items, items, [w for _, w in reading.fixes]))
    return _append(old_body, _newest_fitting(fresh[-MAX_NEW_ERRORS:], limits.sections["Errors & Corrections"]))


def _extra_paths(reading: Reading) -> list[str]:
    """Paths of Files & Context besides the trail: a previous memory's, and in a session without tools the
    paths its messages name."""
    named = [] if reading.agentic else [p for m in reading.msgs if m.role in ("user", "assistant") for p in
                                        paths_in(m.body)]
    return list(dict.fromkeys([*paths_in(reading.legacy), *named]))


def _files_op(reading: Reading, old_body: str, limits: Budgets) -> dict[str, Any]:
    if not reading.agentic:
        old_paths = path_tokens(old_body)
        return _append(old_body, _take(files(reading.msgs, reading.legacy), MAX_NEW_FILES),
                       known=lambda item: item.split(" (")[0].lower() in old_paths)
    return files_op(old_body, reading.trail, limits.sections["Files & Context"], _extra_paths(reading))


def _task(goals: Sequence[str]) -> str:
    return next((g[len(TASK_PREFIX):] for g in goals if g.startswith(TASK_PREFIX)), "")


def _title(reading: Reading, limits: Budgets) -> str:
    """A dialogue's speakers or a chat's first request; the task within the title's budget for an agent's
    session or a task prompt."""
    if len(reading.speakers) >= 2 or not (reading.agentic or is_wrapped(reading.msgs)):
        return title(reading.msgs, reading.legacy)
    return title_of(task_of(reading.msgs, reading.legacy), limits.sections["Session Title"])


def prompt_budgets(system: str) -> Budgets:
    """The section budgets the instructions (the system message, never the data) state under their
    heading (`N. Name (budget): …`), as the size rules they come from; the section table when it states none."""
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
    """80 % of the Task & Goals budget (1 200 of 1 500 at the section table)."""
    return limits.sections["Task & Goals"] * GOAL_SHARE // 100


def create_sections(reading: Reading, limits: Budgets = FULL_BUDGETS) -> dict[str, str]:
    """Bodies of all seven sections for `create_working_memory`."""
    ops = update_sections(reading, {}, limits)
    bodies = {name: "\n".join(f"- {i}" for i in op.get("items", [])) if op["op"] == "APPEND" else
              op.get("content", "") for name, op in ops.items()}
    return {name: bodies[name] for name in SECTIONS}


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
    new_title = _title(reading, limits) if not old_title.strip() else ""
    ops["Session Title"] = {"op": "UPDATE", "content": new_title} if new_title else {"op": "KEEP"}
    old_goals, old_issues = old.get("Task & Goals", ""), old.get("Open Issues", "")
    if reading.agentic:
        ops["Task & Goals"] = agent_goals.goals_op(old_goals, reading.msgs, reading.lines, reading.fixes,
                                                   limits.sections["Task & Goals"], reading.legacy)
        ops["Open Issues"] = agent_goals.issues_op(old_issues, reading.msgs, reading.lines, reading.steps)
    else:
        # the first commit of a task prompt (a wrapped first request) pins its task, as a coding session's does
        first = not old_title.strip() and len(reading.speakers) < 2 and is_wrapped(reading.msgs)
        task = task_of(reading.msgs, reading.legacy) if first else ""
        ops["Task & Goals"] = goals_op(old_goals, reading.lines, reading.fixes, _goal_tokens(limits), task)
        ops["Open Issues"] = issues_op(old_issues, reading.lines)
    goals = _after(old_goals, ops["Task & Goals"])
    issues = [i for i in _after(old_issues, ops["Open Issues"])  # the open ones, not the spill's pointer line
              if not i.startswith(("[resolved]", ARCHIVED_TAG))]
    ops["Errors & Corrections"] = _errors_op(reading, old.get("Errors & Corrections", ""), limits)
    if reading.agentic:
        errors = [(reading.msgs[e.order].seq * 1000 + 999, e.item(" failed: "))
                  for e in seen_errors(reading.steps, reading.msgs, reading.trail) if not e.fixed]
        state = coding_state(reading.msgs, reading.lines, goals, errors, _task(goals), issues) if reading.msgs else ""
    else:
        state = current_state(reading.msgs, reading.lines, goals, issues, reading.known) if reading.msgs else ""
    ops["Current State"] = {"op": "UPDATE", "content": state} if state else {"op": "KEEP"}
    old_facts_body = old.get("Key Facts & Decisions", "")
    ops["Key Facts & Decisions"] = key_facts_op(
        old_facts_body, parse_facts(old_facts_body, reading.speakers, reading.agentic), new_facts(reading, goals),
        _fix_orders(reading), limits)
    ops["Files & Context"] = _files_op(reading, old.get("Files & Context", ""), limits)
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
    reading = read(transcript or "", untag(legacy or ""), _conversation_date(old), known,
                   old.get("Files & Context", ""))
    limits = prompt_budgets(system)
    if name == UPDATE_TOOL_NAME:
        return name, {"sections": update_sections(reading, old, limits)}
    return name, {"sections": create_sections(reading, limits)}
