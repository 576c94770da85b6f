"""The transcript a model reads: stored messages rendered as text blocks, clipping and chunking.

Format, one block per message, blocks separated by a blank line; the header is the message's seq and role
(a few tokens: the turn id is left out, a user message opens each turn)::

    [#12 assistant]
    Let me look at the loader.
    → call read_file {"path": "app/importers/csv_loader.py"}

    [#13 tool]
    ← read_file (error)
    FileNotFoundError: app/importers/csv_loader.py

workmem's own tool traffic is brief: a call to `archive_search` reads `[searched archive: "<query>"]`
and its result is left out (it is a copy of archived text). Hidden messages are left out of commit transcripts.

Content lines that could be mistaken for this structure (a block header, a `→ `/`← ` line, a clip marker or
one of the prompt's tag lines) are escaped with a leading backslash, so message text cannot forge a message
or close the `<messages>` block; so is the first line of a clipped tail, which may start mid-line. Clipping
changes the prompt only, never storage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from workmem.state.archive_object import SEARCH_TOOL_NAME
from workmem.state.messages import INTERNAL_FLAG
from workmem.state.payloads import is_payload
from workmem.state.synopsis import synopsis
from workmem.state.tokens import count_tokens, encoder
from workmem.state.turns import message_units

HEADER_RE = re.compile(r"^\[#(\d+) (user|assistant|tool|system)\]$")
CALL_PREFIX = "→ call "
RESULT_PREFIX = "← "
CONTEXT_PREFIX = "⊕ context "
CLIP_MARKER = "…[clipped {n} tokens]…"
PARTS_CLIP_MARKER = "…[clipped {parts} parts, {n} tokens]…"  # the middle parts of a message of too many
MARKER_TOKENS = 16  # a parts marker line, counts of six digits included
PROMPT_TAGS = ("messages", "current_working_memory", "previous_memory", "section_size_warnings")

_MARKER_STARTS = "|".join(re.escape(marker.split("{")[0]) for marker in (CLIP_MARKER, PARTS_CLIP_MARKER))
_NEEDS_ESCAPE_RE = re.compile(r"^(\\|\[#\d|→ |← |⊕ |" + _MARKER_STARTS + "|</?(" + "|".join(PROMPT_TAGS) + r")>)")
# Separator between blocks; counted generously so chunk sums stay an upper bound of the real count.
_SEPARATOR = "\n\n"
_SEPARATOR_TOKENS = 2


def escape_line(line: str) -> str:
    """Prefix a content line with `\\` when it would otherwise read as transcript structure."""
    return "\\" + line if _NEEDS_ESCAPE_RE.match(line) else line


def _escape_text(text: str) -> str:
    return "\n".join(escape_line(line) for line in text.replace("\r\n", "\n").split("\n"))


def _dump_args(arguments: Any) -> str:
    if isinstance(arguments, str):
        return " ".join(arguments.split())
    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(arguments), ensure_ascii=False)


def _name(value: Any, default: str) -> str:
    return "_".join(str(value or "").split()) or default


def _own_tool_line(part: Mapping[str, Any]) -> list[str]:
    """One line for a call of workmem's own tools; nothing for their results."""
    if part.get("type") != "tool_call":
        return []
    args = part.get("arguments") if isinstance(part.get("arguments"), Mapping) else {}
    if part.get("name") == SEARCH_TOOL_NAME:
        return [f"[searched archive: {json.dumps(str(args.get('query', '')), ensure_ascii=False)}]"]
    if args.get("archive_id"):
        return [f"[read archive: {json.dumps(str(args['archive_id']), ensure_ascii=False)}]"]
    seqs = "-".join(f"#{json.dumps(args.get(k), ensure_ascii=False, default=str)}" for k in ("start_seq", "end_seq"))
    return [f"[read archive: {seqs}]"]


def _part_lines(part: Mapping[str, Any], brief_own_tools: bool = True) -> list[str]:
    if brief_own_tools and part.get(INTERNAL_FLAG):
        return _own_tool_line(part)
    kind = part.get("type")
    if kind == "text":
        text = str(part.get("text") or "")
        return [_escape_text(text)] if text.strip() else []
    if kind == "tool_call":
        return [f"{CALL_PREFIX}{_name(part.get('name'), '?')} {_dump_args(part.get('arguments', {}))}"]
    if kind == "tool_result":
        flag = " (error)" if part.get("is_error") else ""
        lines = [f"{RESULT_PREFIX}{_name(part.get('name'), 'tool')}{flag}"]
        content = part.get("content")
        if not isinstance(content, str):
            content = _dump_args(content)
        if content.strip():
            lines.append(_escape_text(content))
        return lines
    if kind == "context":
        abstract = " ".join(str(part.get("abstract") or "").split())
        return [f"{CONTEXT_PREFIX}{_name(part.get('uri'), '')} {abstract}".rstrip()]
    return []


