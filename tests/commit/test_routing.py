"""Every router of the commit graph, one row per state → edge label (pure functions, no I/O)."""

from __future__ import annotations

import pytest

from workmem.nodes.routing import (
    route_after_merge,
    route_after_recover,
    route_after_slice,
    route_after_take_lease,
    route_after_validate,
)

ROWS = [
    # router, state, label
    (route_after_slice, {"status": "skipped", "reason": "no_messages"}, "nothing_to_cover"),
    (route_after_slice, {"status": "skipped", "reason": "all_within_keep_window"}, "nothing_to_cover"),
    (route_after_slice, {"status": "running", "chunks": [[1, 4]]}, "covered"),
    (route_after_validate, {"verdict": "valid"}, "valid"),
    (route_after_validate, {"verdict": "malformed"}, "malformed"),
    (route_after_validate, {"verdict": "model_error"}, "fallback"),
    (route_after_validate, {"verdict": "model_error", "create_retry_used": False}, "fallback"),
    (route_after_validate, {"verdict": "no_call"}, "no_usable_call"),
    (route_after_validate, {"verdict": "no_call", "create_retry_used": True}, "fallback"),
    (route_after_recover, {"verdict": "valid"}, "recovered"),
    (route_after_recover, {"verdict": "unrecovered"}, "no_usable_call"),
    (route_after_recover, {"verdict": "unrecovered", "create_retry_used": True}, "fallback"),
    (route_after_merge, {"chunk_index": 1, "chunks": [[1, 4], [5, 9]]}, "next_chunk"),
    (route_after_merge, {"chunk_index": 2, "chunks": [[1, 4], [5, 9]]}, "done"),
    (route_after_merge, {"chunk_index": 1, "chunks": [[1, 4]]}, "done"),
    (route_after_take_lease, {"status": "running"}, "leased"),
    (route_after_take_lease, {"status": "busy"}, "busy"),
    (route_after_take_lease, {"status": "skipped"}, "busy"),
]


@pytest.mark.parametrize(("router", "state", "label"), ROWS,
                         ids=[f"{r.__name__}-{label}-{i}" for i, (r, _, label) in enumerate(ROWS)])
def test_router(router, state, label):
    assert router(state) == label
