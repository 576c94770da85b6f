"""Session Title and Current State for the extractive model: the first request, and where the work stands.

Current State is prose in at most three sentences: what is being worked on (the user's latest
request, else the newest open goal), the last result (the agent's latest report, else its latest
statement, else the last tool error) and the next step (the agent's announced next action, else the
first open issue). For a dialogue between people it says who is talking, the date of the latest
session (the next commit reads the date back from here) and the last thing said.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from workmem.nodes.extractive.artifacts import error_items
from workmem.nodes.extractive.cues import (
    LEAD_RE,
    POLITE_RE,
    as_task,
    is_ack,
    is_correction,
    is_next_step,
    is_request,
    reports_done,
)
from workmem.nodes.extractive.prose import is_prose, strip_label
from workmem.nodes.extractive.task import first_request, salient_lines, task_of
from workmem.nodes.extractive.text import as_sentence, capitalised, clean, is_question, sentences
from workmem.nodes.extractive.transcript import Line, Msg, dialogue_speakers
from workmem.nodes.extractive.worth import HEDGE_RE

MAX_TITLE_CHARS = 80
SESSION_DATE_RE = re.compile(r"the latest session is dated (.{4,40}?)\.(?: |$)", re.I)
_TALKING_RE = re.compile(r"^(.{1,120}?) (?:are|is) talking\b")
_PART_CHARS = 220


def _names(speakers: list[str]) -> str:
    return ", ".join(speakers[:-1]) + f" and {speakers[-1]}" if len(speakers) > 1 else speakers[0]


def title(msgs: list[Msg], legacy: str) -> str:
    """The first request (a dialogue: who talks), else the first plain statement; notes are skipped."""
    speakers = dialogue_speakers(msgs)
    if len(speakers) >= 2:
        return clean(f"Conversation between {_names(speakers[:3])}", MAX_TITLE_CHARS)
    first = first_request(msgs)
    sents = sentences("\n".join(salient_lines(first.body))) if first else sentences(legacy)
    requests = [as_task(s) for s in sents if is_request(s) and not is_correction(s, False) and not is_ack(s)]
    plain = [s for s in sents if len(LEAD_RE.sub("", s).split()) >= 3 and not is_correction(s, False)]
    pick = requests or plain
    if not pick:
        return ""
    text = POLITE_RE.sub("", LEAD_RE.sub("", pick[0])).strip().rstrip(".!?:")
    text = clean(text, MAX_TITLE_CHARS).rstrip(".")
    return capitalised(text)


def known_speakers(state: str) -> list[str]:
    """The dialogue speakers a Current State names (`Ann and Bo are talking; …`)."""
    found = _TALKING_RE.match(state or "")
    return [n for n in re.split(r", | and ", found.group(1)) if n] if found else []


def _latest_date(msgs: list[Msg]) -> str | None:
    return next((m.date for m in reversed(msgs) if m.date), None)


def _dialogue_state(speakers: list[str], msgs: list[Msg], lines: list[Line]) -> str:
    date = _latest_date(msgs)
    head = f"{_names(speakers)} are talking" if len(speakers) > 1 else f"{speakers[0]} is talking"
    parts = [head + (f"; the latest session is dated {date}." if date else ".")]
    said = [x for x in lines if x.msg.speaker and not is_ack(x.text) and len(x.text.split()) >= 4]
    if said:
        parts.append(f"Last said, by {said[-1].msg.speaker}: {as_sentence(said[-1].text, _PART_CHARS)}")
    return " ".join(parts)


def current_state(
    msgs: list[Msg], lines: list[Line], goals: list[str], issues: list[str], speakers: Sequence[str] = ()
) -> str:
    """What is being worked on, the last result and the next step, as up to three sentences.

    `speakers`: the dialogue speakers known so far (a dialogue gets who talks, its date and the last line).
    """
    talking = list(dict.fromkeys([*speakers, *dialogue_speakers(msgs)]))
    if talking:
        return _dialogue_state(talking, msgs, lines)
    user = [x for x in lines if x.msg.role == "user" and not is_ack(x.text)]
    last_user = user[-1].index if user else -1
    agent = [x for x in lines if x.msg.role == "assistant" and x.index > last_user] or [
        x for x in lines if x.msg.role == "assistant"
    ]
    parts = []
    asked = [x for x in user if is_request(x.text)]
    doing = as_task(asked[-1].text) if asked else (goals[-1] if goals else "")
    if doing:
        parts.append(f"Working on: {as_sentence(doing, _PART_CHARS)}")
    said = [(x.order, x.text) for x in agent if not is_question(x.text) and not is_next_step(x.text)]
    errors = [(m.seq * 1000 + 999, f"{r.name} failed: {e}") for m in msgs[last_user + 1 :] for r in m.results
              if r.is_error for e in error_items(r)]
    outcomes = sorted([(o, t) for o, t in said if reports_done(t)] + errors) or said
    result = outcomes[-1][1] if outcomes else ""
    if result:
        parts.append(f"Last result: {as_sentence(result, _PART_CHARS)}")
    steps = [x.text for x in agent if is_next_step(x.text) and not is_question(x.text)]
    if steps:
        parts.append(f"Next step: {as_sentence(steps[-1], _PART_CHARS)}")
    elif issues:
        parts.append(f"Still open: {as_sentence(issues[0], _PART_CHARS)}")
    if _latest_date(msgs):
        parts.append(f"The latest session is dated {_latest_date(msgs)}.")
    if not parts and msgs:
        parts.append(f"Messages #{msgs[0].seq}–#{msgs[-1].seq} hold no request or result yet.")
    return " ".join(parts)


def coding_state(msgs: list[Msg], lines: list[Line], goals: Sequence[str], errors: Sequence[tuple[int, str]],
                 task: str, issues: Sequence[str] = ()) -> str:
    """A coding session's Current State, in up to three sentences: what is being worked on (the user's latest
    request here, else the newest one in Task & Goals, else the task), the newest result (a report, else the
    newest error or statement) and the agent's next step announced after the user's latest message (else the
    first open issue).

    `errors`: (order, item) of the errors met, ordered like the lines (`Line.order`)."""
    first = first_request(msgs)
    first = first if first is not None and task and task_of([first]) == task else None  # the task's own request
    user = [x for x in lines if x.msg.role == "user" and x.msg is not first and not is_ack(x.text)]
    asked = [as_task(x.text) for x in user if is_request(x.text)]
    earlier = [g[len("User: "):] for g in goals if g.startswith("User: ") and is_request(g[len("User: "):])]
    doing = asked[-1] if asked else (as_task(earlier[-1]) if earlier else task)
    parts = [f"Working on: {as_sentence(doing, _PART_CHARS)}"] if doing else []
    after = max((x.order for x in lines if x.msg.role == "user"), default=-1)
    agent = [(x.order, strip_label(x.text)) for x in lines if x.msg.role == "assistant"]
    prose = [(o, t) for o, t in agent if is_prose(t) and not is_question(t)]
    said = [(o, t) for o, t in prose if not is_next_step(t) and not HEDGE_RE.match(t)]
    outcomes = sorted([(o, t) for o, t in said if reports_done(t)] + [e for e in errors if e[0] > after]) or said
    if outcomes:
        parts.append(f"Last result: {as_sentence(outcomes[-1][1], _PART_CHARS)}")
    steps = [t for o, t in prose if is_next_step(t) and o > after]
    if steps:
        parts.append(f"Next step: {as_sentence(steps[-1], _PART_CHARS)}")
    elif issues:
        parts.append(f"Still open: {as_sentence(issues[0], _PART_CHARS)}")
    if not parts and msgs:
        parts.append(f"Messages #{msgs[0].seq}–#{msgs[-1].seq} hold no request or result yet.")
    return " ".join(parts)
