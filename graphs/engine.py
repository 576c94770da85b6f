"""`WorkingMemoryEngine`: the lifecycle API agents call (SPEC §7)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from graphs.assemble import SUMMARY_PREFIX, assemble_context, pending_entries, validate_budget
from graphs.injected import strip_injected
from graphs.runner import CommitRunner
from nodes.context import DEFAULT_CHUNK_TOKENS, DEFAULT_CLIP_TOKENS, CommitContext, default_root
from nodes.formatting import format_messages
from nodes.models import resolve_model
from state.errors import InvalidInput
from state.ids import archive_number
from state.index import Index
from state.messages import DEFAULT_MAX_MESSAGE_BYTES
from state.store import SessionStore
from state.tokens import count_tokens
from state.turns import validate_keep

DEFAULT_KEEP_RECENT = 10
DEFAULT_CONTEXT_WINDOW = 128_000
MAX_SEARCH_HITS = 12
_TURN_ID = re.compile(r"t([0-9]{1,9})")


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
    ) -> None:
        if root is not None and (not isinstance(root, (str, Path)) or not str(root)):
            raise InvalidInput("root", root, "must be a non-empty path")
        self.root = Path(root).resolve() if root is not None else default_root()
        self.keep_recent_count = validate_keep(keep_recent_count)
        self.context_window = _positive_int("context_window", context_window)
        self.commit_token_threshold = (
            _positive_int("commit_token_threshold", commit_token_threshold)
            if commit_token_threshold is not None else self.context_window // 2
        )
        self.max_message_bytes = _positive_int("max_message_bytes", max_message_bytes)
        self.model = resolve_model(model)  # a bad WORKMEM_MODEL fails here, before anything touches disk
        self.store = SessionStore(self.root, durable=durable, max_message_bytes=max_message_bytes)
        self.index = Index(self.root)
        context = CommitContext(root=str(self.root), model=self.model, durable=durable, store=self.store,
                                index=self.index, chunk_tokens=_positive_int("chunk_tokens", chunk_tokens),
                                clip_tokens=_positive_int("clip_tokens", clip_tokens))
        workers = _positive_int("max_workers", max_workers)
        self.runner = CommitRunner(self.store, self.index, context, max_workers=workers)

    # -- storing ----------------------------------------------------------------------------------

    def add_messages(self, session_id: str, messages: list[Any]) -> list[dict[str, Any]]:
        """Validate every message, then append the batch to the session (creating it if new)."""
        stored = self.store.append(session_id, messages)
        if stored:
            self._meta_with_default_keep(session_id)
        return stored

    def _meta_with_default_keep(self, session_id: str) -> dict[str, Any]:
        """Session meta; before its first commit pending_tokens is counted with this engine's keep (§2)."""
        meta = self.store.meta(session_id)
        if not meta.get("commit_count") and meta.get("keep_recent_count") != self.keep_recent_count:
            meta = self.store.set_keep_recent_count(session_id, self.keep_recent_count)
        return meta

    def after_turn(self, session_id: str, messages: list[Any], pre_prompt_count: int = 0) -> dict[str, Any]:
        """Store `messages[pre_prompt_count:]` minus what workmem injected; past the threshold start a
        background commit and return at once → {stored, pending_tokens, task_id, commit}."""
        if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, (list, tuple)):
            raise InvalidInput("messages", messages, "must be a list of messages")
        if isinstance(pre_prompt_count, bool) or not isinstance(pre_prompt_count, int) or pre_prompt_count < 0:
            raise InvalidInput("pre_prompt_count", pre_prompt_count, "must be an integer >= 0")
        if pre_prompt_count > len(messages):
            raise InvalidInput("pre_prompt_count", pre_prompt_count, f"more than the {len(messages)} messages given")
        new = strip_injected(list(messages[pre_prompt_count:]), offset=pre_prompt_count,
                             max_bytes=self.max_message_bytes)
        stored = self.store.append(session_id, new) if new else []
        exists = bool(stored) or self.store.session_exists(session_id)
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

    def commit(self, session_id: str, keep_recent_count: int = 0, wait: bool = True) -> dict[str, Any]:
        """Compress the session's older messages into working memory → {status, task_id, archive_id, reason}.

        A commit already running for the session is returned with status `busy` instead of a second one.
        """
        keep = validate_keep(keep_recent_count)
        if not isinstance(wait, bool):
            raise InvalidInput("wait", wait, "must be a bool")
        self.store.meta(session_id)  # validates the id and raises SessionNotFound for unknown sessions
        return self.runner.start(session_id, keep, wait=wait)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The commit task row (status, error, attempts, archive id, result), or None."""
        if not isinstance(task_id, str) or not task_id:
            raise InvalidInput("task_id", task_id, "must be a non-empty string")
        return self.index.get_task(task_id)

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
        if not self.store.live_messages(session_id):
            return _compact_result(False, "no_messages", None, None, 0, 0)
        before = self._context_tokens(session_id)
        result = self.commit(session_id, keep_recent_count=0, wait=True)
        if result["status"] == "busy":
            self.wait()
            result = self.commit(session_id, keep_recent_count=0, wait=True)
        compacted = result["status"] == "completed"
        summary = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown")
        out = _compact_result(compacted, result.get("reason") or result["status"], summary,
                              result.get("archive_id") if compacted else None, before,
                              self._context_tokens(session_id))
        out["ok"] = result["status"] in ("completed", "skipped")
        out["task_id"] = result.get("task_id")
        return out

    def _context_tokens(self, session_id: str) -> int:
        """Tokens of the summary message plus every live message (what an unbounded context would hold)."""
        wm = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown", "")
        summary = count_tokens(SUMMARY_PREFIX + wm) if wm.strip() else 0
        return summary + sum(m["tokens"] for m in self.store.live_messages(session_id))

    # -- reading ----------------------------------------------------------------------------------

    def assemble(self, session_id: str, token_budget: int = 128_000, *,
                 pending: list[Any] | None = None) -> dict[str, Any]:
        """LangChain messages for the next model call (system addition, WM summary, live tail) + stats.

        `pending`: messages not stored yet (an agent's current turn), budgeted as the newest live
        messages; with `pending` a session that does not exist yet is simply empty.
        """
        validate_budget(token_budget)
        extra = pending_entries(_as_list(pending, "pending"), max_bytes=self.max_message_bytes) if pending else []
        if pending is not None and not self.store.session_exists(session_id):
            return assemble_context([], "", 0, token_budget, pending=extra)
        archive = self.working_memory(session_id) or {}
        wm = archive.get("working_summary", {}).get("markdown", "")
        archives_total = archive_number(archive["archive_id"]) if archive else 0
        return assemble_context(self.store.live_messages(session_id), wm, archives_total, token_budget, extra)

    def archive_search(self, session_id: str, query: str, archive_id: str | None = None,
                       limit: int = MAX_SEARCH_HITS) -> list[dict[str, Any]]:
        """Literal, BM25-ranked search of archived messages → ≤ 12 hits {archive_id, seq, turn_id, role, content}."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", query, "must be a non-empty string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_HITS:
            raise InvalidInput("limit", limit, f"must be an integer between 1 and {MAX_SEARCH_HITS}")
        self.store.meta(session_id)  # SessionNotFound for unknown sessions
        if archive_id is not None:
            self.store.read_archive(session_id, archive_id)  # ArchiveNotFound for unknown ids
        return self.index.search(session_id, query, archive_id=archive_id, limit=limit)

    def archive_expand(self, session_id: str, archive_id: str | None = None, *,
                       start_seq: int | None = None, end_seq: int | None = None,
                       start_turn_id: str | None = None, end_turn_id: str | None = None) -> dict[str, Any]:
        """An archive's abstract and its messages as text; or any seq range, or turn range, of the session."""
        ranges = [v is not None for v in (start_seq, end_seq, start_turn_id, end_turn_id)]
        if archive_id is not None:
            if any(ranges):
                raise InvalidInput("archive_id", archive_id, "give an archive id or a range, not both")
            archive = self.store.read_archive(session_id, archive_id)
            messages = self.store.archive_messages(session_id, archive_id)
            return _expansion(archive["archive_id"], archive.get("abstract", ""), messages)
        if start_turn_id is not None or end_turn_id is not None:
            if start_seq is not None or end_seq is not None:
                raise InvalidInput("start_seq", start_seq, "give a seq range or a turn range, not both")
            first = _turn_number(start_turn_id, "start_turn_id")
            last = _turn_number(end_turn_id if end_turn_id is not None else start_turn_id, "end_turn_id")
            if last < first:
                raise InvalidInput("end_turn_id", end_turn_id, f"must not come before start_turn_id ({start_turn_id})")
            return _expansion(None, "", self._turn_messages(session_id, first, last))
        for field, value in (("start_seq", start_seq), ("end_seq", end_seq)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(field, value, "give archive_id, start_seq and end_seq >= 1, or turn ids")
        first_seq, last_seq = int(start_seq or 0), int(end_seq or 0)
        if last_seq < first_seq:
            raise InvalidInput("end_seq", end_seq, f"must be >= start_seq ({start_seq})")
        return _expansion(None, "", self.store.messages_in_range(session_id, first_seq, last_seq))

    def _turn_messages(self, session_id: str, first: int, last: int) -> list[dict[str, Any]]:
        """Messages of turns first..last: from the archives whose turn range overlaps, then the live file."""
        out: list[dict[str, Any]] = []
        for entry in self.store.list_archives(session_id):
            rng = self.store.read_archive(session_id, entry["archive_id"]).get("source_turn_range", {})
            lo = _turn_number(rng.get("start_turn_id") or "t0", "start_turn_id")
            hi = _turn_number(rng.get("end_turn_id") or "t0", "end_turn_id")
            if lo <= last and hi >= first:
                out.extend(self.store.archive_messages(session_id, entry["archive_id"]))
        out.extend(self.store.live_messages(session_id))
        seen: set[int] = set()
        picked = []
        for msg in out:
            if first <= _turn_number(msg["turn_id"], "turn_id") <= last and msg["seq"] not in seen:
                seen.add(msg["seq"])
                picked.append(msg)
        return sorted(picked, key=lambda m: m["seq"])

    def working_memory(self, session_id: str) -> dict[str, Any] | None:
        """The latest complete archive object (with the WM markdown), or None before the first commit."""
        return self.store.last_complete_archive(session_id)

    def session_info(self, session_id: str) -> dict[str, Any]:
        """The session meta: pending tokens, counts, keep count, last archive — O(1)."""
        return self.store.meta(session_id)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for background commits, then flush the session metas and close the databases."""
        self.runner.close()
        self.store.close()
        self.index.close()

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


def _turn_number(turn_id: Any, field: str) -> int:
    match = _TURN_ID.fullmatch(turn_id) if isinstance(turn_id, str) else None
    if match is None:
        raise InvalidInput(field, turn_id, "must be a turn id like 't3'")
    return int(match.group(1))


def _as_list(value: Any, field: str) -> list[Any]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise InvalidInput(field, value, "must be a list of messages")
    return list(value)


def _positive_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > 10_000_000:
        raise InvalidInput(field, value, "must be a positive integer (at most 10 000 000)")
    return value
