"""Which engine and which session an agent-side component (tool, middleware, node) works on."""

from __future__ import annotations

import hashlib
import re
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


def engine_settings(engine: Any, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The checked keywords to build a `WorkingMemoryEngine` with, or None when `engine` is given (then
    `settings` must be empty: an engine and engine settings together are `InvalidInput`). Nothing is built or
    written here, so a caller can check all its other arguments before it builds."""
    import inspect

    from workmem.graphs.engine import WorkingMemoryEngine

    if engine is not None:
        if settings:
            raise InvalidInput("engine", engine, f"give an engine or engine settings ({', '.join(sorted(settings))}), "
                                                 "not both")
        return None
    known = set(inspect.signature(WorkingMemoryEngine.__init__).parameters) - {"self"}
    for name, value in settings.items():
        if name not in known:
            raise InvalidInput(name, value, "is not a setting of WorkingMemoryEngine")
    return dict(settings)


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


SessionRef = str | Callable[[Any], str] | None
"""A bound session: an id, a function of the run's `Runtime` returning one, or None (the run names it)."""


def check_session_ref(value: Any) -> SessionRef:
    """A bound session as a middleware or tool accepts it: None, a non-empty string, or a callable."""
    if value is None or callable(value) or (isinstance(value, str) and value):
        return value
    raise InvalidInput("session_id", value, "must be a non-empty string, a function of the run's runtime, or None")


def session_from_run(bound: SessionRef = None, *, runtime: Any = None, config: Mapping[str, Any] | None = None,
                     default: str | None = None) -> str:
    """Session id of the current run: the bound one (a function of the run's `Runtime` is called with it), else
    the run context's `session_id`, else the config's `configurable.session_id` or `thread_id`, else `default` —
    inside a tool call (a subagent), one taken from the run is the delegation's own (`run_sessions`)."""
    return run_sessions(bound, runtime=runtime, config=config, default=default)[0]


def run_sessions(bound: SessionRef = None, *, runtime: Any = None, config: Mapping[str, Any] | None = None,
                 default: str | None = None) -> tuple[str, str]:
    """(the run's session, the session it runs inside). They differ for a run inside a tool call of another
    graph — a subagent, which inherits that graph's config and so its thread id and run context: a session taken
    from the run (not a fixed `bound` id) is then `<session>/<delegation>` (`delegation_of`), so the subagent's
    messages never join the conversation it runs inside."""
    if isinstance(bound, str):
        return bound, bound
    if runtime is None:
        runtime = _current_runtime()
    if config is None:
        config = _current_config()
    if callable(bound):
        base = _called_session(bound, runtime)
    else:
        candidates = [_get(getattr(runtime, "context", None), "session_id")]
        configurable = (config or {}).get("configurable") or {}
        candidates += [configurable.get("session_id"), configurable.get("thread_id"), default]
        found = next((value for value in candidates if isinstance(value, str) and value), None)
        if found is None:
            raise InvalidInput("session_id", None, "bind a session id, or run with context.session_id, "
                                                   "configurable.session_id or a thread_id")
        base = found
    delegation = delegation_of(config)
    return (_delegated(base, delegation) if delegation else base), base


def _delegated(base: str, delegation: str) -> str:
    """`<base>/<delegation>`; over the id's length limit, the delegation's digest stands for it."""
    from workmem.state.ids import MAX_SESSION_ID_CHARS

    own = f"{base}/{delegation}"
    if len(own) > MAX_SESSION_ID_CHARS:
        own = f"{base}/{TOOL_NODE}~{hashlib.sha256(delegation.encode()).hexdigest()[:16]}"
    if len(own) > MAX_SESSION_ID_CHARS:
        raise InvalidInput("session_id", base, "is too long to name a subagent's session inside it: give the "
                                               "subagent its own session_id")
    return own


def readable_session(engine: WorkingMemoryEngine, bound: SessionRef = None, *, config: Mapping[str, Any] | None = None,
                     default: str | None = None) -> str:
    """The session a tool or a node reads and commits: the run's own, else — a helper without a memory of its own,
    run inside a tool call — the one it runs inside."""
    own, enclosing = run_sessions(bound, config=config, default=default)
    return own if own == enclosing or engine.session_exists(own) else enclosing


def delegated_from(session_id: str, base: str) -> bool:
    """Whether `session_id` is the session of a subagent run inside a conversation of session `base`."""
    if not session_id.startswith(base + "/"):
        return False
    segments = session_id[len(base) + 1:].split(NS_SEP)
    return any(re.split(r"[:~]", segment, maxsplit=1)[0] == TOOL_NODE for segment in segments)


NS_SEP = "|"  # LangGraph's separator of checkpoint namespaces
TOOL_NODE = "tools"  # the node `create_agent` (and LangGraph's prebuilt agents) runs tool calls in


def delegation_of(config: Mapping[str, Any] | None) -> str | None:
    """The checkpoint namespace of the tool call the current graph runs inside — up to its newest `tools`
    segment (with the counter LangGraph adds for a second graph run in the same call) — or None at the top, or in
    a graph that is a node of another (an agent added to your own graph keeps the thread's session). Namespaces
    are deterministic: a delegation resumed, in this process or another, is the same one."""
    namespace = ((config or {}).get("configurable") or {}).get("checkpoint_ns") or ""
    segments = namespace.split(NS_SEP)[:-1] if isinstance(namespace, str) else []  # the node's own segment: out
    tools = [i for i, segment in enumerate(segments) if segment.split(":", 1)[0] == TOOL_NODE]
    if not tools:
        return None
    end = tools[-1] + 1
    while end < len(segments) and segments[end].isdigit():
        end += 1
    return NS_SEP.join(segments[:end])


def _called_session(resolve: Callable[[Any], Any], runtime: Any) -> str:
    """What a `session_id` function returns for this run's runtime: a non-empty string, else `InvalidInput`."""
    if runtime is None:
        raise InvalidInput("session_id", resolve, "a session_id function needs the run's runtime: call it "
                                                  "inside an agent run")
    try:
        value = resolve(runtime)
    except Exception as exc:
        raise InvalidInput("session_id", resolve, f"the session_id function raised {type(exc).__name__}: {exc}"
                           ) from exc
    if not isinstance(value, str) or not value:
        raise InvalidInput("session_id", value, "the session_id function must return a non-empty string")
    return value


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
