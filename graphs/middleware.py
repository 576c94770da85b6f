"""`WorkingMemoryMiddleware` for `langchain.agents.create_agent` (SPEC §7 LangChain integration).

Before each model call the model sees `engine.assemble()`'s context — system addition (joined to the
agent's own system prompt), working memory, the stored live tail — followed by the messages of the
current run that are not stored yet. The agent's own message history is never modified. After the
agent finishes, the turn's new messages go to `engine.after_turn` exactly once: the state field
`workmem_stored` counts how many of the history's messages are already stored. When the session's
newest stored message (by LangChain message id) shows up later in the history, everything up to it
counts as stored too: that covers a parent graph that runs the agent as a node without carrying the
field, and a crash between storing a turn and checkpointing the new count.

A message of the turn larger than the engine's `max_message_bytes` (a huge tool output) would make
every model call and the store fail on every later turn of the thread; the middleware sends and
stores a clipped copy instead (`state.messages.clip_to_cap`: head + tail around a visible marker,
`meta["workmem_clipped_bytes"]`), with one warning in the log when it is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NotRequired

from langchain.agents.middleware.types import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from workmem.graphs.assemble import reserve_for_reply, validate_budget
from workmem.graphs.binding import resolve_engine, session_from_run
from workmem.state.errors import InvalidInput
from workmem.state.messages import CLIPPED_BYTES_META, clip_to_cap, prepare_message
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

_NO_CAP = 1 << 62

log = logging.getLogger("workmem.agent")


class WorkmemAgentState(AgentState):
    """Agent state plus what the middleware keeps: how many history messages are stored, the last commit.

    Both are plain fields (in the input and output schemas) so a parent graph can carry them.
    """

    workmem_stored: NotRequired[int]
    workmem_commit_task: NotRequired[str | None]


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


def stored_count(state: Any) -> int:
    """How many leading messages of the agent history the state says are stored (never more than it holds)."""
    stored = state.get("workmem_stored") or 0
    return max(0, min(int(stored), len(state.get("messages") or [])))


def newest_stored_id(engine: WorkingMemoryEngine, session_id: str) -> str | None:
    """LangChain id of the session's newest stored message (live, else the newest archive's last), if any."""
    if not engine.storage.sessions.session_exists(session_id):
        return None
    newest = engine.storage.sessions.live_messages(session_id)[-1:]
    if not newest:
        archive = engine.working_memory(session_id)
        newest = engine.storage.sessions.archive_messages(session_id, archive["archive_id"])[-1:] if archive else []
    return newest[0]["meta"].get("source_id") if newest else None


def stored_prefix(engine: WorkingMemoryEngine, session_id: str, messages: list[Any], counted: int) -> int:
    """Leading history messages already stored: `counted`, or up to the newest stored message found after it."""
    last_id = newest_stored_id(engine, session_id) if len(messages) > counted else None
    if last_id is not None:
        for i in range(len(messages) - 1, counted - 1, -1):
            if getattr(messages[i], "id", None) == last_id:
                return i + 1
    return counted


def clip_oversized(messages: list[Any], max_bytes: int, *, warn: bool = False) -> list[Any]:
    """`messages` with each one whose stored size exceeds `max_bytes` replaced by a clipped workmem dict.

    The others are returned as they are; a message that is invalid for another reason is left for the
    engine to reject with its usual error. `warn` logs one warning per clipped message.
    """
    out = []
    for message in messages:
        try:
            msg, body = prepare_message(message, max_bytes=_NO_CAP)
        except InvalidInput:
            out.append(message)
            continue
        if len(body) <= max_bytes:
            out.append(message)
            continue
        clipped = clip_to_cap(msg, max_bytes)
        if warn:
            log.warning("workmem: a %s message (id %s) of %d bytes exceeds max_message_bytes (%d); "
                        "a clipped copy is stored", clipped["role"], msg["meta"].get("source_id"),
                        clipped["meta"][CLIPPED_BYTES_META], max_bytes)
        out.append(clipped)
    return out


class WorkingMemoryMiddleware(AgentMiddleware[WorkmemAgentState, Any]):
    """Assemble workmem context before every model call and record each finished turn with `after_turn`."""

    state_schema = WorkmemAgentState

    def __init__(
        self,
        engine: WorkingMemoryEngine | Callable[[], WorkingMemoryEngine],
        *,
        session_id: str | None = None,
        default_session_id: str | None = None,
        token_budget: int = DEFAULT_CONTEXT_WINDOW,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.session_id = session_id
        self.default_session_id = default_session_id
        self.token_budget = validate_budget(token_budget)
        self.tools = []

    def _session(self, runtime: Any) -> str:
        return session_from_run(self.session_id, runtime=runtime, default=self.default_session_id)

    def assembled_request(self, request: ModelRequest) -> ModelRequest:
        """The request with its messages replaced by assemble() + the run's unstored messages."""
        engine, session_id = resolve_engine(self.engine), self._session(request.runtime)
        history = list(request.state.get("messages") or [])
        prefix = {id(m) for m in history[: stored_prefix(engine, session_id, history, stored_count(request.state))]}
        pending = [m for m in request.messages if id(m) not in prefix and carries_content(m)]
        pending = clip_oversized(pending, engine.max_message_bytes)
        own = request.system_message
        budget = self.token_budget - (count_tokens(own.text) if own is not None else 0)
        try:
            assembled = engine.assemble(session_id, budget, pending=pending)
        except InvalidInput as exc:
            if exc.field != "token_budget":
                raise
            # The turn itself does not fit (say, one huge tool output): show the model a clipped view of
            # its largest messages — at most half the window each, a token being at least one byte.
            view_cap = max(1024, (budget - reserve_for_reply(budget)) // 2)
            assembled = engine.assemble(session_id, budget, pending=clip_oversized(pending, view_cap))
        addition, *messages = assembled["messages"]
        return request.override(messages=messages, system_message=combine_system(own, addition))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        """Call the model on the assembled context."""
        return handler(self.assembled_request(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        """Async variant of `wrap_model_call` (the engine's file I/O runs in a worker thread)."""
        return await handler(await asyncio.to_thread(self.assembled_request, request))

    def after_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Store this run's new messages once (after_turn may start a background commit)."""
        engine, session_id = resolve_engine(self.engine), self._session(runtime)
        messages: list[BaseMessage] = list(state.get("messages") or [])
        stored = stored_prefix(engine, session_id, messages, stored_count(state))
        turn = clip_oversized([m for m in messages[stored:] if carries_content(m)], engine.max_message_bytes,
                              warn=True)
        result = engine.after_turn(session_id, [*messages[:stored], *turn], pre_prompt_count=stored)
        return {"workmem_stored": len(messages), "workmem_commit_task": result["task_id"]}

    async def aafter_agent(self, state: WorkmemAgentState, runtime: Any) -> dict[str, Any] | None:
        """Async variant of `after_agent` (the engine's file I/O runs in a worker thread)."""
        return await asyncio.to_thread(self.after_agent, state, runtime)
