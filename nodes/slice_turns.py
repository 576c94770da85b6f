"""Node `slice_turns`: snapshot the live messages and choose the covered seq range and its chunks."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, clip_tokens_of, services
from workmem.nodes.formatting import chunk_messages
from workmem.nodes.prompts import create_prompt, update_prompt
from workmem.state.commit_state import CommitState, keep_of
from workmem.state.memory import section_reminders
from workmem.state.tokens import count_tokens
from workmem.state.turns import choose_covered_range

# Room left in every prompt for what the working memory gains from this commit's earlier chunks.
WM_GROWTH_TOKENS = 2_000
# The least transcript a chunk is given, however large the prompt around it.
MIN_TRANSCRIPT_TOKENS = 1_000


def slice_turns(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Cover the live messages except the tail `keep` asks for (tool groups never split; hidden messages
    are covered but left out of the transcripts)."""
    svc = services(runtime)
    session_id = state["session_id"]
    live = svc.sessions.live_messages(session_id)
    if not live:
        return {"status": "skipped", "reason": "no_messages", "route": ["slice_turns"]}
    covered_range = choose_covered_range(live, keep_of(state))
    if covered_range is None:
        return {"status": "skipped", "reason": "all_within_keep_window", "route": ["slice_turns"]}
    start_seq, end_seq = covered_range
    covered = [m for m in live if start_seq <= m["seq"] <= end_seq]
    tail = [m for m in live if m["seq"] > end_seq]
    hidden = sorted(s for s in svc.sessions.hidden(session_id) if start_seq <= s <= end_seq)
    budget = transcript_budget(svc.chunk_tokens, svc.sessions.latest_overview(session_id) or "")
    return {
        "status": "running",
        "start_seq": start_seq,
        "end_seq": end_seq,
        "covered_tokens": sum(m["tokens"] for m in covered),
        "tail": {**_tail_summary(tail), "keep": list(keep_of(state))},
        "hidden": hidden,
        "chunks": [list(c) for c in chunk_messages(covered, budget_tokens=budget,
                                                   clip_tokens=clip_tokens_of(state, svc), hidden=set(hidden))],
        "chunk_index": 0,
        "route": ["slice_turns"],
    }


def transcript_budget(chunk_tokens: int, working_memory: str) -> int:
    """Tokens left for a chunk's transcript once the prompt around it fits in `chunk_tokens`.

    The prompt also carries the system prompt, its scaffolding, the current WM (as the update
    prompt's current memory or the create prompt's previous memory), its size warnings and what the
    WM gains within this commit. Floor: a quarter of `chunk_tokens`, and at least
    `MIN_TRANSCRIPT_TOKENS` (all of `chunk_tokens` when smaller), so a WM that fills the budget, or a
    budget smaller than the prompt itself, still moves the commit forward in useful steps.
    """
    floor = max(chunk_tokens // 4, min(chunk_tokens, MIN_TRANSCRIPT_TOKENS))
    return max(chunk_tokens - prompt_overhead(working_memory) - WM_GROWTH_TOKENS, floor)


def prompt_overhead(working_memory: str) -> int:
    """Tokens of the larger of the update and create prompts around an empty transcript."""
    prompts = (update_prompt(working_memory, "", section_reminders(working_memory)),
               create_prompt("", working_memory))
    return max(sum(count_tokens(text) for _, text in pairs) for pairs in prompts)


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
