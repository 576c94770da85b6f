"""Errors & Corrections for the extractive model: each error once, where it was last seen, and what fixed it.

An error is an informative line of a failing tool result or a pasted traceback (`artifacts.error_items`).
The same error at another line is one item: errors compare with their location and digits masked, and the
item keeps the latest location. An error is fixed when a later run of the same command (or call) no longer
shows it; the item then names the files edited in between. User corrections are items too. Items already
in the section (the same error, unless this one is now fixed) are not added again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from workmem.nodes.extractive.artifacts import error_items
from workmem.nodes.extractive.code_words import SHELL_TOOLS
from workmem.nodes.extractive.steps import Step, is_shell
from workmem.nodes.extractive.text import clean
from workmem.nodes.extractive.trail import Trail
from workmem.nodes.extractive.transcript import Line, Msg, Result

MAX_FIXED_BY = 3
_WHERE_RE = re.compile(r"^(.*?)(?: \(at (.+):(\d+)\))?$")
FIXED_MARK = " — fixed: "
RUN_MARK = " — when running "
GONE_MARK = " — no longer seen"  # fixed, with no edit between the error and the clean run
_FIXED_RE = re.compile(r" — (?:fixed: |when running |no longer seen\b).*$")
_TOOL_PREFIX_RE = re.compile(r"^[A-Za-z_][\w.-]*: (?=\S)")
_EDITS = ("edited", "changed", "restored")
_LABELS_RE = re.compile(r"^(?:(?:error|fatal)\s*:\s*|[A-Za-z_][\w.]*(?:Error|Exception)\s*:\s*)+", re.I)
_FAILED_TEST_RE = re.compile(r"FAILED\s+([^\s:]+)::")
_FILTER_RE = re.compile(r"\s-k\b|\s-m\s+(?!(?:pytest|unittest)\b)|\s--(?:deselect|lf|last-failed)\b")
_TEST_RUN_RE = re.compile(r"(?:^|[\s;&|/])(?:pytest|py\.test|tox|nosetests)\b|-m\s+(?:pytest|unittest)\b")
_ERROR_SAYS_RE = re.compile(
    r"[A-Za-z](?:Error|Exception|Exit|Interrupt|Failure)\b|^FAILED\b|(?i:\b(?:error|fatal)\s*:\s*\S)")


@dataclass
class Seen:
    """One error: its text, where it was last seen, the step that last showed it, what fixed it."""

    text: str
    tool: str
    path: str | None
    line: str | None
    order: int
    signature: str
    run: str = ""  # the script or test file whose run showed it
    fixed_by: list[str] = field(default_factory=list)
    fixed: bool = False
    tested: bool = False  # shown by a test run (a clean run of the suite, or of a folder holding its file, fixes it)

    @property
    def named_tool(self) -> str:
        """The tool that showed the error ('' for a shell, whose command says more than its name)."""
        return "" if not self.tool or self.tool.lower() in SHELL_TOOLS else self.tool

    def item(self, joiner: str = ": ") -> str:
        """The Errors & Corrections item (`joiner` between a named tool and the error)."""
        head = f"{self.named_tool}{joiner}{self.text}" if self.named_tool else self.text
        where = f" (at {self.path}:{self.line})" if self.path else ""
        return clean(f"{head}{where}{_status(self.fixed, self.fixed_by, self.run)}", 320)


def _status(fixed: bool, fixed_by: list[str], run: str) -> str:
    if fixed and fixed_by:
        return f"{FIXED_MARK}edited {', '.join(fixed_by)}"
    if fixed:
        return f"{GONE_MARK} running {run}" if run else GONE_MARK
    return f"{RUN_MARK}{run}" if run else ""


def error_key(item: str) -> str:
    """What makes two error items the same error: the text without tool prefix, location, fix note and the
    labels a runner puts before it (`ERROR: `, `TypeError: `), every word holding a digit masked (line numbers,
    temporary directories, ids)."""
    text = _FIXED_RE.sub("", item.strip())
    text = _WHERE_RE.match(text).group(1)  # type: ignore[union-attr]
    text = _LABELS_RE.sub("", text)
    return " ".join("#" if re.search(r"\d", w) else w for w in text.lower().split())


def is_error_line(item: str) -> bool:
    """An error line says so: an exception name, a `FAILED` test, or `error:` / `fatal:` with a message."""
    return bool(_ERROR_SAYS_RE.search(item))


def _keys(item: str) -> set[str]:
    return {error_key(item), error_key(_TOOL_PREFIX_RE.sub("", item, count=1))}


def _runs(step: Step, trail: Trail) -> str:
    """The scripts and test files a step ran, as the trail writes them ('' for none)."""
    return ", ".join(dict.fromkeys(trail.relative(t.path) for t in step.touches if t.kind in ("ran", "tested")))


def _signature(step: Step, trail: Trail) -> str:
    """What makes two steps the same run: the scripts or tests they ran, else the command or call."""
    runs = _runs(step, trail)
    if runs:
        return runs
    return " ".join(step.command.split()) if step.command else f"{step.name} {sorted(t.path for t in step.touches)}"


def _split(item: str, trail: Trail) -> tuple[str, str | None, str | None]:
    found = _WHERE_RE.match(item)
    text, path, line = found.group(1), found.group(2), found.group(3)  # type: ignore[union-attr]
    return text, trail.relative(path) if path else None, line


def seen_errors(all_steps: list[Step], msgs: list[Msg], trail: Trail) -> list[Seen]:
    """The transcript's errors, one per error key, ordered by where each was last seen."""
    by_key: dict[str, Seen] = {}
    clean_runs: dict[str, list[tuple[int, set[str], list[str]]]] = {}
    for step in all_steps:
        if step.result is None:
            continue
        refused = step.result.refused and not is_shell(step.name)  # a tool's refusal says it in its own words
        items = [i for i in error_items(step.result) if is_error_line(i) or refused]
        keys = {error_key(i) for i in items}
        signature = _signature(step, trail)
        clean_runs.setdefault(signature, []).append((step.order, keys, picked_tests(step.command or "")))
        for item in items:
            text, path, line = _split(item, trail)
            by_key.pop(error_key(item), None)
            by_key[error_key(item)] = Seen(text, step.name, path, line, step.order, signature, _runs(step, trail),
                                           tested=bool(_TEST_RUN_RE.search(step.command or "")))
    for i, msg in enumerate(msgs):
        if msg.role == "user":
            for item in filter(is_error_line, error_items(Result("", False, msg.text))):
                text, path, line = _split(item, trail)
                by_key.setdefault(error_key(item), Seen(text, "", path, line, i, ""))
    suites = _clean_test_runs(all_steps, trail)
    for key, seen in by_key.items():
        later = [order for order, keys, picked in clean_runs.get(seen.signature, [])
                 if order > seen.order and key not in keys and _ran_it(picked, seen.text)]
        later += [run.order for run in suites if run.order > seen.order and _covers(run, seen)]
        if seen.signature and later:
            seen.fixed = True
            seen.fixed_by = _edited_between(trail, seen.order, min(later), seen.text + " " + (seen.path or ""))
    return sorted(by_key.values(), key=lambda s: s.order)


