"""Node `report`: the one exit of the commit, so every run ends in the same place.

Skipped and persisted runs both end here; in the graph Studio serves (`with_lease=True`), `release_lease`
follows it.
"""

from __future__ import annotations

from typing import Any

from workmem.state.commit_state import CommitState


def report(state: CommitState) -> dict[str, Any]:
    """Close the run: skipped runs keep their reason; persisted runs are completed."""
    if state.get("status") == "skipped":  # nothing archived: no archive id and no memory to report
        return {"status": "skipped", "archive_id": "", "working_memory": "", "route": ["report"]}
    return {"status": "completed", "route": ["report"]}
