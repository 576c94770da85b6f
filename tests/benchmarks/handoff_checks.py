"""Does a final working memory read like a handoff? Four checks on a replayed session and its memory.

Each check takes the session record as `agent_sessions_dev.json` stores it (`task`, `messages`, `probes`) and
the final working-memory markdown:

- *title names the task*: at least two words of 4+ letters of the task's first line occur in Session Title
  (case-insensitive; a word is a run of letters, so `SCRIPT_NAME` gives `script` and `name`);
- *Task & Goals holds the task*: the first 40 characters of the task's first line, normalised (lowercase,
  whitespace collapsed), occur in Task & Goals normalised the same way;
- *files touched*: the Files & Context bullets whose path (or its basename) occurs in some tool-call argument
  of the session, out of the bullets that name a path (the spill pointer is not an entry);
- *probes in the memory*: probes whose first 40 normalised characters occur in the normalised memory.

Beside them: whether every `file_edited` probe's file is in Files & Context (the path as written, or a
relative path it ends with).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workmem.nodes.guards import path_tokens
from workmem.state.memory import bullet_items, parse_sections

PREFIX_CHARS = 40
MIN_TITLE_WORDS = 2
_WORD_RE = re.compile(r"[A-Za-z]+")
_POINTER = "[archived]"
_EXTENSION_RE = re.compile(r"\w\.[A-Za-z]\w{0,7}$")


def normalised(text: str) -> str:
    """Lowercase, whitespace collapsed."""
    return " ".join(text.lower().split())


def first_line(task: str) -> str:
    """The task's first non-empty line, stripped."""
    return next((ln.strip() for ln in task.splitlines() if ln.strip()), "")


def _words(text: str, min_len: int = 1) -> set[str]:
    return {w.lower() for w in _WORD_RE.findall(text) if len(w) >= min_len}


def title_names_task(task: str, memory: str) -> bool:
    """At least two words of 4+ letters of the task's first line occur in Session Title."""
    title = parse_sections(memory).get("Session Title", "")
    return len(_words(first_line(task), 4) & _words(title)) >= MIN_TITLE_WORDS


def goals_hold_task(task: str, memory: str) -> bool:
    """The first 40 normalised characters of the task's first line occur in Task & Goals."""
    head = normalised(first_line(task))[:PREFIX_CHARS]
    return bool(head) and head in normalised(parse_sections(memory).get("Task & Goals", ""))


def tool_arguments(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every tool call's arguments: the raw JSON text and each string value in it."""
    out: list[str] = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            raw = (call.get("function") or {}).get("arguments") or ""
            out.append(raw)
            try:
                stack: list[Any] = [json.loads(raw)]
            except ValueError:
                continue
            while stack:
                item = stack.pop()
                if isinstance(item, dict):
                    stack.extend(item.values())
                elif isinstance(item, list):
                    stack.extend(item)
                elif isinstance(item, str):
                    out.append(item)
    return out


def file_entries(memory: str) -> list[str]:
    """The Files & Context bullets that are entries (the spill pointer left out)."""
    items = bullet_items(parse_sections(memory).get("Files & Context", ""))
    return [i for i in items if not i.startswith(_POINTER)]


def entry_path(entry: str) -> str | None:
    """The path a Files & Context bullet names: its first path-like token (a `/` in it, or a file extension),
    as written."""
    for token in re.split(r"[\s`'\"(),;]+", entry):
        token = token.rstrip(".:")
        if token and re.search(r"\w", token) and ("/" in token or _EXTENSION_RE.search(token) or path_tokens(token)):
            return token
    return None


def touched(path: str, arguments: Sequence[str]) -> bool:
    """The path, or its basename, occurs in some tool-call argument."""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return any(path in a or (base and base in a) for a in arguments)


@dataclass(frozen=True)
class FileShare:
    """Files & Context entries that name a touched file, out of all its entries."""

    touched: int
    entries: int

    @property
    def share(self) -> float:
        """touched / entries (1.0 for an empty section: it names nothing untouched)."""
        return self.touched / self.entries if self.entries else 1.0


def files_touched(messages: Sequence[Mapping[str, Any]], memory: str) -> FileShare:
    """How many Files & Context entries name a file the agent's tool calls touched."""
    arguments = tool_arguments(messages)
    entries = file_entries(memory)
    hits = 0
    for entry in entries:
        path = entry_path(entry)
        hits += bool(path and touched(path, arguments))
    return FileShare(hits, len(entries))


def probes_in_memory(probes: Sequence[Mapping[str, Any]], memory: str) -> list[Mapping[str, Any]]:
    """The probes whose first 40 normalised characters occur in the normalised memory."""
    text = normalised(memory)
    return [p for p in probes if (head := normalised(p["text"])[:PREFIX_CHARS]) and head in text]


def file_present(path: str, memory: str) -> bool:
    """The file is in Files & Context: its path as written, or a relative path the probe's path ends with."""
    for entry in file_entries(memory):
        named = entry_path(entry)
        if path in entry or (named and not named.startswith("/") and path.endswith("/" + named.lstrip("./"))):
            return True
    return False


def edited_files_missing(probes: Sequence[Mapping[str, Any]], memory: str) -> list[str]:
    """The `file_edited` probes' files that Files & Context does not name."""
    return [p["text"] for p in probes if p["kind"] == "file_edited" and not file_present(p["text"], memory)]


@dataclass(frozen=True)
class Handoff:
    """The four checks (and the edited-files check) of one session's final working memory."""

    title: bool
    goals: bool
    files: FileShare
    probes: int
    edited_missing: tuple[str, ...]


def check(session: Mapping[str, Any], memory: str) -> Handoff:
    """Every check of one session's final working memory."""
    return Handoff(title_names_task(session["task"], memory), goals_hold_task(session["task"], memory),
                   files_touched(session["messages"], memory), len(probes_in_memory(session["probes"], memory)),
                   tuple(edited_files_missing(session["probes"], memory)))
