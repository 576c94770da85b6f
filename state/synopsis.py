"""The synopsis of a large tool result: what the model sees in its place.

A synopsis is the result's own text — its head and its tail (errors sit at the tail), whole lines within a token
limit — around one marker line that names the tool, the kind of content, the size in characters and tokens, what is
left out, the reference and how to read on; the marker names nothing of the part it stands for. It is a pure
function of the result, so the same result gives the same bytes on every call and the prompt-cache prefix holds.
"""

from __future__ import annotations

import json
import re

from workmem.state.archive_object import READ_TOOL_NAME
from workmem.state.tokens import count_tokens

KINDS = ("json", "csv", "yaml", "xml", "code", "log", "text", "binary")
READ_TOOL = READ_TOOL_NAME
MARKER_TOKENS = 80  # what the marker line takes, kept out of the head and tail
TAIL_SHARE = 0.6  # of the head + tail allowance: errors and summaries sit at the end of an output
SAMPLE_CHARS = 4_000  # how much of a result its kind is judged on

_LOG_LINE = re.compile(r"^\s*(\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\d\d:\d\d:\d\d|\[?(DEBUG|INFO|WARN(ING)?|ERROR|"
                       r"FATAL|TRACE)\b|(PASSED|FAILED|ERROR)\s|={3,}|E\s{3})", re.M)
_CODE_LINE = re.compile(r"^\s*(def |class |import |from \S+ import|function |const |let |var |#include|"
                        r"public |private |return\b|if \(|for \(|\}|@\w+)", re.M)
_YAML_LINE = re.compile(r"^\s*(- )?[A-Za-z_][\w.-]*:(\s|$)", re.M)


def kind_of(text: str) -> str:
    """json / csv / yaml / xml / code / log / text / binary, judged on the result's first characters."""
    sample = text[:SAMPLE_CHARS]
    if "\x00" in sample or sum(not (c.isprintable() or c in "\n\r\t") for c in sample) > len(sample) // 20:
        return "binary"
    stripped = sample.lstrip()
    if stripped[:1] in "{[" and _parses_as_json(text, stripped):
        return "json"
    if stripped.startswith("<") and (stripped.startswith("<?xml") or re.match(r"<[A-Za-z!]", stripped)):
        return "xml"
    lines = [line for line in sample.splitlines()[:40] if line.strip()]
    if not lines:
        return "text"
    share = len(lines)
    if _share(_LOG_LINE, lines) >= 0.3:
        return "log"
    if _share(_CODE_LINE, lines) >= 0.25:
        return "code"
    if share >= 3 and _is_csv(lines):
        return "csv"
    if _share(_YAML_LINE, lines) >= 0.6:
        return "yaml"
    return "text"


def _parses_as_json(text: str, stripped: str) -> bool:
    if len(text) <= 1 << 20:
        try:
            json.loads(text)
            return True
        except ValueError:
            return False
    return stripped[:2] in ('{"', "[{", "[\"", "[1", "[0") or stripped[:1] == "{"  # too large to parse here


def _share(pattern: re.Pattern[str], lines: list[str]) -> float:
    return sum(bool(pattern.match(line)) for line in lines) / len(lines)


def _is_csv(lines: list[str]) -> bool:
    for sep in (",", "\t", ";", "|"):
        counts = {line.count(sep) for line in lines[:20]}
        if len(counts) == 1 and counts.pop() >= 1:
            return True
    return False


def synopsis(text: str, *, tool: str | None, ref: str, limit_tokens: int, tokens: int | None = None) -> str:
    """The synopsis of tool result `text` within about `limit_tokens` tokens (see the module docstring)."""
    kind = kind_of(text)
    total = count_tokens(text) if tokens is None else tokens
    about = f"tool result {ref} · {tool or 'tool'} · {kind} · {len(text):,} chars, {total:,} tokens"
    if kind == "binary":
        return (f"[… {about}: binary, never shown raw — {READ_TOOL}(ref=\"{ref}\", offset=0, limit=2000) reads it "
                f"as text]")
    room = max(limit_tokens - MARKER_TOKENS, 32)
    tail_room = int(room * TAIL_SHARE)
    head = _fit(text, room - tail_room, from_end=False)
    tail = _fit(text, tail_room, from_end=True, start=len(head))
    omitted_from, omitted = len(head), len(text) - len(head) - len(tail)
    marker = (f"[… {about}: {omitted:,} chars left out here — {READ_TOOL}(ref=\"{ref}\", offset={omitted_from}) "
              f"reads on, query=\"…\" finds]")
    return "\n".join(part for part in (head, marker, tail) if part)


def _fit(text: str, tokens: int, *, from_end: bool, start: int = 0) -> str:
    """The longest run of whole lines (else characters) at the start (or end) of `text[start:]` within `tokens`
    (`start` instead of a slice: a result of hundreds of MB is never copied whole)."""
    chars = max(tokens, 0) * 4
    piece = (text[max(start, len(text) - chars):] if chars else "") if from_end else text[start:start + chars]
    while piece and count_tokens(piece) > tokens:
        cut = max(len(piece) // 8, 1)
        piece = piece[cut:] if from_end else piece[:-cut]
    if not piece or len(piece) == len(text) - start:
        return piece
    newline = piece.find("\n") if from_end else piece.rfind("\n")
    if newline > 0 and (len(piece) - newline if not from_end else newline) < len(piece) // 2:
        piece = piece[newline + 1:] if from_end else piece[:newline]
    return piece
