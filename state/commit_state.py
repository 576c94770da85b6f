"""State of the commit graph: seq ranges, the WM text, ops, decisions and the route — never message bodies.

The vocabularies (`CommitStatus`, `Verdict`, `PromptKind`) are `Literal` types shared by the nodes
and the routers. Lists that grow over a run (route, issues, guard notes) and the model usage are
reducers, so chunk 2 adds to what chunk 1 recorded instead of overwriting it; a list update that
starts with `RESET` replaces instead (a Studio run on a reused thread starts afresh).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Required

from pydantic import Field
from typing_extensions import TypedDict

from workmem.state.memory import valid_memory_budget

CommitStatus = Literal["running", "skipped", "completed", "busy", "failed"]
Verdict = Literal["valid", "malformed", "no_call", "model_error", "unrecovered"]
PromptKind = Literal["update", "create"]
RESET = "__reset__"
USAGE_FIELDS = ("input_tokens", "output_tokens", "calls", "failed_attempts")


def extend(old: list[Any] | None, new: list[Any] | None) -> list[Any]:
    """Reducer of the run's growing lists: append, or start over when `new` begins with `RESET`."""
    if new and new[0] == RESET:
        return list(new[1:])
    return [*(old or []), *(new or [])]


def add_usage(old: dict[str, int] | None, new: dict[str, int] | None) -> dict[str, int]:
    """Reducer of the model usage: field-wise sums (`{RESET: 1}` starts over)."""
    if new and new.get(RESET):
        return {key: int(new.get(key, 0)) for key in USAGE_FIELDS}
    base = {key: int((old or {}).get(key, 0)) for key in USAGE_FIELDS}
    for key in USAGE_FIELDS:
        base[key] += int((new or {}).get(key, 0) or 0)
    return base


def fresh_run() -> dict[str, Any]:
    """The update that starts a run afresh on a reused thread: per-run lists, usage and outputs reset."""
    return {"route": [RESET], "issues": [RESET], "guard_notes": [RESET], "model_errors": [RESET],
            "usage": {RESET: 1}, "spilled": [RESET], "archive_id": "", "working_memory": "", "previous_memory": "",
            "reason": "", "degraded": False, "key_facts_may_spill": False, "model_name": "", "chunks": [],
            "chunk_index": 0, "attempt": 0, "transport_error": "", "model_error": "", "call_error": "", "answer": {},
            "ops": {}, "guarded_ops": {}, "raw_args": "", "model_fixes": []}


def memory_budget_of(state: Any) -> int | None:
    """The memory budget a commit run uses (tokens), or None for the full section table (also for older checkpoints)."""
    return valid_memory_budget(state.get("memory_budget"))


def keep_of(state: Any) -> tuple[str, int]:
    """The keep a commit run uses: `keep` ([unit, n]), else a first-build `keep_recent_count` (messages)."""
    keep = state.get("keep")
    if isinstance(keep, (list, tuple)) and len(keep) == 2:
        return str(keep[0]), int(keep[1])
    return "messages", int(state.get("keep_recent_count") or 0)


class GuardNote(TypedDict):
    """One guard decision that changed an op: which section, which guard, what it did, the detail."""

    section: str
    guard: str
    action: str
    detail: str


class CommitInput(TypedDict, total=False):
    """What the engine passes to start a commit."""

    session_id: str
    archive_id: str
    task_id: str
    keep: list[Any]  # [unit, n]: the raw tail the commit keeps
    keep_recent_count: int  # first-build checkpoints: the messages unit
    memory_budget: int  # the WM's token budget (`state.memory.budgets`); absent → the section table
    clip_tokens: int  # how long one message may be in the commit's transcript; absent → the engine's


