"""Node `create_retry`: switch the current chunk to the create prompt; used at most once per chunk."""

from __future__ import annotations

from typing import Any

from workmem.state.commit_state import CommitState


def create_retry(state: CommitState) -> dict[str, Any]:
    """The next `generate` asks for a whole new document instead of per-section ops."""
    return {"prompt_kind": "create", "create_retry_used": True, "model_error": "", "attempt": 0,
            "transport_error": "", "route": ["create_retry"]}
