"""Every routing decision of the commit graph: pure functions of the state, no I/O.

Each returns an edge label; `graphs/commit.py` maps labels to nodes with an explicit path map so the
mermaid drawing shows every fallback edge by name.
"""

from __future__ import annotations

from typing import Literal

from workmem.state.commit_state import CommitState

MAX_MODEL_ATTEMPTS = 3  # transport attempts per model call (the client itself makes no retries)


def route_after_slice(state: CommitState) -> Literal["covered", "nothing_to_cover"]:
    """Nothing to cover (no messages, all within the keep window) ends the run as skipped."""
    return "nothing_to_cover" if state.get("status") == "skipped" else "covered"


def route_after_generate(state: CommitState) -> Literal["answered", "retry", "exhausted"]:
    """A transport error goes around the retry loop until the last attempt, then to the extractive fallback;
    anything the model answered (or refused) goes to `validate`."""
    if not state.get("transport_error"):
        return "answered"
    return "retry" if state.get("attempt", 0) < MAX_MODEL_ATTEMPTS else "exhausted"


def _retry_or_give_up(state: CommitState) -> Literal["no_usable_call", "fallback"]:
    """One create retry per chunk; after that the extractive model takes over."""
    return "fallback" if state.get("create_retry_used") else "no_usable_call"


def route_after_validate(state: CommitState) -> Literal["valid", "malformed", "no_usable_call", "fallback"]:
    """Valid call → guard; malformed args or JSON in text → recover; no usable call → the create
    prompt once, then the extractive fallback; transport errors past the retries → fallback."""
    verdict = state.get("verdict")
    if verdict == "valid":
        return "valid"
    if verdict == "malformed":
        return "malformed"
    if verdict == "model_error":
        return "fallback"
    return _retry_or_give_up(state)


def route_after_recover(state: CommitState) -> Literal["recovered", "no_usable_call", "fallback"]:
    """Some sections recovered → guard; nothing recovered → create retry once, then fallback."""
    if state.get("verdict") == "valid":
        return "recovered"
    return _retry_or_give_up(state)


def route_after_merge(state: CommitState) -> Literal["next_chunk", "done"]:
    """Loop back to the model for the next chunk, or persist once every chunk is merged."""
    if state.get("chunk_index", 0) < len(state.get("chunks", [])):
        return "next_chunk"
    return "done"


def route_after_take_lease(state: CommitState) -> Literal["leased", "busy"]:
    """Only the run holding the lease commits; others end with status busy (or skipped)."""
    return "leased" if state.get("status") == "running" else "busy"
