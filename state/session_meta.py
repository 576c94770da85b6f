"""The session meta every backend reports (SPEC §2 *Session meta*) and the clock its timestamps come from."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

PUBLIC_FIELDS = (
    "session_id", "created_at", "updated_at", "next_seq", "message_count", "total_message_count",
    "commit_count", "last_commit_at", "keep", "keep_recent_count", "pending_tokens", "live_tokens", "last_archive",
)


def now_iso() -> str:
    """Current UTC time as ISO 8601 with offset."""
    return datetime.now(UTC).isoformat()


def public(meta: dict[str, Any]) -> dict[str, Any]:
    """The §2 fields of a meta dict (a copy)."""
    out = {k: meta.get(k) for k in PUBLIC_FIELDS}
    if isinstance(out["last_archive"], dict):
        out["last_archive"] = dict(out["last_archive"])
    return out
