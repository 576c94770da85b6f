"""The checkpointer `langgraph dev --config studio.json` persists Studio runs in: `<root>/studio.sqlite`.

The graphs it serves are `graphs/commit.py:graph` (the commit graph with its lease nodes) and
`graphs/agent.py:agent`. Unlike the engine's checkpoints, a Studio run's *input* is stored here too
(that is how the server keeps runs), so messages pasted into the commit graph's input panel are in
this file; the commit itself still never writes message bodies into its state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from workmem.state.file_storage import STUDIO_FILE
from workmem.state.sqlite import BUSY_TIMEOUT_SECONDS
from workmem.state.storage import default_root


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncSqliteSaver]:
    """AsyncSqliteSaver on `<root>/studio.sqlite` (root = $WORKMEM_HOME or ./.workmem), WAL, 30 s timeout."""
    root = default_root()
    root.mkdir(parents=True, exist_ok=True)
    async with aiosqlite.connect(root / STUDIO_FILE, timeout=BUSY_TIMEOUT_SECONDS, check_same_thread=False) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        yield saver
