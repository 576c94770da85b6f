"""A transcript's tool calls paired with their results, and what each call did to files (the artifact trail's input).

A call is paired with the first result of the same tool that follows it (results come in call order); its
arguments are read as JSON, or, when the transcript clipped the call in two, as much of each string value
as survived. What a call touched: a shell tool's command line is read by `shell.command_touches`; an editor
tool with sub-commands (`str_replace_editor`: view / create / str_replace / insert) by its sub-command; any
other tool by the verbs of its name (`Read`, `edit_file`, `Write`, `Grep`) on the paths of its path-like
arguments, with the line range its arguments give (`offset`/`limit`, `view_range`, `insert_line`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from workmem.nodes.extractive.code_words import (
    COMMAND_KEYS,
    EDIT_VERBS,
    EDITOR_COMMANDS,
    READ_VERBS,
    RUN_VERBS,
    SEARCH_VERBS,
    SHELL_TOOLS,
    TEST_VERBS,
    WRITE_VERBS,
)
from workmem.nodes.extractive.shell import Kind, Touch, clean_path, command_touches
from workmem.nodes.extractive.text import alternation
from workmem.nodes.extractive.transcript import CALL_CUT, Msg, Result
from workmem.nodes.extractive.words import PATH_KEYS

_PATH_KEY_RE = re.compile(alternation(PATH_KEYS), re.I)
_ABSOLUTE_START_RE = re.compile(r"(?:[A-Za-z]:[\\/]|/|~/)")
_SECOND_START_RE = re.compile(r"\s(?:[A-Za-z]:[\\/]|/|~/)")
_STRING_RE = re.compile(r'"([A-Za-z_]\w*)"\s*:\s*"((?:[^"\\]|\\.)*)(")?')
_ESCAPE_RE = re.compile(r'\\(u[0-9a-fA-F]{4}|.)')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "\\": "\\", "/": "/"}
_DEF_RE = re.compile(r"^\s*(?:async\s+)?(?:def|class|function|func)\s+([A-Za-z_]\w*)")
_WORD_SPLIT_RE = re.compile(r"(?<=[a-z])(?=[A-Z])|[_\W]+")


@dataclass
class Step:
    """One tool call (its position, tool, arguments) and its result, with what it did to files."""

    order: int  # the index of the calling message in the transcript (results of earlier calls: -1)
    name: str
    args: dict[str, Any] | str
    result: Result | None = None
    touches: list[Touch] = field(default_factory=list)

    @property
    def command(self) -> str:
        """The command line of a shell call ('' for other tools)."""
        if isinstance(self.args, dict):
            value = next((self.args[k] for k in COMMAND_KEYS if isinstance(self.args.get(k), str)), "")
            return value if value not in EDITOR_COMMANDS else ""
        return self.args if is_shell(self.name) else ""


def _unescape(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1).startswith("u") and len(
        m.group(1)) == 5 else _ESCAPES.get(m.group(1), m.group(1)), text)


def call_arguments(raw: str) -> dict[str, Any] | str:
    """A call's arguments: the JSON object, or the string values that survived a clip (the missing middle
    becomes a newline), or the raw text when it is no JSON object at all."""
    text = raw.strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    if not text.startswith("{"):
        return text
    head, _, tail = text.partition(CALL_CUT.strip("\n"))
    found: dict[str, Any] = {}
    for match in _STRING_RE.finditer(head.strip()):
        found.setdefault(match.group(1), _unescape(match.group(2)))
    if tail and found:
        key = list(found)[-1]
        ending = re.match(r'((?:[^"\\]|\\.)*)"', tail.strip())
        found[key] += "\n" + _unescape(ending.group(1) if ending else tail.strip())
    return found or text


def is_shell(name: str) -> bool:
    """A shell tool (`bash`, `Bash`, `shell`): its command line says what it did."""
    return name.lower() in SHELL_TOOLS


def _verb(name: str) -> Kind | None:
    parts = {p.lower() for p in _WORD_SPLIT_RE.split(name) if p} | {name.lower()}
    for verbs, kind in ((EDIT_VERBS, "edited"), (WRITE_VERBS, "created"), (TEST_VERBS, "tested"),
                        (READ_VERBS, "read"), (SEARCH_VERBS, "searched"), (RUN_VERBS, "ran")):
        if parts & set(verbs):
            return kind  # type: ignore[return-value]
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _lines(args: dict[str, Any]) -> tuple[int, int] | None:
    view = args.get("view_range")
    if isinstance(view, list) and len(view) == 2 and all(_int(v) for v in view):
        return (view[0], view[1]) if view[1] >= view[0] else (view[0], view[0])
    start = _int(args.get("offset")) or _int(args.get("start_line")) or _int(args.get("insert_line"))
    if start is None:
        return None
    size = _int(args.get("limit"))
    end = _int(args.get("end_line")) or (start + size - 1 if size else start)
    return start, max(start, end)


def _defined(args: dict[str, Any]) -> str:
    """The function or class an edit's text defines or sits in (`old_string`, `new_str`…), else ''."""
    for key in ("old_string", "old_str", "new_string", "new_str", "content"):
        value = args.get(key)
        if isinstance(value, str):
            found = next((m.group(1) for line in value.split("\n") if (m := _DEF_RE.match(line))), None)
            if found:
                return found
    return ""


