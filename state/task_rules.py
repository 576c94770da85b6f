"""Rules every backend's task and lease store applies: statuses, TTLs, checked updates."""

from __future__ import annotations

import json
from typing import Any, Literal, get_args

from workmem.state.errors import InvalidInput
from workmem.state.ids import canonical_archive_id
from workmem.state.redact import clean_error
from workmem.state.session_meta import now_iso

TaskStatus = Literal["pending", "running", "completed", "failed", "skipped", "abandoned"]
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
MAX_TTL = 24 * 3600.0
TASK_FIELDS = {"status", "error", "attempts", "result", "archive_id", "thread_id"}


def check_status(value: Any) -> str:
    if value not in TASK_STATUSES:
        raise InvalidInput("status", value, f"must be one of {', '.join(TASK_STATUSES)}")
    return str(value)


def check_nonempty(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, value, "must be a non-empty string")
    return value


def check_ttl(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TTL:
        raise InvalidInput("ttl", value, f"must be a number of seconds in (0, {MAX_TTL:g}]")
    return float(value)


def _json(value: Any, field: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, value, f"not JSON-serializable: {exc}") from exc


def task_updates(fields: dict[str, Any], *, nul_free: bool = False) -> dict[str, Any]:
    """Checked column values for `update_task` (both backends), with `updated_at`; `nul_free` strips NULs
    that a Postgres text or jsonb column cannot hold."""
    unknown = set(fields) - TASK_FIELDS
    if unknown:
        raise InvalidInput("fields", sorted(unknown), f"task fields are {sorted(TASK_FIELDS)}")
    updates: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "status":
            value = check_status(value)
        elif key == "error":
            value = None if value is None else clean_error(value)
            if value is not None and nul_free:
                value = value.replace("\x00", "")
        elif key == "attempts":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput("attempts", value, "must be an integer >= 0")
        elif key == "result":
            value = None if value is None else _json(value, "result")
            if value is not None and nul_free:
                value = value.replace("\\u0000", "")
        elif key == "archive_id" and value is not None:
            value = canonical_archive_id(value)
        updates[key] = value
    updates["updated_at"] = now_iso()
    return updates
