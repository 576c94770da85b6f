"""The transcript a model reads: stored messages rendered as text blocks, clipping and chunking.

Format, one block per message, blocks separated by a blank line::

    [#12 t3 assistant]
    Let me look at the loader.
    → call read_file {"path": "app/importers/csv_loader.py"}

    [#13 t3 tool]
    ← read_file (error)
    FileNotFoundError: app/importers/csv_loader.py

Content lines that could be mistaken for this structure (a block header, a `→ `/`← ` line, or one of
the prompt's tag lines) are escaped with a leading backslash, so message text cannot forge a message
or close the `<messages>` block. Clipping changes the prompt only, never storage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from workmem.state.tokens import count_tokens, encoder

HEADER_RE = re.compile(r"^\[#(\d+) (t\d+) (user|assistant|tool|system)\]$")
CALL_PREFIX = "→ call "
RESULT_PREFIX = "← "
CONTEXT_PREFIX = "⊕ context "
CLIP_MARKER = "…[clipped {n} tokens]…"
PROMPT_TAGS = ("messages", "current_working_memory", "previous_memory", "section_size_warnings")

_NEEDS_ESCAPE_RE = re.compile(r"^(\\|\[#\d|→ |← |⊕ |</?(" + "|".join(PROMPT_TAGS) + r")>)")
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


def _part_lines(part: Mapping[str, Any]) -> list[str]:
    kind = part.get("type")
    if kind == "text":
        text = str(part.get("text") or "")
        return [_escape_text(text)] if text.strip() else []
    if kind == "tool_call":
        return [f"{CALL_PREFIX}{part.get('name') or '?'} {_dump_args(part.get('arguments', {}))}"]
    if kind == "tool_result":
        flag = " (error)" if part.get("is_error") else ""
        lines = [f"{RESULT_PREFIX}{part.get('name') or 'tool'}{flag}"]
        content = part.get("content")
        if not isinstance(content, str):
            content = _dump_args(content)
        if content.strip():
            lines.append(_escape_text(content))
        return lines
    if kind == "context":
        abstract = " ".join(str(part.get("abstract") or "").split())
        return [f"{CONTEXT_PREFIX}{part.get('uri') or ''} {abstract}".rstrip()]
    return []


def header(message: Mapping[str, Any]) -> str:
    """The block header of a stored message, e.g. `[#12 t3 user]`."""
    return f"[#{message.get('seq', 0)} {message.get('turn_id') or 't0'} {message.get('role', 'user')}]"


def clip_text(text: str, clip_tokens: int) -> str:
    """Clip `text` to about `clip_tokens` tokens: head + `…[clipped N tokens]…` + tail."""
    tokens = encoder().encode(text, disallowed_special=())
    if len(tokens) <= clip_tokens:
        return text
    keep = max(clip_tokens - 12, 2)  # room for the marker line
    head_n = keep * 2 // 3
    tail_n = keep - head_n
    head = encoder().decode(tokens[:head_n]).rstrip("\ufffd")
    tail = encoder().decode(tokens[len(tokens) - tail_n :]).lstrip("\ufffd")
    removed = len(tokens) - head_n - tail_n
    return f"{head}\n{CLIP_MARKER.format(n=removed)}\n{tail}"


def format_message(message: Mapping[str, Any], *, clip_tokens: int = 4000) -> str:
    """Render one stored message as a transcript block; an oversized body is clipped."""
    lines: list[str] = []
    for part in message.get("parts") or []:
        if isinstance(part, Mapping):
            lines.extend(_part_lines(part))
    body = "\n".join(lines)
    if clip_tokens > 0 and body:
        body = clip_text(body, clip_tokens)
    return f"{header(message)}\n{body}" if body else header(message)


def format_messages(messages: Sequence[Mapping[str, Any]], *, clip_tokens: int = 4000) -> str:
    """Render stored messages as the transcript a model reads (blocks separated by blank lines)."""
    return _SEPARATOR.join(format_message(m, clip_tokens=clip_tokens) for m in messages)


def _call_ids(message: Mapping[str, Any]) -> set[str]:
    return {
        str(p.get("id"))
        for p in message.get("parts") or []
        if isinstance(p, Mapping) and p.get("type") == "tool_call"
    }


def _result_ids(message: Mapping[str, Any]) -> set[str]:
    return {
        str(p.get("tool_call_id"))
        for p in message.get("parts") or []
        if isinstance(p, Mapping) and p.get("type") == "tool_result"
    }


def _units(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Indexes of `messages` grouped so that a tool group (assistant calls + its results) is one unit."""
    units: list[list[int]] = []
    i = 0
    while i < len(messages):
        unit = [i]
        open_ids = _call_ids(messages[i]) if messages[i].get("role") == "assistant" else set()
        j = i + 1
        while open_ids and j < len(messages):
            answered = _result_ids(messages[j])
            if not answered or not answered & open_ids:
                break
            unit.append(j)
            j += 1
        units.append(unit)
        i = j
    return units


def chunk_messages(
    messages: Sequence[Mapping[str, Any]], budget_tokens: int = 24000, *, clip_tokens: int = 4000
) -> list[tuple[int, int]]:
    """Split messages into consecutive (start_seq, end_seq) chunks whose transcript fits the budget.

    A tool group stays in one chunk unless the group alone exceeds the budget; a single message
    always forms a chunk of its own even when it is larger than the budget.
    """
    if not messages:
        return []
    sizes = [count_tokens(format_message(m, clip_tokens=clip_tokens)) + _SEPARATOR_TOKENS for m in messages]
    chunks: list[list[int]] = []
    current: list[int] = []
    used = 0

    def close() -> None:
        nonlocal current, used
        if current:
            chunks.append(current)
        current, used = [], 0

    for unit in _units(messages):
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
