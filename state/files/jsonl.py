"""JSONL of stored messages: encode one line, parse a file's bytes (torn tail ignored, bad lines reported)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workmem.state import jsonutil
from workmem.state.errors import Anomaly, CorruptLine
from workmem.state.files import fsutil
from workmem.state.jsonutil import dumps
from workmem.state.lru import LRU
from workmem.state.messages import bad_value
from workmem.state.stored import check_stored, stored_records


@dataclass
class Parsed:
    """Messages of the complete lines of a JSONL byte string, plus what could not be read."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # the line of each message, without its newline
    line_nos: list[int] = field(default_factory=list)  # the line number of each message
    problems: list[Anomaly] = field(default_factory=list)
    bad_lines: list[bytes] = field(default_factory=list)  # corrupt lines, kept verbatim by GC
    end: int = 0  # offset just after the last complete line; bytes after it are a torn tail
    lines: int = 0  # complete lines seen (for line numbers of a later segment)
    unterminated: bool = False  # the last line is a whole stored message that lacks only its newline

    def extended(self, more: Parsed, offset: int) -> Parsed:
        """This parse followed by `more`, the parse of the bytes from `offset` (= `self.end`) on (a new object)."""
        return Parsed(messages=[*self.messages, *more.messages], raw=[*self.raw, *more.raw],
                      line_nos=[*self.line_nos, *more.line_nos], problems=[*self.problems, *more.problems],
                      bad_lines=[*self.bad_lines, *more.bad_lines], end=offset + more.end,
                      lines=self.lines + more.lines, unterminated=more.unterminated)


log = logging.getLogger("workmem.store")


class ParseCache:
    """The parse of each live file as last read, so a read parses only the lines appended since.

    A read hands over the file's bytes; when they begin with the bytes the cached parse covered (an append only
    adds lines), only the rest is parsed. Anything else — a rewrite, a truncation, an edit in place — is parsed
    whole. Bounded: the newest `size` files."""

    def __init__(self, size: int = 64) -> None:
        self._items: LRU[str, tuple[bytes, Parsed]] = LRU(size)

    def parse(self, data: bytes, path: str) -> Parsed:
        """`parse(data, path)`, reusing the cached parse of a prefix of `data`."""
        cached = self._items.get(path)
        if cached is not None and data.startswith(cached[0]):
            done, before = cached
            parsed = before if len(data) == len(done) else before.extended(
                parse(data[len(done):], path, first_line=before.lines + 1), len(done))
        else:
            parsed = parse(data, path)
        if not parsed.unterminated:  # its newline may come later: the next read parses that line again
            self._items.put(path, (data[:parsed.end], parsed))
        return parsed

    def forget(self, path: str) -> None:
        """Drop the cached parse of `path`."""
        self._items.pop(path)


def _encode_lines(stored: list[dict[str, Any]], bodies: list[bytes | None]) -> bytes:
    """JSONL bytes of `stored`; `bodies[i]` is message i's `"meta":…,"parts":…` when validation encoded it.

    A message whose body was encoded during validation reuses it after its encoded head fields
    (a large tool result is not encoded twice). The others are plain text messages of only strings
    and ints, which were checked without encoding: each is encoded whole here. When a batch holds
    only those and orjson is present, one `map` over `orjson.dumps` encodes every line without a
    Python-level call per message; orjson with default options writes what `jsonutil.dumps` does
    for such dicts (strings and ints only).
    """
    if jsonutil.orjson is not None and not any(bodies):  # bodies are None or non-empty bytes
        return b"\n".join(map(jsonutil.orjson.dumps, stored)) + b"\n"
    lines = []
    for msg, body in zip(stored, bodies, strict=True):
        if body is None:
            lines.append(dumps(msg) + b"\n")
        else:
            lines.append(f'{{"id":"{msg["id"]}","seq":{msg["seq"]},"turn_id":"{msg["turn_id"]}",'
                         f'"role":"{msg["role"]}","created_at":"{msg["created_at"]}","tokens":{msg["tokens"]},'
                         .encode() + body + b"}\n")
    return b"".join(lines)


def stored_lines(prepared: list[tuple[dict[str, Any], bytes | None]], counts: list[int], first_seq: int, turn: int,
                 now: str) -> tuple[list[dict[str, Any]], bytes, int]:
    """Stored messages of a validated batch, their JSONL bytes, and the turn number after them.

    The line of a message is its stored dict as compact JSON; see `_encode_lines`.
    """
    stored, turn = stored_records(prepared, counts, first_seq, turn, now)
    return stored, _encode_lines(stored, [body for _msg, body in prepared]), turn


