"""The task of a session, read from its first request: the title, and what Task & Goals starts with.

A first message often wraps its task in boilerplate: tag lines (`<pr_description>`), a lead-in that ends
with a colon (`Consider the following PR description:`), greetings, bare paths, HTML comments, code
blocks, and wrapper blocks that are never the task (`<system-reminder>`). The first line left is the
salient one. A headline (one line, no sentence end: an issue title) is the task as written; a paragraph
gives its first request (`Can you fix X?` → `Fix X.`), else its first sentence. The stated constraints
are the other sentences of the request that say what must, should or must not happen.
"""

from __future__ import annotations

import re

from workmem.nodes.extractive.code_words import CONSTRAINT_CUES, SKIPPED_BLOCKS
from workmem.nodes.extractive.cues import (
    LEAD_RE,
    POLITE_RE,
    as_task,
    is_ack,
    is_correction,
    is_prohibition,
    is_request,
)
from workmem.nodes.extractive.prose import is_output_line, is_prose
from workmem.nodes.extractive.text import alternation, clean, norm, sentences
from workmem.nodes.extractive.transcript import Msg, is_harness_note
from workmem.nodes.guard_words import TITLE_STOPWORDS
from workmem.state.tokens import count_tokens, token_head

MAX_TASK_CHARS = 240
TASK_PREFIX = "Task: "
NAMES_PREFIX = "Names in the task: "
MAX_TASK_NAMES = 10
MAX_NAME_CHARS = 60
_URL_RE = re.compile(r"\b(?:https?://|www\.)\S+")
_DOMAIN_RE = re.compile(r"\.(?:com|org|net|io|dev|html?)$")
_NAME_RE = re.compile(
    r"`([^`\n]+)`|(?<![\w./-])[\w.-]+(?:/[\w.-]+)+|(?<![\w./])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\w*\))?|"
    r"(?<![\w./])[A-Za-z]\w*_\w+|(?<![\w./])[A-Z][a-z]+[A-Z]\w*"
)
_TAG_RE = re.compile(r"</?[A-Za-z_][\w:-]*(?:\s[^<>]*)?/?>")
_SKIPPED_OPEN_RE = re.compile(rf"^\s*<({alternation(SKIPPED_BLOCKS)})(?:\s[^>]*)?>", re.I)
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_BARE_PATH_RE = re.compile(r"^\s*(?:[~/.]?[\w.-]*/[\w./-]*|https?://\S+)\s*$")
_CONSTRAINT_RE = re.compile(rf"\b(?:{alternation(CONSTRAINT_CUES)})\b", re.I)
_HEADLINE_WORDS = 30
_DOTTED_RE = re.compile(r"^(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*\.[A-Za-z_]\w*(?:\(\w*\))?)$")  # `a.b.c()` → `b.c()`
_VAGUE_RE = re.compile(r"^(?:it|this|that|they|these|those)\b", re.I)
_NEGATIVE_RE = re.compile(r"(?:don'?t|do not|never)\b", re.I)
_CLAUSE_RE = re.compile(r"[:;,]\s|\s[-—]\s|\s\(")


def first_request(msgs: list[Msg]) -> Msg | None:
    """The first user message with something to read beyond boilerplate (notes left out: dates, a harness's)."""
    return next((m for m in msgs if m.role == "user" and not m.is_note and salient_lines(m.body)), None)


def salient_lines(body: str) -> list[str]:
    """The lines of a request that are not boilerplate, in order (tags stripped from each)."""
    out: list[str] = []
    skipping: str | None = None
    in_fence = in_comment = False
    for raw in body.split("\n"):
        if skipping:
            if re.search(rf"</{re.escape(skipping)}\s*>", raw, re.I):
                skipping = None
            continue
        if _FENCE_RE.match(raw):
            in_fence = not in_fence
            continue
        opened = _SKIPPED_OPEN_RE.match(raw)
        if opened and not re.search(rf"</{re.escape(opened.group(1))}\s*>", raw, re.I):
            skipping = opened.group(1)
            continue
        if in_comment or raw.strip().startswith("<!--"):
            in_comment = "-->" not in raw
            continue
        line = _TAG_RE.sub(" ", raw).strip()
        if (in_fence or opened or not line or _BARE_PATH_RE.match(line) or line.endswith(":")
                or is_harness_note(line) or is_output_line(line)):
            continue
        if not LEAD_RE.sub("", line).strip(" !.,;"):  # a greeting alone
            continue
        out.append(line)
    return out


