"""Work artifacts the extractive model copies: paths for Files & Context, error lines for Errors & Corrections."""

from __future__ import annotations

import json
import re
from typing import Any

from workmem.nodes.extractive.text import alternation, clean
from workmem.nodes.extractive.transcript import Msg, Result
from workmem.nodes.extractive.words import ERROR_WORDS, EXCEPTION_SUFFIXES, PATH_KEYS
from workmem.nodes.guard_words import PATH_EXTENSIONS

_TAG_RE = re.compile(r"</?tool_use_error>")  # a coding agent's wrapper of its tool's refusal
_EXC_RE = re.compile(
    rf"^\s*(?:E\s+)?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:{alternation(EXCEPTION_SUFFIXES)})\b:\s*\S"
)
_ERROR_LINE_RE = re.compile(rf"^\s*(?:{alternation(ERROR_WORDS)})\b[:!]?\s*\S", re.I)
_FAILED_RE = re.compile(r"^\s*FAILED\s+\S+")
_FRAME_RE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_URL_RE = re.compile(r"\bhttps?://[^\s\"'<>)\]]+")
_PATH_RUN_RE = re.compile(r"[\w./\\-]+")
_PATH_EXT_RE = re.compile(rf"\w\.(?:{alternation(PATH_EXTENSIONS)})$", re.I)
_PATH_SLASH_RE = re.compile(r"/?[A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*){2,}/?")
_PLAIN_PATH_RE = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?")
_LINE_HEAD_RE = re.compile(r'^\s*(?:FAILED\s+|File ")?([^\s":]+)')
_NOISE_PATH_RE = re.compile(r"site-packages|dist-packages|^/usr/lib/|^<", re.I)
_PATH_KEY_RE = re.compile(alternation(PATH_KEYS), re.I)


def error_items(result: Result) -> list[str]:
    """The informative error lines of one tool result: pytest FAILED lines, else the exception line."""
    failed = [ln.strip() for ln in result.lines if _FAILED_RE.match(ln)]
    if failed:
        return [clean(ln, 240) for ln in failed[:2]]
    where, exceptions, plain = "", [], []
    for line in result.lines:
        frame = _FRAME_RE.match(line)
        if frame:
            where = f" (at {frame.group(1)}:{frame.group(2)})"
        elif _EXC_RE.match(line):
            exceptions.append(re.sub(r"^E\s+", "", line.strip()) + where)
        elif _ERROR_LINE_RE.match(line):
            plain.append(line.strip())
    items = exceptions[-1:] or plain[:1]
    if not items and result.refused:
        said = (text for ln in result.lines if (text := _TAG_RE.sub("", ln).strip()))
        items = [next(said, "failed without output")]
    return [clean(i, 240) for i in items]


def tool_errors(msgs: list[Msg]) -> list[str]:
    """Errors met in the transcript: failing tool results and pasted tracebacks, `tool: line` items."""
    found: list[str] = []
    for m in msgs:
        for r in m.results:
            found.extend(f"{r.name}: {item}" for item in error_items(r))
        if m.role in ("user", "assistant"):
            found.extend(error_items(Result("", False, m.text)))
    return found


def paths_in(text: str) -> list[str]:
    """URLs and path-like tokens, in order.

    Tokens are maximal runs checked by anchored patterns, so a long unbroken line costs linear time.
    """
    found: list[tuple[int, str]] = [(u.start(), u.group(0).rstrip(".,;:")) for u in _URL_RE.finditer(text)]
    masked = _URL_RE.sub(lambda u: " " * len(u.group(0)), text)
    for run in _PATH_RUN_RE.finditer(masked):
        token = run.group(0).rstrip(".,;:)")
        if not (_PATH_EXT_RE.search(token) or _PATH_SLASH_RE.fullmatch(token)) or _NOISE_PATH_RE.search(
            token
        ):
            continue
        if all(token != t for _, t in found):
            found.append((run.start(), token))
    return [t for _, t in sorted(found)]


def _arg_paths(raw: str) -> list[str]:
    """Paths given as tool-call arguments under path-like keys (`path`, `file`, `dir`, `url`, …)."""
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return paths_in(raw)
    out: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        key, item = stack.pop(0)
        if isinstance(item, dict):
            stack.extend((str(k), v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((key, v) for v in item)
        elif isinstance(item, str) and _PATH_KEY_RE.search(key):
            for token in item.split():
                out.extend([token] if _PLAIN_PATH_RE.fullmatch(token) else paths_in(token))
    return out


def files(msgs: list[Msg], legacy: str) -> list[str]:
    """`path (tools that touched it)` items, in order of first mention, absolute twins folded."""
    order: list[str] = []
    tools: dict[str, list[str]] = {}

    def note(path: str, tool: str | None) -> None:
        if path not in tools:
            tools[path] = []
            order.append(path)
        if tool and tool not in tools[path]:
            tools[path].append(tool)

    for path in paths_in(legacy):
        note(path, None)
    for m in msgs:
        for path in paths_in(m.body):
            note(path, None)
        for name, raw in m.calls:
            for path in _arg_paths(raw):
                note(path, name)
        for r in m.results:  # only paths that open a line: listings, tracebacks, test ids
            for line in r.lines:
                head = _LINE_HEAD_RE.match(line)
                for path in paths_in(head.group(1)) if head else []:
                    note(path, None)
    kept: list[str] = []
    for path in order:
        # `/srv/app/x.py` and a bare `x.py` are folded into a repo-relative `app/x.py` seen elsewhere
        twin = next(
            (
                q
                for q in order
                if q != path
                and (
                    (path.startswith("/") and not q.startswith("/") and path.endswith("/" + q))
                    or ("/" not in path and q.endswith("/" + path))
                )
            ),
            None,
        )
        if twin is not None:
            tools[twin].extend(t for t in tools[path] if t not in tools[twin])
        else:
            kept.append(path)
    return [f"{p} ({', '.join(tools[p])})" if tools[p] else p for p in kept]
