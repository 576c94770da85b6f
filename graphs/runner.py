"""Runs commits: the lease, the task row, the checkpointed graph, resume and abandonment."""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from langgraph.constants import TAG_NOSTREAM

from workmem.graphs.lease import LEASE_TTL_SECONDS, Heartbeat, acquire, give_up, heartbeat, hold, holder_alive
from workmem.nodes.context import CommitContext, CommitNodeFailed
from workmem.nodes.models import LazyModel
from workmem.nodes.persist import finish_archived_commit
from workmem.state.commit_state import keep_of
from workmem.state.errors import (
    ArchiveNotFound,
    DamagedFile,
    DatabaseUnavailable,
    ModelUnavailable,
    SessionNotFound,
    StorageError,
    UnsafePath,
    WorkmemError,
)
from workmem.state.redact import clean_error, describe_error
from workmem.state.retention import Keep, as_keep
from workmem.state.storage import Storage, commit_thread_id

log = logging.getLogger("workmem.runner")
Progress = Callable[[str, dict[str, Any]], None]
RunSettings = tuple[Keep, int | None, int | None]  # a new run's keep, memory budget and transcript clip

MAX_RESUMES = 3
DEFAULT_KEEP_CHECKPOINTS = 20  # completed commit threads kept for debugging (Studio, notebooks)
# A failed run keeps its checkpoint: it is resumed like an interrupted one until MAX_RESUMES.
RESUMABLE_STATUSES = ("pending", "running", "failed")


def degradation_reason(out: dict[str, Any]) -> str:
    """Why a commit fell back to the extractive model: the model's last (redacted) error, else its unusable
    answers."""
    name = out.get("model_name") or "the model"
    errors = out.get("model_errors") or []
    if errors:
        return f"{name} failed, the extractive model stood in: {errors[-1]}"
    return f"{name} gave no usable tool call (after the create retry), the extractive model stood in"


def degradation_cause(reason: str) -> str:
    """The stable part of a degradation reason: the error type and HTTP status, without varying details."""
    error = reason.partition(": ")[2] or reason
    kind = re.match(r"[\w.]+", error)
    status = re.search(r"\b(?:Error code|status)[: ]+(\d{3})\b", error)
    return f"{kind.group(0) if kind else error[:40]}:{status.group(1) if status else ''}"


def _degradation_of(task: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": task.get("task_id"), "archive_id": task.get("archive_id"), "reason": task.get("error") or "",
            "at": task.get("updated_at")}



def commit_config(thread_id: str | None) -> dict[str, Any]:
    """The config a commit's graph runs with: its own checkpoint thread, and `nostream` — a commit started inside an
    agent's model call inherits that run's callbacks, and its model's reply is not the agent's to stream (LangChain's
    `SummarizationMiddleware` tags its summariser call the same way)."""
    return {"configurable": {"thread_id": thread_id}, "tags": [TAG_NOSTREAM]}