def header(message: Mapping[str, Any]) -> str:
    """The block header of a stored message, e.g. `[#12 user]`."""
    return f"[#{message.get('seq', 0)} {message.get('role', 'user')}]"


LONGEST_TOKEN_CHARS = 16  # of text encoded per token kept, at each end of a long text (cl100k averages ~4)
MIN_PART_TOKENS = 48  # what each part of a clipped message keeps at least: a tool call's name and first arguments
MIN_KEPT_PARTS = 8  # parts a clipped message keeps however small the clip
USER_CLIP_TOKENS = 256  # a user's message is never clipped shorter: the task and its corrections are read from it


def _ends(text: str, clip_tokens: int) -> tuple[list[int], list[int], int]:
    """The tokens of the start and the end of `text` and its token count (for a long text only its ends are
    encoded, the middle's tokens estimated)."""
    window = max(clip_tokens, 64) * LONGEST_TOKEN_CHARS
    if len(text) <= 2 * window:
        tokens = encoder().encode(text, disallowed_special=())
        return tokens, tokens, len(tokens)
    first = encoder().encode(text[:window], disallowed_special=())
    last = encoder().encode(text[-window:], disallowed_special=())
    middle = round((len(text) - 2 * window) * (len(first) + len(last)) / (2 * window))
    return first, last, len(first) + len(last) + middle


def clip_text(text: str, clip_tokens: int, *, keep_tail: bool = True) -> str:
    """Clip `text` to about `clip_tokens` tokens: head + `…[clipped N tokens]…` + tail, each on its own line (no
    tail when `keep_tail` is False: the marker then ends the head's line, so a clipped tool call stays one line)."""
    first, last, total = _ends(text, clip_tokens)
    if total <= clip_tokens:
        return text
    keep = max(clip_tokens - 12, 2)  # room for the marker line
    head_n = keep * 2 // 3 if keep_tail else keep
    tail_n = keep - head_n
    head = encoder().decode(first[:head_n]).rstrip("\ufffd")
    tail = escape_line(encoder().decode(last[len(last) - tail_n:]).lstrip("\ufffd")) if tail_n else ""
    removed = total - head_n - tail_n
    if not tail_n:
        return f"{head} {CLIP_MARKER.format(n=removed)}"
    return f"{head}\n{CLIP_MARKER.format(n=removed)}\n{tail}"


