"""The heuristics behind the extractive model: parse the commit prompt, copy sentences into sections.

It never paraphrases, so it cannot invent; it reads no clock and no random state, so the same prompt
always yields the same tool arguments. `nodes/extractive.py` wraps it as a chat model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

from workmem.nodes.formatting import CALL_PREFIX, CLIP_MARKER, CONTEXT_PREFIX, HEADER_RE, RESULT_PREFIX
from workmem.nodes.guards import PATH_EXTENSIONS, path_tokens
from workmem.nodes.prompts import TAG_LINES
from workmem.state.errors import InvalidInput
from workmem.state.memory import bullet_items, parse_sections
from workmem.state.ops import CREATE_TOOL_NAME, UPDATE_TOOL_NAME

EXTRACTIVE_MODEL_NAME = "workmem-extractive"
MAX_ITEM_CHARS = 300
MAX_TITLE_CHARS = 80
LIMITS = {"goals": 8, "facts": 12, "files": 20, "errors": 10, "issues": 8}

_WORD = r"[A-Za-z][A-Za-z0-9'’-]*"
_FENCE_RE = re.compile(r"```.*?(```|$)", re.DOTALL)
_SENT_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'`(\[]?[A-Z0-9])")
_MARKER_RE = re.compile(r"^\s*(?:#+\s*|>\s*|[-*+](?:\s+|$)|\d+[.)](?:\s+|$))+")
_LEAD_RE = re.compile(
    r"^(?:(?:hi|hello|hey|ok(?:ay)?|so|also|and|but|now|then|great|good|thanks|one more (?:thing|rule))"
    r"\b[,!.:]?\s*)+",
    re.I,
)
_POLITE_RE = re.compile(
    r"^(?:please|can you|could you|would you|i need you to|i want you to|help me|i'd like you to)\b[\s,]*",
    re.I,
)
_IMPERATIVE_RE = re.compile(
    r"^(?:please|can you|could you|would you|let's|let us|make sure|add|fix|implement|create|update|change|"
    r"remove|delete|write|put|use|return|keep|leave|log|deploy|detect|skip|check|run|rename|move|refactor|"
    r"document|investigate|support|handle|find|show|explain|build|migrate|test|switch|send|ask)\b",
    re.I,
)
_WANT_RE = re.compile(r"\b(?:please|i want|i need|we need|i'd like|should|must)\b", re.I)
_ACK_RE = re.compile(
    r"^(?:thanks|thank you|ok|okay|great|good|cool|perfect|nice|sounds good|go ahead|yes|yep|sure)\b", re.I
)
_CORRECTION_RE = re.compile(
    r"^(?:no|nope)\b[,.!]|"
    r"\b(?:actually|instead(?! of)|don'?t|do not|wrong|not quite|that's not|that is not)\b",
    re.I,
)
_DECISION_RE = re.compile(
    r"\b(decided|decide|decision|chose|choose|chosen|because|agreed|settled on|going with|go with|"
    r"we'll use|will use|switch(?:ed)? to|prefer|instead of)\b",
    re.I,
)
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_RE = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}(?:st|nd|rd|th)? {_MONTH},? \d{{4}}\b|\b{_MONTH} \d{{1,2}}"
    r"(?:st|nd|rd|th)?\b(?:,? \d{4})?|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.I,
)
_NUMBER_RE = re.compile(r"(?<![\w/.])\$?\d[\d,]*(?:\.\d+)?%?(?![\w/])")
_NAME_RE = re.compile(r"`[^`]+`|(?<=\s)[A-Z][a-zA-Z]{2,}\b")
_NAME_STOP = frozenset(
    "The This That These Those Then Also But And When What Why How Let Yes Now Here There Its Your Our They "
    "She Please".split()
)
_ISSUE_RE = re.compile(
    r"\b(todo|fixme|open question|unresolved|still open|still (?:need|have) to|not (?:yet|sure)|follow[- ]up|"
    r"later|unclear|tbd|to be decided|remaining|pending|"
    r"need to (?:check|confirm|decide|verify|find out|ask))\b",
    re.I,
)
_RESOLVED_RE = re.compile(
    r"\b(fixed|resolved|solved|done|works now|working now|pass(?:es)? now|now pass(?:es)?|passing|answered|"
    r"settled|closed|(?:is|are) (?:now )?(?:updated|handled|implemented)|completed|finished|confirmed)\b",
    re.I,
)
_EXC_RE = re.compile(
    r"^\s*(?:E\s+)?(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b:\s*\S"
)
_ERROR_LINE_RE = re.compile(r"^\s*(?:error|fatal)\b[:!]?\s*\S", re.I)
_FAILED_RE = re.compile(r"^\s*FAILED\s+\S+")
_FRAME_RE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
_CLIP_RE = re.compile("^" + re.escape(CLIP_MARKER).replace(re.escape("{n}"), r"\d+") + "$")
_URL_RE = re.compile(r"\bhttps?://[^\s\"'<>)\]]+")
_PATH_RUN_RE = re.compile(r"[\w./\\-]+")
_PATH_EXT_RE = re.compile(rf"\w\.(?:{PATH_EXTENSIONS})$", re.I)
_PATH_SLASH_RE = re.compile(r"/?[A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*){2,}/?")
_PLAIN_PATH_RE = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?")
_LINE_HEAD_RE = re.compile(r'^\s*(?:FAILED\s+|File ")?([^\s":]+)')
_NOISE_PATH_RE = re.compile(r"site-packages|dist-packages|^/usr/lib/|^<", re.I)
_PATH_KEY_RE = re.compile(r"path|file|dir|url|uri|target|source|dest", re.I)
_KEY_STOP = frozenset(
    "that this with from have should would could will what when where which there their them then than also "
    "just into about does need needs still todo open question issue resolved silently dropped restored make "
    "sure whether".split()
)


@dataclass
class _Result:
    name: str
    is_error: bool
    lines: list[str] = field(default_factory=list)


@dataclass
class _Msg:
    seq: int
    turn: str
    role: str
    text: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    results: list[_Result] = field(default_factory=list)

    @property
    def body(self) -> str:
        return "\n".join(self.text)


# --- reading the prompt -------------------------------------------------------------------------


def prompt_text(messages: Sequence[BaseMessage]) -> str:
    """The prompt's human text (the system prompt only when nothing else is there)."""
    texts = [m.text for m in messages if m.type != "system"] or [m.text for m in messages]
    return "\n\n".join(texts)


