"""`WorkingMemoryMiddleware` for `langchain.agents.create_agent` (SPEC §7 *Integration semantics*).

One line integrates workmem into an agent::

    agent = create_agent(model, tools, middleware=[WorkingMemoryMiddleware(engine)], checkpointer=saver)
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "user-42"}})

- **Session = thread.** Without `session_id`, the run's `thread_id` (or `context={"session_id": …}`) names
  the session, so each conversation has its own memory.
- **Before each model call** the model sees workmem's context instead of the raw history: the system
  addition (joined to the agent's own system prompt), the working memory, and the thread's live tail
  — the live stored messages present in the state, in state order (all live messages when the state
  holds none, e.g. a client that sends only new messages) — plus the state's messages not stored yet.
  Budget order: system addition, unstored messages (clipped when they alone do not fit), WM whole or
  not at all, then the live tail newest-first in whole tool groups. The agent's history is never
  modified (unless `trim_state`). What the model was sent is recorded in `workmem_last_call`.
- **After the agent finishes**, the state is aligned with the stored session (`alignment.py`) and only
  what follows the aligned run is stored; stored messages the state no longer holds are hidden (left
  out of later contexts and commit transcripts; the log keeps them). A commit starts when due
  (`engine.commit_due`), in the background or, with `commit_mode="sync"`, before the run returns.
- **Tools.** The middleware contributes `archive_search` / `archive_expand` for the run's session
  (`tools=False` turns them off; binding `make_archive_tools` as well is an error).

A message of the turn larger than the engine's `max_message_bytes` (a huge tool output) would make every
model call and the store fail; the middleware sends and stores a clipped copy instead
(`state.messages.clip_to_cap`), with one warning in the log when it is stored.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from workmem.graphs.agent.alignment import Alignment, align
from workmem.graphs.agent.binding import resolve_engine, session_from_run
from workmem.graphs.agent.tools import make_archive_tools, schema_tokens
from workmem.graphs.context.assemble import assemble_context, pending_entries, reserve_for_reply, validate_budget
from workmem.graphs.context.injected import clean_messages
from workmem.state.archive_object import OWN_TOOLS
from workmem.state.errors import InvalidInput, SessionNotFound
from workmem.state.ids import archive_name, archive_number
from workmem.state.messages import (
    CLIPPED_BYTES_META,
    NO_BYTE_CAP,
    clip_to_cap,
    lc_id,
    normalize_message,
    prepare_message,
)
from workmem.state.retention import Keep, Trigger, keep_value, trigger_value
from workmem.state.tokens import count_tokens

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

NORMALISED_CACHE_SIZE = 20_000  # messages: a few MB, and a long thread's history aligned without re-normalising
ARCHIVE_TAIL = 64  # newest archived messages a stateless client's history is compared with

log = logging.getLogger("workmem.agent")


class WorkmemAgentState(AgentState):
    """Agent state plus the middleware's private bookkeeping (not in the agent's input or output schema)."""

    workmem_commit_task: NotRequired[Annotated[str | None, PrivateStateAttr]]
    workmem_last_call: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]
    workmem_run_from: NotRequired[Annotated[str | None, PrivateStateAttr]]  # newest input message's id


def combine_system(own: SystemMessage | None, addition: SystemMessage) -> SystemMessage:
    """The agent's system message followed by workmem's addition, as one system message."""
    if own is None:
        return addition
    if isinstance(own.content, str):
        content: Any = f"{own.content}\n\n{addition.text}" if own.content else addition.text
    else:
        content = [*own.content, {"type": "text", "text": addition.text}]
    return SystemMessage(content=content, additional_kwargs={**own.additional_kwargs, "workmem": "system"})


def carries_content(message: Any) -> bool:
    """False for an AI message with no text and no tool call (nothing to store or send)."""
    if not isinstance(message, AIMessage):
        return True
    return bool(message.text.strip() or message.tool_calls or message.invalid_tool_calls or
                (isinstance(message.content, list) and message.content))


def clip_oversized(messages: list[Any], max_bytes: int, *, warn: bool = False) -> list[Any]:
    """`messages` with each one whose stored size exceeds `max_bytes` replaced by a clipped workmem dict.

    The others are returned as they are; a message that is invalid for another reason is left for the
    engine to reject with its usual error. `warn` logs one warning per clipped message.
    """
    out = []
    for message in messages:
        try:
            msg, body = prepare_message(message, max_bytes=NO_BYTE_CAP)
        except InvalidInput:
            out.append(message)
            continue
        if len(body) <= max_bytes:
            out.append(message)
            continue
        clipped = clip_to_cap(msg, max_bytes)
        if warn:
            log.warning("workmem: a %s message (id %s) of %d bytes exceeds max_message_bytes (%d); "
                        "a clipped copy is stored", clipped["role"], lc_id(msg),
                        clipped["meta"][CLIPPED_BYTES_META], max_bytes)
        out.append(clipped)
    return out


class NormalisedCache:
    """Normalised forms of the agent state's messages, reused across model calls: a checkpointed thread's
    whole history is aligned on every call, and normalising it is most of that cost. Keyed by LangChain
    id and everything normalisation reads, so an edited message (same id, new content) is normalised anew."""

    def __init__(self, size: int = NORMALISED_CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def normalize(self, message: Any, *, field: str = "message", max_bytes: int = NO_BYTE_CAP) -> dict[str, Any]:
        """`normalize_message(message)`, from the cache when the same message was normalised before."""
        key = _cache_key(message)
        if key is not None:
            with self._lock:
                hit = self._items.get(key)
                if hit is not None:
                    self._items.move_to_end(key)
                    return hit
        msg = normalize_message(message, field=field, max_bytes=max_bytes)
        if key is not None:
            with self._lock:
                self._items[key] = msg
                while len(self._items) > self.size:
                    self._items.popitem(last=False)
        return msg


def _cache_key(message: Any) -> tuple[Any, ...] | None:
    if not isinstance(message, BaseMessage) or not message.id:
        return None
    content = message.content if isinstance(message.content, str) else repr(message.content)
    extra: tuple[Any, ...] = ()
    if isinstance(message, AIMessage):
        extra = (repr(message.tool_calls), repr(message.invalid_tool_calls))
    elif isinstance(message, ToolMessage):
        extra = (message.tool_call_id, message.status)
    kwargs = repr(message.additional_kwargs) if message.additional_kwargs else ""
    return (message.type, message.id, hash(content), len(content), message.name, kwargs, *extra)


class StateView:
    """The agent state's messages aligned with the stored session (what is stored, live, new)."""

    def __init__(self, engine: WorkingMemoryEngine, session_id: str, messages: list[Any],
                 newest_archive: Callable[[], list[dict[str, Any]]], run_from: str | None = None,
                 cache: NormalisedCache | None = None) -> None:
        self.messages = messages
        normalize = cache.normalize if cache is not None else normalize_message
        # An empty model reply (no text, no tool call: cut or filtered output) is nothing to store or send:
        # skipped before validation, which would refuse it. workmem's own injections never count.
        contentful = [i for i, m in enumerate(messages) if carries_content(m)]
        self.empty_replies = len(messages) - len(contentful)
        kept = clean_messages([messages[i] for i in contentful], max_bytes=NO_BYTE_CAP, normalize=normalize)
        self.indexes = [contentful[j] for j, _msg, _changed in kept]
        normalised = {contentful[j]: msg for j, msg, _changed in kept}
        exists = engine.storage.sessions.session_exists(session_id)
        self.live = engine.storage.sessions.live_messages(session_id) if exists else []
        last_input = next((i for i, m in enumerate(messages) if run_from and getattr(m, "id", None) == run_from),
                          None)
        first_output = (len(self.indexes) if last_input is None
                        else sum(1 for i in self.indexes if i <= last_input))
        # index into `messages` of the run's first own message (unknown: those stored by this run)
        self.first_output_index = len(messages) if last_input is None else last_input + 1
        self.alignment: Alignment = align([normalised[i] for i in self.indexes], self.live,
                                          newest_archive if exists else list, first_output)
        self.shown = self.alignment.shown({m["seq"] for m in self.live})

    def new_messages(self) -> list[Any]:
        """The state's messages to store, in order."""
        return [self.messages[self.indexes[pos]] for pos in self.alignment.new]

    def context_entries(self, engine: WorkingMemoryEngine, session_id: str, max_view_bytes: int) -> list[Any]:
        """What the model may see besides the WM, in order: live stored messages and unstored ones (entries
        with `lc`). The state decides the tail when it holds a stored message (live, or the newest archived
        one: a fork from an archived checkpoint); else, a client sending only new messages, every shown live
        one."""
        unstored_positions = self.alignment.new
        unstored = clip_oversized([self.messages[self.indexes[p]] for p in unstored_positions], max_view_bytes)
        entries = dict(zip(unstored_positions, pending_entries(unstored, max_bytes=NO_BYTE_CAP), strict=True))
        if not self.alignment.holds_stored:
            shown = engine.shown_live(session_id) if self.live else []
            return [*shown, *(entries[p] for p in sorted(entries))]
        return [self.shown.get(p) or entries[p] for p in range(len(self.indexes)) if p in self.shown or p in entries]

    def hidden_changes(self, stored_seqs: list[int]) -> tuple[set[int], set[int]]:
        """(hide, unhide): live messages that came from an agent (they carry a LangChain id) and are no
        longer in the state, older than the newest one it holds or just stored; and those back in it. Only
        when the state holds a stored message: a client sending only new messages hides nothing."""
        if not self.alignment.holds_stored or not self.alignment.by_ids:
            return set(), set()  # a stateless client's history is partial: what it leaves out is not removed
        present = {m["seq"] for m in self.shown.values()}
        newest = max([*present, *stored_seqs], default=0)
        hide = {m["seq"] for m in self.live if m["seq"] < newest and m["seq"] not in present and lc_id(m)}
        return hide, present


