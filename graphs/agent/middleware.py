"""`WorkingMemoryMiddleware` for `langchain.agents.create_agent`: workmem's context at every model call.

One line integrates workmem into an agent::

    agent = create_agent(model, tools, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=saver)
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

Each model call runs the same steps (docs/design.md, *The per-call path*)::

    call = self._snapshot(request)      # store the run's new messages; one view, the memory, the limit, the counts
    plan = decide(call.figures, ...)    # pure: commit with this keep, wait for a running commit, or nothing
    call = self._act(call, plan)        # the only side effects; a new snapshot after a commit finished
    prepared = self._assemble(call)     # the request as sent, its record, the agent-state update

A provider's context-length refusal runs the same steps once more with another target (`_recover`). When storage
is down, the call goes out with the last good view and storing is retried at the next call. Around the run,
`before_agent` notes where the run starts and `after_agent` stores what the run added after its last call; no
commit is decided there. The middleware goes first in the list: middleware that edits `request.messages` (e.g.
`ContextEditingMiddleware`) edits the assembled view.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
    ToolCallRequest,
)
from langchain_core.messages import BaseMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from workmem.graphs.agent.alignment import ArchivedKeys, archive_keys
from workmem.graphs.agent.binding import (
    SessionRef,
    check_session_ref,
    delegated_from,
    delegating,
    engine_settings,
    resolve_engine,
    session_from_run,
)
from workmem.graphs.agent.call import (
    SYSTEM_ADDITION_TOKENS,
    Call,
    Prepared,
    call_tokens,
    clip_cap,
    figures_of,
    out_of_view,
    shown_entries,
    shown_pinned,
    shown_pinned_step,
    shrinkable,
    within_window,
)
from workmem.graphs.agent.events import emit
from workmem.graphs.agent.fallback import last_good, remember_sent
from workmem.graphs.agent.outcomes import report, report_background
from workmem.graphs.agent.overflow import is_context_overflow, lowered_limit
from workmem.graphs.agent.removed import hide_dropped
from workmem.graphs.agent.session_cache import ARCHIVE_TAIL, session_caches
from workmem.graphs.agent.session_locks import SessionLocks, in_turn, session_locks
from workmem.graphs.agent.settings import CommitMode, MemoryMessage, MiddlewareSettings, TokenCounter
from workmem.graphs.agent.tools import binds_tools, make_archive_tools, make_tool_result_reader, schema_tokens
from workmem.graphs.agent.trim import archived_in_state, pinned_step_ids, state_synopses, trimmed
from workmem.graphs.agent.view import (
    NormalisedCache,
    StateView,
    combine_system,
    leading_system_ids,
    with_instructions,
)
from workmem.graphs.context.assemble import assemble_context, reserve_for_reply
from workmem.graphs.context.call_state import warn_capped_keep
from workmem.graphs.context.decision import DEFAULT_LOW_WATER, KeepChoice, Plan, decide, decide_overflow
from workmem.graphs.context.tool_results import (
    DEFAULT_KEEP_TOOL_RESULTS,
    Synopses,
    offload_tokens_for,
    read_tokens_for,
)
from workmem.state.archive_object import OWN_TOOLS
from workmem.state.errors import (
    ContextOverflow,
    DatabaseUnavailable,
    InvalidInput,
    SessionNotFound,
)
from workmem.state.ids import archive_name, archive_number, check_session_id
from workmem.state.redact import describe_error
from workmem.state.retention import Keep, Trigger, trigger_tokens
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens
from workmem.state.validation import require_bool, require_text

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

STORAGE_DOWN = (DatabaseUnavailable, OSError)  # storage that cannot be reached, read or written right now
PINNED_TOOLS = ("write_todos",)  # LangChain's TodoListMiddleware: its newest list stays in view
DEFAULT_PINNED_TOKENS = 100  # the archived running-turn message, shown as its first lines (the archive keeps it)

log = logging.getLogger("workmem.agent")


class WorkmemAgentState(AgentState):
    """Agent state plus the middleware's private bookkeeping (not in the agent's input or output schema)."""

    workmem_commit_task: NotRequired[Annotated[str | None, PrivateStateAttr]]
    workmem_last_call: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]
    workmem_run_from: NotRequired[Annotated[str | None, PrivateStateAttr]]  # newest input message's id
    workmem_run_seq: NotRequired[Annotated[int | None, PrivateStateAttr]]  # the session's next seq at the run's start
    workmem_stored_upto: NotRequired[Annotated[int | None, PrivateStateAttr]]  # its next seq after our last store
    # `workmem_stored_upto` as a previous run left it (None: no earlier run of this thread stored anything)
    workmem_prior_upto: NotRequired[Annotated[int | None, PrivateStateAttr]]
    # `forget_on_remove`: the live stored messages the state held at its last call or run end (what it drops
    # from then on was removed, not left behind on another branch), and removals still to forget
    workmem_held: NotRequired[Annotated[list[int] | None, PrivateStateAttr]]
    workmem_to_forget: NotRequired[Annotated[list[int] | None, PrivateStateAttr]]
    workmem_held_in: NotRequired[Annotated[str | None, PrivateStateAttr]]  # the session's incarnation they name



MAX_TOOL_SETS = 64  # sets of bound tools whose schema tokens are remembered


def profile_limit(model: Any) -> int | None:
    """The input limit the call's own model declares (`profile["max_input_tokens"]`), else None: each call reads
    its model's, so a middleware that swaps models per call gets each one's."""
    profile = getattr(model, "profile", None)
    limit = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None

class WorkingMemoryMiddleware(AgentMiddleware[WorkmemAgentState, Any]):
    """Store, commit when due and assemble workmem's context at every model call of an agent."""

    state_schema = WorkmemAgentState

    def __init__(
        self,
        engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine] | None = None,
        *,
        model: Any = None,
        root: str | Path | None = None,
        session_id: SessionRef = None,
        default_session_id: str | None = None,
        token_budget: int | None = None,
        keep: Keep | None = None,
        trigger: Trigger | int | None = None,
        low_water: float = DEFAULT_LOW_WATER,
        commit_mode: CommitMode = "background",
        trim_state: bool = True,
        tools: bool = True,
        offload_tokens: int | None = None,
        keep_tool_results: int = DEFAULT_KEEP_TOOL_RESULTS,
        exclude_tools: list[str] | None = None,
        memory_message: MemoryMessage = "human",
        pinned_tokens: int | None = DEFAULT_PINNED_TOKENS,
        pinned_tools: list[str] | tuple[str, ...] = PINNED_TOOLS,
        forget_on_remove: bool = False,
        token_counter: TokenCounter | None = None,
        **engine_options: Any,
    ) -> None:
        """Build the middleware on an engine, or on the settings of one it builds, owns and closes.

        Args:
            engine: a `WorkingMemoryEngine`, or a zero-argument function returning one (you close it). Give it or
                engine settings, not both.
            model: the commit model of the engine the middleware builds (a model object or "provider:model").
            root: the data root of the engine it builds; any other `WorkingMemoryEngine` keyword (e.g.
                `database_url=`) goes in `engine_options`.
            session_id: one fixed session, or a function of the run's `Runtime` returning the id; by default each
                thread is one session.
            default_session_id: the session of a run that names none.
            token_budget: the model's input limit; default the agent model's `profile["max_input_tokens"]`, else
                the engine's `context_window`.
            keep: the raw tail a commit leaves (`("messages", n)`, `("turns", n)`, `("tokens", n)`,
                `("fraction", f)` of the input limit); default the engine's.
            trigger: when a commit is due (`("tokens", n)`, `("fraction", f)`, `("messages", n)` or a list of
                them); default the engine's.
            low_water: the share of the trigger the call after a commit may carry, its kept tail measured as that
                call shows it (older tool results as their synopsis), in (0, 1); default 0.5.
            commit_mode: "background" (commit while the call goes out; wait only when over the input limit) or
                "sync" (commit first).
            trim_state: archived messages leave the agent's state (its checkpoints stay bounded).
            tools: contribute `archive_search`, `archive_expand` and `read_tool_result`.
            offload_tokens: a tool result over this many tokens is shown as its synopsis; smaller ones are shown whole
                until a commit. Default a 16th of the model's input limit, at most 20 000 (8 000 at 128k).
            keep_tool_results: after a commit, the kept tail's results but the newest this many are shown as
                their synopsis.
            exclude_tools: tools whose results are never shown as a synopsis.
            memory_message: "human" (the working memory in a message of its own) or "system" (inside the system
                message, for chat templates that need strict user/assistant alternation).
            pinned_tokens: once a commit archived the running turn's user message, it stays in view after the
                memory as its first lines within this many tokens (default 100; None: whole).
            pinned_tools: tools whose newest call and result stay in view after the memory once a commit archived
                them (default `write_todos`: `TodoListMiddleware`'s list survives commits).
            forget_on_remove: live stored messages the state drops lose their text too
                (`engine.forget_messages`), instead of only being hidden.
            token_counter: LangChain's counter signature (messages → tokens) for the trigger and input-limit
                decisions; stored token counts stay cl100k.
            **engine_options: other settings of the engine the middleware builds.
        """
        super().__init__()
        settings = {**({"model": model} if model is not None else {}), **({"root": root} if root is not None else {}),
                    **engine_options}
        build = engine_settings(engine, settings)
        self.session_id = check_session_ref(session_id)
        self.settings = MiddlewareSettings.checked(
            token_budget=token_budget, keep=keep, trigger=trigger, low_water=low_water, commit_mode=commit_mode,
            trim_state=trim_state, offload_tokens=offload_tokens, keep_tool_results=keep_tool_results,
            exclude_tools=exclude_tools, memory_message=memory_message, pinned_tokens=pinned_tokens,
            pinned_tools=pinned_tools, forget_on_remove=forget_on_remove, token_counter=token_counter)
        self.default_session_id = (check_session_id(default_session_id, "default_session_id")
                                   if default_session_id is not None else None)
        tools = require_bool("tools", tools)
        if build is not None:  # every argument is checked: only now may the engine touch the disk
            engine = self._build_engine(build)
        self.engine = engine
        self._owned: WorkingMemoryEngine | None = engine if build is not None else None
        reader = make_tool_result_reader(engine, session_id, default_session_id=default_session_id,
                                         max_tokens=lambda session: self._caches.of(session).read_limit)
        self.tools = [*make_archive_tools(engine, session_id, default_session_id=default_session_id),
                      reader] if tools else []
        self._own_ids = frozenset(id(t) for t in self.tools)
        self._synopses = Synopses()
        self._normalised = NormalisedCache()
        self._caches = session_caches()
        self._schemas: dict[tuple[int, ...], tuple[tuple[Any, ...], int]] = {}  # each set of bound tools seen, newest
        # last, with the tokens of its schemas
        self._schemas_lock = threading.Lock()
        self._warned_no_tools = False

    def _build_engine(self, build: dict[str, Any]) -> WorkingMemoryEngine:
        from workmem.graphs.engine import WorkingMemoryEngine

        # a fraction keep is the model's: resolved per call against its input limit, not the engine's window
        keep = None if self.settings.keeps_fraction else self.settings.keep
        retention = {"keep": keep, "trigger": self.settings.trigger}
        return WorkingMemoryEngine(**{k: v for k, v in retention.items() if v is not None}, **build)

    @property
    def _locks(self) -> SessionLocks:
        """A session's storing steps run one at a time, across the engine's middleware (a cancelled run's may go
        on in its worker thread)."""
        return session_locks(resolve_engine(self.engine))

    # -- the engine it built ---------------------------------------------------------------------

    def close(self) -> None:
        """Close the engine the middleware built from its settings (its background commits are waited for);
        an engine given to the middleware belongs to the caller and is left open. Idempotent."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.close()

    async def aclose(self) -> None:
        """Async variant of `close`."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> WorkingMemoryMiddleware:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the model call -------------------------------------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        """Store, commit when due, call the model on the assembled context; record what it was sent."""
        prepared = self._prepare(request)
        try:
            response = handler(prepared.request)
        except Exception as exc:
            prepared = self._recover(request, prepared, exc)
            response = self._send_again(handler, prepared)
        self._sent(request, prepared)
        return ExtendedModelResponse(model_response=response, command=prepared.command())

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ExtendedModelResponse:
        """Async variant of `wrap_model_call` (the engine's file I/O runs in a worker thread)."""
        session_id = self._session(request.runtime)
        prepared = await in_turn(self._locks, session_id, self._prepare, request)
        try:
            response = await handler(prepared.request)
        except Exception as exc:
            prepared = await in_turn(self._locks, session_id, self._recover, request, prepared, exc)
            try:
                response = await handler(prepared.request)
            except Exception as again:
                if is_context_overflow(again):
                    raise _too_long(prepared) from again
                raise
        self._sent(request, prepared)
        return ExtendedModelResponse(model_response=response, command=prepared.command())

    def wrap_tool_call(self, request: ToolCallRequest,
                       handler: Callable[[ToolCallRequest], ToolMessage | Command]) -> ToolMessage | Command:
        """Run the tool call marked as this agent's: an agent it runs on this session (a subagent) gets its own."""
        with delegating(self._session(request.runtime)):
            return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
                              ) -> ToolMessage | Command:
        """Async variant of `wrap_tool_call`."""
        with delegating(self._session(request.runtime)):
            return await handler(request)

    def _prepare(self, request: ModelRequest) -> Prepared:
        """The per-call steps: snapshot, decide, act, assemble (storage down: the last good view)."""
        self._check_tools(request)
        session_id = self._session(request.runtime)
        with self._locks.holding(session_id):
            try:
                call = self._snapshot(request, session_id)
                plan = decide(call.figures, call.calls.counters, sync=self.settings.commit_mode == "sync")
                call = self._act(call, plan)
                return self._assemble(call, plan)
            except STORAGE_DOWN as exc:
                engine = resolve_engine(self.engine)
                budget = self.settings.token_budget or profile_limit(request.model) or DEFAULT_CONTEXT_WINDOW
                return last_good(request, session_id, exc, cache=self._caches.of(session_id),
                                 calls=engine.call_state(session_id), budget=budget)

    def _snapshot(self, request: ModelRequest, session_id: str) -> Call:
        """Store the run's new messages and read the call once: the view, the memory, the limit, the counts."""
        engine = resolve_engine(self.engine)
        state = dict(request.state)
        events: list[dict[str, Any]] = []
        view = self._store(engine, session_id, self._view(engine, session_id, state))
        if report_background(engine, session_id, self._caches.of(session_id), events):
            view = self._view(engine, session_id, state)
        update = self._hide_dropped(engine, session_id, view, [], state)
        return self._measured(request, engine, session_id, view, events=events, update=update)

    def _measured(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str, view: StateView, *,
                  events: list[dict[str, Any]], update: dict[str, Any]) -> Call:
        """The call on `view`, measured: what the model is shown, each part's tokens, the decision's figures."""
        calls, cache = engine.call_state(session_id), self._caches.of(session_id)
        limit = self._input_limit(request, engine, calls)
        usable = limit - reserve_for_reply(limit)  # a trigger above what a call may carry acts at that line
        threshold = min(trigger_tokens(self.settings.trigger or engine.trigger, limit), usable)
        memory = engine.memory_of(session_id)
        cache.read_limit = size = read_tokens_for(threshold)
        offload = offload_tokens_for(threshold, limit, self.settings.offload_tokens)
        own = with_instructions(request.system_message, view.archived_instructions())
        own_tokens = count_tokens(own.text) if own is not None else 0
        schemas = self._schema_tokens(request)
        entries = self._entries(engine, session_id, view, memory.tail_end, (offload, size), engine.max_message_bytes)
        pinned = [p for p in (shown_pinned(view.pinned, self.settings.pinned_tokens),) if p is not None]
        pinned += shown_pinned_step(view.pinned_tool_step(self.settings.pinned_tools), offload, size)
        pinned = within_window(pinned, limit - own_tokens)
        tokens = call_tokens(own, memory, entries, pinned, own_tokens=own_tokens, schema_tokens=schemas,
                             settings=self.settings)
        floor = engine.min_commit_tokens if engine.min_commit_tokens is not None else threshold // 4
        figures = figures_of(view, entries, tokens=tokens, threshold=threshold, floor=floor, limit=limit,
                             memory_budget=engine.budget_for_trigger(threshold),
                             pinned_tokens=sum(p["tokens"] for p in pinned), settings=self.settings,
                             engine_keep=engine.keep, engine_trigger=engine.trigger,
                             background_running=calls.background is not None, synopsis_size=size)
        return Call(request, engine, session_id, calls, cache, view, memory, limit, threshold, offload, size,
                    entries, pinned, own, own_tokens, schemas, figures, events, update)

    def _act(self, call: Call, plan: Plan) -> Call:
        """Carry the plan out: commit (and wait when it must), or wait for the running commit. A new snapshot
        when a commit finished; else the same one."""
        call.calls.counters = plan.counters
        self._warn_once(call, plan.keep if plan.action == "commit" else None, plan.breaker_engaged)
        if plan.action == "wait":
            call.engine.join_commits(call.session_id)
            finished = report_background(call.engine, call.session_id, call.cache, call.events)
            return self._remeasured(call) if finished else call
        if plan.action == "nothing":
            return call
        result = self._commit(call, plan.keep.keep, plan.wait, "trigger")
        call.update["workmem_commit_task"] = result.get("task_id")
        status = result.get("status")
        if status == "busy" and call.figures.over_limit:
            call.engine.join_commits(call.session_id)
        if status not in ("completed", "busy"):
            return call
        call.calls.counters = replace(call.calls.counters, check_next=status == "completed")
        return self._remeasured(call)

    def _assemble(self, call: Call, plan: Plan | None = None) -> Prepared:
        """The request with its messages replaced by workmem's context, its record, and the state update."""
        request, engine, view = call.request, call.engine, call.view
        budget = call.limit - call.own_tokens
        if budget - reserve_for_reply(budget) <= SYSTEM_ADDITION_TOKENS:
            raise InvalidInput("system_prompt", f"{call.own_tokens:,} tokens",
                               f"leaves no room for any message in the model's input limit of {call.limit:,} tokens")
        memory, entries, pinned = call.memory, call.entries, call.pinned
        try:
            assembled = assemble_context(entries, memory.markdown, memory.archives_total, budget, pinned=pinned)
        except InvalidInput as exc:
            if exc.field != "token_budget":
                raise
            # The run itself does not fit (say, one huge tool output): show the model a clipped view of its largest
            # messages — at most half the window each, a token being at least one byte.
            entries = self._entries(engine, call.session_id, view, memory.tail_end,
                                    (call.offload_limit, call.synopsis_size), clip_cap(budget))
            try:
                assembled = assemble_context(entries, memory.markdown, memory.archives_total, budget, pinned=pinned)
            except InvalidInput as still:  # named by what the user set: the limit, beside the system prompt's share
                raise InvalidInput("token_budget", call.limit, f"the agent's system prompt takes {call.own_tokens:,} "
                                   f"tokens of it; {still.reason}") from still
        addition, *messages = assembled["messages"]
        if self._tools_join(call, entries, assembled["stats"]):
            call.cache.tools_joined = True
            if not binds_tools(request.model):  # the memory still works; only the archive tools are left out
                request = self._without_own_tools(request)
                self._warn_no_tools(request.model)
        else:  # nothing for workmem's note and tools to find yet: the call goes out as the agent's own
            addition, request = None, self._without_own_tools(request)
        sent = self._record(call, assembled["stats"], request, addition is not None)
        if plan is not None and plan.breaker_note:
            sent["breaker"] = plan.breaker_note
        sent["events"], sent["trigger"] = call.events, call.threshold
        system = combine_system(call.system, addition) if addition is not None else call.system
        if (self.settings.memory_message == "system" and messages
                and messages[0].additional_kwargs.get("workmem") == "summary"):
            # the WM after the agent's prompt and workmem's note: no human message of its own, and the system
            # text changes only when a commit changes the WM (prompt caching holds between commits)
            system = combine_system(system, SystemMessage(content=messages.pop(0).text))
        update = {**call.update, "workmem_stored_upto": engine.next_seq(call.session_id)}
        return Prepared(request.override(messages=messages, system_message=system), sent,
                        self._state_removals(call), update)

    def _record(self, call: Call, stats: dict[str, Any], request: ModelRequest, noted: bool) -> dict[str, Any]:
        """What `workmem_last_call` says of the call (`request` as it goes out; `noted`: with workmem's note)."""
        view = call.view
        note = 0 if noted else SYSTEM_ADDITION_TOKENS
        return {"session_id": call.session_id, "budget": stats["budget"], "total_tokens": stats["total_tokens"],
                "call_tokens": stats["total_tokens"] - note + call.own_tokens + self._schema_tokens(request),
                "workmem_tools": noted,
                "working_memory_tokens": stats["summary_tokens"], "archives_total": call.memory.archives_total,
                "live_messages_shown": stats["messages_included"] - stats["pending_included"],
                "unstored_messages": stats["pending_included"], "messages_dropped": stats["messages_dropped"],
                "tail_tokens": stats["messages_tokens"], "pinned_tokens": stats["pinned_tokens"],
                "pinned_user_message": view.pinned is not None, "state_messages": len(view.messages),
                "empty_replies_skipped": view.empty_replies}

    def _state_removals(self, call: Call) -> list[Any]:
        """Messages a commit archived leave the agent's state, and its large stored results shrink to their
        synopsis — the latter only on a thread whose state persists between runs (a checkpointer): a stateless
        client re-sends plain dicts, which would lose the synopsis mark."""
        if not self.settings.trim_state:
            return []
        keep = {p["lc"].id for p in call.pinned if p.get("lc") is not None and p["lc"].id}
        keep |= leading_system_ids(call.view.messages)
        removals: list[Any] = trimmed(call.view.messages, call.cache.to_trim, keep)
        if call.request.state.get("workmem_prior_upto") is not None:
            gone = {r.id for r in removals}
            removals += [m for m in state_synopses(call.view, call.offload_limit, call.synopsis_size, self._synopses,
                                                   self._shrinkable)
                         if m.id not in gone]
        return removals

    # -- a refused call ---------------------------------------------------------------------------

    def _recover(self, request: ModelRequest, prepared: Prepared, exc: Exception) -> Prepared:
        """A context-length refusal: lower the session's input limit, commit aiming under it, assemble again.
        Any other error is raised as it is."""
        if not is_context_overflow(exc):
            raise exc
        if prepared.sent.get("storage_unavailable"):  # no commit can make it smaller now
            raise _too_long(prepared) from exc
        engine, session_id = resolve_engine(self.engine), prepared.sent["session_id"]
        with self._locks.holding(session_id):
            calls = engine.call_state(session_id)
            overflowed = prepared.sent["call_tokens"]
            calls.input_limit = lowered_limit(overflowed)
            log.warning("session %r: the model refused a call of %d tokens as too long (%s); its input limit is %d "
                        "tokens from now on", session_id, overflowed, describe_error(exc), calls.input_limit)
            events = list(prepared.sent.get("events", []))
            if calls.background is not None:
                engine.join_commits(session_id)
                report_background(engine, session_id, self._caches.of(session_id), events)
            state = dict(request.state)
            call = self._measured(request, engine, session_id, self._view(engine, session_id, state), events=events,
                                  update=dict(prepared.update))
            keep = decide_overflow(call.figures, overflowed)
            self._warn_once(call, keep, False)
            result = self._commit(call, keep.keep, True, "overflow")
            if result.get("status") == "busy":
                engine.join_commits(session_id)
            call.update["workmem_commit_task"] = result.get("task_id")
            call = self._remeasured(call)
            call.events.append(emit("overflow_recovered", session_id, call_tokens=overflowed, limit=calls.input_limit))
            return self._assemble(call)

    def _send_again(self, handler: Callable[[ModelRequest], ModelResponse], prepared: Prepared) -> ModelResponse:
        try:
            return handler(prepared.request)
        except Exception as exc:
            if is_context_overflow(exc):
                raise _too_long(prepared) from exc
            raise

    # -- the steps' parts -------------------------------------------------------------------------

    def _sent(self, request: ModelRequest, prepared: Prepared) -> None:
        """A call went out and was answered: an outage falls back to it."""
        session_id = prepared.sent["session_id"]
        remember_sent(self._caches.of(session_id), resolve_engine(self.engine).call_state(session_id), request,
                      prepared)

    def _session(self, runtime: Any) -> str:
        return session_from_run(self.session_id, runtime=runtime, default=self.default_session_id)

    def _view(self, engine: WorkingMemoryEngine, session_id: str, state: dict[str, Any]) -> StateView:
        return StateView(engine, session_id, list(state.get("messages") or []),
                         lambda: self._archive_tail(engine, session_id), state.get("workmem_run_from"),
                         self._normalised, run_seq=state.get("workmem_run_seq"),
                         stored_upto=state.get("workmem_prior_upto"),
                         archived_keys=lambda: self._archived_keys(engine, session_id))

    def _remeasured(self, call: Call) -> Call:
        """The call measured on a new view (after a commit finished)."""
        view = self._view(call.engine, call.session_id, dict(call.request.state))
        return self._measured(call.request, call.engine, call.session_id, view, events=call.events,
                              update=call.update)

    def _archive_tail(self, engine: WorkingMemoryEngine, session_id: str) -> list[dict[str, Any]]:
        """The newest archive's last messages, oldest first (read once per archive of this incarnation of the
        session: a deleted and re-created session has another `created_at`)."""
        memory = engine.memory_of(session_id)
        if not memory.archive_id:
            return []
        cache = self._caches.of(session_id)
        if cache.archive_tail is None or cache.archive_tail[0] != memory.key:
            messages = engine.archive_messages(session_id, memory.archive_id)
            cache.archive_tail = (memory.key, messages[-ARCHIVE_TAIL:])
        return cache.archive_tail[1]

    def _archived_keys(self, engine: WorkingMemoryEngine, session_id: str) -> ArchivedKeys | None:
        """Each archived message's LangChain id with its fingerprints (each archive read once, the new ones after
        a commit); None when an archive cannot be read (one damaged archive never blocks a run: alignment then
        searches none; it is tried again after the next commit)."""
        memory = engine.memory_of(session_id)
        if not memory.archive_id:
            return {}
        keys, error = self._caches.of(session_id).archived_keys(
            memory.created_at, archive_number(memory.archive_id),
            lambda n: archive_keys(engine.archive_messages(session_id, archive_name(n))))
        if error is not None:
            log.warning("session %r: the archives cannot be searched for the state's older messages (%s)",
                        session_id, describe_error(error))
        return keys

    def _archived_in_state(self, engine: WorkingMemoryEngine, session_id: str,
                           messages: list[BaseMessage]) -> list[Any]:
        """`RemoveMessage`s for the state's archived messages (each archive's ids read once)."""
        cache = self._caches.of(session_id)
        incarnation = engine.memory_of(session_id).created_at
        removals = archived_in_state(engine, session_id, messages, lambda archive_id: cache.ids_of(
            incarnation, archive_id, lambda: engine.archive_messages(session_id, archive_id)))
        keep = pinned_step_ids(messages, self.settings.pinned_tools) | leading_system_ids(messages)
        return [r for r in removals if r.id not in keep]

    def _input_limit(self, request: ModelRequest, engine: WorkingMemoryEngine, calls: Any) -> int:
        """The call's input limit: explicit, else the model profile's, else `context_window`; never over what a
        context overflow taught for the session."""
        budget = self.settings.token_budget or profile_limit(request.model) or engine.context_window
        return min(budget, calls.input_limit) if calls.input_limit else budget

    def _check_tools(self, request: ModelRequest) -> None:
        if not self.tools:
            return
        for tool in request.tools:
            name = getattr(tool, "name", None) or (tool.get("name") if isinstance(tool, dict) else None)
            if name in OWN_TOOLS and not self._own(tool):
                raise InvalidInput("tools", name, "is bound twice: the middleware contributes it; drop "
                                                  "make_archive_tools or pass tools=False to the middleware")

    @staticmethod
    def _tools_join(call: Call, entries: list[dict[str, Any]], stats: dict[str, Any]) -> bool:
        """Whether workmem's note and tools go out: something is out of view, or they went out before on this
        session (they stay: a prompt cache would break on each change, and the history may call them)."""
        before = call.request.state.get("workmem_last_call") or {}
        return (call.cache.tools_joined or before.get("workmem_tools") is True
                or out_of_view(call.memory, entries, stats))  # the scan last: once joined, no call pays for it

    def _own(self, tool: Any) -> bool:
        return id(tool) in self._own_ids

    def _schema_tokens(self, request: ModelRequest) -> int:
        """Tokens of every tool schema the call carries (cached per set of tools)."""
        key = tuple(id(t) for t in request.tools)
        with self._schemas_lock:  # calls of many threads share the middleware
            held = self._schemas.get(key)
        if held is None:
            # the tools are held with their count: an id stays theirs while it is a key
            held = (tuple(request.tools), schema_tokens(list(request.tools)) if request.tools else 0)
            with self._schemas_lock:
                self._schemas[key] = held
                while len(self._schemas) > MAX_TOOL_SETS:  # tools built anew at each call: the oldest sets go
                    self._schemas.pop(next(iter(self._schemas)))
        return held[1]

    def _store(self, engine: WorkingMemoryEngine, session_id: str, view: StateView) -> StateView:
        """Store the view's new messages (the view then holds them)."""
        new = view.new_for_storing(engine.max_message_bytes, engine.payload_limits)
        if new:
            view.absorb(engine.add_messages(session_id, new))
        return view

    def _entries(self, engine: WorkingMemoryEngine, session_id: str, view: StateView, boundary: int,
                 line_and_size: tuple[int, int], max_bytes: int) -> list[dict[str, Any]]:
        """The view's context entries, each large or (past the commit boundary) older tool result as its synopsis."""
        entries = view.context_entries(max_bytes, engine.max_message_bytes, lambda: engine.hidden(session_id))
        line, size = line_and_size
        return shown_entries(entries, view.live, boundary=boundary, line=line, size=size, settings=self.settings,
                             synopses=self._synopses)

    def _shrinkable(self, entry: dict[str, Any]) -> bool:
        return shrinkable(entry, self.settings.exclude_tools)

    def _without_own_tools(self, request: ModelRequest) -> ModelRequest:
        return request.override(tools=[t for t in request.tools if not self._own(t)])

    def _warn_no_tools(self, model: Any) -> None:
        if not self._warned_no_tools:
            self._warned_no_tools = True
            log.warning("workmem: %s cannot bind tools; workmem's archive tools are left out of its calls (pass "
                        "tools=False to the middleware to say so)", type(model).__name__)

    def _warn_once(self, call: Call, keep: KeepChoice | None, breaker_engaged: bool) -> None:
        """The WARNINGs a decision may give, once per session and cause: a keep the low-water mark caps (only when a
        commit uses it), the breaker engaging."""
        calls, session_id = call.calls, call.session_id
        if keep is not None:
            warn_capped_keep(session_id, calls, call.figures.keep, keep)
        if breaker_engaged and "breaker" not in calls.warned:
            calls.warned.add("breaker")
            log.warning("session %r: %d commits in a row left the next call over the trigger (%d tokens); trigger "
                        "commits pause until %d more tokens are stored", session_id, calls.counters.ineffective,
                        call.threshold, call.figures.floor)
            call.events.append(emit("loop_breaker_engaged", session_id, ineffective=calls.counters.ineffective))

    def _commit(self, call: Call, keep: Keep, wait: bool, reason: str) -> dict[str, Any]:
        """Start the commit; `commit_started` (with its task) once a task exists — one that found another commit
        running (`busy`) started nothing — then its outcome, now or at a later call."""
        result = call.engine.commit_for_call(call.session_id, keep, call.threshold, wait=wait)
        if result.get("status") == "busy":
            return result
        if result.get("task_id"):
            call.events.append(emit("commit_started", call.session_id, task_id=result["task_id"], reason=reason,
                                    keep=list(keep)))
        report(call.engine, call.session_id, result, call.cache, call.events)
        return result

    def _hide_dropped(self, engine: WorkingMemoryEngine, session_id: str, view: StateView,
                      stored_seqs: list[int], state: dict[str, Any]) -> dict[str, Any]:
        return hide_dropped(engine, session_id, view, stored_seqs, state, forget=self.settings.forget_on_remove,
                            cache=self._caches.of(session_id))

    # -- around the run -------------------------------------------------------------------------

    def before_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Note where the run starts: its newest input message (what the agent adds after it is the run's own,
        never matched by fingerprint) and the session's next seq (what this run stores is the run's own)."""
        messages = list(state.get("messages") or [])
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        with self._locks.holding(session_id):
            update: dict[str, Any] = {"workmem_prior_upto": state.get("workmem_stored_upto")}
            try:
                update["workmem_run_seq"] = engine.next_seq(session_id)
                removals = self._archived_in_state(engine, session_id, messages) if self.settings.trim_state else []
            except STORAGE_DOWN as exc:  # the run goes on; its first call falls back to the last good view
                log.warning("session %r: storage is unavailable at the start of a run (%s)", session_id,
                            describe_error(exc))
                removals = []
            if removals:
                update["messages"] = removals
                gone = {r.id for r in removals}
                messages = [m for m in messages if m.id not in gone]
            update["workmem_run_from"] = messages[-1].id if messages else None
            return update

    async def abefore_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Async variant of `before_agent`."""
        return await in_turn(self._locks, self._session(runtime), self.before_agent, state, runtime)

    def after_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Store what the run added since its last model call, hide what the state dropped; trim the state; report
        a background commit that has finished. No commit is decided here: the next model call decides, on the call
        it is about to send."""
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        with self._locks.holding(session_id):
            try:
                report_background(engine, session_id, self._caches.of(session_id), [])  # streamed: its event pairs
                view = self._view(engine, session_id, dict(state))
                turn = view.new_for_storing(engine.max_message_bytes, engine.payload_limits)
                stored = engine.add_messages(session_id, turn) if turn else []
                update: dict[str, Any] = {**self._hide_dropped(engine, session_id, view, [m["seq"] for m in stored],
                                                               dict(state)),
                                          "workmem_stored_upto": engine.next_seq(session_id)}
            except STORAGE_DOWN as exc:  # the state keeps the run's messages: the next run's first call stores them
                log.warning("session %r: storing the end of the run failed (%s); it is retried at the next call",
                            session_id, describe_error(exc))
                return None
            if self.settings.trim_state:
                # Never this run's own messages: the caller reads its answer from the run's output. A commit that
                # covered them has them trimmed at the next run's start.
                own = {getattr(m, "id", None) for m in [*messages[view.first_output_index:], *view.new_messages()]}
                try:
                    removals = [r for r in self._archived_in_state(engine, session_id, messages) if r.id not in own]
                except STORAGE_DOWN as exc:  # the run's messages are stored: its answer goes back untrimmed
                    log.warning("session %r: trimming the state failed (%s); it is tried again at the next run's end",
                                session_id, describe_error(exc))
                    removals = []
                if removals:
                    update["messages"] = removals
            return update

    async def aafter_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Async variant of `after_agent` (the engine's file I/O runs in a worker thread)."""
        return await in_turn(self._locks, self._session(runtime), self.after_agent, state, runtime)

    def forget(self, thread_id: str, *, checkpointer: Any = None, session_id: str | None = None) -> dict[str, Any]:
        """Delete the thread's session, and its subagents' (`<session or thread>/subagent/…`). The agent's own
        thread must go too, or its history is stored again at the next run: pass the agent's `checkpointer` to delete
        it here, or delete it yourself. With a `session_id` function on the middleware, pass the id it returns for
        that thread as `session_id`."""
        engine, session_id, subagents = self._to_forget(thread_id, session_id)
        deleted = []
        for each in [session_id, *subagents]:  # the subagents' sessions hold what the conversation gave them
            with self._locks.holding(each):  # after a step a cancelled run left storing: it would store it again
                deleted.append(self._delete_session(engine, each))
        if checkpointer is not None:
            checkpointer.delete_thread(thread_id)
        return _forgotten(thread_id, session_id, deleted[0], subagents, checkpointer is not None)

    async def aforget(self, thread_id: str, *, checkpointer: Any = None,
                      session_id: str | None = None) -> dict[str, Any]:
        """Async variant of `forget` (the thread deleted by the checkpointer's `adelete_thread`, a sync-only one's
        `delete_thread` in a worker thread). Once started it runs to its end even if the caller is cancelled: a
        session deleted with its thread kept would have the thread's history stored again at the next run."""
        return await asyncio.shield(self._aforget(thread_id, checkpointer, session_id))

    async def _aforget(self, thread_id: str, checkpointer: Any, session_id: str | None) -> dict[str, Any]:
        engine, session_id, subagents = await asyncio.to_thread(self._to_forget, thread_id, session_id)
        deleted = []
        for each in [session_id, *subagents]:  # each waits for its session in the event loop, as the steps do
            deleted.append(await in_turn(self._locks, each, self._delete_session, engine, each))
        if checkpointer is not None:
            try:
                await checkpointer.adelete_thread(thread_id)
            except NotImplementedError:  # a sync-only checkpointer (`SqliteSaver`)
                await asyncio.to_thread(checkpointer.delete_thread, thread_id)
        return _forgotten(thread_id, session_id, deleted[0], subagents, checkpointer is not None)

    def _to_forget(self, thread_id: str, session_id: str | None) -> tuple[WorkingMemoryEngine, str, list[str]]:
        """The engine, the thread's session id, and its subagents' sessions."""
        engine = resolve_engine(self.engine)
        if session_id is None and callable(self.session_id):
            raise InvalidInput("session_id", None, "the middleware's session_id is a function: call "
                                                   "forget(thread_id, session_id=<the id it returns>)")
        session_id = (require_text("session_id", session_id) if session_id is not None
                      else self.session_id or thread_id)
        subagents = [each for each in engine.session_ids()
                     if delegated_from(each, session_id) or delegated_from(each, thread_id)]
        return engine, session_id, subagents

    def _delete_session(self, engine: WorkingMemoryEngine, session_id: str) -> bool:
        """Delete one session (the caller holds its lock); False when there was none."""
        self._caches.drop(session_id)  # nothing of a deleted conversation is sent again, even in an outage
        try:
            engine.delete_session(session_id)
            return True
        except SessionNotFound:
            return False


def _forgotten(thread_id: str, session_id: str, deleted: bool, subagents: list[str],
               thread_deleted: bool) -> dict[str, Any]:
    """What `forget` answers."""
    out: dict[str, Any] = {"session_id": session_id, "deleted": deleted, "thread_deleted": thread_deleted}
    if subagents:
        out["subagent_sessions_deleted"] = subagents
    if not thread_deleted:
        out["note"] = (f"delete the agent's thread too (checkpointer.delete_thread({thread_id!r})), "
                       "otherwise its history is stored again at its next run")
    return out


def _too_long(prepared: Prepared) -> ContextOverflow:
    """The error of a call refused as too long when no commit can make it smaller (retried, or storage down)."""
    return ContextOverflow(prepared.sent["call_tokens"], prepared.sent["budget"])