def path_words(value: str) -> list[str]:
    """The paths a path argument names: one absolute path whole, spaces and all (`C:\\My Projects\\a.py`,
    `/home/ana/My Files/a.py`); else its words (`tests/a.py tests/b.py`)."""
    text = value.strip()
    if "\n" not in text and _ABSOLUTE_START_RE.match(text) and not _SECOND_START_RE.search(text):
        return [text]
    return text.split()


def call_touches(name: str, args: dict[str, Any] | str) -> list[Touch]:
    """What one tool call did to files."""
    if isinstance(args, str):
        return command_touches(args) if is_shell(name) else []
    command = next((args[k] for k in COMMAND_KEYS if isinstance(args.get(k), str)), None)
    paths = [p for key, value in args.items() if isinstance(value, str) and _PATH_KEY_RE.search(key)
             for word in path_words(value) if (p := clean_path(word))]
    if command in EDITOR_COMMANDS:
        kind: Kind = {"view": "read", "create": "created"}.get(command, "edited")  # type: ignore[assignment]
        return [Touch(p, kind, _lines(args), _defined(args)) for p in paths[:1]]
    if command is not None and (is_shell(name) or " " in command.strip() or not paths):
        return command_touches(command)
    verb = _verb(name)
    if verb is None or not paths:
        return []
    if verb == "searched":
        paths = [p for p in paths if "." in p.rsplit("/", 1)[-1]]
    detail = _defined(args) if verb in ("edited", "created") else ""
    return [Touch(p, verb, _lines(args), detail) for p in (paths if verb in ("tested", "ran") else paths[:1])]


def steps(msgs: list[Msg]) -> list[Step]:
    """Every tool call of the transcript with its result (and results whose call came before it), in order."""
    out: list[Step] = []
    pending: list[Step] = []
    for i, msg in enumerate(msgs):
        for name, raw in msg.calls:
            args = call_arguments(raw)
            step = Step(i, name, args, None, call_touches(name, args))
            out.append(step)
            pending.append(step)
        for result in msg.results:
            match = next((s for s in pending if s.name == result.name), pending[0] if pending else None)
            if match is None:
                out.append(Step(-1, result.name, "", result))
            else:
                match.result = result
                pending.remove(match)
                if result.refused and not is_shell(match.name):  # a refused edit changed nothing
                    match.touches = [t for t in match.touches if t.kind not in ("edited", "created")]
    return out


def defined_names(lines: list[str]) -> list[tuple[int, str]]:
    """`(index, name)` of the function and class definitions among `lines`."""
    return [(i, m.group(1)) for i, line in enumerate(lines) if (m := _DEF_RE.match(line))]
