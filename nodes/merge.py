"""Merge of section ops into the working memory: apply the decided ops, then the budgets.

Pure and never raising. `merge_with_spill(old, ops)` is the guarded API for callers and tests: it
takes the spill pointers out, decides the ops with `guard_ops`, applies them, enforces the section
budgets (`nodes/spill.py`) and puts the pointers back; it returns the document and the spilled items.
`merge_working_memory` returns only the document. The graph's `merge` node applies the ops its
`guard` node already decided, so the guards run once per chunk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workmem.nodes.guards import guard_ops
from workmem.nodes.spill import KEY_FACTS, apply_budgets, fit_document, pointed_bodies
from workmem.state.commit_state import CommitState, GuardNote, memory_budget_of
from workmem.state.memory import (
    FULL_BUDGETS,
    SECTIONS,
    Archived,
    Budgets,
    budgets,
    escape_body,
    is_v2,
    parse_sections,
    read_pointer,
    render_sections,
    valid_memory_budget,
)
from workmem.state.ops import canonical_op


def canonical_sections(markdown: object) -> dict[str, str]:
    """The seven canonical bodies of a document (missing → ''); non-canonical sections are dropped."""
    parsed = parse_sections(markdown) if isinstance(markdown, str) else {}
    return {name: parsed.get(name, "") for name in SECTIONS}


def bodies_without_pointers(markdown: object) -> tuple[dict[str, str], dict[str, Archived]]:
    """The seven bodies as the guards and ops see them (no spill pointer), and what each pointer counts."""
    split = {name: read_pointer(body) for name, body in canonical_sections(markdown).items()}
    return {name: body for name, (body, _) in split.items()}, {name: n for name, (_, n) in split.items()}


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


def merge_decided(old_markdown: object, decided: Mapping[str, Any], *, key_facts_may_spill: bool = False,
                  limits: Budgets = FULL_BUDGETS) -> tuple[str, list[dict[str, str]], list[GuardNote]]:
    """Apply decided ops and the budgets to a document: (new document, spilled items, budget notes)."""
    old, counts = bodies_without_pointers(old_markdown)
    ops = {name: canonical_op(decided.get(name))[0] for name in SECTIONS}
    facts_op = decided.get(KEY_FACTS)  # with the guard's marks (salvage, to archive), which canonical_op drops
    budgeted = apply_budgets(old, apply_ops(old, ops), facts_op if isinstance(facts_op, Mapping) else {}, counts,
                             key_facts_may_spill=key_facts_may_spill, limits=limits)
    if limits.document is not None:
        markdown = fit_document(budgeted, counts, limits.document)
    else:
        markdown = render_sections(pointed_bodies(budgeted, counts))
    return markdown, budgeted.spilled, budgeted.notes


def merge_with_spill(old_markdown: str, ops: dict | None, *, key_facts_may_spill: bool = False,
                     memory_budget: int | None = None) -> tuple[str, list[dict[str, str]]]:
    """Guard, merge and budget ops into a WM document → (document, spilled items); never raises.

    `memory_budget`: the WM's total token budget (`state.memory.budgets`); None → the section table."""
    limits = budgets(valid_memory_budget(memory_budget))
    old, _ = bodies_without_pointers(old_markdown)
    decided, _ = guard_ops(old, ops, limits)
    markdown, spilled, _ = merge_decided(old_markdown, decided, key_facts_may_spill=key_facts_may_spill,
                                         limits=limits)
    return markdown, spilled


def merge_working_memory(old_markdown: str, ops: dict | None) -> str:
    """Guard then merge ops into a WM document; never raises — junk ops mean KEEP; always seven sections."""
    return merge_with_spill(old_markdown, ops)[0]


def merge(state: CommitState) -> dict[str, Any]:
    """Node `merge`: apply the ops `guard` decided and the budgets, and move on to the next chunk."""
    old = state.get("working_memory") or ""
    decided = state.get("guarded_ops")
    markdown, spilled, notes = merge_decided(old if is_v2(old) else "", decided if isinstance(decided, Mapping) else {},
                                             key_facts_may_spill=bool(state.get("key_facts_may_spill")),
                                             limits=budgets(memory_budget_of(state)))
    return {
        "working_memory": markdown,
        "spilled": spilled,
        "guard_notes": notes,
        "chunk_index": state.get("chunk_index", 0) + 1,
        "prompt_kind": "update",
        "create_retry_used": False,
        "answer": {}, "ops": {}, "guarded_ops": {}, "raw_args": "", "model_error": "", "attempt": 0,
        "transport_error": "",
        "route": ["merge"],
    }
