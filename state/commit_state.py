"""State of the commit graph: seq ranges, the WM text, ops and the route — never message bodies."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict


class CommitInput(TypedDict, total=False):
    """What a caller (engine, Studio) passes to start a commit."""

    session_id: str
    archive_id: str
    task_id: str
    keep_recent_count: int
    messages: list[dict[str, Any]]


class StudioInput(TypedDict, total=False):
    """The Studio input panel: which session, how many recent messages stay raw, messages to add first."""

    session_id: str
    keep_recent_count: int
    messages: list[dict[str, Any]]


class CommitOutput(TypedDict, total=False):
    """What a finished commit returns."""

    status: str
    task_id: str
    reason: str
    archive_id: str
    working_memory: str
    route: list[str]
    degraded: bool
    issues: list[str]


class CommitState(TypedDict, total=False):
    """Everything the commit graph checkpoints between nodes.

    Message bodies are never stored here: nodes read them from the session files by seq.
    """

    session_id: str
    archive_id: str
    task_id: str
    keep_recent_count: int
    messages: list[dict[str, Any]]  # optional Studio input, appended then cleared by slice_turns

    status: str  # running | skipped | completed
    reason: str
    start_seq: int
    end_seq: int
    covered_tokens: int
    tail: dict[str, Any]  # the preserved tail as seqs, turn ids and counts
    chunks: list[list[int]]  # [start_seq, end_seq] per chunk
    chunk_index: int

    working_memory: str  # the WM so far (the previous archive's, then merged chunk by chunk)
    previous_memory: str  # legacy (non-v2) text handed to the create prompt
    prompt_kind: str  # update | create — which prompt `generate` sends for this chunk
    create_retry_used: bool

    answer: dict[str, Any]  # the model's answer: tool_calls, invalid_tool_calls, text, tool name
    model_error: str
    raw_args: str  # malformed arguments handed to `recover`
    verdict: str  # valid | malformed | no_call | model_error
    ops: dict[str, Any]  # ops of this chunk, before the guards
    guarded_ops: dict[str, Any]
    guard_notes: list[str]

    degraded: bool
    model_name: str
    route: Annotated[list[str], operator.add]
    issues: Annotated[list[str], operator.add]
