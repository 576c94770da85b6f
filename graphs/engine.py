"""`WorkingMemoryEngine`: the lifecycle API agents call (SPEC §7)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workmem.graphs.assemble import SUMMARY_PREFIX, assemble_context, pending_entries, validate_budget
from workmem.graphs.injected import strip_injected
from workmem.graphs.lease import acquire
from workmem.graphs.runner import DEFAULT_KEEP_CHECKPOINTS, CommitRunner
from workmem.nodes.context import DEFAULT_CHUNK_TOKENS, DEFAULT_CLIP_TOKENS, CommitContext
from workmem.nodes.formatting import format_messages
from workmem.nodes.models import LazyModel, model_spec
from workmem.state.errors import CommitInProgress, DamagedFile, InvalidInput
from workmem.state.ids import archive_number
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES
from workmem.state.storage import DELETE_TASK_PREFIX, open_storage
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens
from workmem.state.turns import DEFAULT_KEEP_RECENT, parse_turn_id, turn_number, validate_keep
from workmem.state.validation import require_bool, require_int, require_list, require_text

log = logging.getLogger("workmem.engine")
MAX_SEARCH_HITS = 12
MAX_SETTING = 10_000_000


class WorkingMemoryEngine:
    """Stores sessions append-only, commits them into working memory, and assembles model context."""

    def __init__(
        self,
        root: str | Path | None = None,
        model: Any = None,
        *,
        keep_recent_count: int = DEFAULT_KEEP_RECENT,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        commit_token_threshold: int | None = None,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        clip_tokens: int = DEFAULT_CLIP_TOKENS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        durable: bool = True,
        max_workers: int = 2,
        keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
        database_url: str | None = None,
    ) -> None:
        self.keep_recent_count = validate_keep(keep_recent_count)
        self.context_window = _positive_int("context_window", context_window)
        self.commit_token_threshold = (
            _positive_int("commit_token_threshold", commit_token_threshold)
            if commit_token_threshold is not None else self.context_window // 2
        )
        self.max_message_bytes = _positive_int("max_message_bytes", max_message_bytes)
        # Checked now (a bad model= or WORKMEM_MODEL fails before anything touches disk), built at the first commit.
        self.model = LazyModel(model_spec(model))
        context = CommitContext(chunk_tokens=_positive_int("chunk_tokens", chunk_tokens),
                                clip_tokens=_positive_int("clip_tokens", clip_tokens), durable=durable)
        workers = _positive_int("max_workers", max_workers)
        kept = require_int("keep_checkpoints", keep_checkpoints, min=0, max=MAX_SETTING)
        require_bool("durable", durable)
        self.storage = open_storage(root, database_url=database_url, durable=durable,
                                    max_message_bytes=max_message_bytes)
        self.root = getattr(self.storage, "root", None)
        self.runner = CommitRunner(self.storage, context, self.model, max_workers=workers, keep_checkpoints=kept)
        try:
            self.storage.finish_deletes()  # a delete a crash interrupted is finished before anything else
        except DamagedFile as exc:  # a damaged index: reads still work; `workmem reindex` repairs it
            log.warning("could not finish an interrupted delete: %s", exc)

    # -- storing ----------------------------------------------------------------------------------

    def add_messages(self, session_id: str, messages: list[Any]) -> list[dict[str, Any]]:
        """Validate every message, then append the batch to the session (creating it if new)."""
        stored = self.storage.sessions.append(session_id, messages)
        if stored:
            self._meta_with_default_keep(session_id)
        return stored

    def _meta_with_default_keep(self, session_id: str) -> dict[str, Any]:
        """Session meta; before its first commit pending_tokens is counted with this engine's keep (§2)."""
        meta = self.storage.sessions.meta(session_id)
        if not meta.get("commit_count") and meta.get("keep_recent_count") != self.keep_recent_count:
            meta = self.storage.sessions.set_keep_recent_count(session_id, self.keep_recent_count)
        return meta

    def after_turn(self, session_id: str, messages: list[Any], pre_prompt_count: int = 0) -> dict[str, Any]:
        """Store `messages[pre_prompt_count:]` minus what workmem injected; past the threshold start a
        background commit and return at once → {stored, pending_tokens, task_id, commit}."""
        messages = require_list("messages", messages)
        require_int("pre_prompt_count", pre_prompt_count, min=0, max=len(messages))
        new = strip_injected(list(messages[pre_prompt_count:]), offset=pre_prompt_count,
                             max_bytes=self.max_message_bytes)
        stored = self.storage.sessions.append(session_id, new) if new else []
        exists = bool(stored) or self.storage.sessions.session_exists(session_id)
        pending = self._meta_with_default_keep(session_id)["pending_tokens"] if exists else 0
        commit = self._commit_in_background(session_id) if pending >= self.commit_token_threshold else None
        return {"stored": len(stored), "pending_tokens": pending,
                "task_id": commit["task_id"] if commit else None, "commit": commit}

    def _commit_in_background(self, session_id: str) -> dict[str, Any]:
        return self.runner.start(session_id, self.keep_recent_count, wait=False,
                                 then=lambda result: self._commit_again_if_due(session_id, result))

    def _commit_again_if_due(self, session_id: str, finished: dict[str, Any]) -> None:
        """Turns stored while a background commit ran (and found it busy) get their commit now."""
        if finished.get("status") != "completed":
            return  # a failed commit is resumed by the next one; retrying here could loop
        if self._meta_with_default_keep(session_id)["pending_tokens"] >= self.commit_token_threshold:
            self._commit_in_background(session_id)

    # -- committing -------------------------------------------------------------------------------

    def commit(self, session_id: str, keep_recent_count: int = 0, wait: bool = True, *,
               progress: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Compress the session's older messages into working memory → {status, task_id, archive_id, reason}.

        A commit already running for the session is returned with status `busy` instead of a second one.
        `progress(node, update)` is called after each node of a synchronous commit (the CLI's progress bar).
        """
        keep = validate_keep(keep_recent_count)
        require_bool("wait", wait)
        self.storage.sessions.meta(session_id)  # validates the id and raises SessionNotFound for unknown sessions
        return self.runner.start(session_id, keep, wait=wait, progress=progress if wait else None)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The commit task row (status, error, attempts, archive id, result), or None."""
        require_text("task_id", task_id)
        return self.storage.tasks.get_task(task_id)

    def wait(self) -> None:
        """Block until every background commit started by this engine has finished."""
        self.runner.wait()

    def resume_all(self) -> list[dict[str, Any]]:
        """Resume every unfinished commit under this root."""
        return self.runner.resume_all()

    def compact(self, session_id: str) -> dict[str, Any]:
        """Commit everything now (keep 0) and report the context tokens it freed.

        A background commit of this engine that is still running is waited for first.
        """
        if not self.storage.sessions.live_messages(session_id):
            return _compact_result(False, "no_messages", None, None, 0, 0)
        before = self.context_tokens(session_id)
        result = self.commit(session_id, keep_recent_count=0, wait=True)
        if result["status"] == "busy":
            self.wait()
            result = self.commit(session_id, keep_recent_count=0, wait=True)
        compacted = result["status"] == "completed"
        summary = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown")
        out = _compact_result(compacted, result.get("reason") or result["status"], summary,
                              result.get("archive_id") if compacted else None, before,
                              self.context_tokens(session_id))
        out["ok"] = result["status"] in ("completed", "skipped")
        out["task_id"] = result.get("task_id")
        return out

    def context_tokens(self, session_id: str) -> int:
        """Tokens of the summary message plus every live message (what an unbounded context would hold)."""
        wm = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown", "")
        summary = count_tokens(SUMMARY_PREFIX + wm) if wm.strip() else 0
        return summary + sum(m["tokens"] for m in self.storage.sessions.live_messages(session_id))

    # -- reading ----------------------------------------------------------------------------------

    def assemble(self, session_id: str, token_budget: int = DEFAULT_CONTEXT_WINDOW, *,
                 pending: list[Any] | None = None) -> dict[str, Any]:
        """LangChain messages for the next model call (system addition, WM summary, live tail) + stats.

        `pending`: messages not stored yet (an agent's current turn), budgeted as the newest live
        messages; with `pending` a session that does not exist yet is simply empty.
        """
        validate_budget(token_budget)
        extra = pending_entries(require_list("pending", pending), max_bytes=self.max_message_bytes) if pending else []
        if pending is not None and not self.storage.sessions.session_exists(session_id):
            return assemble_context([], "", 0, token_budget, pending=extra)
        archive = self.working_memory(session_id) or {}
        wm = archive.get("working_summary", {}).get("markdown", "")
        archives_total = archive_number(archive["archive_id"]) if archive else 0
        live = self.storage.sessions.live_messages(session_id)
        return assemble_context(live, wm, archives_total, token_budget, extra)

    def archive_search(self, session_id: str, query: str, archive_id: str | None = None,
                       limit: int = MAX_SEARCH_HITS) -> list[dict[str, Any]]:
        """Literal, BM25-ranked search of archived messages → ≤ 12 hits {archive_id, seq, turn_id, role, content}."""
        require_text("query", query)
        require_int("limit", limit, min=1, max=MAX_SEARCH_HITS)
        self.storage.sessions.meta(session_id)  # SessionNotFound for unknown sessions
        if archive_id is not None:
            self.storage.sessions.read_archive(session_id, archive_id)  # ArchiveNotFound for unknown ids
        return self.storage.search.search(session_id, query, archive_id=archive_id, limit=limit)

    def archive_expand(self, session_id: str, archive_id: str | None = None, *,
                       start_seq: int | None = None, end_seq: int | None = None,
                       start_turn_id: str | None = None, end_turn_id: str | None = None) -> dict[str, Any]:
        """An archive's abstract and its messages as text; or any seq range, or turn range, of the session."""
        ranges = [v is not None for v in (start_seq, end_seq, start_turn_id, end_turn_id)]
        if archive_id is not None:
            if any(ranges):
                raise InvalidInput("archive_id", archive_id, "give an archive id or a range, not both")
            archive = self.storage.sessions.read_archive(session_id, archive_id)
            messages = self.storage.sessions.archive_messages(session_id, archive_id)
            return _expansion(archive["archive_id"], archive.get("abstract", ""), messages)
        if start_turn_id is not None or end_turn_id is not None:
            if start_seq is not None or end_seq is not None:
                raise InvalidInput("start_seq", start_seq, "give a seq range or a turn range, not both")
            first = parse_turn_id(start_turn_id, "start_turn_id")
            last = parse_turn_id(end_turn_id if end_turn_id is not None else start_turn_id, "end_turn_id")
            if last < first:
                raise InvalidInput("end_turn_id", end_turn_id, f"must not come before start_turn_id ({start_turn_id})")
            return _expansion(None, "", self._turn_messages(session_id, first, last))
        for field, value in (("start_seq", start_seq), ("end_seq", end_seq)):
            require_int(field, value, min=1)
        first_seq, last_seq = int(start_seq or 0), int(end_seq or 0)
        if last_seq < first_seq:
            raise InvalidInput("end_seq", end_seq, f"must be >= start_seq ({start_seq})")
        newest = self.storage.sessions.meta(session_id)["total_message_count"]
        if first_seq > newest:
            raise InvalidInput("start_seq", start_seq, f"past the session's last message (seq {newest})")
        return _expansion(None, "", self.storage.sessions.messages_in_range(session_id, first_seq, last_seq))

    def _turn_messages(self, session_id: str, first: int, last: int) -> list[dict[str, Any]]:
        """Messages of turns first..last: from the archives whose turn range overlaps, then the live file."""
        out: list[dict[str, Any]] = []
        for entry in self.storage.sessions.list_archives(session_id):
            rng = self.storage.sessions.read_archive(session_id, entry["archive_id"]).get("source_turn_range", {})
            lo, hi = turn_number(rng.get("start_turn_id")), turn_number(rng.get("end_turn_id"))
            if lo <= last and hi >= first:
                out.extend(self.storage.sessions.archive_messages(session_id, entry["archive_id"]))
        out.extend(self.storage.sessions.live_messages(session_id))
        seen: set[int] = set()
        picked = []
        for msg in out:
            if first <= turn_number(msg["turn_id"]) <= last and msg["seq"] not in seen:
                seen.add(msg["seq"])
                picked.append(msg)
        return sorted(picked, key=lambda m: m["seq"])

    def working_memory(self, session_id: str) -> dict[str, Any] | None:
        """The latest complete archive object (with the WM markdown), or None before the first commit."""
        return self.storage.sessions.last_complete_archive(session_id)

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """Delete a session: its files, full-text rows, tasks and checkpoint threads (Studio's too).

        Refused with `CommitInProgress` while a commit holds the session's lease. Crash-safe: the
        directory becomes a tombstone first, and an engine that finds one finishes the delete. The id
        can be used again at once; the session then starts at seq 1.
        """
        self.storage.sessions.meta(session_id)  # validates the id; SessionNotFound for unknown sessions
        lease = f"{DELETE_TASK_PREFIX}{uuid.uuid4().hex}"
        holder = acquire(self.storage.tasks, session_id, lease, self.runner.owner, ttl=self.runner.lease_ttl)
        if holder is not None:
            raise CommitInProgress(session_id, holder)
        try:
            self.storage.delete_session(session_id)
        finally:
            self.storage.tasks.release_lease(session_id, lease)
        return {"deleted": True, "session_id": session_id}

    def check(self, session_id: str) -> list[dict[str, Any]]:
        """Every anomaly of the session's stored data: `{file, line, problem}` (line 0: the whole file)."""
        return [{"file": a.path, "line": a.line_no, "problem": a.reason}
                for a in self.storage.sessions.check(session_id)]

    def reindex(self, session_id: str | None = None, progress: Callable[[str, str], None] | None = None
                ) -> dict[str, Any]:
        """Rebuild the full-text index from the archives (a damaged index is moved aside, its tasks re-derived)."""
        if session_id is not None:
            self.storage.sessions.meta(session_id)
        return self.storage.rebuild_index(session_id, progress)

    def repair(self) -> dict[str, Any]:
        """Move a damaged checkpoint database aside and delete checkpoint threads that no task names."""
        return self.storage.repair()

    def session_info(self, session_id: str) -> dict[str, Any]:
        """The session meta: pending tokens, counts, keep count, last archive — O(1)."""
        return self.storage.sessions.meta(session_id)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for background commits, then flush the session metas and close the databases."""
        self.runner.close()
        self.storage.close()

    def __enter__(self) -> WorkingMemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _expansion(archive_id: str | None, abstract: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"archive_id": archive_id, "abstract": abstract,
            "start_seq": messages[0]["seq"] if messages else None,
            "end_seq": messages[-1]["seq"] if messages else None,
            "message_count": len(messages),
            "content": format_messages(messages, clip_tokens=0)}


def _compact_result(compacted: bool, reason: str, summary: str | None, archive_id: str | None,
                    before: int, after: int) -> dict[str, Any]:
    return {"ok": True, "compacted": compacted, "reason": reason, "summary": summary, "archive_id": archive_id,
            "tokens_before": before, "tokens_after": after}


def _positive_int(field: str, value: Any) -> int:
    return require_int(field, value, min=1, max=MAX_SETTING)