class Problems:
    """Corrupt lines met by the latest read of each file, per session; each is logged once."""

    def __init__(self) -> None:
        self._found: dict[Path, dict[str, list[Anomaly]]] = {}
        self._logged: set[tuple[str, int]] = set()

    def note(self, session_dir: Path, path: Path, found: list[Anomaly], *, replace: bool) -> None:
        """Record what a read of `path` found (replacing the file's earlier record, or adding to it)."""
        per_file = self._found.setdefault(session_dir, {})
        if replace:
            per_file[str(path)] = list(found)
        else:
            per_file.setdefault(str(path), []).extend(found)
        for problem in found:
            if (problem.path, problem.line_no) not in self._logged:
                self._logged.add((problem.path, problem.line_no))
                log.warning("%s", problem)

    def forget(self, session_dir: Path) -> None:
        """Drop what was recorded of a session (it was deleted)."""
        self._found.pop(session_dir, None)

    def of(self, session_dir: Path) -> list[Anomaly]:
        """Every recorded problem of a session."""
        return [c for found in self._found.get(session_dir, {}).values() for c in found]



def parse(data: bytes, path: str, *, first_line: int = 1) -> Parsed:
    """Parse complete lines of `data`. A last line without newline is a torn write and is ignored, unless it is a
    whole stored message that lacks only its newline (a writer cut after it, an editor that strips the final
    newline): that one is stored, and a writer ends its line (`unterminated`)."""
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
        except RecursionError:  # a line nested past what JSON parsing can hold (no writer nests so deep)
            reason = "nested too deeply"
        if not reason and (b"\\ud" in line or b"\\uD" in line):  # no writer escapes a surrogate: is it a lone one?
            reason = bad_value(obj)
        if reason:
            out.problems.append(CorruptLine(path, line_no, reason))
            out.bad_lines.append(line)
            continue
        out.messages.append(obj)
        out.raw.append(line)
        out.line_nos.append(line_no)
    tail = data[out.end:]
    if tail.strip() and (whole := _whole_message(tail)) is not None:
        line_no += 1
        out.messages.append(whole)
        out.raw.append(tail)
        out.line_nos.append(line_no)
        out.end, out.unterminated = len(data), True
    out.lines = line_no - first_line + 1
    return out


def _whole_message(line: bytes) -> dict[str, Any] | None:
    """The stored message a line without its newline holds, or None for a torn write."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError; nested too deeply
        return None
    return None if check_stored(obj) or bad_value(obj) else obj


def complete_lines(data: bytes) -> bytes:
    """The complete lines of a messages file, each ending in a newline (a whole last message without one gets
    it; a torn tail is left out)."""
    parsed = parse(data, "")
    return data[:parsed.end] + (b"\n" if parsed.unterminated else b"")


def ordered(parsed: Parsed, path: str, *, after: int = 0) -> tuple[list[int], list[Anomaly]]:
    """The readers' rule over a file's messages: indexes of the messages with seq > `after`, in seq order,
    each seq once (its first line wins); a repeated seq and a line out of seq order are reported.

    Appends write seqs in order, so the usual file is already ordered and this is one pass."""
    picked = [i for i, m in enumerate(parsed.messages) if m["seq"] > after]
    seqs = [parsed.messages[i]["seq"] for i in picked]
    if all(a < b for a, b in zip(seqs, seqs[1:], strict=False)):
        return picked, []
    found: list[Anomaly] = []
    first: dict[int, int] = {}
    for i in picked:
        seq = parsed.messages[i]["seq"]
        if seq in first:
            found.append(Anomaly(path, parsed.line_nos[i], f"seq {seq} again (first at line "
                                                          f"{parsed.line_nos[first[seq]]}); this copy is ignored"))
        else:
            first[seq] = i
    previous = 0
    for i in picked:
        seq = parsed.messages[i]["seq"]
        if first.get(seq) == i and seq < previous:
            found.append(Anomaly(path, parsed.line_nos[i], f"seq {seq} out of order (after seq {previous})"))
        previous = max(previous, seq)
    return sorted(first.values(), key=lambda i: parsed.messages[i]["seq"]), found


def read_bytes(path: str | os.PathLike[str]) -> bytes | None:
    """The whole file, or None when it does not exist; a symlink is `UnsafePath`, never followed, and a FIFO or
    any other file that is not regular is `DamagedFile`, found without blocking (`fsutil.read_file`)."""
    return fsutil.read_file(path)
