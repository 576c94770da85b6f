"""The session meta every backend reports and the clock its timestamps come from."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

PUBLIC_FIELDS = (
    "session_id", "created_at", "updated_at", "next_seq", "message_count", "total_message_count",
    "commit_count", "last_commit_at", "keep", "keep_recent_count", "pending_tokens", "live_tokens", "last_archive",
)


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, with its text up to the seconds


def now_iso() -> str:
    """Current UTC time as ISO 8601 with offset (`datetime.isoformat`'s text; the date and time of day are
    formatted once per second: every append stamps its messages)."""
    global _second
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _second  # one read: another thread may replace it meanwhile, never half of it
    if cached[0] != second:
        cached = _second = (second, datetime.fromtimestamp(second, UTC).isoformat()[:19])
    return f"{cached[1]}.{micros:06d}+00:00" if micros else f"{cached[1]}+00:00"


def public(meta: dict[str, Any]) -> dict[str, Any]:
    """The public fields of a meta dict (a copy)."""
    out = {k: meta.get(k) for k in PUBLIC_FIELDS}
    if isinstance(out["last_archive"], dict):
        out["last_archive"] = dict(out["last_archive"])
    return out
