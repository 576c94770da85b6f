"""Which engine and which session an agent-side component (tool, middleware, node) works on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from workmem.state.errors import InvalidInput

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

def resolve_engine(ref: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine]) -> WorkingMemoryEngine:
    """The engine itself, or the one a zero-argument factory returns (so a module can build it lazily)."""
    from workmem.graphs.engine import WorkingMemoryEngine

    if isinstance(ref, WorkingMemoryEngine):
        return ref
    if callable(ref):
        engine = ref()
        if isinstance(engine, WorkingMemoryEngine):
            return engine
    raise InvalidInput("engine", ref, "must be a WorkingMemoryEngine or a function returning one")


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def session_from_run(bound: str | None = None, *, runtime: Any = None, config: Mapping[str, Any] | None = None,
                     default: str | None = None) -> str:
    """Session id of the current run: the bound one, else the run context's `session_id`, else the config's
    `configurable.session_id` or `thread_id`, else `default`."""
    if bound is not None:
        return bound
    if runtime is None:
        runtime = _current_runtime()
    if config is None:
        config = _current_config()
    candidates = [_get(getattr(runtime, "context", None), "session_id")]
    configurable = (config or {}).get("configurable") or {}
    candidates += [configurable.get("session_id"), configurable.get("thread_id"), default]
    for value in candidates:
        if isinstance(value, str) and value:
            return value
    raise InvalidInput("session_id", None, "bind a session id, or run with context.session_id, "
                                           "configurable.session_id or a thread_id")


def _current_config() -> Mapping[str, Any]:
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError:  # not inside a runnable
        return {}


def _current_runtime() -> Any:
    from langgraph.runtime import get_runtime

    try:
        return get_runtime()
    except (RuntimeError, KeyError):
        return None