class WorkingMemoryMiddleware(AgentMiddleware[WorkmemAgentState, Any]):
    """Assemble workmem context before every model call and record each finished run with `after_turn`."""

    state_schema = WorkmemAgentState

    def __init__(
        self,
        engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
        *,
        session_id: str | None = None,
        default_session_id: str | None = None,
        token_budget: int | None = None,
        keep: Keep | None = None,
        trigger: Trigger | int | None = None,
        commit_mode: Literal["background", "sync"] = "background",
        trim_state: bool = False,
        tools: bool = True,
    ) -> None:
        """`session_id` pins one session (single-conversation scripts); by default each thread is one.
        `token_budget` defaults to the agent model's `profile["max_input_tokens"]`, else the engine's
        `context_window`. `keep` / `trigger` override the engine's. `trim_state=True` removes archived
        messages from the agent's state once committed (its checkpoints stay bounded)."""
        super().__init__()
        self.engine = engine
        self.session_id = session_id
        self.default_session_id = default_session_id
        self.token_budget = None if token_budget is None else validate_budget(token_budget)
        self.keep = None if keep is None else keep_value(keep)
        self.trigger = None if trigger is None else trigger_value(trigger)
        if commit_mode not in ("background", "sync"):
            raise InvalidInput("commit_mode", commit_mode, "must be 'background' or 'sync'")
        self.commit_mode = commit_mode
        self.trim_state = bool(trim_state)
        self.tools = make_archive_tools(engine, session_id, default_session_id=default_session_id) if tools else []
        self._tool_tokens = schema_tokens(self.tools)  # carried by every call, so counted toward the trigger
        self._input_limit: int | None = None  # the agent model's profile, seen at its first call
        self._archive_tails: dict[str, tuple[tuple[Any, ...], list[dict[str, Any]]]] = {}
        self._normalised = NormalisedCache()

    # -- which session --------------------------------------------------------------------------

    def _session(self, runtime: Any) -> str:
        return session_from_run(self.session_id, runtime=runtime, default=self.default_session_id)

    def archive_tail(self, engine: WorkingMemoryEngine, session_id: str) -> list[dict[str, Any]]:
        """The newest archive's last messages, oldest first (cached per archive of this incarnation of the
        session: a deleted and re-created session has another `created_at`)."""
        meta = engine.session_info(session_id)
        last = meta.get("last_archive")
        if not last:
            return []
        key = (meta.get("created_at"), last["id"], last.get("end_seq"))
        cached = self._archive_tails.get(session_id)
        if cached is None or cached[0] != key:
            messages = engine.storage.sessions.archive_messages(session_id, last["id"])
            cached = (key, messages[-ARCHIVE_TAIL:])
            self._archive_tails[session_id] = cached
        return cached[1]

    def _view(self, engine: WorkingMemoryEngine, session_id: str, messages: list[Any],
              run_from: str | None = None) -> StateView:
        return StateView(engine, session_id, messages, lambda: self.archive_tail(engine, session_id), run_from,
                         self._normalised)

    # -- before each model call -----------------------------------------------------------------

    def budget_for(self, request: ModelRequest, engine: WorkingMemoryEngine) -> int:
        """The call's token budget: explicit, else the model profile's input limit, else `context_window`."""
        profile = getattr(request.model, "profile", None)
        limit = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self._input_limit = limit
        return self.token_budget or self._input_limit or engine.context_window

    def _check_tools(self, request: ModelRequest) -> None:
        if not self.tools:
            return
        ours = {id(t) for t in self.tools}
        for tool in request.tools:
            name = getattr(tool, "name", None) or (tool.get("name") if isinstance(tool, dict) else None)
            if name in OWN_TOOLS and id(tool) not in ours:
                raise InvalidInput("tools", name, "is bound twice: the middleware contributes it; drop "
                                                  "make_archive_tools or pass tools=False to the middleware")

    def assembled_request(self, request: ModelRequest) -> tuple[ModelRequest, dict[str, Any]]:
        """The request with its messages replaced by workmem's context, and what that context holds."""
        self._check_tools(request)
        engine, session_id = resolve_engine(self.engine), self._session(request.runtime)
        view = self._view(engine, session_id, list(request.state.get("messages") or []),
                          request.state.get("workmem_run_from"))
        own = request.system_message
        budget = self.budget_for(request, engine) - (count_tokens(own.text) if own is not None else 0)
        exists = engine.storage.sessions.session_exists(session_id)
        wm, archives_total = engine.summary_of(session_id) if exists else ("", 0)
        try:
            entries = view.context_entries(engine, session_id, engine.max_message_bytes)
            assembled = assemble_context(entries, wm, archives_total, budget)
        except InvalidInput as exc:
            if exc.field != "token_budget":
                raise
            # The run itself does not fit (say, one huge tool output): show the model a clipped view of
            # its largest messages — at most half the window each, a token being at least one byte.
            view_cap = max(1024, (budget - reserve_for_reply(budget)) // 2)
            assembled = assemble_context(view.context_entries(engine, session_id, view_cap), wm, archives_total,
                                         budget)
        addition, *messages = assembled["messages"]
        stats = assembled["stats"]
        sent = {"session_id": session_id, "budget": stats["budget"], "total_tokens": stats["total_tokens"],
                "working_memory_tokens": stats["summary_tokens"], "archives_total": archives_total,
                "live_messages_shown": stats["messages_included"] - stats["pending_included"],
                "unstored_messages": stats["pending_included"], "messages_dropped": stats["messages_dropped"],
                "state_messages": len(view.messages)}
        return request.override(messages=messages, system_message=combine_system(own, addition)), sent

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        """Call the model on the assembled context; record what it was sent in `workmem_last_call`."""
        assembled, sent = self.assembled_request(request)
        return ExtendedModelResponse(model_response=handler(assembled),
                                     command=Command(update={"workmem_last_call": sent}))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ExtendedModelResponse:
        """Async variant of `wrap_model_call` (the engine's file I/O runs in a worker thread)."""
        assembled, sent = await asyncio.to_thread(self.assembled_request, request)
        return ExtendedModelResponse(model_response=await handler(assembled),
                                     command=Command(update={"workmem_last_call": sent}))

    # -- around the run -------------------------------------------------------------------------

    def before_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Note the run's newest input message (what the agent adds after it is the run's own, never matched
        by fingerprint); with `trim_state`, drop messages committed since the last run from the state."""
        messages = list(state.get("messages") or [])
        update: dict[str, Any] = {}
        if self.trim_state:
            engine, session_id = resolve_engine(self.engine), self._session(runtime)
            removals = self.archived_in_state(engine, session_id, messages)
            if removals:
                update["messages"] = removals
                gone = {r.id for r in removals}
                messages = [m for m in messages if m.id not in gone]
        update["workmem_run_from"] = messages[-1].id if messages else None
        return update

    async def abefore_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Async variant of `before_agent`."""
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def after_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Store this run's new messages once, hide what the state dropped, start a commit when due."""
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        view = self._view(engine, session_id, messages, state.get("workmem_run_from"))
        turn = clip_oversized(view.new_messages(), engine.max_message_bytes, warn=True)
        result = engine.after_turn(session_id, turn, keep=self.keep, trigger=self.trigger,
                                   input_limit=self._input_limit, tool_tokens=self._tool_tokens,
                                   wait=self.commit_mode == "sync")
        hide, shown = view.hidden_changes([m["seq"] for m in result["messages"]])
        hidden = engine.storage.sessions.hidden(session_id) if (hide or shown) else set()
        if hide - hidden or shown & hidden:
            engine.storage.sessions.set_hidden(session_id, hide, shown)
        update: dict[str, Any] = {"workmem_commit_task": result["task_id"]}
        if self.trim_state:
            # Never this run's own messages: the caller reads its answer from the run's output. A commit that
            # covered them (commit_mode="sync" with a small keep) has them trimmed at the next run's start.
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
        if not engine.storage.sessions.session_exists(session_id):
            return []
        live_ids = {lc_id(m) for m in engine.storage.sessions.live_messages(session_id)}
        wanted = {m.id for m in messages if m.id and m.id not in live_ids}
        last = engine.session_info(session_id).get("last_archive")
        found: set[str] = set()
        n = archive_number(last["id"]) if last else 0
        while wanted and n >= 1:
            ids = {lc_id(m) for m in engine.storage.sessions.archive_messages(session_id, archive_name(n))} & wanted
            if not ids:
                break
            found |= ids
            wanted -= ids
            n -= 1
        return [RemoveMessage(id=m.id) for m in messages if m.id in found]

    def forget(self, thread_id: str, *, checkpointer: Any = None) -> dict[str, Any]:
        """Delete the thread's session. The agent's own thread must go too, or its history is stored again
        at the next run: pass the agent's `checkpointer` to delete it here, or delete it yourself."""
        engine = resolve_engine(self.engine)
        session_id = self.session_id or thread_id
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
