"""JSONL of stored messages: encode one line, parse a file's bytes (torn tail ignored, bad lines reported)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from state.errors import CorruptLine
from state.messages import ROLES


@dataclass
class Parsed:
    """Messages of the complete lines of a JSONL byte string, plus what could not be read."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # the line of each message, without its newline
    problems: list[CorruptLine] = field(default_factory=list)
    bad_lines: list[bytes] = field(default_factory=list)  # corrupt lines, kept verbatim by GC
    end: int = 0  # offset just after the last complete line; bytes after it are a torn tail
    lines: int = 0  # complete lines seen (for line numbers of a later segment)


def encode_line(msg: dict[str, Any]) -> bytes:
    """One stored message as a UTF-8 JSON line ending in a newline."""
    return (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def check_stored(obj: Any) -> str:
    """Why `obj` is not a stored message ('' when it looks like one); a cheap shape check per line."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    seq = obj.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        return f"bad seq {seq!r}"
    if obj.get("role") not in ROLES:
        return f"bad role {obj.get('role')!r}"
    if not isinstance(obj.get("parts"), list):
        return "parts is not a list"
    tokens = obj.get("tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return f"bad tokens {tokens!r}"
    return ""


def parse(data: bytes, path: str, *, first_line: int = 1) -> Parsed:
    """Parse complete lines of `data`; a last line without newline is a torn write and is ignored."""
    out = Parsed()
    out.end = data.rfind(b"\n") + 1
    line_no = first_line - 1
    for line in data[: out.end].split(b"\n")[:-1]:
        line_no += 1
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            reason = check_stored(obj)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            reason = f"invalid JSON: {exc}"
        if reason:
            out.problems.append(CorruptLine(path, line_no, reason))
            out.bad_lines.append(line)
            continue
        out.messages.append(obj)
        out.raw.append(line)
    out.lines = line_no - first_line + 1
    return out


def read_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The whole file, or None when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