def is_wrapped(msgs: list[Msg]) -> bool:
    """The first request wraps its task in boilerplate (a tag line, a lead-in, a skipped block): a task prompt
    written for an agent, not a message of a chat."""
    first = first_request(msgs)
    if first is None:
        return False
    raw = [ln.strip() for ln in first.head.split("\n") if ln.strip()]
    salient = salient_lines(first.head)
    before = raw[: next((i for i, ln in enumerate(raw) if salient and salient[0] in ln), 0)]
    return any(_TAG_RE.fullmatch(ln) or ln.endswith(":") or ln.startswith("<!--") for ln in before)


def is_task_prompt(msg: Msg) -> bool:
    """A user message written for an agent to work from: wrapped (`is_wrapped`) in tagged blocks
    (`<pr_description>` … `<instructions>`), not a chat message that opens with a lead-in (`One more thing:`)."""
    return (msg.role == "user" and is_wrapped([msg])
            and any(_TAG_RE.fullmatch(line.strip()) for line in msg.head.split("\n") if line.strip()))


def _is_headline(line: str, *, titled: bool = False) -> bool:
    """One short sentence with no sentence end — or, on a line of its own at the head of a task prompt (`titled`),
    with one (an issue title may end in `.` or `?`)."""
    ends = bool(re.search(r"[.!?]$", line))
    return (titled or not ends) and len(sentences(line)) == 1 and len(line.split()) <= _HEADLINE_WORDS


def _is_label(line: str) -> bool:
    """A section heading of one or two words (`# Task`, `## Description`): it names a part, not the task."""
    return line.startswith("#") and len(line.lstrip("#").split()) <= 2


def task_of(msgs: list[Msg], legacy: str = "") -> str:
    """The session's task as one line ('' when no request is there)."""
    first = first_request(msgs)
    lines = salient_lines(first.body) if first else [ln for ln in legacy.split("\n") if ln.strip()]
    while len(lines) > 1 and _is_label(lines[0]):
        lines = lines[1:]
    if not lines:
        return ""
    if _is_headline(lines[0], titled=len(lines) > 1 and first is not None and is_wrapped([first])):
        return clean(lines[0], MAX_TASK_CHARS)
    sents = sentences("\n".join(lines))
    sents = [s for s in sents if not _NEGATIVE_RE.match(as_task(s))]  # what not to do bounds the task, is not it
    requests = [as_task(s) for s in sents if is_request(s) and not is_correction(s, False) and not is_ack(s)]
    plain = [s for s in sents if len(LEAD_RE.sub("", s).split()) >= 3 and not is_correction(s, False)]
    named = [s for s in [*requests, *plain] if not _is_vague(s)]  # what names its subject, requests first
    pick = (named or requests or plain or [lines[0]])[0]
    return clean(POLITE_RE.sub("", LEAD_RE.sub("", pick)).strip(), MAX_TASK_CHARS)


def _is_vague(sent: str) -> bool:
    """A sentence that leans on another for its subject (`It should skip them.`, `Fix it.`)."""
    words = POLITE_RE.sub("", LEAD_RE.sub("", sent)).split()
    return len(words) < 3 or bool(_VAGUE_RE.match(words[0]))


def fit_tokens(text: str, budget: int) -> str:
    """`text` cut after the last word that fits in `budget` tokens — or by tokens, when whole words would keep
    less than half of it (a first word too long, a script written without spaces)."""
    if count_tokens(text) <= budget:
        return text
    words = text.split(" ")
    while len(words) > 1 and count_tokens(" ".join(words)) > budget:
        words.pop()
    head = " ".join(words).rstrip(" ,;:-—(")
    if budget // 2 <= count_tokens(head) <= budget:
        return head
    return token_head(text, budget)


def _content_words(text: str) -> int:
    return sum(1 for w in re.findall(r"[A-Za-z]{4,}", text))