class CommitRunner:
    """Starts, resumes and tracks commits of one data root; at most one commit per session."""

    def __init__(self, storage: Storage, context: CommitContext, model: LazyModel, *,
                 max_workers: int = 2, lease_ttl: float = LEASE_TTL_SECONDS,
                 keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS) -> None:
        self.storage, self.context, self.model = storage, context, model
        self.keep_checkpoints = keep_checkpoints
        self.sessions, self.tasks = storage.sessions, storage.tasks
        self.lease_ttl = lease_ttl
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._graph: Any = None
        self._graph_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="workmem-commit")
        self._futures: list[tuple[str, Future]] = []  # (session id, its background commit)
        self._futures_lock = threading.Lock()
        self._closing = False
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    @property
    def checkpointer(self) -> Any:
        """The storage's commit checkpointer, opened at the first commit: an engine whose checkpoint
        database is damaged still opens and reads; its commits fail with `DamagedFile`."""
        return self.storage.checkpointer()

    @property
    def graph(self) -> Any:
        """The commit graph compiled on the checkpointer (once)."""
        with self._graph_lock:
            if self._graph is None:
                # imported at the first commit: reading commands (sessions, search, context) skip LangGraph's import
                from workmem.graphs.commit import compile_commit_graph

                self._graph = compile_commit_graph(self.checkpointer)
            return self._graph

    # -- starting -------------------------------------------------------------------------------

    def start(self, session_id: str, keep: Keep, *, wait: bool, memory_budget: int | None = None,
              then: Callable[[dict[str, Any]], None] | None = None, progress: Progress | None = None,
              clip_tokens: int | None = None) -> dict[str, Any]:
        """Take the lease and run (or schedule) a commit; a held lease returns the running task.

        `memory_budget` (tokens of the whole WM, None → the section table) is recorded in the run's input, so a
        resumed run keeps it. `then(result)` runs after a background commit has finished and released the lease;
        `progress(node, update)` is called after each node of a synchronous commit.
        """
        try:
            return self._start(session_id, keep, wait, (keep, memory_budget, clip_tokens), then, progress)
        except DatabaseUnavailable as exc:  # a commit that cannot reach its database fails, with the reason
            log.warning("commit of session %r could not start: %s", session_id, exc)
            return {"status": "failed", "task_id": None, "archive_id": None, "reason": clean_error(exc)}

    def _start(self, session_id: str, keep: Keep, wait: bool, settings: RunSettings,
               then: Callable[[dict[str, Any]], None] | None, progress: Progress | None) -> dict[str, Any]:
        task_id = uuid.uuid4().hex
        holder = acquire(self.tasks, session_id, task_id, self.owner, ttl=self.lease_ttl)
        if holder is not None:
            running = self.tasks.get_task(holder) or {}
            return {"status": "busy", "task_id": holder, "archive_id": running.get("archive_id"),
                    "reason": "commit_in_progress"}
        try:  # renewed from now on, also while a background commit waits for a free worker of the pool
            beat = hold(self.tasks, session_id, task_id, ttl=self.lease_ttl)
        except BaseException:
            give_up(self.tasks, session_id, task_id, self.owner)
            raise
        try:
            self.tasks.create_task(task_id=task_id, session_id=session_id, status="pending")
            if not wait:
                future = self._pool.submit(self._run_in_background, session_id, task_id, settings, beat, then)
                with self._futures_lock:
                    self._futures.append((session_id, future))
        except BaseException:
            beat.release()  # never leave a session locked by a commit that did not start
            raise
        if wait:
            return self._run_leased(session_id, task_id, settings, beat, progress)
        return {"status": "pending", "task_id": task_id, "archive_id": None, "reason": "started"}

    def _run_in_background(self, session_id: str, task_id: str, settings: RunSettings, beat: Heartbeat,
                           then: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        result = self._run_leased(session_id, task_id, settings, beat)
        if then is not None and not self._closing:
            then(result)
        return result

    def _run_leased(self, session_id: str, task_id: str, settings: RunSettings, beat: Heartbeat,
                    progress: Progress | None = None) -> dict[str, Any]:
        try:
            return self._run_held(session_id, task_id, settings, progress)
        except BaseException as exc:  # before or around the graph run (the graph's own errors are results)
            # An interrupt too (Ctrl-C, SystemExit in a worker thread): a row left `running` would make this
            # engine wait for a commit that no longer runs; `failed` is resumed by the next one.
            log.error("commit %s of session %r %s: %s", task_id, session_id,
                      "failed outside its graph run" if isinstance(exc, Exception) else "was interrupted",
                      describe_error(exc))
            self._mark_cut(task_id, exc)
            if isinstance(exc, DatabaseUnavailable):  # resumed by a later commit once the database is back
                return {"status": "failed", "task_id": task_id, "archive_id": None, "reason": clean_error(exc)}
            raise
        finally:
            beat.release()

    def _run_held(self, session_id: str, task_id: str, settings: RunSettings,
                  progress: Progress | None = None) -> dict[str, Any]:
        try:
            context = self._run_context()
        except ModelUnavailable as exc:
            self._warn_once(session_id, exc)
            self.tasks.update_task(task_id, status="failed", error=str(exc))
            return {"status": "failed", "task_id": task_id, "archive_id": None, "reason": clean_error(exc)}
        resumed = []
        for task in self.resumable_tasks(session_id):
            if task["task_id"] == task_id:
                continue
            earlier = self._resume_task(task, context)
            resumed.append(earlier)
            if earlier["status"] not in ("completed", "skipped", "abandoned"):
                # Its messages stay reserved for it until it is abandoned (MAX_RESUMES): a new commit
                # now would reserve the same archive id and cover the same seqs.
                reason = f"earlier commit {task['task_id']} did not finish: {earlier.get('reason') or ''}"
                self.tasks.update_task(task_id, status="skipped", result={"reason": clean_error(reason)})
                return {"status": "failed", "task_id": task_id, "archive_id": None,
                        "reason": clean_error(reason), "resumed": resumed}
        archive_id = self.sessions.next_archive_id(session_id)
        thread_id = commit_thread_id(session_id, task_id)
        self.tasks.update_task(task_id, archive_id=archive_id, thread_id=thread_id, status="running")
        keep, memory_budget, clip_tokens = settings
        graph_input = {"session_id": session_id, "archive_id": archive_id, "task_id": task_id, "keep": list(keep)}
        if memory_budget is not None:
            graph_input["memory_budget"] = memory_budget
        if clip_tokens is not None:
            graph_input["clip_tokens"] = clip_tokens
        result = self._invoke(task_id, thread_id, graph_input, context, progress)
        return {**result, "resumed": resumed} if resumed else result

    def _run_context(self) -> CommitContext:
        """This run's context: the engine's knobs, its storage and the model, built on first use."""
        return replace(self.context, storage=self.storage, model=self.model.get())

    def _warn_once(self, session_id: str, exc: Exception) -> None:
        if session_id not in self._warned:
            self._warned.add(session_id)
            log.warning("commits of session %r cannot run: %s", session_id, clean_error(exc))

    # -- running and resuming -------------------------------------------------------------------

    def _invoke(self, task_id: str, thread_id: str, graph_input: dict[str, Any] | None,
                context: CommitContext, progress: Progress | None = None) -> dict[str, Any]:
        config = commit_config(thread_id)
        try:
            out = self._run_graph(graph_input, config, context, progress)
        except (DamagedFile, StorageError, UnsafePath):
            raise  # the storage itself failed: a typed error for the caller (the task is marked by _run_leased)
        except Exception as exc:
            error = clean_error(exc) if isinstance(exc, CommitNodeFailed) else describe_error(exc)
            self.tasks.update_task(task_id, status="failed", error=error)
            return {"status": "failed", "task_id": task_id, "archive_id": None,
                    "reason": error}
        if out.get("status") == "skipped":  # the archive id it reserved was never written: a later commit's
            self.tasks.update_task(task_id, status="skipped", archive_id=None, result={"reason": out.get("reason")})
            self.checkpointer.delete_thread(thread_id)
            self.tasks.forget_thread(task_id)
        else:
            self.prune_checkpoints()
        reason = out.get("reason") or ""
        if out.get("degraded"):  # completed through the fallback: say why, loudly, so a bad model is seen
            reason = self._record_degraded(task_id, out)
        elif out.get("model_errors"):
            self.tasks.update_task(task_id, error=out["model_errors"][-1])
        return {"status": out.get("status", "completed"), "task_id": task_id,
                "archive_id": None if out.get("status") == "skipped" else self._archive_of(task_id),
                "reason": reason, "degraded": bool(out.get("degraded")),
                "route": out.get("route", []), "guard_notes": out.get("guard_notes", []),
                "usage": out.get("usage") or {}, "model_fixes": out.get("model_fixes") or []}

    def _record_degraded(self, task_id: str, out: dict[str, Any]) -> str:
        """Why a completed commit degraded (`degradation_reason` of its run's `out`), set as its task's error and
        warned once per session and cause; returned."""
        reason = clean_error(degradation_reason(out))
        task = self.tasks.update_task(task_id, error=reason)
        self._warn_degraded(task.get("session_id", "?"), reason)
        return reason

    def _warn_degraded(self, session_id: str, reason: str) -> None:
        """One WARNING per session and cause (the error's type and HTTP status, not its varying text)."""
        key = f"{session_id}\0degraded\0{degradation_cause(reason)}"
        with self._warn_lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("commit of session %r is degraded: %s (warned once per session and cause)", session_id, reason)

    def last_degradation(self, session_id: str) -> dict[str, Any] | None:
        """The session's newest degraded commit {task_id, archive_id, reason, at}, or None — read from the task
        rows each time (another engine or replica may have committed since); later successes do not clear it."""
        return next((_degradation_of(t) for t in reversed(self.tasks.list_tasks(session_id=session_id))
                     if (t.get("result") or {}).get("degraded")), None)

    def _run_graph(self, graph_input: dict[str, Any] | None, config: dict[str, Any], context: CommitContext,
                   progress: Progress | None) -> dict[str, Any]:
        """Run (or resume) the graph to its end; `progress(node, update)` after each node when given."""
        if progress is None:
            return self.graph.invoke(graph_input, config, context=context, durability="sync")
        out: dict[str, Any] = {}
        for mode, chunk in self.graph.stream(graph_input, config, context=context, durability="sync",
                                             stream_mode=["updates", "values"]):
            if mode == "values":
                out = chunk
            else:
                for node, update in chunk.items():
                    progress(node, update if isinstance(update, dict) else {})
        return out

    def prune_checkpoints(self) -> int:
        """Delete the checkpoint threads of completed commits beyond the newest `keep_checkpoints`
        (failed and unfinished ones stay until resumed or abandoned); returns how many went."""
        pruned = self.tasks.threads_to_prune(self.keep_checkpoints)
        for task in pruned:
            self.checkpointer.delete_thread(task["thread_id"])
            self.tasks.forget_thread(task["task_id"])
        return len(pruned)

    def _archive_of(self, task_id: str) -> str | None:
        return (self.tasks.get_task(task_id) or {}).get("archive_id")

    def _resume_task(self, task: dict[str, Any], context: CommitContext) -> dict[str, Any]:
        """Resume an unfinished commit on its own thread; abandon it after MAX_RESUMES failures."""
        task_id, thread_id = task["task_id"], task.get("thread_id")
        config = commit_config(thread_id)
        has_checkpoint = bool(thread_id) and self.checkpointer.get_tuple(config) is not None
        writer = self._archive_writer(task)
        if writer == task_id:
            # Its archive is complete: finish from it, never from the graph — a power cut may have taken the
            # later checkpoints, and a re-run would slice afresh and find nothing left to cover. It counts as a resume.
            self.tasks.update_task(task_id, attempts=task.get("attempts", 0) + 1, error=None)
            return self._resumed(task_id, lambda: self._finish_archived(task, config if has_checkpoint else None))
        if not has_checkpoint or task.get("attempts", 0) >= MAX_RESUMES:
            return self._abandon(task, "never started" if not has_checkpoint else "too many resumes")
        if writer is not None:
            return self._abandon(task, f"{task['archive_id']} was written by another commit")
        # a resumed run starts clean: the failure it resumes from is not how it ends (a new one is recorded)
        self.tasks.update_task(task_id, status="running", attempts=task.get("attempts", 0) + 1, error=None)
        return self._resumed(task_id, lambda: self._invoke(task_id, thread_id, None, context))

    def _resumed(self, task_id: str, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a resumed commit; one cut by an interrupt or a storage error is marked `failed` with what cut it
        (resumed again later), never left `running` with nothing running it."""
        try:
            return run()
        except BaseException as exc:
            self._mark_cut(task_id, exc)
            raise

    def _mark_cut(self, task_id: str, exc: BaseException) -> None:
        """Mark a task whose run `exc` cut `failed` with it (resumed by a later commit)."""
        try:
            self.tasks.update_task(task_id, status="failed", error=describe_error(exc))
        except Exception:  # the storage itself may be what failed; the task is resumed or abandoned later
            pass

    def _finish_archived(self, task: dict[str, Any], config: dict[str, Any] | None) -> dict[str, Any]:
        """Run the steps after `.done` of a commit whose graph cannot be resumed any more."""
        session_id, archive_id = task["session_id"], task["archive_id"]
        archive = self.sessions.read_archive(session_id, archive_id)
        values = self.graph.get_state(config).values if config else {}
        tail = archive.get("preserved_tail", {})
        recorded = values.get("keep") or "keep_recent_count" in values
        keep = keep_of(values) if recorded else as_keep(tail.get("keep") or tail.get("message_count", 0))
        try:
            finish_archived_commit(self.sessions, self.tasks, self.storage.search, archive, keep)
        except Exception as exc:
            reason = clean_error(f"finishing its complete archive failed: {exc}")
            if (self.tasks.get_task(task["task_id"]) or task).get("attempts", 0) <= MAX_RESUMES:
                self.tasks.update_task(task["task_id"], status="failed", error=reason)  # resumed again later
                return {"status": "failed", "task_id": task["task_id"], "archive_id": archive_id, "reason": reason}
            return self._abandon(task, reason)
        self.prune_checkpoints()
        model = archive.get("model") or {}
        if model.get("degraded"):  # its run fell back before the interruption: say why, as a finished run does
            error = model.get("error")
            reason = self._record_degraded(task["task_id"], {"model_name": model.get("name"),
                                                             "model_errors": [error] if error else []})
            return {"status": "completed", "task_id": task["task_id"], "archive_id": archive_id, "reason": reason,
                    "degraded": True}
        return {"status": "completed", "task_id": task["task_id"], "archive_id": archive_id,
                "reason": "finished from its complete archive"}

    def _archive_writer(self, task: dict[str, Any]) -> str | None:
        """The task id recorded in the task's reserved archive if that archive is complete, else None."""
        if not task.get("archive_id"):
            return None
        try:
            return self.sessions.read_archive(task["session_id"], task["archive_id"]).get("task_id") or ""
        except ArchiveNotFound:
            return None

    def _abandon(self, task: dict[str, Any], reason: str) -> dict[str, Any]:
        if task.get("thread_id"):
            self.checkpointer.delete_thread(task["thread_id"])
        self.tasks.update_task(task["task_id"], status="abandoned", error=reason)
        return {"status": "abandoned", "task_id": task["task_id"], "archive_id": task.get("archive_id"),
                "reason": reason}

    def resumable_tasks(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Commits that did not finish (pending, running, or failed with a checkpoint to resume)."""
        return [t for t in self.tasks.list_tasks(session_id) if t["status"] in RESUMABLE_STATUSES]

    def resume_all(self) -> list[dict[str, Any]]:
        """Resume every unfinished commit whose session lease is free."""
        results: list[dict[str, Any]] = []
        pending = self.resumable_tasks()
        try:
            context = self._run_context() if pending else self.context
        except ModelUnavailable as exc:
            return [{"status": "failed", "task_id": t["task_id"], "archive_id": t.get("archive_id"),
                     "reason": clean_error(exc)} for t in pending]
        for task in pending:
            session_id = task["session_id"]
            # The lease may carry this very task id while its process still runs it (acquire_lease
            # treats an equal task id as "ours"), so a live holder of any task means hands off.
            if holder_alive(self.tasks.lease_holder(session_id)):
                continue
            if acquire(self.tasks, session_id, task["task_id"], self.owner, ttl=self.lease_ttl):
                continue  # another process holds this session; it resumes the task itself
            with heartbeat(self.tasks, session_id, task["task_id"], ttl=self.lease_ttl):
                task = self.tasks.get_task(task["task_id"]) or task  # it may have finished meanwhile
                if task["status"] in RESUMABLE_STATUSES:
                    results.append(self._resume_or_report(task, context))
        return results

    def _resume_or_report(self, task: dict[str, Any], context: CommitContext) -> dict[str, Any]:
        """`_resume_task`, or what stopped it: a task whose session is gone is abandoned, another error is
        reported as `failed` (the task stays resumable), and `resume_all` goes on with the next task."""
        try:
            if not self.sessions.session_exists(task["session_id"]):
                raise SessionNotFound(task["session_id"])
            return self._resume_task(task, context)
        except SessionNotFound as exc:
            log.warning("task %s: %s; abandoned", task["task_id"], describe_error(exc))
            return self._abandon(task, clean_error(f"its session is gone: {exc}"))
        except (WorkmemError, OSError) as exc:
            log.warning("task %s could not be resumed: %s", task["task_id"], describe_error(exc))
            return {"status": "failed", "task_id": task["task_id"], "archive_id": task.get("archive_id"),
                    "reason": clean_error(exc)}

    def wait(self, session_id: str | None = None) -> None:
        """Block until every background commit of `session_id` (None: of every session), and any follow-up it
        started, has finished."""
        while True:
            with self._futures_lock:
                waited = [f for s, f in self._futures if session_id is None or s == session_id]
            if not waited:
                return
            for future in waited:
                future.exception()  # waits; a commit's own failure is its task's status, not the waiter's
            with self._futures_lock:  # a follow-up is appended before the commit that started it finishes
                self._futures = [(s, f) for s, f in self._futures if not f.done()]

    def close(self) -> None:
        """Wait for background commits, then release the thread pool and the checkpoint connection."""
        self._closing = True
        self.wait()
        self._pool.shutdown(wait=True)
