"""The archive object — what every backend stores per commit and returns to callers.

Format 2 keeps the working memory once (the file backend's `.overview.md`, a column elsewhere):
`working_summary` holds only the overview's name and per-section token counts; readers fill the
`markdown` and `sections` callers know back in with `with_working_summary`.
"""

from __future__ import annotations

from typing import Any

from workmem.state.memory import SECTION_KEYS, parse_sections

ARCHIVE_FORMAT = 2
OVERVIEW = ".overview.md"
ABSTRACT_CHARS = 200  # the abstract is one line of at most this many characters
SEARCH_TOOL_NAME = "archive_search"
EXPAND_TOOL_NAME = "archive_expand"
READ_TOOL_NAME = "read_tool_result"
OWN_TOOLS = frozenset((SEARCH_TOOL_NAME, EXPAND_TOOL_NAME, READ_TOOL_NAME))  # the names of workmem's own tools


def with_working_summary(archive: dict[str, Any], overview: str) -> dict[str, Any]:
    """The archive object as callers know it: `working_summary` holds the WM's `markdown` and `sections`
    (format 2 stores the WM once, apart; format 1 objects already carry both)."""
    summary = archive.get("working_summary") or {}
    if "markdown" in summary:
        return dict(archive)
    sections = parse_sections(overview)
    filled = {**summary, "markdown": overview,
              "sections": {key: sections.get(name, "") for name, key in SECTION_KEYS.items()}}
    return {**archive, "working_summary": filled}
