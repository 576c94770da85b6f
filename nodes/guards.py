"""Per-section guards that refuse information loss before a merge; pure functions of (old, op).

`guard_ops` decides, for all seven sections, the op that will be merged: junk becomes KEEP, own
headers and list markers are cleaned, each section's guard runs on a non-empty old body, and every
APPEND is deduplicated. Each decision that changes an op is returned as a `GuardNote`. `merge`
applies the decided ops without running the guards again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from workmem.nodes.dedupe import dedupe_items
from workmem.nodes.guard_words import (
    ANCHOR_DECISION_WORDS,
    ANCHOR_STOPWORDS,
    ANCHOR_UNITS,
    PATH_EXTENSIONS,
    RESOLVED_TAG,
    RESTORED_TAG,
    TITLE_STOPWORDS,
)
from workmem.state.commit_state import CommitState, GuardNote, memory_budget_of
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    FULL_BUDGETS,
    SECTIONS,
    Budgets,
    body_tokens,
    budgets,
    bullet_items,
    clean_item,
    escape_body,
    is_own_header,
    is_v2,
    parse_sections,
    split_lines,
    split_pointer,
    strip_own_header,
)
from workmem.state.ops import KEEP, canonical_ops, create_as_update_ops
from workmem.state.search.words import MONTH_NAMES

# Marks on a decided Key Facts op for the budgets (`nodes/spill.py`): an APPEND that salvages a rejected
# UPDATE (past the budget it is spilled at once), and the new items of an UPDATE rejected at emergency size
# (the section KEEPs; they go straight to the archive).
SALVAGE = "salvage"
TO_ARCHIVE = "to_archive"
# Under a memory budget (a commit's), the new items a size rule refuses — past the oversized-APPEND cap, or a
# sentinel round's — are marked too, and the budgets archive them: nothing refused for size vanishes.
REFUSED = "refused"
OVERSIZED_APPEND_CAP = 5

Op = dict[str, Any]
Decision = tuple[Op, list[GuardNote]]

_MONTHS = "|".join(map(re.escape, MONTH_NAMES))
_UNITS = "|".join(map(re.escape, ANCHOR_UNITS))
_DECISION_WORDS = "|".join(map(re.escape, ANCHOR_DECISION_WORDS))
_CASE_FREE_ANCHORS = re.compile(
    rf"""\b\d{{4}}-\d{{2}}-\d{{2}}\b
    | \b\d{{1,2}}\s+(?:{_MONTHS})\s+\d{{4}}\b
    | \b\d+(?:[.,]\d+)?\s+(?:{_UNITS})\b
    | \$\d[\d,]*(?:\.\d+)?
    | \b(?:{_DECISION_WORDS})\b""",
    re.IGNORECASE | re.VERBOSE,
)
_CLOCK_TIME = re.compile(r"\b(\d{1,2}(?::\d{2})?)\s*([ap]m)\b", re.IGNORECASE)
_CAPITALISED = re.compile(r"(?<![A-Za-z])[A-Z][a-zA-Z]{2,}")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9.]{2,}|\d+")
_PATH_RUN = re.compile(r"[\w./\\-]+")
_PATH_EXT = re.compile(rf"\.(?:{'|'.join(map(re.escape, PATH_EXTENSIONS))})$", re.I)
_SLASH_PATH = re.compile(r"(?<![\w.\-])[A-Za-z_][\w.-]*(?:/[A-Za-z_][\w.-]*)+")
log = logging.getLogger("workmem.guards")


def meaningful_words(text: str) -> set[str]:
    """Title words (`[A-Za-z][A-Za-z0-9.]{2,}` or digit runs), lowercased, trailing dots off, no stopwords."""
    words = {match.group().lower().rstrip(".") for match in _WORD.finditer(text or "")}
    return {word for word in words if word and word not in TITLE_STOPWORDS}


def lexical_anchors(text: str) -> set[str]:
    """Dates, counted quantities, amounts, clock times, decision verbs and capitalised names, lowercased."""
    text = text or ""
    anchors = {" ".join(m.group().lower().split()).rstrip(",") for m in _CASE_FREE_ANCHORS.finditer(text)}
    anchors |= {f"{m.group(1)} {m.group(2).lower()}" for m in _CLOCK_TIME.finditer(text)}
    for match in _CAPITALISED.finditer(text):
        word = match.group().lower()
        if word not in ANCHOR_STOPWORDS:
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


def note(section: str, guard: str, action: str, detail: str) -> GuardNote:
    """One guard decision that changed an op."""
    return {"section": section, "guard": guard, "action": action, "detail": detail}


def _append_or_keep(items: list[str]) -> Op:
    return {"op": "APPEND", "items": items} if items else dict(KEEP)


def _new_items(old_body: str, items: Iterable[str]) -> list[str]:
    cleaned = [clean_item(item) for item in items]
    return dedupe_items(bullet_items(old_body), [item for item in cleaned if item])


def _guard_title(name: str, old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, []
    old_words = meaningful_words(old_body)
    if not old_words or old_words & meaningful_words(op["content"]):
        return op, []
    return dict(KEEP), [note(name, "title", "rejected", "the UPDATE shares no meaningful word with the old title")]


def _guard_files(name: str, old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, []
    old_paths = path_tokens(old_body)
    new_paths = path_tokens(op["content"])
    lost = old_paths - new_paths
    if not lost:
        return op, []
    added = new_paths - old_paths
    lines = [line for line in split_lines(op["content"]) if path_tokens(line) & added]
    items = _new_items(old_body, lines)
    return _append_or_keep(items), [note(name, "files", "demoted", f"the UPDATE loses paths {sorted(lost)}; "
                                         f"{len(items)} line(s) with new paths appended instead")]


def _guard_errors(name: str, old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, []
    items = _new_items(old_body, content_items(op["content"]))
    return _append_or_keep(items), [note(name, "errors", "demoted",
                                         f"append-only: the UPDATE became an APPEND of {len(items)} new item(s)")]


def content_items(content: str) -> list[str]:
    """The items of a model's UPDATE content: its lines, list markers off. A `#` line is the model's text (stored
    escaped, as an UPDATE applied whole stores it), not a heading; only a section's header is left out."""
    lines = [line for line in split_lines(content) if not any(is_own_header(s, line) for s in SECTIONS)]
    return bullet_items(escape_body("\n".join(lines)))


