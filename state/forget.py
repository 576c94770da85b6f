"""Forgetting messages for privacy: what stays in place of a forgotten message, and the rules both backends'
`forget_messages` share (which seqs may be named, which commit checkpoints go with the text).

A forgotten message keeps its place, so the invariants of the log hold as before — seqs stay contiguous,
counts, turns and archive ranges stay what they were, a tool call still has its result (nothing lost, nothing
duplicated). Its id, seq, turn_id, role and created_at stay; its verbatim text goes: each text (and a tool
result's content, a context's abstract) becomes `FORGOTTEN_TEXT`, a tool call keeps its id and name with
empty arguments, a tool result its call id, name and error flag, a context part loses its uri; the meta keeps
only the LangChain id (so an agent's state still aligns with it, and a copy sent again under that id stores
nothing: `stored.repeats`) and gains `workmem_forgotten` (when); the fingerprint (a hash of the text a short
secret could be recovered from), content blocks and payload references go, and `tokens` counts the placeholder.
Forgotten messages are not indexed (`messages.indexed_text`). The working memory a commit already made from them is
not rewritten (`WM_NOTE`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.messages import FORGOTTEN_META, LC_ID_META, lc_id, message_text
from workmem.state.tokens import count_tokens
from workmem.state.validation import require_int, require_list

FORGOTTEN_TEXT = "[forgotten]"
MAX_FORGET_SEQS = 100_000  # seqs one call may name
FORGET_TASK_PREFIX = "forget-"  # the lease a forget holds (like a delete's)
UNFINISHED = ("pending", "running", "failed")  # = runner.RESUMABLE_STATUSES: a commit that may be resumed
ABANDONED_REASON = ("abandoned by forget_messages: its checkpoint held text of forgotten messages "
                    "(they stay live for the next commit)")
WM_NOTE = ("the working memory already made from these messages was not rewritten and may still say what they "
           "said: to drop it too, delete the session (`middleware.forget`, `delete_session`) or start a new thread; "
           "the agent's own checkpoints are the caller's to clear")


def checked_seqs(seqs: Any, newest: int) -> list[int]:
    """The distinct seqs to forget, ascending: a non-empty list of ints, each naming a stored message of a
    session whose newest seq is `newest` (seqs are never reused, so 1..newest is every stored one)."""
    values = require_list("seqs", seqs)
    if not values:
        raise InvalidInput("seqs", seqs, "must name at least one message")
    if len(values) > MAX_FORGET_SEQS:
        raise InvalidInput("seqs", f"<{len(values)} seqs>", f"at most {MAX_FORGET_SEQS} per call")
    chosen = sorted({require_int("seqs", v, min=1) for v in values})
    unknown = [s for s in chosen if s > newest]
    if unknown:
        raise InvalidInput("seqs", unknown[:10], f"names no stored message: the session's newest seq is {newest}")
    return chosen


def is_forgotten(msg: dict[str, Any]) -> bool:
    """True for a stored message whose text was forgotten."""
    return FORGOTTEN_META in (msg.get("meta") or {})


def forgotten_copy(msg: dict[str, Any], at: str) -> dict[str, Any]:
    """The stored message `msg` as it stays once forgotten at `at` (see the module doc); the same for the same
    message and time, so every copy of one message (a live line, its archive's line) is rewritten alike, and a
    placeholder's copy is the placeholder itself (an already forgotten message keeps its time)."""
    when = (msg.get("meta") or {}).get(FORGOTTEN_META)
    at = when if isinstance(when, str) and when else at
    parts: list[dict[str, Any]] = []
    for part in msg.get("parts") or ():
        kept = _placeholder_part(part) if isinstance(part, dict) else None
        if kept is not None and not (kept["type"] in ("text", "context") and kept in parts):
            parts.append(kept)
    meta: dict[str, Any] = {FORGOTTEN_META: at}
    ident = lc_id(msg) if isinstance(msg.get("meta"), dict) else None  # an older line's `source_id` too
    if isinstance(ident, str) and ident:
        meta = {LC_ID_META: ident, **meta}
    out = {"id": msg["id"], "seq": msg["seq"], "turn_id": msg["turn_id"], "role": msg["role"],
           "created_at": msg["created_at"], "tokens": 0, "meta": meta, "parts": parts}
    out["tokens"] = count_tokens(message_text(out)) if parts else 0
    return out


def _placeholder_part(part: dict[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind == "text":
        return {"type": "text", "text": FORGOTTEN_TEXT}
    if kind == "tool_call":
        return {"type": "tool_call", "id": part.get("id"), "name": part.get("name") or "tool", "arguments": {},
                **({"internal": True} if part.get("internal") else {})}
    if kind == "tool_result":
        return {"type": "tool_result", "tool_call_id": part.get("tool_call_id"), "name": part.get("name"),
                "content": FORGOTTEN_TEXT, "is_error": bool(part.get("is_error")),
                **({"internal": True} if part.get("internal") else {})}
    if kind == "context":
        return {"type": "context", "uri": "", "abstract": FORGOTTEN_TEXT}
    return None


def commit_threads_to_clear(tasks: list[dict[str, Any]], writer_of: Callable[[dict[str, Any]], str | None]
                            ) -> tuple[list[dict[str, Any]], list[str]]:
    """Which of a session's commit tasks lose their checkpoint thread with a forget (their transcripts hold the
    text), and which of those are abandoned: (tasks whose thread goes, ids of the tasks abandoned).

    Every task with a thread loses it. A finished one only loses its debugging history; an unfinished one
    (pending, running or failed — no commit runs now: the forget holds the lease) is abandoned, its messages
    still live for the next commit — except one whose archive it completed itself (`writer_of(task)` is its
    id): the runner finishes that one from its archive, without the checkpoint."""
    cleared = [t for t in tasks if t.get("thread_id")]
    abandoned = [t["task_id"] for t in tasks if t.get("status") in UNFINISHED and writer_of(t) != t["task_id"]]
    return cleared, abandoned


def forget_result(session_id: str, seqs: list[int]) -> dict[str, Any]:
    """The result of a forget that changed nothing yet (every backend fills in what it did)."""
    return {"session_id": session_id, "seqs": list(seqs), "forgotten": [], "payloads_removed": 0,
            "index_rows_removed": 0, "checkpoint_threads_removed": 0, "commits_abandoned": [],
            "working_memory_rewritten": False, "note": WM_NOTE}
