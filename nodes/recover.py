"""Recovery of section ops from malformed tool-call arguments: JSON repair, then a scan."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from workmem.state.commit_state import CommitState
from workmem.state.ops import parse_update_args, resolve_section_name

_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_SECTION_OBJECT = re.compile(rf"(?P<key>{_STRING})\s*:\s*\{{", re.DOTALL)
_STRING_AT = re.compile(_STRING, re.DOTALL)
_SPACE = re.compile(r"\s*")
_VALUE_END = re.compile(r'\s*(?:[}\]]|,\s*(?:"|\Z))')
_SCALAR = re.compile(r"[^\s,\]}\"\[{]+")
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_CLOSERS = {"{": "}", "[": "]"}
_EMPTY_APPEND = {"op": "APPEND", "items": []}  # carries nothing: not a recovered section


def _close_brackets(raw: str) -> str | None:
    """Drop trailing commas and close unclosed brackets outside strings; None if a string is cut off."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    for char in raw:
        if in_string:
            in_string = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            in_string = True
        elif char in "}]":
            _drop_trailing_comma(out)
            if not stack or _CLOSERS[stack.pop()] != char:
                return None
        elif char in _CLOSERS:
            stack.append(char)
        out.append(char)
    if in_string or (out and out[-1] == '"'):
        return None  # cut inside a string, or right after a quote that may have been inner text
    _drop_trailing_comma(out)
    return "".join(out) + "".join(_CLOSERS[opener] for opener in reversed(stack))


def _drop_trailing_comma(out: list[str]) -> None:
    index = len(out) - 1
    while index >= 0 and out[index].isspace():
        index -= 1
    if index >= 0 and out[index] == ",":
        del out[index]


def _loads(text: str) -> object | None:
    try:
        value = json.loads(text, strict=False)
        return json.loads(value, strict=False) if isinstance(value, str) else value
    except (ValueError, RecursionError):
        return None


def repair_json(raw: str) -> object | None:
    """Parse raw arguments (a) as JSON, (b) after dropping trailing commas and closing brackets; else None."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    value = _loads(raw)
    if value is not None:
        return value
    repaired = _close_brackets(raw.strip())
    return _loads(repaired) if repaired is not None else None


def _unescape(body: str) -> str:
    """JSON-unescape a string body; invalid escapes are kept as written instead of failing."""
    try:
        return json.loads(f'"{body}"', strict=False)
    except ValueError:
        return _ESCAPE.sub(_unescape_one, body)


def _unescape_one(match: re.Match[str]) -> str:
    code = match.group(1)
    if code.startswith("u"):
        return chr(int(code[1:], 16))
    return _SIMPLE_ESCAPES.get(code, code)


def _string_at(text: str, pos: int) -> tuple[str, int] | None:
    """The complete JSON string starting at `pos` (decoded) and the index after it; None if cut off."""
    match = _STRING_AT.match(text, pos)
    return (_unescape(match.group()[1:-1]), match.end()) if match else None


def _value_at(text: str, pos: int) -> tuple[str, int] | None:
    """The string value starting at `pos` (decoded) and the index after it; None when it has no valid end.

    Models write unescaped quotes inside values (`"User said "ship it" at 10:05"`), so a value ends
    only at a quote followed, after optional whitespace, by `}` or `]`, or by `,` and then a quote or
    the end of the input; any other quote is part of the text. A value cut off has no valid end and
    is never returned as a fragment.
    """
    i = pos + 1
    while (j := text.find('"', i)) != -1:
        backslashes = len(text[i:j]) - len(text[i:j].rstrip("\\"))
        if backslashes % 2 == 0 and _VALUE_END.match(text, j + 1):
            return _unescape(text[pos + 1:j]), j + 1
        i = j + 1
    return None


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def _scan_items(text: str, pos: int) -> tuple[list[str], int, bool]:
    """Read an array's string items from just after `[`; returns (complete items, end, closed)."""
    items: list[str] = []
    while True:
        pos = _skip_space(text, pos)
        if text.startswith("]", pos):
            return items, pos + 1, True
        if text.startswith('"', pos):
            found = _value_at(text, pos)
            if found is None:
                return items, len(text), False
            items.append(found[0])
            pos = found[1]
        else:
            scalar = _SCALAR.match(text, pos)
            if scalar is None:
                return items, pos, False
            pos = scalar.end()
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("]", pos):
            return items, pos, False


