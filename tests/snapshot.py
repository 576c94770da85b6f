"""Stored expectations too long to write inline (graph drawings, tool schemas, prompts).

`assert_snapshot(name, text)` compares `text` with `tests/snapshots/<name>`; run the tests with
`WORKMEM_UPDATE_SNAPSHOTS=1` after a deliberate change to rewrite the files, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = "WORKMEM_UPDATE_SNAPSHOTS"


def assert_snapshot(name: str, text: str) -> None:
    """`text` must equal the stored snapshot `name` (rewritten first when WORKMEM_UPDATE_SNAPSHOTS is set)."""
    path = SNAPSHOTS / name
    if os.environ.get(UPDATE):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: review it and regenerate with {UPDATE}=1"


def assert_json_snapshot(name: str, value: Any) -> None:
    """`value` as indented JSON (key order kept) must equal the stored snapshot `name`."""
    assert_snapshot(name, json.dumps(value, indent=2, ensure_ascii=False) + "\n")
