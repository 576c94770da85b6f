"""The seven-section working-memory document: parse, render, bullet items, escaping, size rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import NamedTuple

from workmem.state.retention import DEFAULT_TRIGGER, trigger_tokens
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens

SECTIONS: tuple[str, ...] = (
    "Session Title",
    "Current State",
    "Task & Goals",
    "Key Facts & Decisions",
    "Files & Context",
    "Errors & Corrections",
    "Open Issues",
)

SECTION_KEYS: dict[str, str] = {
    "Session Title": "session_title",
    "Current State": "current_state",
    "Task & Goals": "task_and_goals",
    "Key Facts & Decisions": "key_facts_and_decisions",
    "Files & Context": "files_and_context",
    "Errors & Corrections": "errors_and_corrections",
    "Open Issues": "open_issues",
}

DOCUMENT_TITLE = "# Working Memory"

# Token budget of each section's body: the guards, the size
# reminders and the prompts all read this one table.
SECTION_BUDGETS: dict[str, int] = {
    "Session Title": 60,
    "Current State": 500,
    "Task & Goals": 1500,
    "Key Facts & Decisions": 3000,
    "Files & Context": 1500,
    "Errors & Corrections": 2000,
    "Open Issues": 1500,
}

MAX_BULLETS = 25
MAX_TOKENS = 1500
EMERGENCY_BULLETS = 50
EMERGENCY_TOKENS = 3000

# The one item a section keeps for what it spilled into the archive. Merge owns it:
# it is taken out before the guards and ops see a body and put back (first) after, so it counts for
# no rule, and a model can neither drop nor forge it.
# It says what it holds: items moved out because the section was full (older items), and new items a size rule
# refused (the oversized-APPEND cap, a sentinel round, a rejected or salvaged round past the budget).
ARCHIVED_TAG = "[archived]"
POINTER_ITEM = ARCHIVED_TAG + " {n} older items — archive_search finds them"
REFUSED_ITEMS = "{n} new items refused for size"
_POINTER_END = " — archive_search finds them"
_POINTER_LINE = re.compile(r"^\s*(?:(?:[-*+]|\d+[.)])\s+)?\[archived\] (?:(\d+) older items)?(?:(?:, )?(\d+) new items "
                           r"refused for size)? — archive_search finds them[.!]?\s*$")  # a model's variants too

CONSOLIDATION_SENTINEL = (
    "[⚠ CONSOLIDATION REQUIRED: Key Facts exceeds size limit. "
    "You MUST use UPDATE to merge and compress existing bullets before adding new facts.]"
)

_LIST_MARKER = re.compile(r"^(?:[-*+]|\d+[.)])(?:\s+|$)")
_BULLET_MARKER = re.compile(r"^[-*+](?:\s+|$)")
_BUDGET_LINE = ('- "{name}" is at ~{t} of its {budget} tokens: consolidate it via UPDATE now, or its oldest '
                'items move to the archive.')
_REMINDER_LINE = (
    '- "{name}" has {n} bullets (~{t} tokens): it MUST be consolidated via UPDATE — group related facts '
    "by topic, keep names, dates and exact values. Target: <=25 bullets, <={target} tokens."
)


def split_lines(text: str) -> list[str]:
    """The one line rule of parsing, escaping and `is_v2`: every separator `str.splitlines` knows."""
    return text.splitlines()


def parse_sections(md: str | None) -> dict[str, str]:
    """Parse a WM document into {bare section name: stripped body}; later repeats win, preamble dropped."""
    if not isinstance(md, str) or not md:
        return {}
    sections: dict[str, str] = {}
    name: str | None = None
    body: list[str] = []
    for line in split_lines(md):
        stripped = line.strip()
        if stripped.startswith("## "):
            if name is not None:
                sections[name] = "\n".join(body).strip()
            name, body = stripped[3:], []
        elif name is not None:
            body.append(line)
    if name is not None:
        sections[name] = "\n".join(body).strip()
    return sections


def render_sections(mapping: Mapping[str, str]) -> str:
    """Render the seven sections in order with LF line ends; missing names render empty, others drop."""
    lines = [DOCUMENT_TITLE, ""]
    for name in SECTIONS:
        body = mapping.get(name) if isinstance(mapping, Mapping) else None
        lines.append(f"## {name}")
        if isinstance(body, str) and body.strip():
            lines.append("\n".join(split_lines(body.strip())))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def bullet_items(body: str | None) -> list[str]:
    """Return the items of a body: non-empty, non-`#` lines with one leading list marker removed."""
    if not isinstance(body, str):
        return []
    items = []
    for line in split_lines(body):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        item = _LIST_MARKER.sub("", stripped, count=1).strip()
        if item:
            items.append(item)
    return items


def is_v2(md: str | None) -> bool:
    """True iff some line, stripped, is exactly `## <name>` for one of the seven sections."""
    if not isinstance(md, str):
        return False
    headers = {f"## {name}" for name in SECTIONS}
    return any(line.strip() in headers for line in split_lines(md))


def scrub_text(text: str) -> str:
    """Replace lone surrogates (possible after JSON `\\ud800` escapes) so the text can be written as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def escape_body(content: str) -> str:
    """Escape every line whose stripped form starts with `#` as `\\#…` so a body can never open a section."""
    lines = []
    for line in split_lines(scrub_text(content)):
        head = len(line) - len(line.lstrip())
        if line[head:].startswith("#"):
            line = f"{line[:head]}\\{line[head:]}"
        lines.append(line)
    return "\n".join(lines)