def title_of(task: str, budget: int) -> str:
    """The Session Title: the task as written when it fits the title's token budget; else its first clause
    that fits, fills half the budget and names two words of the task; else the task's words without glue words
    and version numbers, cut to fit (`Regression in 5.2.3: pytest tries …` → `Regression pytest tries collect`)."""
    text = task.rstrip(".!?:").strip()
    if count_tokens(text) <= budget:
        return text
    cuts = [m.start() for m in _CLAUSE_RE.finditer(text)]
    for cut in reversed(cuts):
        head = text[:cut].strip()
        if count_tokens(head) <= budget and _content_words(head) >= 2 and 2 * count_tokens(head) >= budget:
            return head
    words = [w.rstrip(":,;") for w in text.split() if w.lower().strip(":,;()") not in TITLE_STOPWORDS
             and not re.fullmatch(r"[\W\d.]*\d[\W\d.v]*", w) and re.search(r"\w", w)]
    if count_tokens(" ".join(words)) > budget:  # a module path by its last two parts, the most specific ones
        words = [_DOTTED_RE.sub(r"\1", w) for w in words]
    return fit_tokens(" ".join(words), budget)


def task_block(body: str) -> list[str]:
    """The lines of the block the task is in: from its salient line to the next line that is only a tag
    (`</pr_description>`), code blocks included."""
    lines = body.split("\n")
    salient = salient_lines(body)
    if not salient:
        return []
    start = next((i for i, ln in enumerate(lines) if salient[0] in _TAG_RE.sub(" ", ln)), 0)
    out = []
    for line in lines[start:]:
        if out and _TAG_RE.fullmatch(line.strip() or "-"):
            break
        out.append(line)
    return out


def prompt_block(msg: Msg) -> str | None:
    """The normalised text of the block a task prompt (`is_task_prompt`) states its task in; None for any other
    message. The prompt's other lines are its harness's rules (how to answer, how to submit)."""
    if not is_task_prompt(msg):
        return None
    return norm(" ".join(task_block(msg.head)))


def task_names(msgs: list[Msg], task: str) -> list[str]:
    """The code names the task's block mentions (quoted code, dotted, snake_case and CamelCase names) that its
    first line does not, in order: what to search for when the task is picked up again."""
    first = first_request(msgs)
    if first is None:
        return []
    text = _URL_RE.sub(" ", "\n".join(task_block(first.head)))
    found = [(m.start(), m.group(1) or m.group(0)) for m in _NAME_RE.finditer(text)]
    names: list[str] = []
    for _, name in sorted(found):
        name = name.strip().rstrip(".,;:")
        if (2 < len(name) <= MAX_NAME_CHARS and name not in task and all(name not in n for n in names)
                and not _DOMAIN_RE.search(name) and name.lower() not in ("e.g", "i.e", "etc")):
            names = [n for n in names if n not in name] + [name]
    return names[:MAX_TASK_NAMES]


def names_item(names: list[str]) -> str:
    """The Task & Goals item listing the task's code names."""
    return NAMES_PREFIX + ", ".join(f"`{n}`" for n in names) if names else ""


def constraints(msgs: list[Msg], task: str) -> list[str]:
    """The sentences of the first request that state a constraint or an expectation (prose only): those of the
    block the task is in, then the prohibitions of the rest (a task prompt's other rules are about how to answer
    its harness — `Your response MUST include …` — not about the work)."""
    first = first_request(msgs)
    if first is None:
        return []
    block = set(salient_lines("\n".join(task_block(first.head))))
    out: list[str] = []
    lines = [ln for ln in salient_lines(first.head) if not ln.startswith("#")]
    inside = sentences("\n".join(ln for ln in lines if ln in block))
    outside = [s for s in sentences("\n".join(ln for ln in lines if ln not in block)) if is_prohibition(s)]
    for sent in [*inside, *outside]:
        sent = clean(sent)
        if sent.rstrip(".") != task.rstrip(".") and _CONSTRAINT_RE.search(sent) and is_prose(sent) and (
                sent not in out and re.search(r"[.!?)\"'`]$", sent)):
            out.append(sent)
    return out
