"""`ReclaimingSqliteSaver`: LangGraph's `SqliteSaver` that gives a deleted thread's pages back to the file system.

Commits delete the checkpoint threads they no longer need (`keep_checkpoints`); without this, SQLite keeps
their pages as free pages and `checkpoints.sqlite` stays at its high-water mark. A file created by workmem
has `auto_vacuum=INCREMENTAL` (`sqlite.connect`), so an incremental vacuum after each delete truncates the
freed pages at the next WAL checkpoint; on an older file (auto_vacuum off) the vacuum does nothing and the
free pages are reused as before. LangGraph is imported here, so this module is loaded with the checkpointer.
"""

from __future__ import annotations

import logging
import sqlite3

from langgraph.checkpoint.sqlite import SqliteSaver

log = logging.getLogger("workmem.checkpoints")


class ReclaimingSqliteSaver(SqliteSaver):
    """`SqliteSaver` whose `delete_thread` also runs `PRAGMA incremental_vacuum`."""

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes, then free their pages (best effort: the delete stands)."""
        super().delete_thread(thread_id)
        with self.lock:
            try:
                # executescript steps the pragma to its end; execute() would free a single page
                self.conn.executescript("PRAGMA incremental_vacuum;")
            except (sqlite3.Error, OSError) as exc:  # OSError: a full disk as `CheckedConnection` raises it
                log.warning("%s: freeing the pages of a deleted checkpoint thread failed (%s); they stay free "
                            "pages, reused by later commits", getattr(self.conn, "path", "checkpoints"), exc)