class Archived(NamedTuple):
    """What a section's pointer counts: items moved out because the section was full, new items refused for size."""

    older: int = 0
    refused: int = 0

    @property
    def total(self) -> int:
        """Every item the pointer stands for."""
        return self.older + self.refused

    def __add__(self, other: object) -> Archived:  # type: ignore[override]
        if not isinstance(other, Archived):
            return NotImplemented
        return Archived(self.older + other.older, self.refused + other.refused)


def read_pointer(body: str) -> tuple[str, Archived]:
    """`body` without its spill pointer line(s), and what the pointer counted (nothing when there is none)."""
    older = refused = 0
    kept = []
    for line in split_lines(body or ""):
        match = _POINTER_LINE.match(line)
        if match and (match.group(1) or match.group(2)):
            older, refused = max(older, int(match.group(1) or 0)), max(refused, int(match.group(2) or 0))
        else:
            kept.append(line)
    return "\n".join(kept).strip(), Archived(older, refused)


def split_pointer(body: str) -> tuple[str, int]:
    """`body` without its spill pointer line(s), and how many items the pointer counted (0 when none)."""
    rest, archived = read_pointer(body)
    return rest, archived.total


def pointer_item(archived: Archived) -> str:
    """The pointer item for `archived` ('' when it counts nothing); older items alone read as a bare merge writes
    them."""
    if archived.refused <= 0:
        return POINTER_ITEM.format(n=archived.older) if archived.older > 0 else ""
    parts = [f"{archived.older} older items"] if archived.older > 0 else []
    return f"{ARCHIVED_TAG} " + ", ".join([*parts, REFUSED_ITEMS.format(n=archived.refused)]) + _POINTER_END


def with_pointer(body: str, count: int | Archived) -> str:
    """`body` with the spill pointer as its first line (none when it counts nothing); an int counts older items."""
    item = pointer_item(count if isinstance(count, Archived) else Archived(max(count, 0)))
    if not item:
        return body
    return f"- {item}\n{body}" if body else f"- {item}"


def is_own_header(name: str, line: str) -> bool:
    """Whether `line` is section `name`'s own header (any number of `#`, the name, case-insensitive)."""
    return re.fullmatch(r"#+\s*" + re.escape(name) + r"\s*:?\s*", line.strip(), re.IGNORECASE) is not None


def strip_own_header(name: str, body: str) -> str:
    """`body` without a first non-empty line that repeats the section's own header (models often do)."""
    lines = split_lines(body)
    for i, line in enumerate(lines):
        if line.strip():
            return "\n".join(lines[i + 1:]) if is_own_header(name, line) else body
    return body


def clean_item(item: str) -> str:
    """Collapse an APPEND item to one line and drop the bullet marker(s) the model may have added."""
    text = " ".join(part.strip() for part in scrub_text(item).splitlines() if part.strip())
    while True:
        unmarked = _BULLET_MARKER.sub("", text, count=1).strip()
        if unmarked == text:
            return text
        text = unmarked


def bullet_count(body: str) -> int:
    """Number of bullet items of a body (the n of the size rules)."""
    return len(bullet_items(body))


def body_tokens(body: str) -> int:
    """Token count of a body (the t of the size rules)."""
    return count_tokens(body) if isinstance(body, str) else 0


def is_oversized(n: int, t: int, max_tokens: int = MAX_TOKENS) -> bool:
    """Oversized: more than 25 bullets or more than 1500 tokens (`max_tokens` under a smaller memory budget)."""
    return n > MAX_BULLETS or t > max_tokens


def is_emergency(n: int, t: int, max_tokens: int = EMERGENCY_TOKENS) -> bool:
    """Emergency size: more than 50 bullets or more than 3000 tokens (`max_tokens` under a smaller budget)."""
    return n > EMERGENCY_BULLETS or t > max_tokens


# The memory budget follows the commit trigger: the working memory rides on every model call,
# so a small trigger gets a small memory — about what a summariser's summary costs up to an 8 000-token
# trigger (400 tokens), growing by a fifth of every trigger token beyond, never over the table. Under it
# every section budget shrinks in the table's proportions (none under 60 tokens), and the Key Facts size
# limits with them (oversized past half its budget, emergency past all of it); the bullet limits stay.
# What no longer fits is spilled into the archive with its pointer, never dropped.
TABLE_TOTAL = sum(SECTION_BUDGETS.values())
SMALL_TRIGGER = 8_000  # up to this trigger the memory gets MIN_MEMORY_BUDGET; a fifth of the rest is added
MIN_MEMORY_BUDGET = 400
MIN_SECTION_BUDGET = 60
# A memory budget counts the rendered document: the title and the seven headings, and the newline each
# non-empty body adds after its heading; the sections share what is left.
DOCUMENT_OVERHEAD = count_tokens(render_sections({})) + len(SECTIONS)
MAX_MEMORY_BUDGET = TABLE_TOTAL + DOCUMENT_OVERHEAD  # the whole section table with its headings


