"""Node `slice_turns`: snapshot the live messages and choose the covered seq range and its chunks."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from nodes.context import CommitContext, services
from nodes.formatting import chunk_messages
from state.commit_state import CommitState
from state.turns import choose_covered_range


def slice_turns(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Cover the live messages except the newest `keep_recent_count` (tool groups never split)."""
    svc = services(runtime)
    session_id = state["session_id"]
    live = svc.store.live_messages(session_id)
    if not live:
        return {"status": "skipped", "reason": "no_messages", "route": ["slice_turns"]}
    covered_range = choose_covered_range(live, state.get("keep_recent_count", 0))
    if covered_range is None:
        return {"status": "skipped", "reason": "all_within_keep_window", "route": ["slice_turns"]}
    start_seq, end_seq = covered_range
    covered = [m for m in live if start_seq <= m["seq"] <= end_seq]
    tail = [m for m in live if m["seq"] > end_seq]
    return {
        "status": "running",
        "start_seq": start_seq,
        "end_seq": end_seq,
        "covered_tokens": sum(m["tokens"] for m in covered),
        "tail": _tail_summary(tail),
        "chunks": [list(c) for c in chunk_messages(covered, budget_tokens=svc.chunk_tokens,
                                                     clip_tokens=svc.clip_tokens)],
        "chunk_index": 0,
        "route": ["slice_turns"],
    }


def _tail_summary(tail: list[dict[str, Any]]) -> dict[str, Any]:
    """The preserved tail as numbers only (it is recorded in archive.json)."""
    if not tail:
        return {"head_turn_id": None, "tail_turn_id": None, "head_seq": None, "tail_seq": None,
                "message_count": 0, "token_estimate": 0}
    return {
        "head_turn_id": tail[0]["turn_id"],
        "tail_turn_id": tail[-1]["turn_id"],
        "head_seq": tail[0]["seq"],
        "tail_seq": tail[-1]["seq"],
        "message_count": len(tail),
        "token_estimate": sum(m["tokens"] for m in tail),
    }
