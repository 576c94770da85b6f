"""The checkpointer `langgraph dev --config studio.json` persists Studio runs in: `<root>/studio.sqlite`.

The graphs it serves are `graphs/commit.py:graph` (the commit graph with its lease nodes) and
`graphs/agent.py:agent`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from nodes.context import default_root

STUDIO_DB = "studio.sqlite"


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncSqliteSaver]:
    """AsyncSqliteSaver on `<root>/studio.sqlite` (root = $WORKMEM_HOME or ./.workmem)."""
    root = default_root()
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(root / STUDIO_DB)) as saver:
        await saver.setup()
        yield saver