@dataclass(frozen=True)
class Budgets:
    """The size rules of one memory budget: each section's body budget and the Key Facts limits."""

    table: tuple[tuple[str, int], ...]  # (section, body budget) in document order
    oversized_tokens: int = MAX_TOKENS
    emergency_tokens: int = EMERGENCY_TOKENS
    # The rendered document's bound a commit holds (None: the section table alone, as a bare merge keeps it); not part
    # of equality, so the size rules a model reads back from its instructions compare equal.
    document: int | None = field(default=None, compare=False)

    @classmethod
    def of_sections(cls, sections: Mapping[str, int], document: int | None = None) -> Budgets:
        """The size rules of these section budgets: Key Facts oversized past half its budget, emergency past all."""
        facts = sections["Key Facts & Decisions"]
        return cls(tuple((name, sections[name]) for name in SECTIONS), facts * MAX_TOKENS // EMERGENCY_TOKENS, facts,
                   document)

    @property
    def sections(self) -> Mapping[str, int]:
        """Each section's body budget, read-only."""
        return MappingProxyType(dict(self.table))

    @property
    def total(self) -> int:
        """The sum of the section budgets."""
        return sum(budget for _, budget in self.table)

    def oversized(self, n: int, t: int) -> bool:
        """`is_oversized` under this budget."""
        return is_oversized(n, t, self.oversized_tokens)

    def emergency(self, n: int, t: int) -> bool:
        """`is_emergency` under this budget."""
        return is_emergency(n, t, self.emergency_tokens)


def valid_memory_budget(value: object) -> int | None:
    """A memory budget as the pure functions take it: a positive int, anything else (None, bools, text) None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def memory_budget_for(trigger_tokens: int) -> int:
    """The default memory budget of a commit trigger: 400 tokens up to an 8 000-token trigger, plus a fifth
    of the trigger beyond; at most the section table with its headings (`MAX_MEMORY_BUDGET`)."""
    return min(MAX_MEMORY_BUDGET, MIN_MEMORY_BUDGET + max(0, int(trigger_tokens) - SMALL_TRIGGER) // 5)


def scaled_table(room: int) -> dict[str, int]:
    """the section table scaled to `room` tokens of bodies: no section under 60 tokens while the sum still fits,
    else the floor drops until it does (a floor never takes a section over its own table budget)."""
    if room >= TABLE_TOTAL:
        return dict(SECTION_BUDGETS)
    scaled = {name: int(budget * max(room, 0) / TABLE_TOTAL) for name, budget in SECTION_BUDGETS.items()}
    for floor in range(MIN_SECTION_BUDGET, 0, -1):
        table = {name: max(floor, value) for name, value in scaled.items()}
        if sum(table.values()) <= room:
            return table
    return scaled


@lru_cache(maxsize=64)
def budgets(memory_budget: int | None = None) -> Budgets:
    """The size rules for a memory of `memory_budget` tokens, the rendered document; None → the section table
    with no document bound (a bare merge)."""
    if memory_budget is None:
        return Budgets.of_sections(SECTION_BUDGETS)
    return Budgets.of_sections(scaled_table(memory_budget - DOCUMENT_OVERHEAD), document=memory_budget)


FULL_BUDGETS = budgets()
# An engine's default, from the default trigger (half of the default 128 k context window): the full table.
DEFAULT_MEMORY_BUDGET = memory_budget_for(trigger_tokens(DEFAULT_TRIGGER, DEFAULT_CONTEXT_WINDOW))




def section_reminders(md: str | None, limits: Budgets = FULL_BUDGETS) -> str:
    """Size warnings before an update call; '' when no section needs one.

    The reference rule: every oversized section except Errors & Corrections. Added: every other
    section (Errors & Corrections and Session Title excepted, they cannot be consolidated by UPDATE)
    at 75 % of its budget or more, so the model consolidates before anything spills. The spill
    pointer counts for nothing.
    """
    sections = parse_sections(md)
    lines = []
    for name in SECTIONS:
        body = split_pointer(sections.get(name, ""))[0]
        if name == "Errors & Corrections" or not body:
            continue
        n, t = bullet_count(body), body_tokens(body)
        if limits.oversized(n, t):
            lines.append(_REMINDER_LINE.format(name=name, n=n, t=t, target=limits.oversized_tokens))
        elif name != "Session Title" and t * 4 >= limits.sections[name] * 3:
            lines.append(_BUDGET_LINE.format(name=name, t=t, budget=limits.sections[name]))
    if not lines:
        return ""
    return "<section_size_warnings>\n" + "\n".join(lines) + "\n</section_size_warnings>"
