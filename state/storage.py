"""The storage interface: what the engine and the commit nodes may ask of a backend.

Nothing above `state/` imports a backend module: it receives a `Storage` from `open_storage` and
talks to its three parts — `sessions` (messages, archives, meta), `tasks` (commit tasks and leases)
and `search` (the full-text index of archived messages) — plus the LangGraph checkpointer the
commit graph runs on. `FileStorage` (files + SQLite under one root) and `PostgresStorage` (one schema of
a PostgreSQL database, for many replicas) implement it; `open_storage` picks one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from workmem.state.errors import DataRootNotFound, InvalidInput
from workmem.state.ids import safe_session_id
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.payloads import DEFAULT_LIMITS, PayloadLimits

ENV_HOME = "WORKMEM_HOME"
ENV_DATABASE_URL = "WORKMEM_DATABASE_URL"
ENV_POSTGRES_URI = "POSTGRES_URI"  # what LangGraph Platform sets for its own database
DEFAULT_ROOT = ".workmem"
DELETE_TASK_PREFIX = "delete-"  # the lease a session delete holds
STUDIO_THREAD_PREFIX = "studio:"  # a Studio run's task row names its thread in the Studio checkpointer this way
COMMIT_THREAD_MARK = "/commit/"  # in engine commit threads: `<safe_id>/commit/<task_id>`


def commit_thread_id(session_id: str, task_id: str) -> str:
    """The checkpoint thread of a commit: `<safe_id>/commit/<task_id>` (never reused)."""
    return f"{safe_session_id(session_id)}{COMMIT_THREAD_MARK}{task_id}"


class SessionStorage(Protocol):
    """Sessions: append-only messages, the live rule, archives and the session meta."""

    def append(self, session_id: str, messages: list[Any], *, durable: bool | None = None) -> list[dict[str, Any]]:
        """Validate and append a batch; returns the stored messages."""

    def session_exists(self, session_id: str) -> bool:
        """True once the session has been written to."""

    def location(self, session_id: str) -> str:
        """Where the session lives, for people (a directory, a table key)."""

    def meta(self, session_id: str) -> dict[str, Any]:
        """The session meta."""

    def set_keep(self, session_id: str, keep: tuple[str, int]) -> dict[str, Any]:
        """Set the keep window (`(unit, n)`) pending_tokens is computed with."""

    def hidden(self, session_id: str) -> set[int]:
        """Seqs of live messages hidden by the agent's state (removed or not on the thread's branch)."""

    def set_hidden(self, session_id: str, hide: set[int], unhide: set[int]) -> set[int]:
        """Record messages as hidden / shown again (beside the log, which never changes); returns the set."""

    def live_messages(self, session_id: str, *, texts: bool = True) -> list[dict[str, Any]]:
        """Messages not yet archived, oldest first (`texts=False` as for `messages_in_range`)."""

    def messages_in_range(self, session_id: str, start_seq: int, end_seq: int, *,
                          texts: bool = True) -> list[dict[str, Any]]:
        """Messages with start_seq ≤ seq ≤ end_seq, archived or live (`texts=False`: payload parts as stored —
        their record of size, characters, tokens and preview — without reading the payloads)."""

    def last_complete_archive(self, session_id: str) -> dict[str, Any] | None:
        """The newest complete archive object, or None."""

    def latest_overview(self, session_id: str) -> str | None:
        """The WM of the newest complete archive, or None."""

    def next_archive_id(self, session_id: str) -> str:
        """The id the next commit writes."""

    def list_archives(self, session_id: str) -> list[dict[str, Any]]:
        """`{archive_id, abstract, start_seq, end_seq}` of every complete archive, oldest first."""

    def read_archive(self, session_id: str, archive_id: str) -> dict[str, Any]:
        """An archive object plus `overview` and `abstract`."""

    def archive_messages(self, session_id: str, archive_id: str, *, texts: bool = True) -> list[dict[str, Any]]:
        """The messages one complete archive covers (a damaged payload reads as its preview with a note;
        `texts=False` as for `messages_in_range`)."""

    def write_archive(self, session_id: str, archive: dict[str, Any], messages: list[dict[str, Any]],
                      overview: str, abstract: str, spilled: list[dict[str, str]] | None = None) -> Any:
        """Persist a complete archive with the WM items it spilled (idempotent)."""

    def spilled_items(self, session_id: str, archive_id: str) -> list[dict[str, str]]:
        """The WM items an archive's commit moved out of the working memory."""

    def drop_covered(self, session_id: str, end_seq: int) -> int:
        """Forget live copies of archived messages (garbage collection)."""

    def record_commit(self, session_id: str, archive: dict[str, Any], keep: tuple[str, int]) -> dict[str, Any]:
        """Update the meta after a commit."""

    def list_sessions(self) -> list[str]:
        """Every session id."""

    def check(self, session_id: str) -> list[Any]:
        """Every anomaly of the session's stored data (`Anomaly`: where, and what)."""

    def problems(self, session_id: str) -> list[Any]:
        """What the latest reads of the session found wrong."""

    def close(self) -> None:
        """Flush caches."""


