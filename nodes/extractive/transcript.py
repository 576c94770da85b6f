"""Reading the commit prompt for the extractive model: blocks, transcript messages, speakers, dates.

A transcript message may be a line of a dialogue between people (`Nate: …`, the way a chat log is
usually pasted), and a message that is only a bracketed note holding a date (`[session 3 — 7 May,
2023]`) dates the messages after it. Both are recognised here so that the section builders can say
who said what and when.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from langchain_core.messages import BaseMessage

from workmem.nodes.extractive.code_words import HARNESS_NOTES, SKIPPED_BLOCKS
from workmem.nodes.extractive.text import DATE_RE, FULL_DATE_RE, SPEAKER_NAME, alternation, sentences
from workmem.nodes.extractive.words import NOT_SPEAKERS
from workmem.nodes.formatting import (
    CALL_PREFIX,
    CLIP_MARKER,
    CONTEXT_PREFIX,
    HEADER_RE,
    PARTS_CLIP_MARKER,
    RESULT_PREFIX,
)
from workmem.nodes.prompts import TAG_LINES

CALL_CUT = "\n…\n"  # where a clipped tool call's arguments lost their middle


def _marker_pattern(marker: str) -> str:
    """A clip marker template as a regex: its `{…}` counts as digits."""
    return re.sub(r"\\\{\w+\\\}", lambda _: r"\d+", re.escape(marker))


_MARKER = _marker_pattern(CLIP_MARKER)
_CLIP_RE = re.compile(f"^{_MARKER}$")
_CALL_CLIP_RE = re.compile(f" {_MARKER}$")  # ends a tool call of a clipped message that kept only its head
_PARTS_CLIP_RE = re.compile(f"^{_marker_pattern(PARTS_CLIP_MARKER)}$")
_SPEAKER_RE = re.compile(rf"^({SPEAKER_NAME}): (?=\S)")
_HARNESS_NOTE_RE = re.compile(rf"^(?:{alternation(HARNESS_NOTES)})\b", re.I)
_WRAPPER_RE = re.compile(rf"<({alternation(SKIPPED_BLOCKS)})(?:\s[^>]*)?>.*?</\1\s*>", re.S | re.I)
_EMPTY_ARGS_RE = re.compile(r"<command-args>\s*</command-args>", re.I)
_ARGS_TAG_RE = re.compile(r"</?command-args>", re.I)
_REQUEST_ARGS_RE = re.compile(r"<command-args>\s*\S", re.I)
TOOL_ERROR_TAG = "<tool_use_error>"


@dataclass
class Result:
    """One tool result inside a transcript message."""

    name: str
    is_error: bool
    lines: list[str] = field(default_factory=list)
    clip_at: int | None = None  # index in `lines` where the transcript clipped the result's middle out

    @property
    def refused(self) -> bool:
        """The tool did not do what it was called for: an error result, or one a coding agent wraps as its tool's
        refusal (`<tool_use_error>String to replace not found …`)."""
        first = next((line for line in self.lines if line.strip()), "")
        return self.is_error or first.lstrip().startswith(TOOL_ERROR_TAG)


@dataclass
class Msg:
    """One transcript block: seq and role, text lines, tool calls and results, speaker and date."""

    seq: int
    role: str
    text: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    speaker: str | None = None
    date: str | None = None
    is_note: bool = False
    call_tail_from: int | None = None  # `text[i]` is the end of the tool call the transcript clipped in two
    clip_at: int | None = None  # `text[i:]` follows the middle the transcript clipped out of the message

    @property
    def body(self) -> str:
        """The message text, without a dialogue speaker prefix (or the end of a clipped tool call)."""
        return self._text_before(None)

    @property
    def head(self) -> str:
        """The message text before the middle the transcript clipped out (all of it when nothing was)."""
        return self._text_before(self.clip_at)

    def _text_before(self, end: int | None) -> str:
        lines = self.text[:end]
        if self.call_tail_from is not None:
            lines = lines[: self.call_tail_from] + lines[self.call_tail_from + 1 :]
        text = "\n".join(lines).lstrip()
        if self.speaker and text.startswith(f"{self.speaker}: "):
            return text[len(self.speaker) + 2 :]
        return text

    @property
    def party(self) -> str:
        """Who speaks: the dialogue speaker, else the role."""
        return self.speaker or self.role


def prompt_text(messages: Sequence[BaseMessage]) -> str:
    """The prompt's human text (the system prompt only when nothing else is there)."""
    texts = [m.text for m in messages if m.type != "system"] or [m.text for m in messages]
    return "\n\n".join(texts)


def untag(text: str) -> str:
    """Undo `prompts._neutralise` (only tag lines were escaped there; `\\#` lines of a WM stay escaped)."""
    return "\n".join(
        ln[1:] if ln.startswith("\\") and ln[1:].strip() in TAG_LINES else ln for ln in text.split("\n")
    )


def block(lines: list[str], tag: str, start: int = 0, last_close: bool = False) -> tuple[str | None, int]:
    """Body of the block `<tag>`…`</tag>` (tag lines alone on their line) and the index after it."""
    try:
        i = next(k for k in range(start, len(lines)) if lines[k].strip() == f"<{tag}>")
    except StopIteration:
        return None, start
    closes = [k for k in range(i + 1, len(lines)) if lines[k].strip() == f"</{tag}>"]
    if not closes:
        return "\n".join(lines[i + 1 :]), len(lines)
    j = closes[-1] if last_close else closes[0]
    return "\n".join(lines[i + 1 : j]), j + 1


def _unescape(line: str) -> str:
    return line[1:] if line.startswith("\\") else line


