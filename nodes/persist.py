"""Node `persist`: write the archive, index it, garbage-collect the live file, finish the task.

Every step is idempotent, in this order, so re-running any prefix after a crash is harmless:
archive dir (temp → rename) with `.done` last → full-text index → lease re-check → live-file GC →
meta → task completed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from langgraph.runtime import Runtime

from workmem.nodes.context import CommitContext, services
from workmem.nodes.extractive.model import EXTRACTIVE_MODEL_NAME
from workmem.state.archive_object import ABSTRACT_CHARS, ARCHIVE_FORMAT, EXPAND_TOOL_NAME, OVERVIEW, SEARCH_TOOL_NAME
from workmem.state.commit_state import CommitState, add_usage, keep_of
from workmem.state.errors import ArchiveConflict
from workmem.state.ids import archive_name, archive_number
from workmem.state.memory import CONSOLIDATION_SENTINEL, SECTION_KEYS, parse_sections
from workmem.state.storage import SearchStorage, SessionStorage, TaskStorage
from workmem.state.tokens import count_tokens

ARCHIVE_INDEX_SIZE = 20
GUARD_NOTES_KEPT = 100  # archive.json keeps the newest notes and the total count


def abstract_of(working_memory: str) -> str:
    """One line: Session Title — first sentence of Current State (at most 200 characters)."""
    sections = parse_sections(working_memory)
    title = " ".join(sections.get("Session Title", "").split()) or "Untitled session"
    state_text = " ".join(sections.get("Current State", "").split())
    first = re.split(r"(?<=[.!?])\s", state_text, maxsplit=1)[0] if state_text else ""
    line = f"{title} — {first}" if first else title
    return line if len(line) <= ABSTRACT_CHARS else line[: ABSTRACT_CHARS - 1] + "…"


def build_archive(
    state: CommitState, messages: list[dict[str, Any]], previous: dict[str, Any] | None
) -> dict[str, Any]:
    """The working-memory object for this commit."""
    wm = state["working_memory"]
    notes = list(state.get("guard_notes") or [])
    sections = parse_sections(wm)
    spilled_counts: dict[str, int] = {}
    for item in state.get("spilled") or []:
        spilled_counts[item["section"]] = spilled_counts.get(item["section"], 0) + 1
    abstract = abstract_of(wm)
    entry = {"archive_id": state["archive_id"], "abstract": abstract,
             "start_seq": state["start_seq"], "end_seq": state["end_seq"]}
    older = (previous or {}).get("expansion", {}).get("archive_index", [])
    return {
        "archive_id": state["archive_id"],
        "session_id": state["session_id"],
        "task_id": state.get("task_id"),
        "created_at": datetime.now(UTC).isoformat(),
        "source_turn_range": {
            "start_turn_id": messages[0]["turn_id"] if messages else None,
            "end_turn_id": messages[-1]["turn_id"] if messages else None,
            "start_seq": state["start_seq"],
            "end_seq": state["end_seq"],
        },
        "format": ARCHIVE_FORMAT,
        "working_summary": {
            "overview": OVERVIEW,
            "section_tokens": {key: count_tokens(sections.get(name, "")) for name, key in SECTION_KEYS.items()},
        },
        "spilled": spilled_counts,
        "key_facts_sentinel_commits": sentinel_commits(previous, sections),
        "preserved_tail": state.get("tail") or {},
        "expansion": {
            "archive_index": ([*older, entry])[-ARCHIVE_INDEX_SIZE:],
            "expand_tool": EXPAND_TOOL_NAME,
            "search_tool": SEARCH_TOOL_NAME,
        },
        "guard_notes": notes[-GUARD_NOTES_KEPT:],
        "guard_notes_total": len(notes),
        "model": {
            "name": state.get("model_name") or "",
            "degraded": bool(state.get("degraded")),
            "fallback": EXTRACTIVE_MODEL_NAME if state.get("degraded") else None,
            "route": list(state.get("route") or []) + ["persist"],
            "usage": add_usage(None, state.get("usage")),
            "error": (state.get("model_errors") or [None])[-1],
            "fixes": list(state.get("model_fixes") or []),
        },
        "tokens": {"covered": state.get("covered_tokens", 0), "working_memory": count_tokens(wm)},
    }


def sentinel_commits(previous: dict[str, Any] | None, sections: dict[str, str]) -> int:
    """How many commits in a row ended with the Key Facts consolidation sentinel, this one included."""
    if CONSOLIDATION_SENTINEL not in sections.get("Key Facts & Decisions", ""):
        return 0
    return previous_sentinel_commits(previous) + 1


def previous_sentinel_commits(previous: dict[str, Any] | None) -> int:
    """The counter of the previous archive (first-build archives derive it from their WM: 0 or 1)."""
    if not previous:
        return 0
    if "key_facts_sentinel_commits" in previous:
        return int(previous["key_facts_sentinel_commits"])
    key_facts = (previous.get("working_summary") or {}).get("sections", {}).get("key_facts_and_decisions", "")
    return int(CONSOLIDATION_SENTINEL in key_facts)


def _check_ownership(written: dict[str, Any], state: CommitState) -> None:
    """Writing an archive that is already complete is a no-op; it must then be this commit's own work
    (a resumed run), never another commit's that reserved the same id after this one lost its lease."""
    if written.get("task_id") != state.get("task_id"):
        raise ArchiveConflict(state["session_id"], state["archive_id"], state.get("task_id"), written.get("task_id"))


def persist(state: CommitState, runtime: Runtime[CommitContext]) -> dict[str, Any]:
    """Archive the covered messages with the new WM, then let the live file forget them."""
    svc = services(runtime)
    session_id, archive_id = state["session_id"], state["archive_id"]
    messages = svc.sessions.messages_in_range(session_id, state["start_seq"], state["end_seq"], texts=False)
    number = archive_number(archive_id)
    previous = svc.sessions.read_archive(session_id, archive_name(number - 1)) if number > 1 else None
    archive = build_archive(state, messages, previous)
    svc.sessions.write_archive(session_id, archive, messages, state["working_memory"],
                               archive["expansion"]["archive_index"][-1]["abstract"], list(state.get("spilled") or []))
    written = svc.sessions.read_archive(session_id, archive_id)  # this run's, or an earlier attempt's
    _check_ownership(written, state)
    holder = svc.tasks.lease_holder(session_id)
    finish_archived_commit(svc.sessions, svc.tasks, svc.search, written, keep_of(state),
                           collect_garbage=holder is None or holder.get("task_id") == state.get("task_id"))
    return {"status": "completed", "route": ["persist"]}


def finish_archived_commit(sessions: SessionStorage, tasks: TaskStorage, search: SearchStorage,
                           archive: dict[str, Any], keep: tuple[str, int], *, collect_garbage: bool = True) -> None:
    """The steps after `.done`, each idempotent: index the archive — what the archive itself holds, never what
    a (resumed) run believes it covered — let the live file forget its messages, update the meta, mark the
    task completed. Also how an interrupted commit whose archive is already complete is finished without its
    graph."""
    session_id, archive_id = archive["session_id"], archive["archive_id"]
    search.index_messages(session_id, archive_id, sessions.archive_messages(session_id, archive_id),
                          sessions.spilled_items(session_id, archive_id))
    if collect_garbage:
        sessions.drop_covered(session_id, archive["source_turn_range"]["end_seq"])
    sessions.record_commit(session_id, archive, keep)
    if archive.get("task_id"):
        tasks.update_task(archive["task_id"], status="completed",
                          result={"archive_id": archive_id, "route": archive["model"]["route"],
                                  "degraded": archive["model"]["degraded"]})
