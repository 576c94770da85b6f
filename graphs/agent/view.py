"""The agent state seen by the middleware: its messages aligned with the stored session.

`StateView` says which state messages are stored, live, new, and what the model may be shown; the view rules are
judged on the messages stored before the run started (`run_seq`), so messages the run itself stored never make
a client that sends only new messages look like one that holds its history, and a checkpointed thread whose
state dropped every earlier stored message (a "clear") shows none of them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from workmem.graphs.agent.alignment import Alignment, ArchivedKeys, align, fingerprint_of
from workmem.graphs.context.assemble import pending_entries
from workmem.graphs.context.injected import clean_messages
from workmem.state.errors import InvalidInput
from workmem.state.lru import LRU
from workmem.state.messages import (
    CLIP_MARK,
    CLIPPED_BYTES_META,
    DROPPED_BLOCKS_META,
    FINGERPRINT_META,
    NO_BYTE_CAP,
    SYNOPSIS_FP,
    clip_to_cap,
    first_image_only,
    for_storage,
    lc_id,
    message_text,
    message_tokens,
    prepare_message,
)
from workmem.state.payloads import PayloadLimits
from workmem.state.safe_form import CHECKPOINTED_FP, as_checkpointed, storable_form

if TYPE_CHECKING:
    from workmem.graphs.engine import WorkingMemoryEngine

NORMALISED_CACHE_SIZE = 20_000  # messages: a few MB, and a long thread's history aligned without re-normalising

log = logging.getLogger("workmem.agent")


def combine_system(own: SystemMessage | None, addition: SystemMessage) -> SystemMessage:
    """The agent's system message followed by workmem's addition, as one system message."""
    if own is None:
        return addition
    if isinstance(own.content, str):
        content: Any = f"{own.content}\n\n{addition.text}" if own.content else addition.text
    else:
        content = [*own.content, {"type": "text", "text": addition.text}]
    return SystemMessage(content=content, additional_kwargs={**own.additional_kwargs, "workmem": "system"})


def with_instructions(own: SystemMessage | None, instructions: list[SystemMessage]) -> SystemMessage | None:
    """The agent's system message followed by the state's archived instructions (`StateView.archived_instructions`)."""
    for message in instructions:
        own = message if own is None else combine_system(own, message)
    return own


def leading_system_ids(messages: list[Any]) -> set[str]:
    """Ids of the system messages the state starts with: the agent's instructions, which never leave the state."""
    ids: set[str] = set()
    for message in messages:
        if not isinstance(message, SystemMessage):
            break
        if message.id:
            ids.add(message.id)
    return ids


def carries_content(message: Any) -> bool:
    """False for an AI message with no text and no tool call, or a user message with no content at all (nothing
    to store or send)."""
    if isinstance(message, HumanMessage):
        content = message.content
        return bool(content) if isinstance(content, str) else any(_block_says(block) for block in content)
    if not isinstance(message, AIMessage):
        return True
    return bool(message.text.strip() or message.tool_calls or message.invalid_tool_calls or
                (isinstance(message.content, list) and message.content))


def _block_says(block: Any) -> bool:
    """A content block with something in it: text that is not empty, or any block that is not text."""
    if isinstance(block, str):
        return bool(block)
    return not (isinstance(block, dict) and block.get("type") == "text" and not block.get("text"))


def clip_oversized(messages: list[Any], max_bytes: int, *, warn: bool = False,
                   payloads: PayloadLimits | None = None) -> list[Any]:
    """`messages` with each one whose stored size exceeds `max_bytes` replaced by a clipped workmem dict (with
    `payloads`, a large tool result is measured as stored: its text is a payload, not part of the message).

    The others are returned as they are; a message that is invalid for another reason is left for the
    engine to reject with its usual error. `warn` logs one warning per clipped message.
    """
    out = []
    for message in messages:
        try:
            msg, body = prepare_message(message, max_bytes=NO_BYTE_CAP, payloads=payloads)
        except InvalidInput:
            out.append(message)
            continue
        if len(body) <= max_bytes:
            out.append(message)
            continue
        clipped = clip_to_cap(msg, max_bytes, stored=payloads is not None)
        if warn:
            log.warning("workmem: a %s message (id %s) of %d bytes exceeds max_message_bytes (%d); "
                        "a clipped copy is stored", clipped["role"], lc_id(msg),
                        clipped["meta"][CLIPPED_BYTES_META], max_bytes)
        out.append(clipped)
    return out


