"""Which engine and which session an agent-side component (tool, middleware, node) works on."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workmem.state.errors import InvalidInput
from workmem.state.ids import MAX_SESSION_ID_CHARS, check_session_id

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
        if not (isinstance(engine, WorkingMemoryEngine) or callable(engine)):
            raise InvalidInput("engine", engine, "must be a WorkingMemoryEngine or a function returning one")
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
    if value is None or callable(value):
        return value
    if isinstance(value, str) and value:
        return check_session_id(value)  # its length and characters too, as every run would check them
    raise InvalidInput("session_id", value, "must be a non-empty string, a function of the run's runtime, or None")


def session_from_run(bound: SessionRef = None, *, runtime: Any = None, config: Mapping[str, Any] | None = None,
                     default: str | None = None) -> str:
    """Session id of the current run: the bound one (a function of the run's `Runtime` is called with it), else
    the run context's `session_id`, else the config's `configurable.session_id` or `thread_id`, else `default` —
    inside a tool call of an agent on that session (a subagent), the delegation's own (`run_sessions`)."""
    return run_sessions(bound, runtime=runtime, config=config, default=default)[0]


def run_sessions(bound: SessionRef = None, *, runtime: Any = None, config: Mapping[str, Any] | None = None,
                 default: str | None = None) -> tuple[str, str]:
    """(the run's session, the session of the agent whose tool call it runs in — the same outside one)."""
    if config is None:
        config = _current_config()
    if isinstance(bound, str):
        return _delegated(bound, config)
    if runtime is None:
        runtime = _current_runtime()
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
    return _delegated(base, config)


# -- a subagent's own session --------------------------------------------------------------------------------
# LangGraph passes a run's config — and LangChain its run context — to whatever runs inside it, so an agent
# invoked from a tool of another agent (a subagent) inherits that agent's thread id and context, and with them the
# session of that agent or of its thread: the subagent's messages would be stored into, and shown from, another
# conversation, and two delegations would share one. The middleware registers each tool call it wraps while it
# runs (`delegating`): by its thread and checkpoint namespace, which the config carries into every graph run
# inside the call on whatever thread the tool runs it, and in the context it runs in, which an asyncio task the
# tool starts keeps after the tool returned. Such a run that resolves to the calling agent's session or thread
# gets `<session>/subagent/<its graph's namespace>` instead. Namespaces are deterministic, so a delegation resumed
# (in this process or another) is the same session; a subagent compiled with `checkpointer=True` runs without the
# call's task id, and keeps one session per thread, as LangGraph keeps its state.
NS_SEP = "|"  # LangGraph's separator of checkpoint namespaces
SUBAGENT = "/subagent/"


@dataclass(frozen=True)
class _Call:
    session: str  # the calling agent's session
    thread: str | None  # and its thread
    segments: tuple[str, ...]  # the checkpoint namespace of the tool call


_calls: dict[str | None, list[_Call]] = {}  # the tool calls running now, by thread
_calls_lock = threading.Lock()
_delegations: ContextVar[tuple[_Call, ...]] = ContextVar("workmem_delegations", default=())  # and in this context:
# an asyncio task the tool started still knows its call once the tool has returned


@contextmanager
def delegating(session_id: str, config: Mapping[str, Any] | None = None) -> Iterator[None]:
    """While a tool call of the agent on `session_id` runs (an agent it runs gets a session of its own)."""
    config = config or _current_config()
    call = _Call(session_id, _thread(config), _segments(config))
    with _calls_lock:
        _calls.setdefault(call.thread, []).append(call)
    token = _delegations.set((*_delegations.get(), call))
    try:
        yield
    finally:
        _delegations.reset(token)
        with _calls_lock:
            running = _calls[call.thread]
            running.remove(call)
            if not running:
                del _calls[call.thread]


def _thread(config: Mapping[str, Any] | None) -> str | None:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    return thread if isinstance(thread, str) else None


def _segments(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    namespace = ((config or {}).get("configurable") or {}).get("checkpoint_ns") or ""
    return tuple(namespace.split(NS_SEP)) if isinstance(namespace, str) and namespace else ()


def _inside(segments: tuple[str, ...], call: _Call) -> bool:
    """A graph run inside the call (deeper, along the same tasks; a checkpointed subgraph's segment names the node
    without its task id), not the call's own code."""
    return len(segments) > len(call.segments) and all(
        own == theirs or (":" not in own and own == theirs.split(":", 1)[0])
        for own, theirs in zip(segments, call.segments, strict=False))


def _delegated(base: str, config: Mapping[str, Any] | None) -> tuple[str, str]:
    """(own, enclosing) for a run resolving to `base`: inside a running tool call of an agent whose session or
    thread is `base`, its own is named by the namespace of the graph it runs in; the enclosing one is the session
    of the innermost such calling agent."""
    segments = _segments(config)
    with _calls_lock:
        running = list(dict.fromkeys([*_calls.get(_thread(config), ()), *_delegations.get()]))
    around = [call for call in running if _inside(segments, call) and base in (call.session, call.thread)]
    if not around:
        return base, base
    delegation = NS_SEP.join(segments[:-1])
    own = f"{base}{SUBAGENT}{delegation}"
    if len(own) > MAX_SESSION_ID_CHARS:  # the delegation's digest stands for it
        own = f"{base}{SUBAGENT}~{hashlib.sha256(delegation.encode()).hexdigest()[:12]}"
    if len(own) > MAX_SESSION_ID_CHARS:
        raise InvalidInput("session_id", base, "is too long to name a subagent's session inside it: give the "
                                               "subagent its own session_id")
    return own, max(around, key=lambda call: len(call.segments)).session


def readable_session(engine: WorkingMemoryEngine, bound: SessionRef = None, *, config: Mapping[str, Any] | None = None,
                     default: str | None = None) -> str:
    """The session a tool or a node reads and commits: the run's own, else — a helper without a memory of its own,
    run inside an agent's tool call — that agent's."""
    own, enclosing = run_sessions(bound, config=config, default=default)
    return own if own == enclosing or engine.session_exists(own) else enclosing


def delegated_from(session_id: str, base: str) -> bool:
    """Whether `session_id` is the session of a subagent run inside a conversation of session `base`."""
    return session_id.startswith(base + SUBAGENT)


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
