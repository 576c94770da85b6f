"""Files & Context for the extractive model: the artifact trail merged into the section, within its budget.

An entry the section already holds and a file the new messages touched are one entry: their segments are
merged (line ranges and definitions joined, the newest command kept). Entries are ordered edited files
first (newest first within a tier, files the new messages did not touch after; the section is read back the
same way, its top line the newest, so a rewrite keeps the order of what it did not touch). When the section would
pass its budget, entries are shortened to what was done (`read`, `tested`) from the least important up,
then new entries of the least important tiers are left out (the archive keeps them), never a new edit or a
new file; an old entry is never left out — the Files & Context guard refuses an UPDATE that loses a path —
so when even the short old entries and the new edits do not fit, the least important come first, where the
budget's spill takes the first lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from workmem.nodes.extractive.agent_goals import TRAIL_SEPARATOR
from workmem.nodes.extractive.tracking import list_op
from workmem.nodes.extractive.trail import TIERS, FileTrail, Trail, line_ranges, merged_spans, segments, twins
from workmem.nodes.guards import path_tokens
from workmem.nodes.spill import POINTER_TOKENS
from workmem.state.memory import bullet_items, split_pointer
from workmem.state.tokens import count_tokens

SEPARATOR = TRAIL_SEPARATOR
MAX_NAMES = 3
OTHER_TIER = 5  # an entry without a kind it can be ranked by (a bare path, another writer's entry)
WRITTEN_TIER = TIERS["created"]  # a new edit or a new file is never left out: the old entries it outgrows spill
_SEGMENT_RE = re.compile(r"^(?P<kind>[a-z]+)(?: (?P<ranges>L\d+(?:-\d+)?(?:, L\d+(?:-\d+)?)*))?"
                         r"(?: in (?P<names>[\w.]+(?:, [\w.]+)*))?(?: by (?P<script>\S+))?$")
_RANGE_RE = re.compile(r"L(\d+)(?:-(\d+))?")
_KIND_ORDER = ("edited", "changed", "restored", "created", "removed", "ran", "tested", "read", "searched")


@dataclass
class Entry:
    """One Files & Context item being built: its path, segments, rank and the old text it came from."""

    path: str
    parts: list[str]
    tier: int
    recency: int
    old_text: str | None = None
    brief_parts: list[str] | None = None

    def text(self, brief: bool = False) -> str:
        """The item, or its short form (another writer's entry: as it was)."""
        if self.old_text is not None and SEPARATOR not in self.old_text:
            return self.old_text
        parts = self.brief_parts if brief and self.brief_parts is not None else self.parts
        return f"{self.path}{SEPARATOR}{'; '.join(parts)}" if parts else self.path


def _kind(segment: str) -> str:
    return segment.split(" ", 1)[0].rstrip(":")


def entry_path(item: str) -> str:
    """The path an entry names: the text before its separator (an entry another writer wrote: its first
    path-like token, else all of it)."""
    if SEPARATOR in item:
        return item.partition(SEPARATOR)[0].strip().strip("`")
    return next((w.strip("`'\"(),;:") for w in item.split() if path_tokens(w.strip("`'\"(),;:"))), item)


def _tier(parts: list[str]) -> int:
    return min((TIERS.get(_kind(p), OTHER_TIER) for p in parts), default=OTHER_TIER)


def _ranges(text: str | None) -> list[tuple[int, int]]:
    return [(int(a), int(b or a)) for a, b in _RANGE_RE.findall(text or "")]


def _merge_one(old: str, new: str) -> str:
    """One kind's segment from an old and a new one: ranges and definitions joined, the newest rest."""
    a, b = _SEGMENT_RE.match(old), _SEGMENT_RE.match(new)
    if not a or not b or _kind(new) in ("ran", "tested"):
        return new
    merged = merged_spans(_ranges(a.group("ranges")) + _ranges(b.group("ranges")))
    names = list(dict.fromkeys([*(a.group("names") or "").split(", "), *(b.group("names") or "").split(", ")]))
    names = [n for n in names if n][-MAX_NAMES:]
    text = b.group("kind")
    if merged:
        text += " " + line_ranges(merged)
    if names:
        text += " in " + ", ".join(names)
    script = b.group("script") or a.group("script")
    return text + (f" by {script}" if script else "")


def merge_parts(old: list[str], new: list[str]) -> list[str]:
    """The segments of an old entry and of what the new messages did to the same file."""
    by_kind: dict[str, str] = {}
    for part in old:
        by_kind[_kind(part)] = part
    for part in new:
        kind = _kind(part)
        by_kind[kind] = _merge_one(by_kind[kind], part) if kind in by_kind else part
    order = {k: i for i, k in enumerate(_KIND_ORDER)}
    return sorted(by_kind.values(), key=lambda p: order.get(_kind(p), len(order)))


def _brief(parts: list[str]) -> list[str]:
    """The kinds of the segments that matter most (the edit, the run; else the one thing done)."""
    kinds = list(dict.fromkeys(_kind(p) for p in parts))
    top = max(min((TIERS.get(k, OTHER_TIER) for k in kinds), default=OTHER_TIER), 2)
    return [k for k in kinds if TIERS.get(k, OTHER_TIER) <= top]


def entries(old_items: list[str], trail: Trail, extra_paths: list[str]) -> list[Entry]:
    """Old entries merged with the trail's files (and bare `extra_paths`), ranked."""
    old = {entry_path(item): item for item in old_items}
    out: dict[str, Entry] = {}
    for position, (path, item) in enumerate(old.items()):
        parts = item.partition(SEPARATOR)[2].split("; ") if SEPARATOR in item else []
        out[path] = Entry(path, parts, _tier(parts), -position, item)  # written newest first: the top line is newest
    touched: list[FileTrail] = trail.entries()
    for f in touched:
        new_parts = segments(f)
        if f.path not in out:  # the same file as an old entry wrote it (absolute there, relative here)
            f.path = next((p for p in out if twins(p, f.path)), f.path)
        if f.path in out and SEPARATOR not in (out[f.path].old_text or SEPARATOR):
            continue  # another writer's entry for this file stays as it was
        if f.path in out:
            e = out[f.path]
            e.parts = merge_parts(e.parts, new_parts)
            e.tier, e.recency = _tier(e.parts), f.last
        else:
            out[f.path] = Entry(f.path, new_parts, f.tier, f.last)
        out[f.path].brief_parts = _brief(out[f.path].parts)
    for path in extra_paths:
        out.setdefault(path, Entry(path, [], OTHER_TIER, -len(old) - 1))
    for e in out.values():
        if e.brief_parts is None:
            e.brief_parts = _brief(e.parts)
    return sorted(out.values(), key=lambda e: (e.tier, -e.recency, e.path))


def _render(chosen: list[Entry], brief_from: int | None) -> list[str]:
    return [e.text(brief=brief_from is not None and e.tier >= brief_from) for e in chosen]


def _tokens(items: list[str]) -> int:
    return count_tokens("\n".join(f"- {i}" for i in items))


def fitted(ranked: list[Entry], budget: int) -> list[str]:
    """The items within `budget`: shorten from the least important tier up, then leave new entries out."""
    tiers = sorted({e.tier for e in ranked}, reverse=True)
    steps: list[tuple[int | None, int | None]] = [(None, None)]
    for tier in tiers:
        steps += [(tier, None), (tier, tier)] if tier > WRITTEN_TIER else [(tier, None)]
    for brief_from, drop_from in steps:
        chosen = [e for e in ranked if e.old_text is not None or drop_from is None or e.tier < drop_from]
        items = _render(chosen, brief_from)
        if _tokens(items) <= budget:
            return items
    # Even the short old entries do not fit: the least important first, where the spill takes the first lines.
    kept = [e for e in ranked if e.old_text is not None or e.tier <= WRITTEN_TIER]
    return _render(sorted(kept, key=lambda e: (-e.tier, e.recency)), 0)


def _keep_paths(old_body: str, items: list[str], old_items: list[str]) -> list[str]:
    """Put an old item back as it was when the new items lost one of its path-like tokens (the guard's rule)."""
    lost = path_tokens(old_body) - path_tokens("\n".join(items))
    if not lost:
        return items
    restore = {entry_path(o): o for o in old_items if path_tokens(o) & lost}
    return [restore.get(entry_path(i), i) for i in items] + [
        o for p, o in restore.items() if p not in {entry_path(i) for i in items}]


def files_op(old_body: str, trail: Trail, budget: int, extra_paths: list[str]) -> dict[str, Any]:
    """The Files & Context op: KEEP, APPEND the new entries, or UPDATE to the merged, ranked, fitted list."""
    body, archived = split_pointer(old_body)
    old_items = bullet_items(body)
    room = budget - (POINTER_TOKENS if archived else 0)
    items = _keep_paths(body, fitted(entries(old_items, trail, extra_paths), room), old_items)
    return list_op(old_items, items)
