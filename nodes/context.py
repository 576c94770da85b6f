"""Runtime knobs of the commit graph and the services (storage, model) its nodes use."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from langgraph.errors import GraphBubbleUp
from langgraph.runtime import Runtime

from workmem.nodes.model_fixes import ModelFixes
from workmem.state.errors import InvalidInput, WorkmemError
from workmem.state.redact import describe_error
from workmem.state.storage import (
    SearchStorage,
    SessionStorage,
    Storage,
    TaskStorage,
    database_url_for,
    default_root,
    open_storage,
)

DEFAULT_CHUNK_TOKENS = 24_000
DEFAULT_CLIP_TOKENS = 4_000
ENV_TOOL_SCHEMA = "WORKMEM_TOOL_SCHEMA"
ToolSchema = Literal["ref", "inline"]


def tool_schema_setting(value: str | None = None) -> ToolSchema:
    """`ref` (the op object once, under `$defs`) or `inline` (written out per section, for servers that
    reject `$ref`): `value`, else `WORKMEM_TOOL_SCHEMA`, else `ref`."""
    raw = (os.environ.get(ENV_TOOL_SCHEMA, "") if value is None else value).strip().lower()
    if raw in ("", "ref"):
        return "ref"
    if raw == "inline":
        return "inline"
    raise InvalidInput(ENV_TOOL_SCHEMA if value is None else "tool_schema", raw, "must be 'ref' or 'inline'")


@dataclass(kw_only=True)
class CommitContext:
    """Passed with `context=` on every invoke (also on resume); everything has a default for Studio."""

    root: str | None = None
    model: Any = None  # a BaseChatModel; None → WORKMEM_MODEL or the extractive default
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    clip_tokens: int = DEFAULT_CLIP_TOKENS
    durable: bool = True
    retry_backoff_s: float = 0.5  # before the 2nd transport attempt; doubled before the 3rd
    storage: Any = None  # the engine's Storage; None → one per root
    tool_schema: ToolSchema = field(default_factory=tool_schema_setting)
    model_fixes: ModelFixes = field(default_factory=ModelFixes)  # the engine's: kept across its commits


@dataclass(frozen=True)
class Services:
    """What the nodes of one commit talk to."""

    sessions: SessionStorage
    tasks: TaskStorage
    search: SearchStorage
    model: Any
    chunk_tokens: int
    clip_tokens: int
    tool_schema: ToolSchema = "ref"
    fixes: ModelFixes = field(default_factory=ModelFixes)


_lock = threading.Lock()


@lru_cache(maxsize=32)
def _storage(root: str | None, durable: bool, database_url: str | None = None) -> Storage:
    return open_storage(root, database_url=database_url, durable=durable)


@lru_cache(maxsize=1)
def _default_model() -> Any:
    from workmem.nodes.models import resolve_model

    return resolve_model()


def context_of(runtime: Runtime | None) -> CommitContext:
    """The run's CommitContext; Studio may pass none or a plain dict."""
    ctx = getattr(runtime, "context", None) if runtime is not None else None
    if ctx is None:
        return CommitContext()
    if isinstance(ctx, dict):
        return CommitContext(**{k: v for k, v in ctx.items() if k in CommitContext.__dataclass_fields__})
    return ctx


class CommitNodeFailed(WorkmemError, RuntimeError):
    """A commit node failed; the message is the redacted `Type: message` of the original error."""

    def __init__(self, node: str, error: BaseException) -> None:
        self.node = node
        self.error_type = type(error).__name__
        super().__init__(f"node {node} failed: {describe_error(error)}")


def redacted(node: Callable[..., Any]) -> Callable[..., Any]:
    """The node, but an exception escaping it is replaced by a redacted `CommitNodeFailed` (no chained
    original), so no secret reaches LangGraph's error channel in the checkpoint, nor its logs."""

    @functools.wraps(node)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return node(*args, **kwargs)
        except GraphBubbleUp:  # interrupts and other control flow of LangGraph itself
            raise
        except Exception as exc:
            raise CommitNodeFailed(_current_node() or node.__name__, exc) from None

    return run


def _current_node() -> str | None:
    """The name of the graph node running now (LangGraph puts it in the run's metadata)."""
    from langgraph.config import get_config

    try:
        return get_config().get("metadata", {}).get("langgraph_node")
    except RuntimeError:  # called outside a graph run
        return None


def services(runtime: Runtime | None) -> Services:
    """Resolve the storage and model of this run (storage cached per root)."""
    ctx = context_of(runtime)
    url = None if ctx.root else database_url_for()  # Studio runs without a root: the environment decides
    root = str(Path(ctx.root).resolve()) if ctx.root else (None if url else str(default_root()))
    with _lock:
        storage = ctx.storage if ctx.storage is not None else _storage(root, ctx.durable, url)
        model = ctx.model if ctx.model is not None else _default_model()
    return Services(storage.sessions, storage.tasks, storage.search, model, ctx.chunk_tokens, ctx.clip_tokens,
                    tool_schema_setting(ctx.tool_schema), ctx.model_fixes)


def clip_tokens_of(state: Any, svc: Services) -> int:
    """How long one message may be in this run's transcripts: the run's own `clip_tokens` (a commit an agent's
    call started sets it from its trigger), else the engine's."""
    value = state.get("clip_tokens") if isinstance(state, dict) else None
    valid = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if valid else svc.clip_tokens
