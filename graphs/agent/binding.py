"""Which engine and which session an agent-side component (tool, middleware, node) works on."""

from __future__ import annotations

import threading
from collections import Counter
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
    one an enclosing agent run holds made the run's own (`own_session`)."""
    if runtime is None and (bound is None or callable(bound)):
        runtime = _current_runtime()
    if callable(bound):
        return _called_session(bound, runtime)
    if bound is not None:
        return bound
    if config is None:
        config = _current_config()
    candidates = [_get(getattr(runtime, "context", None), "session_id")]
    configurable = (config or {}).get("configurable") or {}
    candidates += [configurable.get("session_id"), configurable.get("thread_id"), default]
    for value in candidates:
        if isinstance(value, str) and value:
            return own_session(value, graph_namespace(config))
    raise InvalidInput("session_id", None, "bind a session id, or run with context.session_id, "
                                           "configurable.session_id or a thread_id")


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


# -- a subagent's own session ----------------------------------------------------------------------------------
# LangGraph passes a run's config to whatever runs inside it, so an agent invoked from a tool of another agent (a
# subagent) inherits that agent's thread id — and with it, when nothing names a session, its session: the
# subagent's messages would be stored into, and shown from, the other agent's conversation. The middleware's runs
# hold their session while they run (by the namespace of their graph); a run inside a graph whose run holds the
# same session gets `<session>/<its graph's namespace>` instead. The namespace names the tool call, so each
# delegation is a session of its own, the same one again when it resumes. A run that ends by an interrupt or an
# error keeps holding its session in this process until a run of the same graph ends normally.
NS_SEP = "|"  # LangGraph's separator of checkpoint namespaces
_holders: dict[str, Counter[str]] = {}
_holders_lock = threading.Lock()


def graph_namespace(config: Mapping[str, Any] | None) -> str:
    """The checkpoint namespace of the graph a node runs in: its own without the node's segment ('' at the top)."""
    namespace = ((config or {}).get("configurable") or {}).get("checkpoint_ns") or ""
    return namespace.rpartition(NS_SEP)[0] if isinstance(namespace, str) else ""


def _encloses(outer: str, inner: str) -> bool:
    return outer != inner and (outer == "" or inner.startswith(outer + NS_SEP))


def own_session(session_id: str, namespace: str) -> str:
    """`session_id`, or — when a run of a graph this one runs inside holds it — `<session_id>/<namespace>`."""
    with _holders_lock:
        holders = list(_holders.get(session_id, ()))
    return f"{session_id}/{namespace}" if any(_encloses(h, namespace) for h in holders) else session_id


def hold_session(session_id: str, config: Mapping[str, Any] | None = None) -> None:
    """Note that a run of the current graph uses `session_id` (runs inside it get their own)."""
    namespace = graph_namespace(_current_config() if config is None else config)
    with _holders_lock:
        _holders.setdefault(session_id, Counter())[namespace] += 1


def release_session(session_id: str, config: Mapping[str, Any] | None = None) -> None:
    """The run of the current graph that held `session_id` ended."""
    namespace = graph_namespace(_current_config() if config is None else config)
    with _holders_lock:
        held = _holders.get(session_id)
        if held is not None and held[namespace] > 0:
            held[namespace] -= 1
            if held[namespace] == 0:
                del held[namespace]
            if not held:
                del _holders[session_id]