class NormalisedCache:
    """Normalised forms of the agent state's messages, reused across model calls: a checkpointed thread's
    whole history is aligned on every call, and normalising it is most of that cost. Keyed by LangChain
    id and everything normalisation reads, so an edited message (same id, new content) is normalised anew.
    Each form is kept with its encoding, so storing a new message does not normalise it again."""

    def __init__(self, size: int = NORMALISED_CACHE_SIZE) -> None:
        self._items: LRU[tuple[Any, ...], tuple[dict[str, Any], bytes]] = LRU(size)

    def normalize(self, message: Any, *, field: str = "message", max_bytes: int = NO_BYTE_CAP,
                  payloads: PayloadLimits | None = None) -> dict[str, Any]:
        """`normalize_message(message)`, from the cache when the same message was normalised before."""
        return self.prepare(message, field=field, max_bytes=max_bytes, payloads=payloads)[0]

    def prepare(self, message: Any, *, field: str = "message", max_bytes: int = NO_BYTE_CAP,
                payloads: PayloadLimits | None = None) -> tuple[dict[str, Any], bytes]:
        """`prepare_message(message)` (the form and its encoding), from the cache when it was prepared before."""
        key = _cache_key(message) if max_bytes == NO_BYTE_CAP and payloads is None else None
        if key is not None:
            hit = self._items.get(key)
            if hit is not None:
                return hit
        try:
            prepared = prepare_message(message, field=field, max_bytes=max_bytes, payloads=payloads)
        except InvalidInput:  # an agent run stores what it cannot refuse
            repaired, note = storable_form(message, record=_checkpointed_print(message, field))
            if note is None:
                raise
            log.warning("workmem: a %s message (id %r) cannot be stored as it is (%s); its storable form is "
                        "stored", getattr(message, "type", None) or type(message).__name__,
                        getattr(message, "id", None), note)
            prepared = prepare_message(repaired, field=field, max_bytes=max_bytes, payloads=payloads)
        if key is not None:
            self._items.put(key, prepared)
        return prepared


def _checkpointed_print(message: Any, field: str) -> dict[str, str]:
    """For a message with lone surrogates: the fingerprint of its copy after a checkpoint round trip (each a `?`),
    kept in the stored form's repair record — the state holds that copy at the thread's next run."""
    checkpointed = as_checkpointed(message)
    if checkpointed is None:
        return {}
    try:
        form = prepare_message(checkpointed, field=field, max_bytes=NO_BYTE_CAP)[0]
    except InvalidInput:
        return {}
    return {CHECKPOINTED_FP: form["meta"][FINGERPRINT_META]}


def _cache_key(message: Any) -> tuple[Any, ...] | None:
    try:
        return _key(message)
    except (RecursionError, ValueError):  # nesting too deep for repr: normalised anew each time
        return None


def _key(message: Any) -> tuple[Any, ...] | None:
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


def _in_state(error: InvalidInput, messages: list[Any], contentful: list[int]) -> InvalidInput:
    """`error` about a state message workmem cannot store, saying which one and how the thread goes on (the
    checkpointed state holds it, so every later run would meet it again)."""
    found = re.match(r"messages\[(\d+)\]", error.field)
    position = contentful[int(found.group(1))] if found and int(found.group(1)) < len(contentful) else None
    message_id = getattr(messages[position], "id", None) if position is not None else None
    where = f"the agent state's message {position} (id {message_id!r})" if position is not None else "a state message"
    return InvalidInput(error.field, error.value, f"{error.reason}; {where} cannot be stored: remove it "
                        "(RemoveMessage) or replace it (update_state) for the thread to go on")


