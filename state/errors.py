"""Typed errors of workmem; each message names the field and the offending value."""

from __future__ import annotations


class WorkmemError(Exception):
    """Base class of every error workmem raises on purpose."""


class InvalidInput(WorkmemError, ValueError):
    """A public entry received a value it cannot accept; nothing was written."""

    def __init__(self, field: str, value: object = None, reason: str = "") -> None:
        self.field = field
        self.value = value
        self.reason = reason
        try:
            shown = repr(value)
        except ValueError:  # an integer past Python's 4,300-digit limit for text
            shown = f"<a {type(value).__name__} too large to show>"
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"invalid {field}={shown}" + (f": {reason}" if reason else ""))


class SessionNotFound(WorkmemError, LookupError):
    """The session has no directory under the data root."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session not found: session_id={session_id!r}")


class DataRootNotFound(WorkmemError, LookupError):
    """A read found no workmem data where it was pointed (a data root without workmem's files, a database schema
    without workmem's tables); nothing was created."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"no workmem data at {where}")


class ArchiveNotFound(WorkmemError, LookupError):
    """No complete archive with this id exists in the session."""

    def __init__(self, session_id: str, archive_id: object) -> None:
        self.session_id = session_id
        self.archive_id = archive_id
        super().__init__(f"archive not found: archive_id={archive_id!r} in session_id={session_id!r}")


class CommitInProgress(WorkmemError, RuntimeError):
    """Another commit holds the session's lease."""

    def __init__(self, session_id: str, task_id: str | None) -> None:
        self.session_id = session_id
        self.task_id = task_id
        super().__init__(f"commit in progress: session_id={session_id!r} task_id={task_id!r}")


class Anomaly(WorkmemError, ValueError):
    """Something on disk is not as it should be; `path` and `line_no` (0: the whole file) say where."""

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        where = f"line {line_no} of {path}" if line_no else path
        super().__init__(f"{where}: {reason}")


class CorruptLine(Anomaly):
    """A line of a JSONL file on disk is not a valid message."""

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        super().__init__(path, line_no, reason)
        self.args = (f"corrupt line {line_no} in {path}: {reason}",)


class DamagedFile(WorkmemError, OSError):
    """A file workmem needs cannot be read as what it should be (a garbled archive.json, a corrupt database)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"damaged file {path}: {reason}")

    def __str__(self) -> str:
        return f"damaged file {self.path}: {self.reason}"


class UnsafePath(WorkmemError, OSError):
    """A path under the data root is a symlink (or not what it must be); nothing was written."""

    def __init__(self, path: str, reason: str = "is a symlink") -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"unsafe path {path}: {reason}")

    def __str__(self) -> str:
        return f"unsafe path {self.path}: {self.reason}"


class StorageError(WorkmemError, OSError):
    """A write to the data root failed (disk full, read-only, …); what was stored before is intact."""

    def __init__(self, path: str, error: OSError) -> None:
        self.path = path
        self.error = error
        super().__init__(error.errno, f"cannot write {path}: {error.strerror or error}")

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.error.strerror or self.error}"


class ArchiveConflict(WorkmemError, RuntimeError):
    """The archive id a commit reserved was completed by another commit (its lease was lost)."""

    def __init__(self, session_id: str, archive_id: str, task_id: str | None, owner_task_id: str | None) -> None:
        self.session_id, self.archive_id = session_id, archive_id
        self.task_id, self.owner_task_id = task_id, owner_task_id
        super().__init__(f"archive conflict: archive_id={archive_id!r} of session_id={session_id!r} was written "
                         f"by task {owner_task_id!r}, not by task_id={task_id!r}")


class CommitFailed(WorkmemError, RuntimeError):
    """A commit a command ran synchronously failed (nothing was archived); `reason` names the cause."""

    def __init__(self, session_id: str, task_id: str | None, reason: str) -> None:
        self.session_id, self.task_id, self.reason = session_id, task_id, reason
        which = f"commit {task_id}" if task_id else "a commit"
        super().__init__(f"{which} of session {session_id!r} failed: {reason}")


class ModelUnavailable(WorkmemError, RuntimeError):
    """The commit model could not be built (a missing provider package or API key)."""

    def __init__(self, spec: str, reason: str) -> None:
        self.spec = spec
        self.reason = reason
        super().__init__(f"model {spec!r} is unavailable: {reason}")


class DatabaseUnavailable(WorkmemError, ConnectionError):
    """The PostgreSQL database of the Postgres backend cannot be reached (URL shown without its password)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"database {url} is unavailable: {reason}")

    def __str__(self) -> str:
        return f"database {self.url} is unavailable: {self.reason}"


class ContextOverflow(WorkmemError, RuntimeError):
    """The model refused a call as too long twice in a row, after a commit made it smaller."""

    def __init__(self, call_tokens: int, limit: int) -> None:
        super().__init__(f"the model refused a call of {call_tokens} tokens as too long again, after a commit "
                         f"brought the session's input limit to {limit} tokens")
        self.call_tokens, self.limit = call_tokens, limit


class UnsupportedFormat(WorkmemError, RuntimeError):
    """Stored data written by a newer workmem in a format this build cannot read (refused, never misread)."""

    def __init__(self, where: str, found: object, supported: int) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(f"{where} has storage format {found!r}; this workmem reads formats up to {supported}: "
                         "upgrade workmem")