def _scan_fields(text: str, pos: int) -> tuple[dict[str, Any], int]:
    """Read `"key": value` pairs of an op object from just after `{` until `}` or the first damage."""
    fields: dict[str, Any] = {}
    while True:
        pos = _skip_space(text, pos)
        if text.startswith("}", pos):
            return fields, pos + 1
        key = _string_at(text, pos)
        if key is None:
            return fields, pos
        colon = _skip_space(text, key[1])
        if not text.startswith(":", colon):
            return fields, colon
        pos = _skip_space(text, colon + 1)
        if text.startswith('"', pos):
            value = _value_at(text, pos)
            if value is None:
                return fields, len(text)
            fields[key[0]], pos = value
        elif text.startswith("[", pos):
            items, pos, closed = _scan_items(text, pos + 1)
            fields[key[0]] = items
            if not closed:
                return fields, pos
        else:
            scalar = _SCALAR.match(text, pos)
            if scalar is None:
                return fields, pos
            pos = scalar.end()
        pos = _skip_space(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("}", pos):
            return fields, pos


def _op_from_fields(fields: Mapping[str, Any]) -> dict[str, Any] | None:
    op = fields.get("op")
    name = op.strip().upper() if isinstance(op, str) else None
    if name == "KEEP":
        return {"op": "KEEP"}
    if name == "UPDATE" and isinstance(fields.get("content"), str):
        return {"op": "UPDATE", "content": fields["content"]}
    if name == "APPEND" and isinstance(fields.get("items"), list):
        return {"op": "APPEND", "items": list(fields["items"])}
    return None


def _scan_ops(text: str) -> dict[str, dict[str, Any]]:
    """Find `"<section>": {…}` objects in document order; the first recoverable one per section wins."""
    found: dict[str, dict[str, Any]] = {}
    pos = 0
    while (match := _SECTION_OBJECT.search(text, pos)) is not None:
        name = resolve_section_name(_unescape(match.group("key")[1:-1]))
        if name is None or name in found:
            pos = match.end()
            continue
        fields, end = _scan_fields(text, match.end())
        op = _op_from_fields(fields)
        if op is None:
            pos = match.end()
            continue
        found[name] = op
        pos = max(end, match.end())
    return found


def recover_ops(raw: str) -> dict[str, dict[str, Any]]:
    """Recover the section ops of malformed arguments; returns only the sections recovered ({} when none)."""
    if isinstance(raw, Mapping):
        value: object = raw
    elif isinstance(raw, str):
        value = repair_json(raw)
    else:
        return {}
    found: dict[str, dict[str, Any]] = {}
    if isinstance(value, Mapping):
        parsed = parse_update_args(value)
        if parsed.ok:
            found = {name: parsed.ops[name] for name in parsed.present}
    if not found and isinstance(raw, str):
        found = _scan_ops(raw)
    return {name: op for name, op in found.items() if op != _EMPTY_APPEND}


def recover(state: CommitState) -> dict[str, Any]:
    """Node `recover`: keep what can be recovered from malformed arguments; the rest becomes KEEP."""
    ops = recover_ops(state.get("raw_args") or "")
    if not ops:
        return {"verdict": "unrecovered", "ops": {}, "issues": ["recover: nothing recoverable"],
                "route": ["recover"]}
    return {"verdict": "valid", "ops": {"kind": "update", "sections": ops},
            "issues": [f"recover: recovered {', '.join(ops)}"], "route": ["recover"]}
