"""Merge of section ops into the working memory (§4, §5): guard, then apply; pure and never raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workmem.nodes.guards import dedupe_items, guard_ops
from workmem.state.commit_state import CommitState
from workmem.state.memory import (
    SECTIONS,
    bullet_items,
    clean_item,
    escape_body,
    is_v2,
    parse_sections,
    render_sections,
)
from workmem.state.ops import KEEP, canonical_op, create_as_update_ops  # noqa: F401  (re-exported)


def canonical_sections(markdown: object) -> dict[str, str]:
    """The seven canonical bodies of a document (missing → ''); non-canonical sections are dropped."""
    parsed = parse_sections(markdown) if isinstance(markdown, str) else {}
    return {name: parsed.get(name, "") for name in SECTIONS}


def apply_op(old_body: str, op: object) -> str:
    """Apply one op: KEEP → old body verbatim; UPDATE → escaped stripped content; APPEND → new bullets."""
    canonical, _ = canonical_op(op)
    if canonical["op"] == "UPDATE":
        return escape_body(canonical["content"]).strip()
    if canonical["op"] == "APPEND":
        cleaned = [item for item in map(clean_item, canonical["items"]) if item]
        new = dedupe_items(bullet_items(old_body), cleaned)
        if new:
            lines = "\n".join(f"- {item}" for item in new)
            return f"{old_body}\n{lines}" if old_body else lines
    return old_body


def merge_sections(old_sections: Mapping[str, str], ops: object) -> tuple[dict[str, str], list[str]]:
    """Guard then apply the ops to all seven sections; returns the new bodies and the guard notes."""
    old = {name: old_sections.get(name, "") for name in SECTIONS}
    guarded, notes = guard_ops(old, ops)
    return {name: apply_op(old[name], guarded[name]) for name in SECTIONS}, notes


def merge_working_memory(old_markdown: str, ops: dict | None) -> str:
    """Merge ops into a WM document; never raises — junk ops mean KEEP; output has exactly seven sections."""
    merged, _ = merge_sections(canonical_sections(old_markdown), ops)
    return render_sections(merged)


def merge(state: CommitState) -> dict[str, Any]:
    """Node `merge`: apply the guarded ops to the WM and move on to the next chunk."""
    old = state.get("working_memory") or ""
    merged = merge_working_memory(old if is_v2(old) else "", state.get("guarded_ops"))
    return {
        "working_memory": merged,
        "chunk_index": state.get("chunk_index", 0) + 1,
        "prompt_kind": "update",
        "create_retry_used": False,
        "answer": {}, "verdict": "", "ops": {}, "guarded_ops": {}, "raw_args": "", "model_error": "",
        "route": ["merge"],
    }