class StudioInput(TypedDict, total=False):
    """Commit one workmem session into its working memory (Studio's input panel)."""

    session_id: Required[Annotated[str, Field(
        description="The session to commit (for an agent: its thread id). Must already hold messages, "
                    "or get some from `messages`.")]]
    keep: Annotated[str, Field(
        description="How much of the newest conversation stays raw: messages:10, turns:3, tokens:4000 or "
                    "fraction:0.1 of a 128 000-token window; a bare number counts messages (default messages:0, "
                    "commit everything).")]
    keep_recent_count: Annotated[int, Field(
        description="Older form of keep: this many newest messages stay raw. Give keep or this, not both.")]
    memory_budget: Annotated[int, Field(
        description="Token budget of the whole working memory (400-10105); default 10060, an engine's at its "
                    "default trigger. Sections past their share spill their oldest items into the archive.")]
    messages: Annotated[list[dict[str, Any]], Field(
        description="Messages to append before committing, e.g. {\"role\": \"user\", \"content\": \"…\"}; also "
                    "LangChain's {\"type\": \"human\", …} dicts. Appended once per run.")]


class CommitOutput(TypedDict, total=False):
    """What a finished commit returns."""

    status: CommitStatus
    task_id: str
    reason: str
    archive_id: str
    working_memory: str
    route: list[str]
    degraded: bool
    issues: list[str]
    guard_notes: list[GuardNote]
    usage: dict[str, int]
    model_name: str
    model_errors: list[str]
    model_fixes: list[str]


class CommitState(TypedDict, total=False):
    """Everything the commit graph checkpoints between nodes.

    Message bodies are never stored here: nodes read them from the session files by seq.
    """

    session_id: str
    archive_id: str
    task_id: str
    keep: list[Any]  # [unit, n]
    keep_recent_count: int  # first-build checkpoints; `keep` wins when both are present
    memory_budget: int  # the WM's token budget for this run; absent (older checkpoints) → the section table
    clip_tokens: int  # one message's length in this run's transcripts; absent → the engine's `clip_tokens`
    messages: list[dict[str, Any]]  # optional Studio input, appended by take_lease then cleared

    status: CommitStatus
    reason: str
    start_seq: int
    end_seq: int
    covered_tokens: int
    tail: dict[str, Any]  # the preserved tail as seqs, turn ids and counts
    hidden: list[int]  # covered seqs the agent's state no longer holds: left out of the transcripts
    chunks: list[list[int]]  # [start_seq, end_seq] per chunk
    chunk_index: int

    working_memory: str  # the WM so far (the previous archive's, then merged chunk by chunk)
    previous_memory: str  # legacy (non-v2) text handed to the create prompt
    prompt_kind: PromptKind  # which prompt `generate` sends for this chunk
    create_retry_used: bool

    attempt: int  # transport attempts of the current call (0 once it is answered)
    transport_error: str  # the redacted transport error of the last attempt, "" when it answered
    answer: dict[str, Any]  # the model's answer: tool_calls, invalid_tool_calls, text
    model_error: str  # redacted: this call's API refusal, or its transport error past the last attempt
    call_error: str  # redacted: the exception the newest model call raised, "" when it answered
    model_errors: Annotated[list[str], extend]  # every model error of the run (the task shows the last)
    model_fixes: list[str]  # the refusal fixes in effect at the last call (nodes/model_fixes.py)
    raw_args: str  # malformed arguments handed to `recover`
    verdict: Verdict
    ops: dict[str, Any]  # ops of this chunk, before the guards: {kind: update|create, sections}
    guarded_ops: dict[str, Any]  # the seven ops `merge` applies, decided by `guard`

    key_facts_may_spill: bool  # the consolidation sentinel stood through two commits (see nodes/spill.py)
    spilled: Annotated[list[dict[str, str]], extend]  # WM items moved to the archive: {section, item}

    degraded: bool
    model_name: str
    route: Annotated[list[str], extend]
    issues: Annotated[list[str], extend]
    guard_notes: Annotated[list[GuardNote], extend]
    usage: Annotated[dict[str, int], add_usage]
