"""Merge of section ops into the working memory (§4, §5): apply the decided ops; pure and never raising.

`merge_working_memory(old, ops)` is the guarded API for callers and tests: it decides the ops with
`guard_ops` and applies them. The graph's `merge` node applies the ops its `guard` node already
decided, so the guards run once per chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workmem.nodes.guards import guard_ops
from workmem.state.commit_state import CommitState
from workmem.state.memory import SECTIONS, escape_body, is_v2, parse_sections, render_sections
from workmem.state.ops import canonical_op


def canonical_sections(markdown: object) -> dict[str, str]:
    """The seven canonical bodies of a document (missing → ''); non-canonical sections are dropped."""
    parsed = parse_sections(markdown) if isinstance(markdown, str) else {}
    return {name: parsed.get(name, "") for name in SECTIONS}


def apply_op(old_body: str, op: object) -> str:
    """Apply one decided op: KEEP → old body verbatim; UPDATE → escaped stripped content; APPEND → new bullets."""
    canonical, _ = canonical_op(op)
    if canonical["op"] == "UPDATE":
        return escape_body(canonical["content"]).strip()
    if canonical["op"] == "APPEND" and canonical["items"]:
        lines = "\n".join(f"- {item}" for item in canonical["items"])
        return f"{old_body}\n{lines}" if old_body else lines
    return old_body


def apply_ops(old_sections: Mapping[str, str], decided: Mapping[str, Any]) -> dict[str, str]:
    """The seven new bodies: each section's decided op applied to its old body (a missing op is KEEP)."""
    return {name: apply_op(old_sections.get(name, ""), decided.get(name)) for name in SECTIONS}


def merge_working_memory(old_markdown: str, ops: dict | None) -> str:
    """Guard then merge ops into a WM document; never raises — junk ops mean KEEP; always seven sections."""
    old = canonical_sections(old_markdown)
    decided, _ = guard_ops(old, ops)
    return render_sections(apply_ops(old, decided))


def merge(state: CommitState) -> dict[str, Any]:
    """Node `merge`: apply the ops `guard` decided to the WM and move on to the next chunk."""
    old = state.get("working_memory") or ""
    decided = state.get("guarded_ops")
    merged = render_sections(apply_ops(canonical_sections(old if is_v2(old) else ""),
                                       decided if isinstance(decided, Mapping) else {}))
    return {
        "working_memory": merged,
        "chunk_index": state.get("chunk_index", 0) + 1,
        "prompt_kind": "update",
        "create_retry_used": False,
        "answer": {}, "ops": {}, "guarded_ops": {}, "raw_args": "", "model_error": "", "attempt": 0,
        "transport_error": "",
        "route": ["merge"],
    }