class TaskStorage(Protocol):
    """Commit tasks and the one-commit-per-session lease."""

    def create_task(self, session_id: str, **fields: Any) -> dict[str, Any]:
        """Insert a task row."""

    def update_task(self, task_id: str, **fields: Any) -> dict[str, Any]:
        """Change fields of a task row."""

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """A task row, or None."""

    def list_tasks(self, session_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Task rows, oldest first."""

    def acquire_lease(self, session_id: str, task_id: str, owner: str, ttl: float = 60) -> str | None:
        """Take the lease (None) or return the holder's task id."""

    def renew_lease(self, session_id: str, task_id: str, ttl: float = 60) -> bool:
        """Extend a held lease."""

    def release_lease(self, session_id: str, task_id: str) -> None:
        """Give a lease up."""

    def lease_holder(self, session_id: str) -> dict[str, Any] | None:
        """The unexpired lease row, or None."""

    def threads_to_prune(self, keep: int) -> list[dict[str, Any]]:
        """Completed commits beyond the newest `keep` that still have a checkpoint thread."""

    def forget_thread(self, task_id: str) -> None:
        """Record that a task's checkpoint thread was deleted."""

    def close(self) -> None:
        """Close connections."""


class SearchStorage(Protocol):
    """The full-text index of archived messages."""

    def index_messages(self, session_id: str, archive_id: str, messages: Any, spilled: Any = ()) -> int:
        """(Re)index one archive's messages and the WM items its commit spilled."""

    def search(self, session_id: str, query: str, archive_id: str | None = None,
               limit: int = 12) -> list[dict[str, Any]]:
        """Literal, ranked search → hits (spilled WM items as role `memory`, seq None, with their section)."""

    def reindex(self, sessions: SessionStorage, session_id: str | None = None, progress: Any = None) -> int:
        """Rebuild the index from the archives."""

    def indexed_seqs(self, session_id: str) -> dict[str, list[int]]:
        """archive_id → the seqs of the messages the index holds for it, ascending (spilled items left out)."""

    def close(self) -> None:
        """Close connections."""


class Storage(Protocol):
    """One backend: its sessions, tasks, search index and commit checkpointer."""

    sessions: SessionStorage
    tasks: TaskStorage
    search: SearchStorage

    def delete_session(self, session_id: str) -> None:
        """Delete a session everywhere (crash-safe: an interrupted delete is finished by `finish_deletes`)."""

    def finish_deletes(self) -> int:
        """Finish the deletes a crash interrupted."""

    def forget_messages(self, session_id: str, seqs: list[int]) -> dict[str, Any]:
        """Remove the verbatim text of stored messages everywhere (`state.forget`; the caller holds the lease and
        checked the seqs); crash-safe: an interrupted forget is one of `pending_forgets`."""

    def pending_forgets(self) -> list[dict[str, Any]]:
        """The forgets a crash interrupted (their intents), to be finished with `finish_forget`."""

    def finish_forget(self, intent: dict[str, Any]) -> dict[str, Any]:
        """Finish one interrupted forget (the caller holds the session's lease)."""

    def rebuild_index(self, session_id: str | None = None, progress: Any = None) -> dict[str, Any]:
        """Rebuild the full-text index from the stored archives (moving a damaged one aside first)."""

    def repair(self) -> dict[str, Any]:
        """Move a damaged checkpoint store aside and delete checkpoint threads no task names."""

    def checkpointer(self) -> Any:
        """The LangGraph checkpointer commits run on (opened once, closed with the storage)."""

    def close(self) -> None:
        """Flush and close everything."""


@asynccontextmanager
async def studio_checkpointer() -> AsyncIterator[Any]:
    """The checkpointer `langgraph dev` keeps Studio runs in: `<root>/studio.sqlite` (WAL, 30 s timeout)."""
    from workmem.state.files.storage import open_studio_saver

    async with open_studio_saver(default_root()) as saver:
        yield saver


def default_root() -> Path:
    """The data root: `WORKMEM_HOME` if set, else `./.workmem`; a blank `WORKMEM_HOME` is `InvalidInput` (it
    would make a folder named by spaces)."""
    home = os.environ.get(ENV_HOME)
    if home and not home.strip():
        raise InvalidInput(ENV_HOME, home, "must be a path, not blank")
    return Path(home or DEFAULT_ROOT).resolve()


def database_url_for(root: str | os.PathLike[str] | None = None, url: str | None = None) -> str | None:
    """The Postgres URL to use, or None for files: `url` > `root` > `WORKMEM_DATABASE_URL` >
    `WORKMEM_HOME` > `POSTGRES_URI` > `./.workmem` — passing a root never silently moves to Postgres."""
    if url is not None:
        return url
    if root is not None:
        return None
    env = os.environ
    return env.get(ENV_DATABASE_URL) or (None if env.get(ENV_HOME) else env.get(ENV_POSTGRES_URI)) or None


def open_storage(root: str | os.PathLike[str] | None = None, *, database_url: str | None = None,
                 database_schema: str | None = None, durable: bool = True,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 payload_limits: PayloadLimits = DEFAULT_LIMITS, create: bool = True) -> Storage:
    """The storage of a Postgres database or of a data root, chosen by `database_url` (precedence above);
    `database_schema` names the schema on Postgres (default `WORKMEM_DATABASE_SCHEMA`, else `workmem`).
    `create=False` opens existing data only: none there is `DataRootNotFound`, and nothing is created."""
    url = database_url_for(root, database_url)
    if url is not None:
        from workmem.state.postgres.storage import PostgresStorage

        return PostgresStorage(url, schema=database_schema, durable=durable, max_message_bytes=max_message_bytes,
                               payload_limits=payload_limits, create=create)
    from workmem.state.files.storage import FileStorage, holds_data
    from workmem.state.postgres.schema import ENV_SCHEMA, schema_name

    if database_schema is not None or os.environ.get(ENV_SCHEMA):  # checked on either backend, the environment's
        # too: a typo fails here, not on the move to Postgres
        schema_name(database_schema, "database_schema" if database_schema is not None else ENV_SCHEMA)
    if root is not None and (not isinstance(root, (str, os.PathLike)) or not str(root).strip()
                             or "\x00" in str(root)):
        raise InvalidInput("root", root, "must be a non-empty path without NUL")
    path = Path(root).resolve() if root is not None else default_root()
    if path.exists() and not path.is_dir():
        raise InvalidInput("root", str(path), "is not a directory")
    if not create and not holds_data(path):
        raise DataRootNotFound(str(path))
    return FileStorage(path, durable=durable, max_message_bytes=max_message_bytes, payload_limits=payload_limits)


def drop_database_schema(database_url: str, schema: str) -> None:
    """Drop a workmem schema and everything in it (a scratch schema, e.g. an evaluation's); refused for the
    schema that holds `pg_trgm`, which other workmem schemas of the database may use."""
    from workmem.state.postgres.storage import drop_schema

    drop_schema(database_url, schema)
