"""The artifact trail: which files the agent touched and how, rendered as Files & Context entries.

Each file the agent's tool calls read, searched, edited, created, ran or tested gets one entry, the path
first: `src/app.py — edited L40-52 in load_rows; read L1-120; tested: pytest tests/test_app.py`. Line ranges
come from the calls (`sed -n '40,52p'`, `offset`/`limit`); the function an edit or a read sits in comes
from the numbered lines the transcript showed (`nl -ba`, `cat -n`, `grep -n`, a read tool's line numbers,
or the lines of a `sed -n` range) when every line between the definition and the edit was shown. A path
that only appears in a tool's output (a listing, a traceback) is no entry. Paths under a directory the
agent changed into (`cd /srv/app && …`) are written relative to it. Entries are ordered edited files
first, then created, run or tested files, then files only read or searched; newest first within each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from workmem.nodes.extractive.shell import DOTTED_NAME, Kind, Touch, cd_dirs, is_absolute
from workmem.nodes.extractive.steps import Step, defined_names
from workmem.nodes.extractive.text import clean
from workmem.nodes.guard_words import PATH_EXTENSIONS

TIERS: dict[str, int] = {"edited": 0, "changed": 0, "restored": 0, "created": 1, "tested": 2, "ran": 2, "read": 3,
                         "searched": 4, "removed": 5}
MAX_RANGES = 3
MAX_NAMES = 2
MAX_COMMAND_CHARS = 160
_NUMBERED_RES = (re.compile(r"^\s*(\d+)→(.*)$"), re.compile(r"^\s*(\d+)\t(.*)$"), re.compile(r"^(\d+)[:-](.*)$"))
_HOME_RE = re.compile(r"^/(?:home|Users)/[^/]+(?=/)|^/root(?=/)")  # a home directory: what `~` stands for
_WRAPPER_RE = re.compile(r"^\s*</?[A-Za-z_][\w-]*>(?:.*</[A-Za-z_][\w-]*>)?\s*$")
_DIFF_RE = re.compile(r"^(?:diff --git a/\S+ b/(\S+)|\+\+\+ b/(\S+))")
_SCRIPT_NAME_RE = re.compile(r"^[\w./-]+$")
_FILE_EXT_RE = re.compile(rf"\.(?:{'|'.join(PATH_EXTENSIONS)}|txt|rst|html|csv|cfg|rb|pl)$", re.I)


@dataclass
class Shown:
    """What the transcript showed of one file with line numbers: text by line, definitions by line."""

    text: dict[int, str] = field(default_factory=dict)
    defs: dict[int, str] = field(default_factory=dict)

    def add(self, start: int, lines: list[str]) -> None:
        """Lines shown from line `start` on."""
        for k, line in enumerate(lines):
            self.text[start + k] = line
        for k, name in defined_names(lines):
            self.defs[start + k] = name

    def add_numbered(self, numbered: Iterable[tuple[int, str]]) -> None:
        """Lines shown with their own numbers."""
        for number, line in numbered:
            self.text[number] = line
            found = defined_names([line])
            if found:
                self.defs[number] = found[0][1]

    def enclosing(self, line: int) -> str | None:
        """The definition `line` sits in: the nearest one above it, when every line between was shown."""
        above = [d for d in self.defs if d <= line]
        if not above:
            return None
        start = max(above)
        return self.defs[start] if all(n in self.text for n in range(start, line + 1)) else None

    def names_in(self, first: int, last: int) -> list[str]:
        """The definitions a range shows or sits in."""
        names = [self.enclosing(first)] + [self.defs[d] for d in sorted(self.defs) if first < d <= last]
        return list(dict.fromkeys(n for n in names if n))

    def find(self, snippet: str) -> int | None:
        """The line showing the first line of `snippet`, if the transcript showed it."""
        first = next((ln.strip() for ln in snippet.split("\n") if ln.strip()), "")
        if len(first) < 8:
            return None
        return next((n for n in sorted(self.text) if first in self.text[n]), None)


@dataclass
class FileTrail:
    """Everything the transcript's calls did to one file, in order."""

    path: str
    touches: list[tuple[int, Touch]] = field(default_factory=list)  # (step order, touch)
    names: dict[str, list[str]] = field(default_factory=dict)  # per kind, the definitions acted on

    @property
    def tier(self) -> int:
        """Edited files first, then created / run / tested, then read, then searched."""
        return min(TIERS[t.kind] for _, t in self.touches)

    @property
    def last(self) -> int:
        """The step order of the newest touch."""
        return max(order for order, _ in self.touches)


