"""`WorkingMemoryMiddleware` for `langchain.agents.create_agent` (SPEC §7 *Integration semantics*, §12).

One line integrates workmem into an agent::

    agent = create_agent(model, tools, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=saver)
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

- **Session = thread.** Without `session_id`, the run's `thread_id` (or `context={"session_id": …}`) names
  the session, so each conversation has its own memory.
- **At every model call, inside a run** (`wrap_model_call`): the run's new messages are stored (idempotent by
  id, so a retried or resumed run stores nothing twice); when the whole call about to be sent — system,
  working memory, messages, tool schemas — reaches the trigger, a commit runs first (`commit_mode="sync"`)
  or in the background (waited for only when the call would exceed the model's input limit), covering enough
  that the next call carries at most `low_water` × the trigger; then the model sees workmem's context: the
  system addition (joined to the agent's own system prompt), the working memory, the running turn's user
  message when a commit archived it, and the thread's live tail. A commit that leaves the next call over the
  trigger is ineffective; after three in a row trigger commits pause (no compaction loop). A provider's
  context-length error gets one commit and one retry. What the model was sent is in `workmem_last_call`.
- **The state stays bounded** (`trim_state`, on by default): messages a commit archived leave the agent's
  state at the next model call and at the end of the run (the running turn's user message stays); the
  archive tools still reach them.
- **After the agent finishes**, what the run added since its last call is stored and stored messages the
  state no longer holds are hidden (left out of later contexts and commit transcripts; the log keeps them).
  It decides no commit: the next call does.
- **Tools.** The middleware contributes `archive_search` / `archive_expand` for the run's session
  (`tools=False` turns them off; binding `make_archive_tools` as well is an error).
- **First in the list.** The view is built from the agent's state, not from `request.messages`: middleware
  that edits `request.messages` (`ContextEditingMiddleware`) goes after it and edits the assembled view;
  before it, its edits would be replaced.

A message of the turn larger than the engine's `max_message_bytes` (a huge tool output) would make every
model call and the store fail; the middleware sends and stores a clipped copy instead
(`state.messages.clip_to_cap`), with one warning in the log when it is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from workmem.graphs.agent.binding import (
    SessionRef,
    check_session_ref,
    engine_settings,
    resolve_engine,
    session_from_run,
)
from workmem.graphs.agent.in_run import (
    DEFAULT_LOW_WATER,
    OVERFLOW_MARGIN,
    SessionCalls,
    breaker_allows,
    emit,
    is_context_overflow,
    judge_commit,
    low_water_keep,
    newest_step_tokens,
)
from workmem.graphs.agent.tools import make_archive_tools, make_tool_result_reader, schema_tokens
from workmem.graphs.agent.view import (
    NormalisedCache,
    StateView,
    carries_content,
    clip_oversized,
    combine_system,
)
from workmem.graphs.context.assemble import (
    SUMMARY_PREFIX,
    SYSTEM_ADDITION,
    assemble_context,
    reserve_for_reply,
    validate_budget,
)
from workmem.graphs.context.lc_messages import to_langchain_message
from workmem.graphs.context.tool_results import (
    DEFAULT_KEEP_TOOL_RESULTS,
    Synopses,
    offload_tokens_for,
    offloaded,
    result_part,
    shown_as_synopsis,
)
from workmem.state.archive_object import OWN_TOOLS
from workmem.state.errors import (
    CommitInProgress,
    ContextOverflow,
    DatabaseUnavailable,
    InvalidInput,
    SessionNotFound,
)
from workmem.state.forget import is_forgotten
from workmem.state.ids import archive_name, archive_number
from workmem.state.messages import (
    CLIPPED_BYTES_META,
    FINGERPRINT_META,
    SYNOPSIS_FP,
    SYNOPSIS_HASH,
    lc_id,
    synopsis_hash,
)
from workmem.state.redact import describe_error
from workmem.state.retention import (
    Keep,
    Trigger,
    covered_tokens,
    keep_value,
    resolve_keep,
    trigger_messages,
    trigger_tokens,
    trigger_value,
)
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens
from workmem.state.validation import require_int, require_text

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

ARCHIVE_TAIL = 64  # newest archived messages a stateless client's history is compared with
SYSTEM_ADDITION_TOKENS = count_tokens(SYSTEM_ADDITION)
MemoryMessage = Literal["human", "system"]  # where a call carries the working memory
MEMORY_MESSAGES: tuple[MemoryMessage, ...] = ("human", "system")

log = logging.getLogger("workmem.agent")


TokenCounter = Callable[[list[BaseMessage]], int]


def _count(counter: TokenCounter, messages: list[BaseMessage]) -> int:
    """The caller's counter on `messages`, checked: a count that is not a non-negative int is `InvalidInput`."""
    if not messages:
        return 0
    counted = counter(messages)
    if isinstance(counted, bool) or not isinstance(counted, int) or counted < 0:
        raise InvalidInput("token_counter", counted, "must return a non-negative int")
    return counted