def _unescape(line: str) -> str:
    return line[1:] if line.startswith("\\") else line


def _untag(text: str) -> str:
    """Undo `prompts._neutralise` (only tag lines were escaped there; `\\#` lines of a WM stay escaped)."""
    return "\n".join(
        ln[1:] if ln.startswith("\\") and ln[1:].strip() in TAG_LINES else ln for ln in text.split("\n")
    )


def _block(lines: list[str], tag: str, start: int = 0, last_close: bool = False) -> tuple[str | None, int]:
    """Body of the block `<tag>`…`</tag>` (tag lines alone on their line) and the index after it."""
    try:
        i = next(k for k in range(start, len(lines)) if lines[k].strip() == f"<{tag}>")
    except StopIteration:
        return None, start
    closes = [k for k in range(i + 1, len(lines)) if lines[k].strip() == f"</{tag}>"]
    if not closes:
        return "\n".join(lines[i + 1 :]), len(lines)
    j = closes[-1] if last_close else closes[0]
    return "\n".join(lines[i + 1 : j]), j + 1


def _parse_transcript(text: str) -> list[_Msg]:
    msgs: list[_Msg] = []
    result: _Result | None = None
    for raw in text.split("\n"):
        found = HEADER_RE.match(raw)
        if found:
            msgs.append(_Msg(int(found.group(1)), found.group(2), found.group(3)))
            result = None
            continue
        if not msgs or _CLIP_RE.match(raw):
            continue
        msg = msgs[-1]
        if raw.startswith(CALL_PREFIX):
            name, _, args = raw[len(CALL_PREFIX) :].partition(" ")
            msg.calls.append((name, args))
            result = None
        elif raw.startswith(RESULT_PREFIX):
            head = raw[len(RESULT_PREFIX) :].strip()
            is_error = head.endswith(" (error)")
            result = _Result(head.removesuffix(" (error)").strip(), is_error)
            msg.results.append(result)
        elif raw.startswith(CONTEXT_PREFIX):
            msg.text.append(raw[len(CONTEXT_PREFIX) :])
        elif result is not None:
            result.lines.append(_unescape(raw))
        else:
            msg.text.append(_unescape(raw))
    return msgs


