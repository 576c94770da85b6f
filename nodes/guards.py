"""Per-section guards that refuse information loss before a merge (§5); pure functions of (old, op)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workmem.state.commit_state import CommitState
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    SECTIONS,
    body_tokens,
    bullet_items,
    clean_item,
    is_emergency,
    is_oversized,
    is_v2,
    parse_sections,
    split_lines,
)
from workmem.state.ops import KEEP, canonical_op, canonical_ops, create_as_update_ops

RESTORED_TAG = "[silently dropped, restored]"
RESOLVED_TAG = "[resolved]"
OVERSIZED_APPEND_CAP = 5

Op = dict[str, Any]
Decision = tuple[Op, str | None]

_TITLE_STOPWORDS = frozenset(
    "the a an and or of to in on for with by at from session title working memory plan plans notes note"
    .split()
)
_ANCHOR_STOPWORDS = frozenset(
    """the a an and or of to in on for with by at from is are was were has have had been be will would could
    should may might shall this that these those not no but if then so as it its they their them she her he
    him his we our us you your who which what when where how why all each every both few more most other some
    such than too very also just about after before between into through during again further once here there
    over under out up down off own same only new old key facts decisions session working memory""".split()
)
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_UNITS = (
    "years?|months?|weeks?|days?|kids?|children|hours?|miles?|times?|sessions?|rounds?|visits?|dollars?"
    "|euros?|pounds?|bedrooms?|paintings?|people|persons?"
)
_CASE_FREE_ANCHORS = re.compile(
    rf"""\b\d{{4}}-\d{{2}}-\d{{2}}\b
    | \b\d{{1,2}}\s+(?:{_MONTHS})\s+\d{{4}}\b
    | \b\d+(?:[.,]\d+)?\s+(?:{_UNITS})\b
    | \$\d[\d,]*(?:\.\d+)?
    | \b(?:because|decided|chose|committed|agreed|resolved)\b""",
    re.IGNORECASE | re.VERBOSE,
)
_CLOCK_TIME = re.compile(r"\b(\d{1,2}(?::\d{2})?)\s*([ap]m)\b", re.IGNORECASE)
_CAPITALISED = re.compile(r"(?<![A-Za-z])[A-Z][a-zA-Z]{2,}")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9.]{2,}|\d+")
_PATH_RUN = re.compile(r"[\w./\\-]+")
PATH_EXTENSIONS = "py|ts|tsx|js|jsx|md|yaml|yml|json|sh|ps1|cmd|bat|toml|ini|cfg|rs|go"  # §5 Files & Context
_PATH_EXT = re.compile(rf"\.(?:{PATH_EXTENSIONS})$", re.I)
_SLASH_PATH = re.compile(r"(?<![\w.\-])[A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*)+")
_EMPHASIS = re.compile(r"[*`~]+|(?<!\w)_+|_+(?!\w)")


def meaningful_words(text: str) -> set[str]:
    """Title words (`[A-Za-z][A-Za-z0-9.]{2,}` or digit runs), lowercased, trailing dots off, no stopwords."""
    words = {match.group().lower().rstrip(".") for match in _WORD.finditer(text or "")}
    return {word for word in words if word and word not in _TITLE_STOPWORDS}


def lexical_anchors(text: str) -> set[str]:
    """Dates, counted quantities, amounts, clock times, decision verbs and capitalised names, lowercased."""
    text = text or ""
    anchors = {" ".join(m.group().lower().split()).rstrip(",") for m in _CASE_FREE_ANCHORS.finditer(text)}
    anchors |= {f"{m.group(1)} {m.group(2).lower()}" for m in _CLOCK_TIME.finditer(text)}
    for match in _CAPITALISED.finditer(text):
        word = match.group().lower()
        if word not in _ANCHOR_STOPWORDS:
            anchors.add(word)
    return anchors


def path_tokens(text: str) -> set[str]:
    """Path-like tokens (known file extensions or `a/b` runs), lowercased, trailing `.,;:)` removed."""
    text = text or ""
    found = set()
    for match in _PATH_RUN.finditer(text):
        token = match.group().rstrip(".,;:)")
        ext = _PATH_EXT.search(token)
        if ext and re.search(r"\w", token[: ext.start()]):
            found.add(token.lower())
    for match in _SLASH_PATH.finditer(text):
        found.add(match.group().rstrip(".,;:)").lower())
    return found


def normalize_item_tokens(item: str) -> list[str]:
    """Tokens used by dedupe: lowercase, emphasis/backticks removed, split, trailing punctuation dropped."""
    text = _EMPHASIS.sub("", (item or "").lower())
    tokens = (token.rstrip(".,;:!?") for token in text.split())
    return [token for token in tokens if token]


def _contains_run(haystack: list[str], needle: list[str]) -> bool:
    # Tokens never contain spaces, so a space-delimited substring test is a contiguous-run test.
    return f" {' '.join(needle)} " in f" {' '.join(haystack)} "


def dedupe_items(existing_items: Iterable[str], new_items: Iterable[str]) -> list[str]:
    """Keep the new items whose token run is not inside an existing (or earlier new) item's tokens."""
    seen = [tokens for tokens in map(normalize_item_tokens, existing_items) if tokens]
    kept = []
    for item in new_items:
        tokens = normalize_item_tokens(item)
        if not tokens or any(_contains_run(other, tokens) for other in seen):
            continue
        seen.append(tokens)
        kept.append(item)
    return kept


def _append_or_keep(items: list[str]) -> Op:
    return {"op": "APPEND", "items": items} if items else dict(KEEP)


