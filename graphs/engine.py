"""`WorkingMemoryEngine`: the lifecycle API agents call (SPEC §7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphs.assemble import assemble_context
from graphs.injected import strip_injected
from graphs.runner import CommitRunner
from nodes.context import DEFAULT_CHUNK_TOKENS, DEFAULT_CLIP_TOKENS, CommitContext, default_root
from nodes.formatting import format_messages
from state.errors import InvalidInput
from state.ids import archive_number
from state.index import Index
from state.store import SessionStore
from state.tokens import count_tokens

DEFAULT_KEEP_RECENT = 10
MAX_KEEP_RECENT = 10_000
DEFAULT_CONTEXT_WINDOW = 128_000


def clamp_keep(value: Any, field: str = "keep_recent_count") -> int:
    """Validate a keep count: an int ≥ 0, clamped to 10 000."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, value, "must be an integer")
    if value < 0:
        raise InvalidInput(field, value, "must be >= 0")
    return min(value, MAX_KEEP_RECENT)


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
        max_message_bytes: int = 1 << 20,
        durable: bool = True,
        max_workers: int = 2,
    ) -> None:
        self.root = Path(root).resolve() if root else default_root()
        self.keep_recent_count = clamp_keep(keep_recent_count)
        self.context_window = _positive_int("context_window", context_window)
        self.commit_token_threshold = (
            _positive_int("commit_token_threshold", commit_token_threshold)
            if commit_token_threshold is not None else self.context_window // 2
        )
        self.store = SessionStore(self.root, durable=durable, max_message_bytes=max_message_bytes)
        self.index = Index(self.root)
        self.model = model
        context = CommitContext(root=str(self.root), model=model, chunk_tokens=chunk_tokens,
                                clip_tokens=clip_tokens, durable=durable, store=self.store, index=self.index)
        self.runner = CommitRunner(self.store, self.index, context, max_workers=max_workers)

    # -- storing ----------------------------------------------------------------------------------

    def add_messages(self, session_id: str, messages: list[Any]) -> list[dict[str, Any]]:
        """Validate every message, then append the batch to the session (creating it if new)."""
        return self.store.append(session_id, messages)

    def after_turn(self, session_id: str, messages: list[Any], pre_prompt_count: int = 0) -> dict[str, Any]:
        """Store a finished turn (minus what workmem injected); start a background commit past the threshold."""
        if isinstance(pre_prompt_count, bool) or not isinstance(pre_prompt_count, int) or pre_prompt_count < 0:
            raise InvalidInput("pre_prompt_count", pre_prompt_count, "must be an integer >= 0")
        new = strip_injected(list(messages)[pre_prompt_count:])
        stored = self.store.append(session_id, new) if new else []
        pending = self.store.meta(session_id)["pending_tokens"] if self.store.session_exists(session_id) else 0
        commit = None
        if pending >= self.commit_token_threshold:
            commit = self.runner.start(session_id, self.keep_recent_count, wait=False)
        return {"stored": len(stored), "pending_tokens": pending,
                "task_id": commit["task_id"] if commit else None, "commit": commit}

    # -- committing -------------------------------------------------------------------------------

    def commit(self, session_id: str, keep_recent_count: int = 0, wait: bool = True) -> dict[str, Any]:
        """Compress the session's older messages into working memory → {status, task_id, archive_id, reason}."""
        keep = clamp_keep(keep_recent_count)
        self.store.meta(session_id)  # validates the id and raises SessionNotFound for unknown sessions
        return self.runner.start(session_id, keep, wait=wait)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The commit task row (status, error, attempts, archive id, result)."""
        return self.index.get_task(task_id)

    def resume_all(self) -> list[dict[str, Any]]:
        """Resume every unfinished commit under this root."""
        return self.runner.resume_all()

    def compact(self, session_id: str) -> dict[str, Any]:
        """Commit everything now (keep 0) and report the tokens it freed."""
        live = self.store.live_messages(session_id)
        if not live:
            return {"ok": True, "compacted": False, "reason": "no_messages", "summary": None,
                    "archive_id": None, "tokens_before": 0, "tokens_after": 0}
        before = self._context_tokens(session_id)
        result = self.commit(session_id, keep_recent_count=0, wait=True)
        archive = self.working_memory(session_id) or {}
        summary = archive.get("working_summary", {}).get("markdown")
        compacted = result["status"] == "completed"
        return {"ok": result["status"] in ("completed", "skipped"), "compacted": compacted,
                "reason": result.get("reason") or result["status"], "summary": summary,
                "archive_id": result.get("archive_id"), "tokens_before": before,
                "tokens_after": self._context_tokens(session_id)}

    def _context_tokens(self, session_id: str) -> int:
        archive = self.working_memory(session_id) or {}
        wm = archive.get("working_summary", {}).get("markdown", "")
        return count_tokens(wm) + sum(m["tokens"] for m in self.store.live_messages(session_id))

    # -- reading ----------------------------------------------------------------------------------

    def assemble(self, session_id: str, token_budget: int = 128_000) -> dict[str, Any]:
        """LangChain messages for the next model call (system addition, WM summary, live tail) + stats."""
        archive = self.working_memory(session_id) or {}
        wm = archive.get("working_summary", {}).get("markdown", "")
        archives_total = archive_number(archive["archive_id"]) if archive else 0
        return assemble_context(self.store.live_messages(session_id), wm, archives_total, token_budget)

    def archive_search(self, session_id: str, query: str, archive_id: str | None = None,
                       limit: int = 12) -> list[dict[str, Any]]:
        """Literal, BM25-ranked search over the session's archived messages."""
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query", query, "must be a non-empty string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            raise InvalidInput("limit", limit, "must be an integer between 1 and 100")
        if archive_id is not None:
            self.store.read_archive(session_id, archive_id)  # ArchiveNotFound for unknown ids
        self.store.meta(session_id)
        return self.index.search(session_id, query, archive_id=archive_id, limit=limit)

    def archive_expand(self, session_id: str, archive_id: str | None = None, *,
                       start_seq: int | None = None, end_seq: int | None = None) -> dict[str, Any]:
        """An archive's abstract and its messages as text, or any seq range of the session."""
        if archive_id is not None:
            archive = self.store.read_archive(session_id, archive_id)
            messages = self.store.archive_messages(session_id, archive_id)
            return {"archive_id": archive_id, "abstract": archive.get("abstract", ""),
                    "start_seq": messages[0]["seq"] if messages else None,
                    "end_seq": messages[-1]["seq"] if messages else None,
                    "content": format_messages(messages, clip_tokens=0)}
        for field, value in (("start_seq", start_seq), ("end_seq", end_seq)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(field, value, "give archive_id, or start_seq and end_seq >= 1")
        if end_seq < start_seq:
            raise InvalidInput("end_seq", end_seq, f"must be >= start_seq ({start_seq})")
        messages = self.store.messages_in_range(session_id, start_seq, end_seq)
        return {"archive_id": None, "abstract": "", "start_seq": start_seq, "end_seq": end_seq,
                "content": format_messages(messages, clip_tokens=0)}


    def working_memory(self, session_id: str) -> dict[str, Any] | None:
        """The latest complete archive object (with the WM markdown), or None before the first commit."""
        return self.store.last_complete_archive(session_id)

    def session_info(self, session_id: str) -> dict[str, Any]:
        """The session meta: pending tokens, counts, keep count, last archive — O(1)."""
        return self.store.meta(session_id)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for background commits and release resources."""
        self.runner.close()

    def __enter__(self) -> WorkingMemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _positive_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value > 10_000_000:
        raise InvalidInput(field, value, "must be a positive integer (at most 10 000 000)")
    return value