@dataclass(frozen=True)
class TestRun:
    """A test run that showed no error: the test files and folders it ran ([]: the whole suite) and the tests it
    picked (`tests/test_a.py::test_b`; a `-k` / `-m` filter picks what the command cannot say)."""

    order: int
    targets: list[str]
    picked: list[str]

    def covers(self, tests: list[str], error: str) -> bool:
        """Whether the run ran one of the test files `tests` — or, when it picked tests, the one `error` names."""
        if self.picked:
            return _ran_it(self.picked, error)
        return not self.targets or any(test == t or test.startswith(t.rstrip("/") + "/")
                                       for test in tests for t in self.targets)


def _clean_test_runs(all_steps: list[Step], trail: Trail) -> list[TestRun]:
    """The test runs that showed no error, in order."""
    out = []
    for step in all_steps:
        command = step.command or ""
        if step.result is None or not _TEST_RUN_RE.search(command):
            continue
        if not any(is_error_line(i) for i in error_items(step.result)):
            out.append(TestRun(step.order, [trail.relative(t.path) for t in step.touches if t.kind == "tested"],
                               picked_tests(command)))
    return out


def picked_tests(command: str) -> list[str]:
    """The tests a run picks by id (`tests/test_a.py::test_b`); a filter (`-k`, `-m`, `--lf`) picks what the
    command cannot say, written as a NUL no error text holds. [] when it runs what it names whole."""
    picked = [w.strip("'\"") for w in command.split() if "::" in w]
    return [*picked, "\0"] if _FILTER_RE.search(command) else picked