# --- text helpers -------------------------------------------------------------------------------


def _clean(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    """One line, no markdown markers or header hashes, at most `limit` characters."""
    text = " ".join(text.split())
    text = _MARKER_RE.sub("", text).replace("**", "").strip()
    text = text.lstrip("#").strip()
    if len(text) > limit:
        text = text[: limit - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"
    return text


def _sentences(text: str) -> list[str]:
    """Sentences of prose (fenced code left out), one list across lines, list markers removed."""
    text = _FENCE_RE.sub("\n", text)
    out: list[str] = []
    for line in text.split("\n"):
        line = _MARKER_RE.sub("", line).strip()
        for sent in _SENT_SPLIT_RE.split(line):
            sent = sent.strip()
            if sent:
                out.append(sent)
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[`*_]", "", text).lower().split()).rstrip(".,;:!?")


def _keywords(text: str) -> set[str]:
    text = re.sub(r"\[[^\]]*\]", " ", text)
    return {w.lower() for w in re.findall(_WORD, text) if len(w) >= 4 and w.lower() not in _KEY_STOP}


def _take(items: Iterable[str], limit: int, seen: set[str] | None = None) -> list[str]:
    seen = set() if seen is None else seen
    out: list[str] = []
    for item in items:
        item = _clean(item)
        key = _norm(item)
        if key and key not in seen:
            seen.add(key)
            out.append(item)
        if len(out) >= limit:
            break
    return out


def _sentence(text: str) -> str:
    text = _clean(text)
    return text if text.endswith((".", "!", "?", "…")) else text + "."


# --- extraction ---------------------------------------------------------------------------------


def _is_ack(sent: str) -> bool:
    return bool(_ACK_RE.match(sent)) and len(sent.split()) <= 3


def _is_correction(sent: str) -> bool:
    return bool(_CORRECTION_RE.search(sent))


def _is_request(sent: str) -> bool:
    core = _LEAD_RE.sub("", sent).strip()
    clauses = [core] + [c.strip() for c in core.split(": ")[1:]]
    return any(_IMPERATIVE_RE.match(c) for c in clauses) or bool(_WANT_RE.search(core))


def _requests(msg: _Msg) -> list[str]:
    """The user's request sentences, phrased as tasks: `Can you fix X?` → `Fix X.`"""
    out = []
    for sent in _sentences(msg.body):
        if not _is_request(sent) or _is_correction(sent) or _is_ack(sent) or _ISSUE_RE.search(sent):
            continue
        core = _LEAD_RE.sub("", sent).strip()
        task = _POLITE_RE.sub("", core).strip()
        if task != core and task.endswith("?"):
            task = task[:-1].rstrip() + "."
        out.append(task[:1].upper() + task[1:])
    return out


def _title(msgs: list[_Msg], fallback: str) -> str:
    first = next((m for m in msgs if m.role == "user" and m.body.strip()), None)
    sents = _sentences(first.body) if first else _sentences(fallback)
    plain = [s for s in sents if len(_LEAD_RE.sub("", s).split()) >= 3 and not _is_correction(s)]
    pick = (_requests(first) if first else []) or plain
    if not pick:
        return ""
    title = _POLITE_RE.sub("", _LEAD_RE.sub("", pick[0])).strip().rstrip(".!?:")
    title = _clean(title, MAX_TITLE_CHARS).rstrip(".")
    return title[:1].upper() + title[1:]


def _key(sent: str) -> str:
    """Comparison key of a sentence across sections (lead words and polite prefixes ignored)."""
    return _norm(_POLITE_RE.sub("", _LEAD_RE.sub("", sent).strip()))


def _current_state(msgs: list[_Msg]) -> str:
    """2–5 sentences on the latest exchange: the last user message, the reply, tools since, last error."""

    def said(m: _Msg) -> list[str]:
        return [s for s in _sentences(m.body) if not _is_ack(s)]

    last_user = max((i for i, m in enumerate(msgs) if m.role == "user" and said(m)), default=None)
    after = msgs if last_user is None else msgs[last_user + 1 :]
    head: list[str] = []
    if last_user is not None:
        for sent in said(msgs[last_user])[:2]:
            head.append(_sentence(sent))
            if sum(len(h.split()) for h in head) >= 8:
                break
        head[0] = f"Latest user message (#{msgs[last_user].seq}): {head[0]}"
    tail: list[str] = []
    tools: dict[str, int] = {}
    for m in after:
        for name, _ in m.calls:
            tools[name] = tools.get(name, 0) + 1
    if tools:
        tail.append(
            _sentence("Tools used since: " + ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in tools.items()))
        )
    errors = [(r.name, _error_items(r)) for m in after for r in m.results if r.is_error]
    if errors and errors[-1][1]:
        tail.append(_sentence(f"Last tool error: {errors[-1][0]}: {errors[-1][1][-1]}"))
    reply = next((m for m in reversed(after) if m.role == "assistant" and said(m)), None)
    middle = [_sentence(s) for s in said(reply)[: max(0, min(2, 5 - len(head) - len(tail)))]] if reply else []
    if middle:
        middle[0] = f"Latest assistant reply: {middle[0]}"
    sents = head + middle + tail
    if msgs and len(sents) < 2:
        sents.append(
            f"These messages span #{msgs[0].seq}–#{msgs[-1].seq} (turns {msgs[0].turn}–{msgs[-1].turn})."
        )
    return " ".join(sents[:5])


def _error_items(result: _Result) -> list[str]:
    """The informative error lines of one tool result: pytest FAILED lines, else the exception line."""
    failed = [ln.strip() for ln in result.lines if _FAILED_RE.match(ln)]
    if failed:
        return [_clean(ln, 240) for ln in failed[:2]]
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
    if not items and result.is_error:
        items = [ln.strip() for ln in result.lines if ln.strip()][:1] or ["failed without output"]
    return [_clean(i, 240) for i in items]


def _errors(msgs: list[_Msg]) -> list[str]:
    found: list[str] = []
    for m in msgs:
        for r in m.results:
            found.extend(f"{r.name}: {item}" for item in _error_items(r))
        if m.role in ("user", "assistant"):
            found.extend(_error_items(_Result("", False, m.text)))
        if m.role == "user":
            found.extend(f"User correction: {s}" for s in _sentences(m.body) if _is_correction(s))
    return _take(found, LIMITS["errors"])


def _goals(msgs: list[_Msg]) -> list[str]:
    return _take((s for m in msgs if m.role == "user" for s in _requests(m)), LIMITS["goals"])


def _fact_score(sent: str) -> int:
    names = [n for n in _NAME_RE.findall(sent) if n not in _NAME_STOP]
    return (
        3 * bool(_DECISION_RE.search(sent))
        + 2 * bool(_DATE_RE.search(sent))
        + bool(_NUMBER_RE.search(sent))
        + bool(names)
    )


def _facts(msgs: list[_Msg], legacy: str, exclude: set[str]) -> list[str]:
    candidates: list[tuple[int, int, str]] = []
    sources = [legacy] + [m.body for m in msgs if m.role in ("user", "assistant")]
    for text in sources:
        for sent in _sentences(text):
            if sent.endswith("?") or len(sent.split()) < 4 or _key(sent) in exclude:
                continue
            if _ISSUE_RE.search(sent) or (_is_correction(sent) and not _DECISION_RE.search(sent)):
                continue
            score = _fact_score(sent)
            if score >= 2:
                candidates.append((score, len(candidates), sent))
    best = sorted(candidates, key=lambda c: (-c[0], c[1]))[: LIMITS["facts"] * 2]
    return _take((s for _, _, s in sorted(best, key=lambda c: c[1])), LIMITS["facts"])


def _paths_in(text: str) -> list[str]:
    """URLs and path-like tokens (the §5 Files rule, but `a/b` runs need two slashes), in order.

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
        return _paths_in(raw)
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
                out.extend([token] if _PLAIN_PATH_RE.fullmatch(token) else _paths_in(token))
    return out


def _files(msgs: list[_Msg], legacy: str) -> list[str]:
    order: list[str] = []
    tools: dict[str, list[str]] = {}

    def note(path: str, tool: str | None) -> None:
        if path not in tools:
            tools[path] = []
            order.append(path)
        if tool and tool not in tools[path]:
            tools[path].append(tool)

    for path in _paths_in(legacy):
        note(path, None)
    for m in msgs:
        for path in _paths_in(m.body):
            note(path, None)
        for name, raw in m.calls:
            for path in _arg_paths(raw):
                note(path, name)
        for r in m.results:  # only paths that open a line: listings, tracebacks, test ids
            for line in r.lines:
                head = _LINE_HEAD_RE.match(line)
                for path in _paths_in(head.group(1)) if head else []:
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
    items = [f"{p} ({', '.join(tools[p])})" if tools[p] else p for p in kept]
    return _take(items, LIMITS["files"])


def _issues(msgs: list[_Msg], legacy: str) -> tuple[list[str], list[str]]:
    """(new open issues, sentences that report something as fixed or done)."""
    said = [(i, m, _sentences(m.body)) for i, m in enumerate(msgs) if m.role in ("user", "assistant")]
    resolutions = [(i, s) for i, _, sents in said for s in sents if _RESOLVED_RE.search(s)]
    candidates = [(-1, s) for s in _sentences(legacy) if _ISSUE_RE.search(s)]
    for i, m, sents in said:
        answerer = "assistant" if m.role == "user" else "user"
        answered = any(later.role == answerer and later.body.strip() for later in msgs[i + 1 :])
        for sent in sents:
            if _RESOLVED_RE.search(sent):
                continue
            if _ISSUE_RE.search(sent) or (sent.endswith("?") and not answered):
                candidates.append((i, sent))
    still_open = [s for i, s in candidates if not _is_resolved(s, [r for j, r in resolutions if j > i])]
    return _take(still_open, LIMITS["issues"]), [r for _, r in resolutions]


def _is_resolved(item: str, resolutions: list[str]) -> bool:
    keys = _keywords(item)
    if len(keys) < 2:
        return False
    for sent in resolutions:
        shared = keys & _keywords(sent)
        if len(shared) >= 2 and len(shared) >= 0.4 * len(keys):
            return True
    return False


@dataclass
class _Extract:
    title: str
    state: str
    goals: list[str]
    facts: list[str]
    files: list[str]
    errors: list[str]
    issues: list[str]
    resolutions: list[str]


def _extract(msgs: list[_Msg], legacy: str) -> _Extract:
    goals = _goals(msgs)
    errors = _errors(msgs)
    issues, resolutions = _issues(msgs, legacy)
    exclude = {_key(x) for x in goals + issues}
    return _Extract(
        title=_title(msgs, legacy),
        state=_current_state(msgs),
        goals=goals,
        facts=_facts(msgs, legacy, exclude),
        files=_files(msgs, legacy),
        errors=errors,
        issues=issues,
        resolutions=resolutions,
    )


# --- answers ------------------------------------------------------------------------------------


def _bullets(items: list[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def create_sections(extract: _Extract) -> dict[str, str]:
    """Bodies of all seven sections for `create_working_memory`."""
    return {
        "Session Title": extract.title,
        "Current State": extract.state,
        "Task & Goals": _bullets(extract.goals),
        "Key Facts & Decisions": _bullets(extract.facts),
        "Files & Context": _bullets(extract.files),
        "Errors & Corrections": _bullets(extract.errors),
        "Open Issues": _bullets(extract.issues),
    }


def _append(old_body: str, items: list[str], known: Callable[[str], bool] | None = None) -> dict[str, Any]:
    old = _norm(old_body)
    new = [i for i in items if _norm(i) not in old and not (known and known(i))]
    return {"op": "APPEND", "items": new} if new else {"op": "KEEP"}


def update_sections(extract: _Extract, old: dict[str, str]) -> dict[str, dict[str, Any]]:
    """One op per section for `update_working_memory`: KEEP > APPEND > UPDATE, as the prompt asks."""
    ops: dict[str, dict[str, Any]] = {}
    title = old.get("Session Title", "")
    ops["Session Title"] = (
        {"op": "UPDATE", "content": extract.title} if not title.strip() and extract.title else {"op": "KEEP"}
    )
    ops["Current State"] = {"op": "UPDATE", "content": extract.state} if extract.state else {"op": "KEEP"}
    ops["Task & Goals"] = _append(old.get("Task & Goals", ""), extract.goals)
    ops["Key Facts & Decisions"] = _append(old.get("Key Facts & Decisions", ""), extract.facts)
    old_paths = path_tokens(old.get("Files & Context", ""))
    ops["Files & Context"] = _append(
        old.get("Files & Context", ""),
        extract.files,
        known=lambda item: item.split(" (")[0].lower() in old_paths,
    )
    ops["Errors & Corrections"] = _append(old.get("Errors & Corrections", ""), extract.errors)
    ops["Open Issues"] = _open_issues_op(old.get("Open Issues", ""), extract)
    return ops


def _open_issues_op(old_body: str, extract: _Extract) -> dict[str, Any]:
    old_items = bullet_items(old_body)
    marked = [
        f"[resolved] {item}"
        if "[resolved]" not in item
        and "[silently dropped" not in item
        and _is_resolved(item, extract.resolutions)
        else item
        for item in old_items
    ]
    appended = _append(old_body, extract.issues)
    if marked == old_items:
        return appended
    return {"op": "UPDATE", "content": _bullets(marked + appended.get("items", []))}


def _tool_name(tools: Sequence[dict[str, Any]], tool_choice: Any, has_wm: bool) -> str:
    names = [t.get("function", {}).get("name") or t.get("name") for t in tools]
    forced = tool_choice
    if isinstance(tool_choice, dict):
        forced = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
    if not isinstance(forced, str) or forced in ("auto", "any", "required", "none"):
        forced = None
    if forced is None and len(names) == 1:
        forced = names[0]
    if forced is None:
        forced = UPDATE_TOOL_NAME if has_wm and (not names or UPDATE_TOOL_NAME in names) else CREATE_TOOL_NAME
    if forced not in (UPDATE_TOOL_NAME, CREATE_TOOL_NAME):
        raise InvalidInput("tool_choice", forced, "the extractive model only answers the two memory tools")
    return forced


def memory_tool_call(text: str, tools: Sequence[dict[str, Any]], tool_choice: Any) -> tuple[str, dict[str, Any]]:
    """The memory tool to call and its arguments for a commit prompt rendered as `text`."""
    lines = text.replace("\r\n", "\n").split("\n")
    wm, after_wm = _block(lines, "current_working_memory")
    legacy, after_legacy = _block(lines, "previous_memory")
    transcript, _ = _block(lines, "messages", start=max(after_wm, after_legacy), last_close=True)
    name = _tool_name(tools, tool_choice, wm is not None)
    extract = _extract(_parse_transcript(transcript or ""), _untag(legacy or ""))
    if name == UPDATE_TOOL_NAME:
        return name, {"sections": update_sections(extract, parse_sections(_untag(wm or "")))}
    return name, {"sections": create_sections(extract)}
