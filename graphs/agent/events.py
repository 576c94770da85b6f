"""workmem's events during an agent run: LangGraph custom stream events, also recorded in `workmem_last_call`."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("workmem.agent")


def emit(event: str, session_id: str, **fields: Any) -> dict[str, Any]:
    """One workmem event: streamed as `{"workmem": {...}}` when a stream writer is there; returned."""
    record = {"event": event, "session_id": session_id, **fields}
    try:
        from langgraph.config import get_stream_writer

        writer = get_stream_writer()
    except Exception:  # outside a graph run there is no writer
        writer = None
    if writer is not None:
        try:
            writer({"workmem": record})
        except Exception as exc:  # a stream consumer's failure never fails the call
            log.debug("workmem event %s not streamed: %s", event, exc)
    return record