def _issue_key(item: str) -> str:
    return item.lower().strip("_*` ")[:40].strip()


def _guard_open_issues(name: str, old_body: str, op: Op) -> Decision:
    if op["op"] != "UPDATE":
        return op, []
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
        return op, []
    restored = "\n".join(f"- {RESTORED_TAG} {item}" for item in dropped)
    merged = f"{content.strip()}\n{restored}" if content.strip() else restored
    return {"op": "UPDATE", "content": merged}, [
        note(name, "open_issues", "restored", f"{len(dropped)} silently dropped item(s) restored")]


def _guard_key_facts(name: str, old_body: str, op: Op, limits: Budgets = FULL_BUDGETS) -> Decision:
    if op["op"] == "KEEP":
        return op, []
    old_items = bullet_items(old_body)
    n, t = len(old_items), body_tokens(old_body)
    if op["op"] == "APPEND":
        return _throttled_append(name, old_body, n, t, op["items"], limits)
    rejection = _key_facts_update_rejection(old_body, n, op["content"])
    if rejection is None:
        return op, []
    salvaged = _new_items(old_body, content_items(op["content"]))
    if limits.emergency(n, t):
        # Nothing is salvaged into a section at emergency size (KEEP); its new items go to the archive.
        return {**KEEP, TO_ARCHIVE: salvaged} if salvaged else dict(KEEP), [note(
            name, "key_facts", "rejected",
            f"UPDATE rejected ({rejection}); emergency size: {len(salvaged)} new item(s) moved to the archive")]
    if not salvaged:
        return dict(KEEP), [note(name, "key_facts", "rejected", f"UPDATE rejected ({rejection}); nothing new")]
    return {"op": "APPEND", "items": salvaged, SALVAGE: True}, [note(
        name, "key_facts", "salvaged", f"UPDATE rejected ({rejection}); {len(salvaged)} new item(s) appended")]


def _key_facts_update_rejection(old_body: str, n: int, content: str) -> str | None:
    """Why a Key Facts UPDATE loses too much (bullet ratio < 0.15 or anchor coverage < 0.70), else None."""
    if n == 0:
        return None
    kept = len(content_items(content))
    if kept * 100 < 15 * n:
        return f"bullets {kept}/{n} < 0.15"
    old_anchors = lexical_anchors(old_body)
    if not old_anchors:
        return None
    covered = len(old_anchors & lexical_anchors(content))
    if covered * 100 < 70 * len(old_anchors):
        return f"anchor coverage {covered}/{len(old_anchors)} < 0.70"
    return None