def twins(a: str, b: str) -> bool:
    """One path absolute (or home-relative), the other a relative path it ends with (holding a `/`); or one
    home-relative (`~/x`), the other the same path under a home directory (`/home/jim/x`, `/root/x`)."""
    if a.startswith("~/") != b.startswith("~/") and a.startswith("/") != b.startswith("/"):
        home, full = (a, b) if a.startswith("~/") else (b, a)
        return bool(_HOME_RE.match(full)) and _HOME_RE.sub("~", full, count=1) == home
    if is_absolute(a) == is_absolute(b):
        return False
    full, rel = (a, b) if is_absolute(a) else (b, a)
    return "/" in rel and full.endswith("/" + rel)


def _output(result_lines: list[str]) -> list[str]:
    """A tool result without the wrapper tag lines agents put around output (`<returncode>0</returncode>`)."""
    lines = list(result_lines)
    while lines and _WRAPPER_RE.match(lines[0]):
        lines.pop(0)
    while lines and _WRAPPER_RE.match(lines[-1]):
        lines.pop()
    return lines


def _numbered(lines: list[str]) -> list[tuple[int, str]] | None:
    for pattern in _NUMBERED_RES:
        found = [(int(m.group(1)), m.group(2)) for line in lines if (m := pattern.match(line))]
        if found and len(found) * 2 >= len([ln for ln in lines if ln.strip()]):
            return found
    return None


def _show(shown: Shown, step: Step, touch: Touch) -> None:
    """Record the numbered lines a read of one file showed."""
    result = step.result
    if result is None or touch.kind not in ("read", "searched"):
        return
    lines = _output(result.lines[: result.clip_at])
    numbered = _numbered(lines)
    if numbered:
        shown.add_numbered(numbered)
    elif touch.kind == "read" and result.clip_at is None and not result.is_error:
        shown.add(touch.lines[0] if touch.lines else 1, lines)


class Trail:
    """The files of a transcript's steps, with what was shown of them."""

    def __init__(self, all_steps: list[Step]) -> None:
        self.roots = sorted({d for s in all_steps for d in cd_dirs(s.command)}, key=len, reverse=True)
        self.files: dict[str, FileTrail] = {}
        self.shown: dict[str, Shown] = {}
        dotted: list[tuple[int, Touch]] = []
        for step in all_steps:
            touches = list(step.touches) + self._diffed(step)
            for touch in touches:
                if touch.kind == "tested" and DOTTED_NAME.fullmatch(touch.path) and not _FILE_EXT_RE.search(touch.path):
                    dotted.append((step.order, touch))  # a test named by dots: its file, once all files are known
                    continue
                path = self._place(touch.path)
                shown = self.shown.setdefault(path, Shown())
                if len([t for t in step.touches if t.kind in ("read", "searched")]) == 1:
                    _show(shown, step, touch)
                self._note(path, step.order, touch, shown)
        for order, touch in dotted:
            found = self._module_file(touch.path)
            if found:
                self._note(found, order, Touch(found, touch.kind, touch.lines, touch.detail), self.shown[found])
                self.files[found].touches.sort(key=lambda pair: pair[0])

    def _module_file(self, name: str) -> str | None:
        """The known file a dotted test name lives in (`tests.test_a.TestB.test_c` → `tests/test_a.py`)."""
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            stem = "/".join(parts[:end])
            found = next((p for p in self.files if p.rsplit(".", 1)[0] in (stem, f"./{stem}")), None)
            if found:
                return found
        return None

    def _rooted(self, path: str) -> str:
        for root in self.roots:
            if path.startswith(root + "/"):
                return path[len(root) + 1:]
        return path

    def relative(self, path: str) -> str:
        """`path` as the trail writes it: relative to a directory the agent changed into (`/srv/app/x.py` →
        `x.py`), else as the trail writes the same file (`/testbed/src/a.py` and `src/a.py` are one file)."""
        path = self._rooted(path)
        return path if path in self.files else next((p for p in self.files if twins(p, path)), path)

    def _place(self, path: str) -> str:
        """The key a touched path is kept under: one per file, its absolute form once the agent used one (it
        names the file wherever the agent stands)."""
        path = self._rooted(path)
        twin = None if path in self.files else next((p for p in self.files if twins(p, path)), None)
        if twin is None:
            return path
        if not is_absolute(path):
            return twin
        self.files[path] = self.files.pop(twin)
        self.files[path].path = path
        self.shown[path] = self.shown.pop(twin, Shown())
        return path

    def _diffed(self, step: Step) -> list[Touch]:
        if step.result is None or "git diff" not in step.command:
            return []
        found = [m.group(1) or m.group(2) for line in step.result.lines if (m := _DIFF_RE.match(line))]
        return [Touch(p, "changed", None, "git diff") for p in dict.fromkeys(found)]

    def _note(self, path: str, order: int, touch: Touch, shown: Shown) -> None:
        if touch.kind == "created" and path in self.files:  # written over (or appended to) a file it had
            touch = Touch(touch.path, "edited", touch.lines, touch.detail)
        trail = self.files.setdefault(path, FileTrail(path))
        trail.touches.append((order, touch))
        names: list[str] = []
        if touch.lines:
            names = shown.names_in(*touch.lines) if touch.kind == "read" else [
                n for n in [shown.enclosing(touch.lines[0])] if n]
        if touch.kind == "edited" and touch.detail and " " not in touch.detail and "." not in touch.detail:
            names = [touch.detail]  # the definition an editor tool's text names
        if names:
            kept = trail.names.setdefault(touch.kind, [])
            kept.extend(n for n in names if n not in kept)

    def entries(self) -> list[FileTrail]:
        """The touched files, edited first, newest first within a tier."""
        return sorted(self.files.values(), key=lambda f: (f.tier, -f.last, f.path))