def fair_shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Split `budget` over parts of `sizes`: a part under an equal share keeps its size, the rest share what is
    left equally."""
    shares = [0] * len(sizes)
    left, remaining = budget, len(sizes)
    for i in sorted(range(len(sizes)), key=lambda k: sizes[k]):
        shares[i] = min(sizes[i], left // remaining)
        left -= shares[i]
        remaining -= 1
    return shares


def _clipped(blocks: list[tuple[str, bool]], clip_tokens: int) -> str:
    """A message's parts within about `clip_tokens`: one part is clipped head and tail; of several, each keeps
    its fair share, a tool call its head, cut on its own line; any part keeps at least `MIN_PART_TOKENS` — so every
    call keeps its name and first arguments, whatever the parts before it hold, and no part reads as a call's end.
    With more parts than their minimums leave room for, the first ones and the last one are kept and the middle
    ones give way to one marker line."""
    if len(blocks) == 1:
        return clip_text(blocks[0][0], max(clip_tokens, MIN_PART_TOKENS))
    sizes = [_ends(text, clip_tokens)[2] for text, _ in blocks]
    if sum(sizes) + len(blocks) <= clip_tokens:  # a line break after each part
        return "\n".join(text for text, _ in blocks)
    first = _parts_within(sizes, clip_tokens)
    if first == len(blocks) - 1:
        return "\n".join(_fair_parts(blocks, sizes, clip_tokens - len(blocks)))
    line_breaks = first + 2  # after each kept part and the marker
    kept = _fair_parts(blocks[:first] + blocks[-1:], sizes[:first] + sizes[-1:],
                       clip_tokens - MARKER_TOKENS - line_breaks)
    marker = PARTS_CLIP_MARKER.format(parts=len(blocks) - first - 1, n=sum(sizes[first:-1]))
    return "\n".join([*kept[:-1], marker, kept[-1]])


def _parts_within(sizes: list[int], clip_tokens: int) -> int:
    """How many first parts keep their minimum beside the last one's and a marker line within `clip_tokens` (at
    least `MIN_KEPT_PARTS` - 1; all but the last when everything fits)."""
    floors = [min(size, MIN_PART_TOKENS) + 1 for size in sizes]  # with its line break
    if sum(floors) <= clip_tokens:
        return len(sizes) - 1
    room = clip_tokens - MARKER_TOKENS - 1 - floors[-1]
    first = 0
    while first < len(sizes) - 1 and (first < MIN_KEPT_PARTS - 1 or floors[first] <= room):
        room -= floors[first]
        first += 1
    return first


def _fair_parts(blocks: list[tuple[str, bool]], sizes: list[int], budget: int) -> list[str]:
    shares = fair_shares(sizes, budget)
    return [text if size <= share else clip_text(text, max(share, MIN_PART_TOKENS), keep_tail=not is_call)
            for (text, is_call), size, share in zip(blocks, sizes, shares, strict=True)]


def format_message(message: Mapping[str, Any], *, clip_tokens: int = 4000, brief_own_tools: bool = True) -> str:
    """Render one stored message as a transcript block; an oversized body is clipped (each part to its share; see
    `_message_clip` for what a message keeps at least). '' for a message of only workmem's own tool results (when
    `brief_own_tools`)."""
    blocks: list[tuple[str, bool]] = []  # (a part's lines, whether it is a tool call)
    synopses = 0  # tokens of the payload synopses
    parts = [p for p in message.get("parts") or [] if isinstance(p, Mapping)]
    for part in parts:
        if (clip_tokens > 0 and is_payload(part) and isinstance(part.get("content"), str)
                and not (brief_own_tools and part.get(INTERNAL_FLAG))):
            lines = _payload_lines(part, message.get("seq"), clip_tokens)
            synopses += count_tokens("\n".join(lines)) + 1
        else:
            lines = _part_lines(part, brief_own_tools)
        if lines:
            blocks.append(("\n".join(lines), part.get("type") == "tool_call"))
    if not blocks and brief_own_tools and parts and all(p.get(INTERNAL_FLAG) for p in parts):
        return ""
    clip_tokens = _message_clip(message.get("role"), clip_tokens, synopses)
    body = _clipped(blocks, clip_tokens) if clip_tokens > 0 and blocks else "\n".join(t for t, _ in blocks)
    return f"{header(message)}\n{body}" if body else header(message)


def _message_clip(role: Any, clip_tokens: int, synopses: int) -> int:
    """The clip of one message (0: none): a user's message keeps `USER_CLIP_TOKENS` at least; a payload's synopsis
    is made for the clip but never shorter than its marker line (about 110 tokens), so the clip never cuts it."""
    if clip_tokens <= 0:
        return 0
    if role == "user":
        clip_tokens = max(clip_tokens, USER_CLIP_TOKENS)
    return max(clip_tokens, synopses)


def _payload_lines(part: Mapping[str, Any], seq: Any, clip_tokens: int) -> list[str]:
    """A payload's result in a transcript: its synopsis (head, tail, reference `seq:N`), never the whole text."""
    flag = " (error)" if part.get("is_error") else ""
    text = synopsis(part["content"], tool=part.get("name"), ref=f"seq:{seq}", limit_tokens=max(clip_tokens - 16, 64),
                    tokens=part.get("tokens") if isinstance(part.get("tokens"), int) else None)
    return [f"{RESULT_PREFIX}{_name(part.get('name'), 'tool')}{flag}", _escape_text(text)]


def format_messages(messages: Sequence[Mapping[str, Any]], *, clip_tokens: int = 4000,
                    hidden: frozenset[int] | set[int] = frozenset(), brief_own_tools: bool = True) -> str:
    """Render stored messages as the transcript a model reads (blocks separated by blank lines); seqs in
    `hidden` are left out."""
    blocks = (format_message(m, clip_tokens=clip_tokens, brief_own_tools=brief_own_tools)
              for m in messages if m.get("seq") not in hidden)
    return _SEPARATOR.join(b for b in blocks if b)


def chunk_messages(
    messages: Sequence[dict[str, Any]], budget_tokens: int = 24000, *, clip_tokens: int = 4000,
    hidden: frozenset[int] | set[int] = frozenset(),
) -> list[tuple[int, int]]:
    """Split messages into consecutive (start_seq, end_seq) chunks whose transcript fits the budget.

    A tool group stays in one chunk unless the group alone exceeds the budget; a single message
    always forms a chunk of its own even when it is larger than the budget. Hidden messages and
    messages the transcript leaves out cost nothing.
    """
    if not messages:
        return []
    blocks = ["" if m["seq"] in hidden else format_message(m, clip_tokens=clip_tokens) for m in messages]
    sizes = [count_tokens(b) + _SEPARATOR_TOKENS if b else 0 for b in blocks]
    chunks: list[list[int]] = []
    current: list[int] = []
    used = 0

    def close() -> None:
        nonlocal current, used
        if current:
            chunks.append(current)
        current, used = [], 0

    for lo, hi in message_units(messages):
        unit = range(lo, hi + 1)
        unit_size = sum(sizes[i] for i in unit)
        if used + unit_size <= budget_tokens:
            current.extend(unit)
            used += unit_size
            continue
        close()
        if unit_size <= budget_tokens:
            current, used = list(unit), unit_size
            continue
        for i in unit:  # the group alone is too big: split it message by message
            if current and used + sizes[i] > budget_tokens:
                close()
            current.append(i)
            used += sizes[i]
        close()
    close()
    return [(int(messages[c[0]]["seq"]), int(messages[c[-1]]["seq"])) for c in chunks]