def clipped_entry(stored: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """A stored message as the model may see it when it alone does not fit the window: clipped to `max_bytes`
    (head and tail kept), its stored copy untouched."""
    clipped = clip_to_cap({"role": stored["role"], "parts": stored["parts"], "meta": dict(stored.get("meta") or {})},
                          max_bytes)
    clipped = first_image_only(clipped, max_bytes)  # a token is at least a byte: the cap holds for tokens too
    if clipped["parts"] is stored["parts"]:
        return stored
    return {**stored, "parts": clipped["parts"], "meta": clipped["meta"], "tokens": message_tokens(clipped),
            "view_clipped": True}


class StateView:
    """The agent state's messages aligned with the stored session (what is stored, live, new, shown).

    `run_seq`: the session's next seq when the run started (messages stored from then on are the run's own);
    `stored_upto`: its next seq when this thread last stored (None: the thread never did, or is not
    checkpointed). Both None: every stored message counts as stored before the run.
    """

    def __init__(self, engine: WorkingMemoryEngine, session_id: str, messages: list[Any],
                 newest_archive: Callable[[], list[dict[str, Any]]], run_from: str | None = None,
                 cache: NormalisedCache | None = None, *, run_seq: int | None = None,
                 stored_upto: int | None = None,
                 archived_keys: Callable[[], ArchivedKeys | None] | None = None) -> None:
        self.messages = messages
        self._cache = cache if cache is not None else NormalisedCache(size=0)
        self.indexes, self._normalised, self.empty_replies = self._normalise(messages)
        exists = engine.session_exists(session_id)
        self.live = engine.live_messages(session_id) if exists else []
        last_input = next((i for i, m in enumerate(messages) if run_from and getattr(m, "id", None) == run_from),
                          None)
        first_output = (len(self.indexes) if last_input is None
                        else sum(1 for i in self.indexes if i <= last_input))
        # index into `messages` of the run's first own message (unknown: those stored by this run)
        self.first_output_index = len(messages) if last_input is None else last_input + 1
        self.alignment: Alignment = align([self._normalised[i] for i in self.indexes], self.live,
                                          newest_archive if exists else list, first_output,
                                          archived_keys if exists else None)
        self.shown = self.alignment.shown({m["seq"] for m in self.live})
        before_run = run_seq if run_seq is not None else float("inf")
        holds_prior = any(m["seq"] < before_run for m in self.alignment.stored.values())
        # The state decides the tail when it holds a message stored before the run, or when it is a checkpointed
        # thread that stored before (`stored_upto`): then what it no longer holds was removed or cleared
        # (`REMOVE_ALL_MESSAGES`) — or trimmed, being archived. Else a client sending only new messages sees every
        # live message.
        self.state_decides = holds_prior or stored_upto is not None
        self._run_from = run_from
        self.pinned = self._running_turn_message(run_from)

    def _normalise(self, messages: list[Any]) -> tuple[list[int], dict[int, dict[str, Any]], int]:
        """(indexes of the messages that count, their normalised forms by index, empty messages skipped). An empty
        model reply (no text, no tool call: cut or filtered output) or user message is nothing to store or send:
        skipped before validation, which would refuse it. workmem's own injections never count."""
        contentful = [i for i, m in enumerate(messages) if carries_content(m)]
        try:
            kept = clean_messages([messages[i] for i in contentful], max_bytes=NO_BYTE_CAP,
                                  normalize=self._cache.normalize)
        except InvalidInput as exc:
            raise _in_state(exc, messages, contentful) from exc
        indexes = [contentful[j] for j, _msg, _changed in kept]
        return indexes, {contentful[j]: msg for j, msg, _changed in kept}, len(messages) - len(contentful)

    def _running_turn_message(self, run_from: str | None) -> dict[str, Any] | None:
        """The running turn's user message when a commit archived it (it stays in view): an entry of the
        state's own message, or None while it is live, not stored yet, or not in the state."""
        new = set(self.alignment.new)
        for pos in range(len(self.indexes) - 1, -1, -1):
            index = self.indexes[pos]
            if run_from is not None and index >= self.first_output_index:
                continue
            message = self.messages[index]
            if getattr(message, "type", None) != "human":
                continue
            if pos in new or not getattr(message, "id", None) or self._is_live(pos, message.id):
                return None
            msg = self._normalised[index]
            return {**msg, "tokens": message_tokens(msg), "lc": message}
        return None

    def archived_instructions(self) -> list[SystemMessage]:
        """The system messages the state starts with (the agent's instructions, passed as messages), all of them in
        order, once a commit archived any: they go out with the system message on every call, as a system prompt
        does, and not in the tail (a system message after the memory's is refused by some providers)."""
        return [self.messages[self.indexes[pos]] for pos in self._folded()]

    def _folded(self) -> list[int]:
        """Positions of the state's leading system messages when one of them is archived (else none)."""
        leading = []
        for pos, index in enumerate(self.indexes):
            if not isinstance(self.messages[index], SystemMessage):
                break
            leading.append(pos)
        if not leading:
            return []
        new = set(self.alignment.new)
        return leading if any(pos not in new and pos not in self.shown for pos in leading) else []

    def pinned_tool_step(self, tools: frozenset[str]) -> list[dict[str, Any]]:
        """The newest call of one of `tools` in the state with its results, once a commit archived it: entries of
        an assistant message carrying only those calls and of their results (nothing while the call is live, not
        stored yet, or has no result in the state)."""
        if not tools:
            return []
        for index in range(len(self.messages) - 1, -1, -1):
            message = self.messages[index]
            calls = [c for c in getattr(message, "tool_calls", None) or [] if c.get("name") in tools]
            if not calls:
                continue
            new = {self.indexes[pos] for pos in self.alignment.new}
            pos = self.indexes.index(index) if index in self._normalised else None
            if not getattr(message, "id", None) or index in new or self._is_live(pos, message.id):
                return []
            ids = {c.get("id") for c in calls}
            results = [m for m in self.messages[index + 1:] if isinstance(m, ToolMessage) and m.tool_call_id in ids]
            if not results:
                return []
            step = [AIMessage(content="", tool_calls=calls, id=message.id), *results]
            return [{"role": "assistant" if isinstance(m, AIMessage) else "tool", "parts": [], "lc": m,
                     "tokens": message_tokens(self._cache.normalize(m))} for m in step]
        return []

    def _is_live(self, pos: int | None, message_id: str) -> bool:
        """Whether the state's message at `pos` is a live stored message: aligned with one (by id, or by fingerprint
        under another id: a replayed input gets a fresh id), or a live stored message has its LangChain id (the
        newest first: the running turn's user message is among them while it is live)."""
        return pos in self.shown or any(lc_id(m) == message_id for m in reversed(self.live))

    def new_messages(self) -> list[Any]:
        """The state's messages to store, in order."""
        return [self.messages[self.indexes[pos]] for pos in self.alignment.new]

    def new_for_storing(self, max_bytes: int, payloads: PayloadLimits) -> list[Any]:
        """`new_messages()` as an append stores them, each normalised once (the form the view aligned); one larger
        than `max_bytes` as stored is a clipped copy (one WARNING each)."""
        out = []
        for message in self.new_messages():
            msg, body = self._cache.prepare(message)
            ready = for_storage(msg, body, payloads, max_bytes)
            if ready.clipped:
                log.warning("workmem: a %s message (id %s) of %d bytes exceeds max_message_bytes (%d); a clipped copy "
                            "is stored", msg["role"], lc_id(msg), ready.msg["meta"][CLIPPED_BYTES_META], max_bytes)
            out.append(ready)
        return out

    def absorb(self, stored: list[dict[str, Any]]) -> None:
        """The view after `new_messages()` were stored as `stored` (one each, in order): the same alignment,
        those positions now stored and live (a fresh alignment would judge the run's own messages again)."""
        for pos, msg in zip(self.alignment.new, stored, strict=True):
            self.alignment.stored[pos] = msg
        self.alignment.new = []
        known = {m["seq"] for m in self.live}
        self.live = sorted([*self.live, *(m for m in stored if m["seq"] not in known)], key=lambda m: m["seq"])
        self.shown = self.alignment.shown({m["seq"] for m in self.live})
        self.pinned = self._running_turn_message(self._run_from)

    def context_entries(self, max_view_bytes: int, max_message_bytes: int,
                        hidden: Callable[[], set[int]]) -> list[Any]:
        """What the model may see besides the WM, in order: live stored messages and unstored ones (entries
        with `lc`). The state decides the tail when it holds a message stored before the run (live, or the
        newest archived one: a fork from an archived checkpoint), or was cleared; else, a client sending only
        new messages, every live one but the `hidden()` seqs. Messages over `max_view_bytes` are clipped when that
        is less than the store's `max_message_bytes`."""
        unstored_positions = self.alignment.new
        unstored = clip_oversized([self.messages[self.indexes[p]] for p in unstored_positions], max_view_bytes)
        entries = dict(zip(unstored_positions, pending_entries(unstored, max_bytes=NO_BYTE_CAP), strict=True))
        folded = self._folded()  # in the system message instead
        if folded:
            prints = {fingerprint_of(self._normalised[self.indexes[p]]) for p in folded}
            entries = {p: e for p, e in entries.items() if p not in folded}
        if not self.state_decides:
            hide = hidden() if self.live else set()
            shown = [m for m in self.live if m["seq"] not in hide] if hide else self.live
            if folded:
                shown = [m for m in shown if m.get("role") != "system" or fingerprint_of(m) not in prints]
            out = [*shown, *(entries[p] for p in sorted(entries))]
        else:
            out = [self.shown.get(p) or entries[p] for p in range(len(self.indexes))
                   if p not in folded and (p in self.shown or p in entries)]
        if max_view_bytes < max_message_bytes:
            return [entry if "lc" in entry else clipped_entry(entry, max_view_bytes) for entry in out]
        originals = self._originals()
        return [{**entry, **originals[entry["seq"]]} if "lc" not in entry and entry.get("seq") in originals
                else entry for entry in out]

    def _originals(self) -> dict[int, dict[str, Any]]:
        """A stored message the state holds is sent as the state's own object (its artifact, its metadata), unless
        the state holds it as a synopsis, or its stored copy was clipped in its text (too large to send whole): seq
        → `{"original": that object}`, with its `tokens` when the stored copy only dropped content blocks (a
        screenshot over `max_message_bytes`: the model gets the image the store could not keep)."""
        out: dict[int, dict[str, Any]] = {}
        for pos, stored in self.alignment.stored.items():
            index = self.indexes[pos]
            message = self.messages[index]
            if SYNOPSIS_FP in getattr(message, "additional_kwargs", {}):
                continue
            meta = stored.get("meta") or {}
            if CLIPPED_BYTES_META not in meta:
                out[stored["seq"]] = {"original": message}
            elif DROPPED_BLOCKS_META in meta and CLIP_MARK not in message_text(stored):
                out[stored["seq"]] = {"original": message, "tokens": message_tokens(self._normalised[index])}
        return out

    def shown_seqs(self) -> list[int]:
        """Seqs of the live stored messages the state holds."""
        return [m["seq"] for m in self.shown.values()]

    def hidden_changes(self, stored_seqs: list[int]) -> tuple[set[int], set[int]]:
        """(hide, unhide): live messages that came from an agent (they carry a LangChain id) and are no
        longer in the state, older than the newest one it holds or just stored; and those back in it. Only
        when the state decides the tail: a client sending only new messages hides nothing."""
        if not self.state_decides or not self.alignment.by_ids:
            return set(), set()  # a stateless client's history is partial: what it leaves out is not removed
        present = set(self.shown_seqs())
        newest = max([*present, *stored_seqs], default=0)
        hide = {m["seq"] for m in self.live if m["seq"] < newest and m["seq"] not in present and lc_id(m)}
        return hide, present