def _ran_it(picked: list[str], error: str) -> bool:
    """A run that picked tests ran the one `error` names; one that picked none ran everything it names."""
    return not picked or any(p in error for p in picked)


def _covers(run: TestRun, seen: Seen) -> bool:
    """A clean test run covers an error a test run showed: it ran the whole suite, the same test file or a folder
    holding it — or, picking tests, the one the error names."""
    return seen.tested and run.covers([r.strip() for r in seen.run.split(",") if r.strip()], seen.text)


def _edited_between(trail: Trail, start: int, end: int, error: str) -> list[str]:
    """What fixed an error: the files edited between it and the clean run that the error names, else the
    file edited last before that run."""
    found = [(order, f.path) for f in trail.files.values() for order, t in f.touches
             if start < order <= end and t.kind in _EDITS]
    edited = list(dict.fromkeys(p for _, p in sorted(found)))
    named = [p for p in edited if p in error or p.rsplit("/", 1)[-1] in error]
    return (named or edited[-1:])[-MAX_FIXED_BY:]


def fixed_since(old_items: list[str], all_steps: list[Step], trail: Trail) -> list[str]:
    """Errors the section holds that these messages show fixed, each once more with what was edited before the
    clean run: one from a run (`… — when running repro.py`) that a later run of the same script or test no
    longer shows, a failed test that a later clean run of its suite, folder or file covers."""
    out = []
    suites = _clean_test_runs(all_steps, trail)
    shown_in = [(s.order, {error_key(i) for i in error_items(s.result)}) for s in all_steps if s.result is not None]
    for item in old_items:
        head, mark, run = item.partition(RUN_MARK)
        if _settled(item) or any(error_key(o) == error_key(item) and _settled(o) for o in old_items):
            continue
        failed = _FAILED_TEST_RE.match(_TOOL_PREFIX_RE.sub("", head, count=1))
        if not (mark or failed):
            continue
        keys = _keys(head)
        # the error again in these messages: only a later run fixes it
        last_seen = max((order for order, shown in shown_in if keys & shown), default=-1)
        if mark:
            passed = [s.order for s in all_steps if s.result is not None and s.order > last_seen
                      and _runs(s, trail) == run and _ran_it(picked_tests(s.command or ""), head)]
        else:  # a failed test: a clean run of the suite, its folder or its file
            test = trail.relative(failed.group(1))  # type: ignore[union-attr]
            passed = [t.order for t in suites if t.order > last_seen and t.covers([test], head)]
        if passed:
            out.append(clean(head + _status(True, _edited_between(trail, last_seen, passed[0], head), run), 320))
    return out


def _settled(item: str) -> bool:
    """The item says its error was fixed (or no longer seen)."""
    return FIXED_MARK in item or GONE_MARK in item


def latest_status(items: list[str]) -> list[str]:
    """One item per error, in the place it was first met, with its latest status (the section is append-only,
    so this is done among the items a commit adds)."""
    out: list[str] = []
    place: dict[str, int] = {}
    for item in items:
        key = error_key(item)
        if key in place:
            out[place[key]] = item
        else:
            place[key] = len(out)
            out.append(item)
    return out


def error_items_of(errors: list[Seen], fixes: list[tuple[Line, str]]) -> list[str]:
    """Error and correction items in transcript order (corrections sit where they were said)."""
    placed = [(s.order * 1000 + 999, s.item()) for s in errors] + [(line.index * 1000, text) for line, text in fixes]
    return [text for _, text in sorted(placed, key=lambda p: p[0])]


def new_error_items(old_body_items: list[str], items: list[str], corrections: Sequence[str] = ()) -> list[str]:
    """`items` not already in the section: an error it holds is not added again unless now fixed
    (`corrections`, the user's own words, are compared whole)."""
    old_keys = {k for item in old_body_items for k in _keys(item)}
    old_fixed = {k for item in old_body_items if _settled(item) for k in _keys(item)}
    out = []
    for item in items:
        if item in corrections:
            if item not in old_body_items:
                out.append(item)
            continue
        keys = _keys(item)
        if keys & old_keys and not (_settled(item) and not keys & old_fixed):
            continue
        out.append(item)
    return out