def parse_transcript(text: str, start_date: str | None = None, known_speakers: Sequence[str] = ()) -> list[Msg]:
    """Transcript blocks → messages, with dialogue speakers and the conversation date of each message.

    `start_date` dates the messages before the first date note; `known_speakers` (from the current
    memory) are speakers even when they open a single message of this transcript.
    """
    msgs: list[Msg] = []
    result: Result | None = None
    in_call = False  # the last line read was a whole tool call: a clip marker now cuts that call in two
    call_tail = False  # the line now read is the end of a tool call clipped in two
    for raw in text.split("\n"):
        found = HEADER_RE.match(raw)
        if found:
            msgs.append(Msg(int(found.group(1)), found.group(2)))
            result, in_call, call_tail = None, False, False
            continue
        if not msgs:
            continue
        msg = msgs[-1]
        if _PARTS_CLIP_RE.match(raw):  # whole parts left out: what follows is the message's last part
            if msg.clip_at is None:
                msg.clip_at = len(msg.text)
            result, in_call, call_tail = None, False, False
            continue
        if _CLIP_RE.match(raw):
            if result is not None and result.clip_at is None:
                result.clip_at = len(result.lines)
            elif in_call and msg.call_tail_from is None:  # the one line after the marker is the call's end
                msg.call_tail_from = len(msg.text)
                name, args = msg.calls[-1]
                msg.calls[-1] = (name, args + CALL_CUT)
                call_tail = True
            elif result is None and msg.clip_at is None:
                msg.clip_at = len(msg.text)
            in_call = False
            continue
        in_call = raw.startswith(CALL_PREFIX)
        if raw.startswith(CALL_PREFIX):
            line, cut = _CALL_CLIP_RE.subn("", raw)
            name, _, args = line[len(CALL_PREFIX) :].partition(" ")
            msg.calls.append((name, args + CALL_CUT if cut else args))
            result, in_call = None, not cut
        elif raw.startswith(RESULT_PREFIX):
            head = raw[len(RESULT_PREFIX) :].strip()
            is_error = head.endswith(" (error)")
            result = Result(head.removesuffix(" (error)").strip(), is_error)
            msg.results.append(result)
        elif raw.startswith(CONTEXT_PREFIX):
            msg.text.append(raw[len(CONTEXT_PREFIX) :])
        elif result is not None:
            result.lines.append(_unescape(raw))
        else:
            if call_tail:
                name, args = msg.calls[-1]
                msg.calls[-1] = (name, args + _unescape(raw))
            msg.text.append(_unescape(raw))
        call_tail = False
    _mark_speakers(msgs, set(known_speakers))
    _mark_dates(msgs, start_date)
    _mark_harness_notes(msgs)
    return msgs


def _mark_speakers(msgs: list[Msg], known: set[str]) -> None:
    """A `Name: ` prefix is a dialogue speaker when the name is known, opens two user messages, or every
    user message here opens with one of at least two names (a pasted chat log)."""
    said = [m for m in msgs if m.role == "user" and m.text and not note_date("\n".join(m.text))]
    heads = {}
    for m in said:
        found = _SPEAKER_RE.match("\n".join(m.text).lstrip())
        if found and found.group(1).lower() not in NOT_SPEAKERS:
            heads[m.seq] = found.group(1)
    counts = Counter(heads.values())
    log = len(counts) >= 2 and len(heads) == len(said)
    for m in said:
        name = heads.get(m.seq)
        if name and (log or counts[name] >= 2 or name in known):
            m.speaker = name


def note_date(text: str) -> str | None:
    """The date of a date note: a message that is only a bracketed line holding a date."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or "\n" in text or len(text) > 120:
        return None
    found = FULL_DATE_RE.search(text) or DATE_RE.search(text)
    return found.group(0) if found else None


def unwrapped(text: str) -> str:
    """`text` without the wrapper blocks that are never a request (a slash command's arguments kept bare)."""
    return _ARGS_TAG_RE.sub("", _WRAPPER_RE.sub("", text)).strip()


def is_harness_note(text: str) -> bool:
    """A user message a harness wrote (`HARNESS_NOTES`), or one that holds nothing but wrapper blocks that are
    never a request (`<command-name>/clear</command-name>`, `<local-command-stdout>…`)."""
    text = text.strip()
    if _HARNESS_NOTE_RE.match(text):  # unless a slash command's request came with it
        return not _REQUEST_ARGS_RE.search(text)
    left = _EMPTY_ARGS_RE.sub("", _WRAPPER_RE.sub("", text))
    return left != text and not left.strip()


def _mark_harness_notes(msgs: list[Msg]) -> None:
    for m in msgs:
        if m.role == "user" and not m.calls and not m.is_note and is_harness_note(m.body):
            m.is_note = True


def _mark_dates(msgs: list[Msg], current: str | None) -> None:
    for m in msgs:
        date = note_date("\n".join(m.text)) if m.role == "user" and not m.calls else None
        if date:
            current, m.is_note = date, True
        m.date = current


def dialogue_speakers(msgs: list[Msg]) -> list[str]:
    """The dialogue speakers of a transcript, in order of first appearance."""
    return list(dict.fromkeys(m.speaker for m in msgs if m.speaker))


@dataclass(frozen=True)
class Line:
    """One sentence of a message with its position in the transcript (later lines have larger orders)."""

    order: int
    index: int
    msg: Msg
    text: str


def lines_of(msgs: list[Msg]) -> list[Line]:
    """Every sentence of the user and assistant messages (date notes left out), in order."""
    out: list[Line] = []
    for i, m in enumerate(msgs):
        if m.role not in ("user", "assistant") or m.is_note:
            continue
        for k, sent in enumerate(sentences(m.body)):
            if m.role == "user" and _HARNESS_NOTE_RE.match(sent):  # a harness's note opening the message
                continue
            out.append(Line(m.seq * 1000 + k, i, m, sent))
    return out