def merged_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Line ranges joined where they overlap or touch, in order."""
    merged: list[tuple[int, int]] = []
    for first, last in sorted(set(spans)):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(last, merged[-1][1]))
        else:
            merged.append((first, last))
    return merged


def line_ranges(spans: list[tuple[int, int]]) -> str:
    """The newest `MAX_RANGES` ranges as `L3, L10-20`."""
    return ", ".join(f"L{a}" if a == b else f"L{a}-{b}" for a, b in spans[-MAX_RANGES:])


def _ranges(touches: list[Touch]) -> str:
    return line_ranges(merged_spans(t.lines for t in touches if t.lines))


def _command(text: str) -> str:
    return clean(text.split("\n", 1)[0], MAX_COMMAND_CHARS)


def segments(trail: FileTrail, brief: bool = False) -> list[str]:
    """The entry's segments after its path (`edited L40-52 in load_rows`, `tested: pytest …`); `brief` keeps
    only the kinds."""
    by_kind: dict[Kind, list[Touch]] = {}
    for _, touch in trail.touches:
        by_kind.setdefault(touch.kind, []).append(touch)
    out: list[str] = []
    for kind in ("edited", "changed", "restored", "created", "removed", "ran", "tested", "read", "searched"):
        touches = by_kind.get(kind)  # type: ignore[call-overload]
        if not touches:
            continue
        if brief and TIERS[kind] > max(trail.tier, 2):
            continue  # the short form names what matters: the edit, the run, else the one thing done
        if brief or kind in ("changed", "restored", "removed", "searched"):
            out.append({"changed": "changed (git diff)", "restored": "restored from a backup"}.get(kind, kind))
            continue
        if kind in ("ran", "tested"):
            out.append(f"{kind}: {_command(touches[-1].detail)}" if touches[-1].detail else kind)
            continue
        text = kind
        ranges = _ranges(touches)
        if ranges:
            text += " " + ranges
        names = trail.names.get(kind, [])[-MAX_NAMES:]
        if names:
            text += " in " + ", ".join(names)
        scripts = [t.detail for t in touches if t.detail and _SCRIPT_NAME_RE.match(t.detail) and "." in t.detail]
        if scripts:
            text += " by " + scripts[-1]
        out.append(text)
    return out


def entry(trail: FileTrail, brief: bool = False) -> str:
    """One Files & Context item: the path, then what was done to it."""
    parts = segments(trail, brief)
    return f"{trail.path} — {'; '.join(parts)}" if parts else trail.path