def _throttled_append(name: str, old_body: str, n: int, t: int, items: Iterable[str], limits: Budgets) -> Decision:
    """The Key Facts APPEND rule: accept; at most 5 new items when oversized; only the sentinel at emergency.
    Under a memory budget the items it refuses are marked `REFUSED` for the archive."""
    new = _new_items(old_body, items)

    def refusing(op: Op, refused: list[str]) -> Op:
        return {**op, REFUSED: refused} if refused and limits.document is not None else op

    if limits.emergency(n, t):
        if CONSOLIDATION_SENTINEL in old_body:
            return refusing(dict(KEEP), new), [
                note(name, "key_facts", "sentinel", "emergency size, sentinel already present")]
        return refusing({"op": "APPEND", "items": [CONSOLIDATION_SENTINEL]}, new), [
            note(name, "key_facts", "sentinel", "emergency size: only the consolidation sentinel is appended")]
    if limits.oversized(n, t) and len(new) > OVERSIZED_APPEND_CAP:
        return refusing(_append_or_keep(new[:OVERSIZED_APPEND_CAP]), new[OVERSIZED_APPEND_CAP:]), [
            note(name, "key_facts", "throttled", f"oversized: {OVERSIZED_APPEND_CAP} of {len(new)} new items kept")]
    return _append_or_keep(new), []


_GUARDS: dict[str, Callable[[str, str, Op], Decision]] = {
    "Session Title": _guard_title,
    "Key Facts & Decisions": _guard_key_facts,
    "Files & Context": _guard_files,
    "Errors & Corrections": _guard_errors,
    "Open Issues": _guard_open_issues,
}


def clean_op(name: str, op: Op) -> Op:
    """An op as models should have written it: no own header atop an UPDATE, APPEND items on one line
    each, without list markers, empties and own-header items dropped."""
    if op["op"] == "UPDATE":  # a pointer line written by the model is dropped: merge owns the pointer
        return {"op": "UPDATE", "content": split_pointer(strip_own_header(name, op["content"]))[0]}
    if op["op"] == "APPEND":
        items = [item for item in map(clean_item, op["items"])
                 if item and not is_own_header(name, item) and not split_pointer(item)[1]]
        return _append_or_keep(items)
    return op


def _dedupe(name: str, old_body: str, op: Op) -> Decision:
    """Every APPEND loses the items its section (or the batch) already holds."""
    if op["op"] != "APPEND":
        return op, []
    kept = dedupe_items(bullet_items(old_body), op["items"])
    dropped = len(op["items"]) - len(kept)
    if not dropped:
        return op, []
    marks = {k: v for k, v in op.items() if k not in ("op", "items")}
    return {**op, "items": kept} if kept else {**KEEP, **marks}, [note(name, "dedupe", "deduped",
                                                                        f"{dropped} item(s) already present")]


def _decide(name: str, old_body: str, op: Op, limits: Budgets) -> Decision:
    """The op merge applies to section `name` (cleaned, guarded, deduplicated) and the notes of what changed."""
    op = clean_op(name, op)
    notes: list[GuardNote] = []
    guard = _GUARDS.get(name)
    if guard is _guard_key_facts and old_body.strip():
        op, notes = _guard_key_facts(name, old_body, op, limits)
    elif guard is not None and old_body.strip():
        op, notes = guard(name, old_body, op)
    op, more = _dedupe(name, old_body, op)
    return op, notes + more


def guard_ops(old_sections: Mapping[str, str], ops: object,
              limits: Budgets = FULL_BUDGETS) -> tuple[dict[str, Op], list[GuardNote]]:
    """Decide all seven ops; returns them and one note per guard decision that changed one. Never raises.

    `limits`: the size rules of the commit's memory budget (default the section table)."""
    given = canonical_ops(ops)
    old = old_sections if isinstance(old_sections, Mapping) else {}
    guarded: dict[str, Op] = {}
    notes: list[GuardNote] = []
    for name in SECTIONS:
        body = old.get(name, "")
        guarded[name], found = _decide(name, body if isinstance(body, str) else "", given[name], limits)
        notes.extend(found)
    return guarded, notes


def guard(state: CommitState) -> dict[str, Any]:
    """Node `guard`: decide this chunk's seven ops (a create answer becomes UPDATEs) and keep the notes."""
    old = state.get("working_memory") or ""
    ops = state.get("ops") or {}
    section_ops = ops.get("sections") or {}
    if ops.get("kind") == "create":
        section_ops = create_as_update_ops(section_ops)
    bare = {name: split_pointer(body)[0] for name, body in parse_sections(old).items()} if is_v2(old) else {}
    guarded, notes = guard_ops(bare, section_ops, budgets(memory_budget_of(state)))
    for found in notes:
        log.debug("guard %s/%s %s: %s", found["section"], found["guard"], found["action"], found["detail"])
    return {"guarded_ops": guarded, "guard_notes": notes, "route": ["guard"]}