class WorkmemAgentState(AgentState):
    """Agent state plus the middleware's private bookkeeping (not in the agent's input or output schema)."""

    workmem_commit_task: NotRequired[Annotated[str | None, PrivateStateAttr]]
    workmem_last_call: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]
    workmem_run_from: NotRequired[Annotated[str | None, PrivateStateAttr]]  # newest input message's id
    workmem_run_seq: NotRequired[Annotated[int | None, PrivateStateAttr]]  # the session's next seq at the run's start
    workmem_stored_upto: NotRequired[Annotated[int | None, PrivateStateAttr]]  # its next seq after our last store
    # `workmem_stored_upto` as a previous run left it (None: no earlier run of this thread stored anything)
    workmem_prior_upto: NotRequired[Annotated[int | None, PrivateStateAttr]]


STORAGE_DOWN = (DatabaseUnavailable, OSError)  # storage that cannot be reached, read or written right now


class Prepared:
    """One model call as the middleware will send it: the request, its record, the state's removals."""

    def __init__(self, request: ModelRequest, sent: dict[str, Any], removals: list[RemoveMessage],
                 update: dict[str, Any]) -> None:
        self.request, self.sent, self.removals, self.update = request, sent, removals, update

    def command(self) -> Command:
        """The state update that goes with the model's answer."""
        update = {**self.update, "workmem_last_call": self.sent}
        if self.removals:
            update["messages"] = self.removals
        return Command(update=update)


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
        commit_mode: Literal["background", "sync"] = "background",
        trim_state: bool = True,
        tools: bool = True,
        offload_tokens: int | None = None,
        keep_tool_results: int = DEFAULT_KEEP_TOOL_RESULTS,
        exclude_tools: list[str] | None = None,
        memory_message: MemoryMessage = "human",
        forget_on_remove: bool = False,
        token_counter: TokenCounter | None = None,
        **engine_options: Any,
    ) -> None:
        """Give an `engine` (or a zero-argument function returning one; you close it), or the settings of one —
        `model=` (the commit model), `root=` and any other `WorkingMemoryEngine` keyword such as `database_url=`
        — and the middleware builds its own engine (as `SummarizationMiddleware(model=…)` builds its model),
        owns it and closes it in `close()` (or at the end of a `with` block); both at once is `InvalidInput`.
        `session_id` pins one session (single-conversation scripts), or is a function of the run's `Runtime`
        returning the id (e.g. `lambda runtime: runtime.context.user_id`); by default each thread is one.
        `token_budget` (the model's input limit) defaults to the agent model's `profile["max_input_tokens"]`,
        else the engine's `context_window`. `keep` / `trigger` override the engine's; `low_water` (in (0, 1))
        is the share of the trigger the call after a commit may carry. `trim_state=False` keeps archived
        messages in the agent's state (its checkpoints then grow with the session). A tool result over
        `offload_tokens` (default (trigger − 2 000) ÷ 37.5, 128 … 3 000) is shown as its synopsis, read back with
        `read_tool_result`; after a commit the kept tail's results but the newest `keep_tool_results` are shown so
        too (never those of `exclude_tools` or workmem's own tools). `memory_message="system"` carries the working
        memory inside the system message instead of a human message of its own (for chat templates that need
        strict user/assistant alternation); its text changes only when a commit changes the working memory.
        `forget_on_remove=True`: live stored messages the agent's state drops (a `RemoveMessage`,
        `REMOVE_ALL_MESSAGES`, a branch that leaves them out) lose their text too (`engine.forget_messages`),
        instead of only being hidden; archived ones and the agent's own checkpoints are left as they are.
        `token_counter` (LangChain's signature: a function of a list of messages → tokens, e.g.
        `count_tokens_approximately`) measures each call for the trigger and the input-limit decisions instead of
        cl100k; the stored per-message `tokens` (and the keep window) stay cl100k."""
        super().__init__()
        settings = {**({"model": model} if model is not None else {}), **({"root": root} if root is not None else {}),
                    **engine_options}
        build = engine_settings(engine, settings)
        self.session_id = check_session_ref(session_id)
        if memory_message not in MEMORY_MESSAGES:
            raise InvalidInput("memory_message", memory_message, "must be 'human' or 'system'")
        self.memory_message = memory_message
        if token_counter is not None and not callable(token_counter):
            raise InvalidInput("token_counter", token_counter, "must be a function of a list of messages → int")
        self.token_counter = token_counter
        self.default_session_id = default_session_id
        self.token_budget = None if token_budget is None else validate_budget(token_budget)
        self.keep = None if keep is None else keep_value(keep)
        self.trigger = None if trigger is None else trigger_value(trigger)
        if isinstance(low_water, bool) or not isinstance(low_water, (int, float)) or not 0 < low_water < 1:
            raise InvalidInput("low_water", low_water, "must be a number in (0, 1)")
        self.low_water = float(low_water)
        self.offload_tokens = None if offload_tokens is None else require_int("offload_tokens", offload_tokens,
                                                                                min=1)
        self.keep_tool_results = require_int("keep_tool_results", keep_tool_results, min=1)
        if exclude_tools is not None and (not isinstance(exclude_tools, list)
                                          or not all(isinstance(t, str) for t in exclude_tools)):
            raise InvalidInput("exclude_tools", exclude_tools, "must be a list of tool names")
        self.exclude_tools = frozenset(exclude_tools or ()) | OWN_TOOLS
        self._synopses = Synopses()
        if commit_mode not in ("background", "sync"):
            raise InvalidInput("commit_mode", commit_mode, "must be 'background' or 'sync'")
        self.commit_mode = commit_mode
        if not isinstance(trim_state, bool):
            raise InvalidInput("trim_state", trim_state, "must be a bool")
        self.trim_state = trim_state
        if not isinstance(forget_on_remove, bool):
            raise InvalidInput("forget_on_remove", forget_on_remove, "must be a bool")
        self.forget_on_remove = forget_on_remove
        if build is not None:  # every argument is checked: only now may the engine touch the disk
            from workmem.graphs.engine import WorkingMemoryEngine

            # a fraction keep is the model's: resolved per call against its input limit, not the engine's window
            fraction = self.keep is not None and self.keep[0] == "fraction"
            with_retention = {"keep": None if fraction else self.keep, "trigger": self.trigger}
            engine = WorkingMemoryEngine(**{k: v for k, v in with_retention.items() if v is not None}, **build)
        self.engine = engine
        self._owned: WorkingMemoryEngine | None = engine if build is not None else None
        reader = make_tool_result_reader(engine, session_id, default_session_id=default_session_id,
                                         max_tokens=lambda session: self.calls_of(session).offload_limit)
        self.tools = [*make_archive_tools(engine, session_id, default_session_id=default_session_id),
                      reader] if tools else []
        self._tool_tokens = schema_tokens(self.tools)  # carried by every call, so counted toward the trigger
        self._schemas: dict[tuple[int, ...], int] = {}  # tokens of each set of bound tools seen
        self._input_limit: int | None = None  # the agent model's profile, seen at its first call
        self._archive_tails: dict[str, tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}
        self._normalised = NormalisedCache()
        self._calls: dict[str, SessionCalls] = {}

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

    # -- which session --------------------------------------------------------------------------

    def _session(self, runtime: Any) -> str:
        return session_from_run(self.session_id, runtime=runtime, default=self.default_session_id)

    def calls_of(self, session_id: str) -> SessionCalls:
        """This middleware's memory of a session's calls (created on first use)."""
        return self._calls.setdefault(session_id, SessionCalls())

    def archive_tail(self, engine: WorkingMemoryEngine, session_id: str) -> list[dict[str, Any]]:
        """The newest archive's last messages, oldest first (cached per archive of this incarnation of the
        session: a deleted and re-created session has another `created_at`)."""
        meta = engine.storage.sessions.meta(session_id)  # O(1): session_info also reads the task rows
        last = meta.get("last_archive")
        if not last:
            return []
        key = (meta.get("created_at"), last["id"], last.get("end_seq"))
        cached = self._archive_tails.get(session_id)
        if cached is None or cached[0] != key:
            messages = engine.archive_messages(session_id, last["id"])
            cached = (key, messages[-ARCHIVE_TAIL:])
            self._archive_tails[session_id] = cached
        return cached[1]

    def _view(self, engine: WorkingMemoryEngine, session_id: str, messages: list[Any],
              state: dict[str, Any]) -> StateView:
        return StateView(engine, session_id, messages, lambda: self.archive_tail(engine, session_id),
                         state.get("workmem_run_from"), self._normalised, run_seq=state.get("workmem_run_seq"),
                         stored_upto=state.get("workmem_prior_upto"))

    # -- the model call -------------------------------------------------------------------------

    def budget_for(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str | None = None) -> int:
        """The call's token budget (the model's input limit): explicit, else the model profile's, else
        `context_window`; never over what a context overflow taught for the session."""
        profile = getattr(request.model, "profile", None)
        limit = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self._input_limit = limit
        budget = self.token_budget or self._input_limit or engine.context_window
        learned = self.calls_of(session_id).input_limit if session_id is not None else None
        return min(budget, learned) if learned else budget

    def _check_tools(self, request: ModelRequest) -> None:
        if not self.tools:
            return
        ours = {id(t) for t in self.tools}
        for tool in request.tools:
            name = getattr(tool, "name", None) or (tool.get("name") if isinstance(tool, dict) else None)
            if name in OWN_TOOLS and id(tool) not in ours:
                raise InvalidInput("tools", name, "is bound twice: the middleware contributes it; drop "
                                                  "make_archive_tools or pass tools=False to the middleware")

    def _schema_tokens(self, request: ModelRequest) -> int:
        """Tokens of every tool schema the call carries (cached per set of tools)."""
        key = tuple(id(t) for t in request.tools)
        if key not in self._schemas:
            self._schemas[key] = schema_tokens(list(request.tools)) if request.tools else 0
        return self._schemas[key]

    def _store(self, engine: WorkingMemoryEngine, session_id: str, view: StateView) -> StateView:
        """Store the view's new messages (the view then holds them)."""
        new = view.new_messages()
        if not new:
            return view
        stored = engine.add_messages(session_id, clip_oversized(new, engine.max_message_bytes, warn=True,
                                                                payloads=engine.payload_limits))
        view.absorb(stored)
        return view

    def _entries(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str, view: StateView,
                 max_bytes: int) -> list[dict[str, Any]]:
        """The view's context entries, each large or (past a commit boundary) older tool result as its synopsis."""
        entries = view.context_entries(engine, session_id, max_bytes)
        limit = self.offload_tokens or offload_tokens_for(self._threshold(engine, request, session_id))
        self.calls_of(session_id).offload_limit = limit
        boundary = engine.kept_tail_end(session_id) if engine.session_exists(session_id) else 0
        kept = [m["seq"] for m in view.live if m["seq"] <= boundary and self._shrinkable(m)]
        newest = set(kept[-self.keep_tool_results:])
        return [offloaded(e, self._synopses, limit)
                if self._shrinkable(e) and shown_as_synopsis(e, limit, boundary, newest) else e for e in entries]

    def _shrinkable(self, entry: dict[str, Any]) -> bool:
        part = result_part(entry) if "lc" not in entry else None
        return part is not None and part.get("name") not in self.exclude_tools

    def _assemble(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str,
                  view: StateView) -> tuple[ModelRequest, dict[str, Any]]:
        """The request with its messages replaced by workmem's context, and what that context holds."""
        own = request.system_message
        own_tokens = count_tokens(own.text) if own is not None else 0
        budget = self.budget_for(request, engine, session_id) - own_tokens
        exists = engine.session_exists(session_id)
        wm, archives_total = engine.summary_of(session_id) if exists else ("", 0)
        try:
            entries = self._entries(request, engine, session_id, view, engine.max_message_bytes)
            assembled = assemble_context(entries, wm, archives_total, budget, pinned=view.pinned)
        except InvalidInput as exc:
            if exc.field != "token_budget":
                raise
            # The run itself does not fit (say, one huge tool output): show the model a clipped view of
            # its largest messages — at most half the window each, a token being at least one byte.
            view_cap = max(1024, (budget - reserve_for_reply(budget)) // 2)
            assembled = assemble_context(self._entries(request, engine, session_id, view, view_cap), wm,
                                         archives_total, budget, pinned=view.pinned)
        addition, *messages = assembled["messages"]
        stats = assembled["stats"]
        call_tokens = stats["total_tokens"] + own_tokens + self._schema_tokens(request)
        sent = {"session_id": session_id, "budget": stats["budget"], "total_tokens": stats["total_tokens"],
                "call_tokens": call_tokens, "working_memory_tokens": stats["summary_tokens"],
                "archives_total": archives_total,
                "live_messages_shown": stats["messages_included"] - stats["pending_included"],
                "unstored_messages": stats["pending_included"], "messages_dropped": stats["messages_dropped"],
                "tail_tokens": stats["messages_tokens"], "pinned_tokens": stats["pinned_tokens"],
                "pinned_user_message": view.pinned is not None, "state_messages": len(view.messages),
                "empty_replies_skipped": view.empty_replies}
        system = combine_system(own, addition)
        if self.memory_message == "system" and messages and messages[0].additional_kwargs.get("workmem") == "summary":
            # the WM after the agent's prompt and workmem's note: no human message of its own, and the system
            # text changes only when a commit changes the WM (prompt caching holds between commits)
            system = combine_system(system, SystemMessage(content=messages.pop(0).text))
        return request.override(messages=messages, system_message=system), sent

    def assembled_request(self, request: ModelRequest) -> tuple[ModelRequest, dict[str, Any]]:
        """The request with its messages replaced by workmem's context (no storing, no commit): what a call
        would be sent now."""
        self._check_tools(request)
        engine, session_id = resolve_engine(self.engine), self._session(request.runtime)
        state = dict(request.state)
        view = self._view(engine, session_id, list(state.get("messages") or []), state)
        return self._assemble(request, engine, session_id, view)

    def _threshold(self, engine: WorkingMemoryEngine, request: ModelRequest, session_id: str) -> int:
        limit = self.budget_for(request, engine, session_id)
        return trigger_tokens(self.trigger or engine.trigger, limit)

    def _measure(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str,
                 view: StateView) -> dict[str, int]:
        """The whole call as it would go out if nothing were dropped: `call_tokens` (system prompts, working
        memory, the running turn's message, the tail, tool schemas) and `fixed_tokens` (what rides on every
        call whatever is committed: the system prompts and the tool schemas)."""
        own = request.system_message
        own_tokens = count_tokens(own.text) if own is not None else 0
        fixed = own_tokens + SYSTEM_ADDITION_TOKENS + self._schema_tokens(request)
        wm = engine.summary_of(session_id)[0] if engine.session_exists(session_id) else ""
        wm_tokens = count_tokens(SUMMARY_PREFIX + wm) if wm.strip() else 0
        entries = self._entries(request, engine, session_id, view, engine.max_message_bytes)
        if self.token_counter is not None:
            return self._counted(request, wm, view, entries)
        tail = sum(e["tokens"] for e in entries)
        pinned = view.pinned["tokens"] if view.pinned is not None else 0
        return {"call_tokens": fixed + wm_tokens + pinned + tail, "fixed_tokens": fixed}

    def _counted(self, request: ModelRequest, wm: str, view: StateView,
                 entries: list[dict[str, Any]]) -> dict[str, int]:
        """`_measure` by the caller's `token_counter`: the call's messages as they would go out (tool schemas
        still counted with cl100k: a message counter does not see them)."""
        system = [m for m in (request.system_message, SystemMessage(content=SYSTEM_ADDITION)) if m is not None]
        summary = [HumanMessage(content=SUMMARY_PREFIX + wm)] if wm.strip() else []
        pinned = [view.pinned.get("lc") or to_langchain_message(view.pinned)] if view.pinned is not None else []
        tail = [e["lc"] if "lc" in e else e.get("original") or to_langchain_message(e) for e in entries]
        fixed = _count(self.token_counter, system) + self._schema_tokens(request)
        return {"call_tokens": fixed + _count(self.token_counter, [*summary, *pinned, *tail]), "fixed_tokens": fixed}

    def _commit_keep(self, engine: WorkingMemoryEngine, session_id: str, view: StateView, target: int,
                     fixed: int, limit: int) -> tuple[Keep, int]:
        """The keep that leaves at most `target` tokens in the next call (`fixed`: what rides on every call
        besides the tail) and the pending tokens it would cover."""
        keep = resolve_keep(self.keep or engine.keep, limit)  # a fraction: of the model's input limit
        tokens = [m["tokens"] for m in view.live]
        starts = [m["role"] == "user" for m in view.live]
        window = sum(tokens) - covered_tokens(tokens, starts, keep)
        allowance = max(target - fixed - (view.pinned["tokens"] if view.pinned else 0), 0)
        # never less than the newest step (a tool call and its results): the call about to go out answers it
        allowance = max(allowance, newest_step_tokens(view.live))
        chosen, capped = low_water_keep(keep, window, allowance)
        calls = self.calls_of(session_id)
        if capped and "keep" not in calls.warned:
            calls.warned.add("keep")
            log.warning("session %r: the keep window %s (%d tokens) is larger than the low-water mark allows "
                        "(%d tokens); commits keep %s instead", session_id, list(keep), window, allowance,
                        list(chosen))
        return chosen, covered_tokens(tokens, starts, chosen)

    def _commit(self, engine: WorkingMemoryEngine, session_id: str, keep: Keep, threshold: int, wait: bool,
                events: list[dict[str, Any]], reason: str) -> dict[str, Any]:
        events.append(emit("commit_started", session_id, reason=reason, keep=list(keep)))
        result = engine.commit_for_call(session_id, keep, threshold, wait=wait)
        self._report(engine, session_id, result, events)
        return result

    def _report(self, engine: WorkingMemoryEngine, session_id: str, result: dict[str, Any],
                events: list[dict[str, Any]]) -> None:
        status = result.get("status")
        calls = self.calls_of(session_id)
        if status == "pending":
            calls.background = result.get("task_id")
            return
        if status == "completed":
            task = engine.task(result["task_id"]) or {}
            degraded = bool((task.get("result") or {}).get("degraded"))
            events.append(emit("commit_degraded" if degraded else "commit_finished", session_id,
                               task_id=result["task_id"], archive_id=result.get("archive_id")))
            if result.get("archive_id"):
                calls.to_trim |= {i for m in engine.archive_messages(session_id, result["archive_id"])
                                  if (i := lc_id(m))}
        elif status == "skipped":
            events.append(emit("commit_skipped", session_id, reason=result.get("reason")))
        elif status != "busy":
            events.append(emit("commit_failed", session_id, task_id=result.get("task_id"),
                               reason=result.get("reason")))

    def _background_outcome(self, engine: WorkingMemoryEngine, session_id: str,
                            events: list[dict[str, Any]]) -> bool:
        """Report a background commit a call started, once it ended; True when it completed."""
        calls = self.calls_of(session_id)
        if calls.background is None:
            return False
        task = engine.task(calls.background) or {}
        if task.get("status") in ("pending", "running"):
            return False
        calls.background = None
        result = {"status": task.get("status"), "task_id": task.get("task_id"), "archive_id": task.get("archive_id"),
                  "reason": task.get("error")}
        self._report(engine, session_id, result, events)
        return task.get("status") == "completed"

    def prepare_call(self, request: ModelRequest) -> Prepared:
        """§12 per call: store the run's new messages, commit when due (before the call), assemble. When
        storage is down the call goes out with the last good view and storing is retried at the next call."""
        self._check_tools(request)
        engine, session_id = resolve_engine(self.engine), self._session(request.runtime)
        try:
            return self._prepare(request, engine, session_id)
        except STORAGE_DOWN as exc:
            return self._last_good(request, session_id, exc)

    def _sent_well(self, request: ModelRequest, prepared: Prepared) -> None:
        """A call storage served went out and was answered: it is the view an outage falls back to."""
        if prepared.sent.get("storage_unavailable"):
            return
        calls = self.calls_of(prepared.sent["session_id"])
        messages = list(request.state.get("messages") or [])
        calls.last_good = (prepared.request.system_message, list(prepared.request.messages),
                           {m.id for m in messages if getattr(m, "id", None)})
        calls.warned.discard("storage")  # a later outage is warned about again

    def _last_good(self, request: ModelRequest, session_id: str, exc: Exception) -> Prepared:
        """The call as the last good one was sent, plus the state's messages that came after it (or the
        state's own messages when there was none); nothing is recorded as stored."""
        calls = self.calls_of(session_id)
        if "storage" not in calls.warned:
            calls.warned.add("storage")
            log.warning("session %r: storage is unavailable (%s); the call goes out with the last good view and "
                        "storing is retried at the next call", session_id, describe_error(exc))
        events = [emit("storage_unavailable", session_id, error=describe_error(exc))]
        messages = [m for m in request.state.get("messages") or [] if carries_content(m)]
        present = {m.id for m in messages if getattr(m, "id", None)}
        if calls.last_good is None or not calls.last_good[2] <= present:
            # nothing sent yet, or the state dropped messages since (a clear, a trim): only what it holds now
            system, shown = request.system_message, messages
        else:
            system, before, ids = calls.last_good
            shown = [*before, *(m for m in messages if getattr(m, "id", None) not in ids)]
        budget = self.token_budget or self._input_limit or DEFAULT_CONTEXT_WINDOW
        call_tokens = sum(count_tokens(m.text) for m in shown) + (count_tokens(system.text) if system else 0)
        sent = {"session_id": session_id, "storage_unavailable": True, "events": events, "budget": budget,
                "call_tokens": call_tokens, "state_messages": len(messages), "messages_shown": len(shown)}
        return Prepared(request.override(messages=shown, system_message=system), sent, [], {})

    def _prepare(self, request: ModelRequest, engine: WorkingMemoryEngine, session_id: str) -> Prepared:
        state = dict(request.state)
        messages = list(state.get("messages") or [])
        events: list[dict[str, Any]] = []
        calls = self.calls_of(session_id)
        view = self._store(engine, session_id, self._view(engine, session_id, messages, state))
        if self._background_outcome(engine, session_id, events):
            view = self._view(engine, session_id, messages, state)
        self._hide_dropped(engine, session_id, view, [])
        threshold = self._threshold(engine, request, session_id)
        floor = engine.min_commit_tokens if engine.min_commit_tokens is not None else threshold // 4
        measured = self._measure(request, engine, session_id, view)
        fixed = measured["fixed_tokens"] + engine.budget_for_trigger(threshold)
        keep, pending = self._commit_keep(engine, session_id, view, int(self.low_water * threshold), fixed,
                                          self.budget_for(request, engine, session_id))
        if judge_commit(calls, measured["call_tokens"], threshold, pending) and "breaker" not in calls.warned:
            calls.warned.add("breaker")
            log.warning("session %r: %d commits in a row left the next call over the trigger (%d tokens); trigger "
                        "commits pause until %d more tokens are stored", session_id, calls.ineffective, threshold,
                        floor)
            events.append(emit("loop_breaker_engaged", session_id, ineffective=calls.ineffective))
        update: dict[str, Any] = {}
        budget = self.budget_for(request, engine, session_id)
        over_limit = measured["call_tokens"] > budget - reserve_for_reply(budget)
        max_messages = trigger_messages(self.trigger or engine.trigger)
        by_count = max_messages is not None and len(view.live) >= max_messages and pending > 0
        due = ((measured["call_tokens"] >= threshold and pending >= max(floor, 1) or by_count)
               and breaker_allows(calls, pending, floor))
        breaker = None
        if due and calls.background is not None and over_limit:
            engine.wait()  # a running background commit may be enough; see what it left
            if self._background_outcome(engine, session_id, events):
                view = self._view(engine, session_id, messages, state)
            due = False
        if due:
            wait = self.commit_mode == "sync" or over_limit
            result = self._commit(engine, session_id, keep, threshold, wait, events, "trigger")
            update["workmem_commit_task"] = result.get("task_id")
            if result.get("status") == "busy" and over_limit:
                engine.wait()
            if result.get("status") in ("completed", "busy"):
                calls.check_next = result.get("status") == "completed"
                view = self._view(engine, session_id, messages, state)
        elif calls.breaker_at is not None:
            breaker = "engaged: trigger commits pause until more tokens are stored"
        assembled, sent = self._assemble(request, engine, session_id, view)
        if breaker:
            sent["breaker"] = breaker
        removals = self._removals(session_id, messages, view) if self.trim_state else []
        if self.trim_state and state.get("workmem_prior_upto") is not None:
            # only a thread whose state persists between runs (a checkpointer): a stateless client re-sends
            # plain dicts, which would lose the synopsis mark
            gone = {r.id for r in removals}
            removals += [m for m in self._state_synopses(view, calls.offload_limit) if m.id not in gone]
        sent["events"] = events
        sent["trigger"] = threshold
        return Prepared(assembled, sent, removals, {**update, "workmem_stored_upto": engine.next_seq(session_id)})

    def _removals(self, session_id: str, messages: list[Any], view: StateView) -> list[RemoveMessage]:
        """`RemoveMessage`s for the state's messages a commit archived (the running turn's user message stays)."""
        to_trim = self.calls_of(session_id).to_trim
        if not to_trim:
            return []
        keep_id = view.pinned["lc"].id if view.pinned is not None else None
        return [RemoveMessage(id=m.id) for m in messages
                if getattr(m, "id", None) and m.id in to_trim and m.id != keep_id]

    def _state_synopses(self, view: StateView, limit: int) -> list[ToolMessage]:
        """The state's stored large tool results as their synopsis (same id: the reducer replaces them), so the
        agent's checkpoints do not carry megabytes; the log keeps each whole (never one it stored clipped), and
        the copy's mark makes it align as the stored result while unedited."""
        out = []
        for pos, stored in view.alignment.stored.items():
            message = view.messages[view.indexes[pos]]
            if (not isinstance(message, ToolMessage) or not isinstance(message.content, str)
                    or SYNOPSIS_FP in message.additional_kwargs or stored["tokens"] <= limit
                    or not self._shrinkable(stored) or CLIPPED_BYTES_META in (stored.get("meta") or {})):
                continue
            text, _tokens = self._synopses.of(stored, limit)
            mark = {SYNOPSIS_FP: stored["meta"][FINGERPRINT_META], SYNOPSIS_HASH: synopsis_hash(text)}
            out.append(message.model_copy(update={"content": text,
                                                  "additional_kwargs": {**message.additional_kwargs, **mark}}))
        return out

    def _call(self, request: ModelRequest, prepared: Prepared, handler: Callable[[ModelRequest], ModelResponse]
              ) -> tuple[ModelResponse, Prepared]:
        try:
            response = handler(prepared.request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            if prepared.sent.get("storage_unavailable"):  # no commit can make it smaller now
                raise ContextOverflow(prepared.sent["call_tokens"], prepared.sent["budget"]) from exc
            retry = self._after_overflow(request, prepared, exc)
        else:
            self._sent_well(request, prepared)
            return response, prepared
        try:
            response = handler(retry.request)
        except Exception as exc:
            if is_context_overflow(exc):
                raise ContextOverflow(retry.sent["call_tokens"], retry.sent["budget"]) from exc
            raise
        self._sent_well(request, retry)
        return response, retry

    def _after_overflow(self, request: ModelRequest, prepared: Prepared, exc: BaseException) -> Prepared:
        """A context-length refusal: lower the session's input limit, commit aiming under it, re-assemble."""
        engine, session_id = resolve_engine(self.engine), self._session(request.runtime)
        calls = self.calls_of(session_id)
        call_tokens = prepared.sent["call_tokens"]
        calls.input_limit = max(int(call_tokens * OVERFLOW_MARGIN), 1)
        log.warning("session %r: the model refused a call of %d tokens as too long (%s); its input limit is %d "
                    "tokens from now on", session_id, call_tokens, describe_error(exc), calls.input_limit)
        events = list(prepared.sent.get("events", []))
        state = dict(request.state)
        messages = list(state.get("messages") or [])
        threshold = self._threshold(engine, request, session_id)
        if calls.background is not None:
            engine.wait()
            self._background_outcome(engine, session_id, events)
        view = self._view(engine, session_id, messages, state)
        target = int(self.low_water * min(threshold, call_tokens))
        fixed = self._measure(request, engine, session_id, view)["fixed_tokens"] + engine.budget_for_trigger(threshold)
        keep, _pending = self._commit_keep(engine, session_id, view, target, fixed,
                                           self.budget_for(request, engine, session_id))
        result = self._commit(engine, session_id, keep, threshold, True, events, "overflow")
        if result.get("status") == "busy":
            engine.wait()
        view = self._view(engine, session_id, messages, state)
        assembled, sent = self._assemble(request, engine, session_id, view)
        events.append(emit("overflow_recovered", session_id, call_tokens=call_tokens, limit=calls.input_limit))
        sent["events"], sent["trigger"] = events, threshold
        removals = self._removals(session_id, messages, view) if self.trim_state else []
        update = {**prepared.update, "workmem_commit_task": result.get("task_id")}
        return Prepared(assembled, sent, removals, update)

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        """Store, commit when due, call the model on the assembled context; record what it was sent."""
        response, prepared = self._call(request, self.prepare_call(request), handler)
        return ExtendedModelResponse(model_response=response, command=prepared.command())

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ExtendedModelResponse:
        """Async variant of `wrap_model_call` (the engine's file I/O runs in a worker thread)."""
        prepared = await asyncio.to_thread(self.prepare_call, request)
        try:
            response = await handler(prepared.request)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            if prepared.sent.get("storage_unavailable"):  # no commit can make it smaller now
                raise ContextOverflow(prepared.sent["call_tokens"], prepared.sent["budget"]) from exc
            prepared = await asyncio.to_thread(self._after_overflow, request, prepared, exc)
            try:
                response = await handler(prepared.request)
            except Exception as again:
                if is_context_overflow(again):
                    raise ContextOverflow(prepared.sent["call_tokens"], prepared.sent["budget"]) from again
                raise
        self._sent_well(request, prepared)
        return ExtendedModelResponse(model_response=response, command=prepared.command())

    # -- around the run -------------------------------------------------------------------------

    def before_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Note where the run starts: its newest input message (what the agent adds after it is the run's own,
        never matched by fingerprint) and the session's next seq (what this run stores is the run's own)."""
        messages = list(state.get("messages") or [])
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        update: dict[str, Any] = {"workmem_prior_upto": state.get("workmem_stored_upto")}
        try:
            update["workmem_run_seq"] = engine.next_seq(session_id)
            removals = self.archived_in_state(engine, session_id, messages) if self.trim_state else []
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
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def _hide_dropped(self, engine: WorkingMemoryEngine, session_id: str, view: StateView,
                      stored_seqs: list[int]) -> None:
        hide, shown = view.hidden_changes(stored_seqs)
        if not (hide or shown):
            return
        hidden = engine.hidden(session_id)
        if hide - hidden or shown & hidden:
            engine.set_hidden(session_id, hide, shown)
        if self.forget_on_remove and hide:
            self._forget_removed(engine, session_id, view, hide)

    def _forget_removed(self, engine: WorkingMemoryEngine, session_id: str, view: StateView, hide: set[int]) -> None:
        """`forget_on_remove`: the hidden live messages not forgotten yet are forgotten; while a commit holds the
        session's lease they stay hidden and are forgotten at a later call."""
        seqs = sorted(m["seq"] for m in view.live if m["seq"] in hide and not is_forgotten(m))
        if not seqs:
            return
        try:
            engine.forget_messages(session_id, seqs)
        except CommitInProgress as exc:
            log.info("session %r: forgetting removed messages waits for commit %s", session_id, exc.task_id)
            return
        self._archive_tails.pop(session_id, None)

    def after_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Store what the run added since its last model call, hide what the state dropped; trim the state.
        No commit is decided here: the next model call decides, on the call it is about to send."""
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        try:
            view = self._view(engine, session_id, messages, dict(state))
            turn = clip_oversized(view.new_messages(), engine.max_message_bytes, warn=True,
                                  payloads=engine.payload_limits)
            stored = engine.add_messages(session_id, turn) if turn else []
            self._hide_dropped(engine, session_id, view, [m["seq"] for m in stored])
            update: dict[str, Any] = {"workmem_stored_upto": engine.next_seq(session_id)}
        except STORAGE_DOWN as exc:  # the state keeps the run's messages: the next run's first call stores them
            log.warning("session %r: storing the end of the run failed (%s); it is retried at the next call",
                        session_id, describe_error(exc))
            return None
        if self.trim_state:
            # Never this run's own messages: the caller reads its answer from the run's output. A commit that
            # covered them has them trimmed at the next run's start.
            own = {getattr(m, "id", None) for m in [*messages[view.first_output_index:], *view.new_messages()]}
            removals = [r for r in self.archived_in_state(engine, session_id, messages) if r.id not in own]
            if removals:
                update["messages"] = removals
        return update

    async def aafter_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Async variant of `after_agent` (the engine's file I/O runs in a worker thread)."""
        return await asyncio.to_thread(self.after_agent, state, runtime)

    def archived_in_state(self, engine: WorkingMemoryEngine, session_id: str,
                          messages: list[BaseMessage]) -> list[RemoveMessage]:
        """`RemoveMessage`s for the state's messages a commit has archived, found by LangChain id in the
        archives from the newest back to the first that holds none of them (older ones were trimmed)."""
        if not engine.session_exists(session_id):
            return []
        live_ids = {lc_id(m) for m in engine.live_messages(session_id)}
        wanted = {m.id for m in messages if m.id and m.id not in live_ids}
        last = engine.storage.sessions.meta(session_id).get("last_archive")
        found: set[str] = set()
        n = archive_number(last["id"]) if last else 0
        while wanted and n >= 1:
            ids = {lc_id(m) for m in engine.archive_messages(session_id, archive_name(n))} & wanted
            if not ids:
                break
            found |= ids
            wanted -= ids
            n -= 1
        return [RemoveMessage(id=m.id) for m in messages if m.id in found]

    def forget(self, thread_id: str, *, checkpointer: Any = None, session_id: str | None = None) -> dict[str, Any]:
        """Delete the thread's session. The agent's own thread must go too, or its history is stored again
        at the next run: pass the agent's `checkpointer` to delete it here, or delete it yourself. With a
        `session_id` function on the middleware, pass the id it returns for that thread as `session_id`."""
        engine = resolve_engine(self.engine)
        if session_id is None and callable(self.session_id):
            raise InvalidInput("session_id", None, "the middleware's session_id is a function: call "
                                                   "forget(thread_id, session_id=<the id it returns>)")
        session_id = (require_text("session_id", session_id) if session_id is not None
                      else self.session_id or thread_id)
        self._calls.pop(session_id, None)  # nothing of the deleted conversation is sent again, even in an outage
        self._archive_tails.pop(session_id, None)
        try:
            engine.delete_session(session_id)
            deleted = True
        except SessionNotFound:
            deleted = False
        out: dict[str, Any] = {"session_id": session_id, "deleted": deleted, "thread_deleted": False}
        if checkpointer is not None:
            checkpointer.delete_thread(thread_id)
            out["thread_deleted"] = True
        else:
            out["note"] = (f"delete the agent's thread too (checkpointer.delete_thread({thread_id!r})), "
                           "otherwise its history is stored again at its next run")
        return out