def _new_items(old_body: str, items: Iterable[str]) -> list[str]:
    cleaned = [clean_item(item) for item in items]
    return dedupe_items(bullet_items(old_body), [item for item in cleaned if item])


def _guard_title(old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, None
    old_words = meaningful_words(old_body)
    if not old_words or old_words & meaningful_words(op["content"]):
        return op, None
    return dict(KEEP), "UPDATE shares no meaningful word with the old title -> KEEP"


def _guard_files(old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, None
    old_paths = path_tokens(old_body)
    new_paths = path_tokens(op["content"])
    lost = old_paths - new_paths
    if not lost:
        return op, None
    added = new_paths - old_paths
    lines = [line for line in split_lines(op["content"]) if path_tokens(line) & added]
    items = _new_items(old_body, lines)
    demoted = _append_or_keep(items)
    return demoted, f"UPDATE loses paths {sorted(lost)} -> {demoted['op']} of {len(items)} line(s)"


def _guard_errors(old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, None
    items = _new_items(old_body, bullet_items(op["content"]))
    demoted = _append_or_keep(items)
    return demoted, f"append-only: UPDATE -> {demoted['op']} of {len(items)} new item(s)"


def _issue_key(item: str) -> str:
    return item.lower().strip("_*` ")[:40].strip()


def _guard_open_issues(old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, None
    content = op["content"]
    lowered = content.lower()
    dropped = [
        item
        for item in bullet_items(old_body)
        if RESTORED_TAG not in item.lower()
        and RESOLVED_TAG not in item.lower()
        and _issue_key(item) not in lowered
    ]
    if not dropped:
        return op, None
    restored = "\n".join(f"- {RESTORED_TAG} {item}" for item in dropped)
    merged = f"{content.strip()}\n{restored}" if content.strip() else restored
    return {"op": "UPDATE", "content": merged}, f"{len(dropped)} silently dropped item(s) restored"


def _guard_key_facts(old_body: str, op: Op) -> Decision:
    if op["op"] == "KEEP":
        return op, None
    old_items = bullet_items(old_body)
    n, t = len(old_items), body_tokens(old_body)
    if op["op"] == "UPDATE":
        rejection = _key_facts_update_rejection(old_body, n, op["content"])
        if rejection is None:
            return op, None
        if is_emergency(n, t):
            return dict(KEEP), f"UPDATE rejected ({rejection}); emergency size, nothing salvaged -> KEEP"
        salvaged, note = _throttled_append(old_body, n, t, bullet_items(op["content"]))
        return salvaged, f"UPDATE rejected ({rejection}); salvage: {note}"
    return _throttled_append(old_body, n, t, op["items"])


def _key_facts_update_rejection(old_body: str, n: int, content: str) -> str | None:
    """Why a Key Facts UPDATE loses too much (bullet ratio < 0.15 or anchor coverage < 0.70), else None."""
    if n == 0:
        return None
    kept = len(bullet_items(content))
    if kept * 100 < 15 * n:
        return f"bullets {kept}/{n} < 0.15"
    old_anchors = lexical_anchors(old_body)
    if not old_anchors:
        return None
    covered = len(old_anchors & lexical_anchors(content))
    if covered * 100 < 70 * len(old_anchors):
        return f"anchor coverage {covered}/{len(old_anchors)} < 0.70"
    return None


def _throttled_append(old_body: str, n: int, t: int, items: Iterable[str]) -> Decision:
    """The Key Facts APPEND rule: accept; cap at 5 when oversized; only the sentinel at emergency size."""
    if is_emergency(n, t):
        if CONSOLIDATION_SENTINEL in old_body:
            return dict(KEEP), "emergency size, sentinel already present -> KEEP"
        return {"op": "APPEND", "items": [CONSOLIDATION_SENTINEL]}, "emergency size -> sentinel only"
    new = _new_items(old_body, items)
    if is_oversized(n, t):
        capped = new[:OVERSIZED_APPEND_CAP]
        return _append_or_keep(capped), f"oversized -> {len(capped)} of {len(new)} new item(s)"
    return _append_or_keep(new), None


_GUARDS: dict[str, Callable[[str, Op], Decision]] = {
    "Session Title": _guard_title,
    "Key Facts & Decisions": _guard_key_facts,
    "Files & Context": _guard_files,
    "Errors & Corrections": _guard_errors,
    "Open Issues": _guard_open_issues,
}


def _guard(name: str, old_body: str, op: object) -> Decision:
    canonical, _ = canonical_op(op)
    guard = _GUARDS.get(name)
    if guard is None or not isinstance(old_body, str) or not old_body.strip():
        return canonical, None
    return guard(old_body, canonical)



def guard_ops(old_sections: Mapping[str, str], ops: object) -> tuple[dict[str, Op], list[str]]:
    """Guard all seven sections; returns the ops to merge and one note per guard decision that changed one."""
    given = canonical_ops(ops)
    old = old_sections if isinstance(old_sections, Mapping) else {}
    guarded: dict[str, Op] = {}
    notes = []
    for name in SECTIONS:
        guarded[name], note = _guard(name, old.get(name, ""), given[name])
        if note:
            notes.append(f"{name}: {note}")
    return guarded, notes


def guard(state: CommitState) -> dict[str, Any]:
    """Node `guard`: run each section's guard on this chunk's ops (a create answer becomes UPDATEs)."""
    old = state.get("working_memory") or ""
    ops = state.get("ops") or {}
    section_ops = ops.get("sections") or {}
    if ops.get("kind") == "create":
        section_ops = create_as_update_ops(section_ops)
    guarded, notes = guard_ops(parse_sections(old) if is_v2(old) else {}, section_ops)
    return {"guarded_ops": guarded, "guard_notes": notes, "route": ["guard"]}
