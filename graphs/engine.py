"""`WorkingMemoryEngine`: the lifecycle API agents call, and the only way in to storage.

Every lifecycle method has an async twin (`aadd_messages`, `acommit`, …) that runs it in a worker thread;
the helpers behind them and the agent integration's readers (`memory_of`, `call_state`, `budget_for_trigger`,
`summary_of`, `shown_live`, `live_messages`, `archive_messages`, `hidden`, …) have none. Nothing outside this module
and `graphs/runner.py` reads `engine.storage` (tests/test_layering.py): the middleware, the CLI, the demo and the
eval use these methods, so a storage change stops here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workmem.graphs.agent.view import clip_oversized, clipped_entry
from workmem.graphs.context.assemble import (
    SUMMARY_PREFIX,
    SYSTEM_ADDITION,
    assemble_context,
    pending_entries,
    reserve_for_reply,
    validate_budget,
)
from workmem.graphs.context.call_state import SessionCalls, call_states, warn_capped_keep
from workmem.graphs.context.decision import DEFAULT_LOW_WATER, Plan, check_low_water, decide, figures_for
from workmem.graphs.context.injected import strip_injected
from workmem.graphs.context.search_results import MAX_CONTEXT, with_context
from workmem.graphs.context.session_memory import NO_MEMORY, MemoryCache, SessionMemory
from workmem.graphs.context.tool_results import (
    MAX_MATCHES,
    MAX_READ_TOKENS,
    agent_result,
    find_in,
    listing,
    parse_ref,
    read_window,
    result_part,
    with_preview,
    within_read_cap,
)
from workmem.graphs.lease import acquire, heartbeat
from workmem.graphs.runner import DEFAULT_KEEP_CHECKPOINTS, CommitRunner
from workmem.nodes.context import DEFAULT_CHUNK_TOKENS, DEFAULT_CLIP_TOKENS, CommitContext
from workmem.nodes.formatting import format_messages
from workmem.nodes.models import LazyModel, model_kwargs_setting, model_spec
from workmem.state.errors import (
    Anomaly,
    CommitInProgress,
    DamagedFile,
    InvalidInput,
    SessionNotFound,
    WorkmemError,
)
from workmem.state.forget import FORGET_TASK_PREFIX, checked_seqs
from workmem.state.index_checks import index_anomalies
from workmem.state.index_text import DIGEST_MARK, is_digest
from workmem.state.memory import MAX_MEMORY_BUDGET, MIN_MEMORY_BUDGET, memory_budget_for
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, message_text
from workmem.state.payloads import MAX_PAYLOAD_BYTES, PAYLOAD_BYTES, PayloadLimits
from workmem.state.redact import describe_error
from workmem.state.retention import (
    DEFAULT_TRIGGER,
    MESSAGES,
    Keep,
    Trigger,
    keep_from_args,
    resolve_keep,
    trigger_messages,
    trigger_tokens,
    trigger_value,
)
from workmem.state.search.search_hits import from_message
from workmem.state.storage import DELETE_TASK_PREFIX, open_storage
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW, count_tokens
from workmem.state.turns import DEFAULT_KEEP_RECENT, parse_turn_id, turn_number
from workmem.state.validation import require_bool, require_int, require_list, require_text

log = logging.getLogger("workmem.engine")
MAX_SEARCH_HITS = 12
EXPORT_BATCH = 500  # seqs `iter_messages` reads at a time
MAX_SETTING = 10_000_000
MIN_CLIP_TOKENS = 64  # the shortest a message is clipped to in the transcript of a model's trigger commit
TRIGGER_CLIP_SHARE = 256  # a model's trigger commit clips each message to trigger / this (formatting keeps a user's
# message and a payload's synopsis longer: `formatting._message_clip`)
_SYSTEM_NOTE_TOKENS = count_tokens(SYSTEM_ADDITION)


def _async_twin(method: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """`a<name>`: the same method, awaited in a worker thread (file and database I/O never block the loop)."""

    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__name__ = twin.__qualname__ = name or f"a{method.__name__}"
    twin.__doc__ = f"Async twin of `{method.__name__}` (runs in a worker thread). {method.__doc__.splitlines()[0]}"
    return twin


class WorkingMemoryEngine:
    """Stores sessions append-only, commits them into working memory, and assembles model context.

    Retention: `keep` is the raw tail a background commit leaves, `("messages", 10)` by default, or
    `("turns", n)` / `("tokens", n)`; `keep_recent_count=n` is the older spelling of `("messages", n)`.
    Trigger: `trigger=("tokens", n)` or `("fraction", f)` of the model's input limit (default
    `("fraction", 0.5)` of `context_window`; `commit_token_threshold=n` is `("tokens", n)`). A commit
    starts when what the next call carries reaches the trigger and at least `min_commit_tokens`
    (default a quarter of the trigger) lie outside the keep window.
    Memory budget: a hard bound on the rendered WM, `memory_budget` tokens (400 … 10 105), or by default
    taken from the trigger the commit was started for: 400 up to an 8 000-token trigger, plus a fifth of
    the trigger beyond; the full table from a 56 525-token trigger on (so at the default trigger).
    Sections past their share spill their oldest items into the archive (`state.memory.budgets`).
    Storage: files under `root`, or PostgreSQL for many replicas with `database_url=` (in schema
    `database_schema`, default `WORKMEM_DATABASE_SCHEMA` or `workmem`; see `open_storage` for the precedence).
    Tool results over `payload_bytes` (64 KiB) are stored whole as content-addressed payloads, up to
    `max_payload_bytes` (256 MiB; beyond, head and tail around a marker); other messages are capped at
    `max_message_bytes` (1 MiB).
    `create=False` opens existing data only (a reader such as the CLI's): a root or schema without workmem data is
    `DataRootNotFound`, and nothing is created.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        model: Any = None,
        *,
        keep: Keep | None = None,
        keep_recent_count: int | None = None,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        trigger: Trigger | int | None = None,
        commit_token_threshold: int | None = None,
        min_commit_tokens: int | None = None,
        memory_budget: int | None = None,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        clip_tokens: int = DEFAULT_CLIP_TOKENS,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        payload_bytes: int = PAYLOAD_BYTES,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        durable: bool = True,
        max_workers: int = 2,
        keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
        database_url: str | None = None,
        database_schema: str | None = None,
        model_kwargs: dict[str, Any] | None = None,
        create: bool = True,
    ) -> None:
        self.context_window = _positive_int("context_window", context_window)
        self.keep = keep_from_args(keep, keep_recent_count, default=(MESSAGES, DEFAULT_KEEP_RECENT),
                                   input_limit=self.context_window)
        if commit_token_threshold is not None:
            if trigger is not None:
                raise InvalidInput("trigger", trigger, "give trigger or commit_token_threshold, not both")
            self.trigger = trigger_value(commit_token_threshold, "commit_token_threshold")
        else:
            self.trigger = DEFAULT_TRIGGER if trigger is None else trigger_value(trigger)
        self.min_commit_tokens = (None if min_commit_tokens is None
                                  else require_int("min_commit_tokens", min_commit_tokens, min=0, max=MAX_SETTING))
        self.memory_budget = (None if memory_budget is None else
                              require_int("memory_budget", memory_budget, min=MIN_MEMORY_BUDGET,
                                                                   max=MAX_MEMORY_BUDGET))
        self._memories = MemoryCache()  # per session: its newest archive's working memory, read once
        self._calls = call_states()  # per session: what its model calls remember (the breaker, a learned limit)
        self.max_message_bytes = _positive_int("max_message_bytes", max_message_bytes)
        self.payload_limits = PayloadLimits(payload_bytes, max_payload_bytes)
        # Checked now (a bad model= or WORKMEM_MODEL fails before anything touches disk), built at the first commit.
        self.clip_tokens = _positive_int("clip_tokens", clip_tokens)
        spec = model_spec(model)
        if model_kwargs is not None and not isinstance(spec, str):
            raise InvalidInput("model_kwargs", model_kwargs,
                               "applies to model strings; configure the model object itself")
        # the offline model takes no keywords: WORKMEM_MODEL_KWARGS, meant for a provider's model, is not read for it
        offline = spec == "extractive" and model_kwargs is None
        self.model = LazyModel(spec, model_kwargs_setting(model_kwargs) if isinstance(spec, str) and not offline
                               else None)
        context = CommitContext(chunk_tokens=_positive_int("chunk_tokens", chunk_tokens),
                                clip_tokens=_positive_int("clip_tokens", clip_tokens), durable=durable)
        workers = _positive_int("max_workers", max_workers)
        kept = require_int("keep_checkpoints", keep_checkpoints, min=0, max=MAX_SETTING)
        require_bool("durable", durable)
        require_bool("create", create)
        self.storage = open_storage(root, database_url=database_url, database_schema=database_schema, durable=durable,
                                    max_message_bytes=max_message_bytes, payload_limits=self.payload_limits,
                                    create=create)
        self.root = getattr(self.storage, "root", None)
        self.runner = CommitRunner(self.storage, context, self.model, max_workers=workers, keep_checkpoints=kept)
        try:
            self.storage.finish_deletes()  # a delete a crash interrupted is finished before anything else
        except DamagedFile as exc:  # a damaged index: reads still work; `workmem reindex` repairs it
            log.warning("could not finish an interrupted delete: %s", exc)
        self._finish_forgets()  # so is a forget (files: its intent is left in sessions/)

    @property
    def keep_recent_count(self) -> int | None:
        """The messages count of `keep` (None when the engine keeps turns or tokens)."""
        return self.keep[1] if self.keep[0] == MESSAGES else None

    @property
    def commit_token_threshold(self) -> int:
        """The trigger in tokens for a model whose input limit is `context_window`."""
        return trigger_tokens(self.trigger, self.context_window)

    # -- storing ----------------------------------------------------------------------------------

    def add_messages(self, session_id: str, messages: list[Any]) -> list[dict[str, Any]]:
        """Validate every message, then append the batch to the session (creating it if new).

        Idempotent by id: a message whose LangChain id and fingerprint equal a live or newest-archived one's is
        not stored again, the stored one is returned in its place (so a retry is safe; give messages ids).
        Once the batch is stored this succeeds: the keep bookkeeping after it is best effort, logged."""
        stored = self.storage.sessions.append(session_id, messages)
        if stored:
            try:
                self._meta_with_keep(session_id, self.keep)
            except (OSError, WorkmemError) as exc:  # the batch is stored: a raise would make a retry store it again
                log.warning("session %r: stored %d message(s), but refreshing the keep bookkeeping failed (%s); "
                            "it is redone at the next commit", session_id, len(stored), describe_error(exc))
        return stored

    def _meta_with_keep(self, session_id: str, keep: Keep) -> dict[str, Any]:
        """Session meta with pending_tokens counted for `keep`."""
        meta = self.storage.sessions.meta(session_id)
        if tuple(meta.get("keep") or ()) != keep:
            meta = self.storage.sessions.set_keep(session_id, keep)
        return meta

    def after_turn(self, session_id: str, messages: list[Any], pre_prompt_count: int = 0, *,
                   keep: Keep | None = None, trigger: Trigger | int | None = None, input_limit: int | None = None,
                   tool_tokens: int = 0, low_water: float = DEFAULT_LOW_WATER, wait: bool = False) -> dict[str, Any]:
        """Store `messages[pre_prompt_count:]` minus what workmem injected; when a commit is due start one — in the
        background, or before returning with `wait=True` → {stored, pending_tokens, task_id, commit}.

        A commit is due by the middleware's rule (`graphs.context.decision`), on the call the stored session makes
        next (`assemble`: the system note, the working memory, the live messages shown, and `tool_tokens` — the
        schemas of the tools every call carries): it reaches the trigger with at least a quarter of it (or
        `min_commit_tokens`) to cover, and the commit keeps at most `low_water` × the trigger for the call after
        it. `keep` / `trigger` override the engine's for this call; `input_limit` is the model's input limit a
        fraction trigger is taken of (default `context_window`).
        """
        messages = require_list("messages", messages)
        require_int("pre_prompt_count", pre_prompt_count, min=0, max=len(messages))
        require_bool("wait", wait)
        require_int("tool_tokens", tool_tokens, min=0, max=MAX_SETTING)
        low_water = check_low_water(low_water)
        limit = self.context_window if input_limit is None else _positive_int("input_limit", input_limit)
        keep = self.keep if keep is None else keep_from_args(keep, None, default=self.keep, input_limit=limit)
        rule = _TurnRule(keep, self.trigger if trigger is None else trigger_value(trigger), limit, tool_tokens,
                         float(low_water))
        new = strip_injected(list(messages[pre_prompt_count:]), offset=pre_prompt_count,
                             max_bytes=self.max_message_bytes, payloads=self.payload_limits)
        stored = self.storage.sessions.append(session_id, new) if new else []
        if not stored and not self.storage.sessions.session_exists(session_id):
            return {"stored": 0, "pending_tokens": 0, "task_id": None, "commit": None, "messages": []}
        meta = self._meta_with_keep(session_id, keep)
        plan = self._plan_next_call(session_id, rule, sync=wait)
        commit = None
        if plan.action == "commit":
            commit = (self._commit_for_turn(session_id, plan.keep.keep, rule) if wait
                      else self._commit_in_background(session_id, plan.keep.keep, rule))
        return {"stored": len(stored), "pending_tokens": meta["pending_tokens"],
                "task_id": commit["task_id"] if commit else None, "commit": commit, "messages": stored}

    def budget_for_trigger(self, threshold: int) -> int:
        """The memory budget of a commit started for a trigger of `threshold` tokens: the engine's
        `memory_budget`, else the trigger's (`state.memory.memory_budget_for`)."""
        return self.memory_budget if self.memory_budget is not None else memory_budget_for(threshold)

    def _plan_next_call(self, session_id: str, rule: _TurnRule, *, sync: bool) -> Plan:
        """The commit decision on the call the stored session makes next (the middleware's rule); the session's
        call counters are updated, and a keep the low-water mark caps is warned about once."""
        threshold = rule.threshold
        memory = self.memory_of(session_id)
        live = self.storage.sessions.live_messages(session_id)
        hidden = self.storage.sessions.hidden(session_id) if live else set()
        shown = sum(m["tokens"] for m in live if m["seq"] not in hidden)
        fixed = _SYSTEM_NOTE_TOKENS + rule.tool_tokens
        floor = self.min_commit_tokens if self.min_commit_tokens is not None else threshold // 4
        figures = figures_for(
            live, call_tokens=fixed + memory.tokens + shown, fixed_tokens=fixed + self.budget_for_trigger(threshold),
            threshold=threshold, floor=floor, input_limit=rule.limit, reserve=reserve_for_reply(rule.limit),
            keep=resolve_keep(rule.keep, rule.limit), low_water=rule.low_water,
            max_messages=trigger_messages(rule.trigger))
        calls = self.call_state(session_id)
        plan = decide(figures, calls.counters, sync=sync)
        calls.counters = plan.counters
        if plan.action == "commit":
            warn_capped_keep(session_id, calls, figures.keep, plan.keep)
        return plan

    def _commit_for_turn(self, session_id: str, keep: Keep, rule: _TurnRule) -> dict[str, Any]:
        """A synchronous commit `after_turn` decided; when it completes, the next turn says whether it helped."""
        result = self._start_for_trigger(session_id, keep, rule.threshold, wait=True)
        if result.get("status") == "completed":
            calls = self.call_state(session_id)
            calls.counters = replace(calls.counters, check_next=True)
        return result

    def memory_of(self, session_id: str) -> SessionMemory:
        """The working memory the session's next call carries, with its tokens and commit boundary (read once per
        archive; empty for a session not created yet or before its first commit)."""
        try:
            meta = self.storage.sessions.meta(session_id)
        except SessionNotFound:
            return NO_MEMORY
        return self._memory_for(session_id, meta)

    def _memory_for(self, session_id: str, meta: dict[str, Any]) -> SessionMemory:
        return self._memories.get(session_id, meta, lambda: self.working_memory(session_id))

    def call_state(self, session_id: str) -> SessionCalls:
        """What the session's model calls remember between them: the loop breaker's counters, an input limit a
        context overflow taught, a background commit to report (bounded: sessions at rest are evicted first)."""
        return self._calls.of(session_id)

    def _commit_in_background(self, session_id: str, keep: Keep, rule: _TurnRule) -> dict[str, Any]:
        return self._start_for_trigger(session_id, keep, rule.threshold, wait=False,
                                       then=lambda result: self._commit_again_if_due(session_id, rule, result))

    def _start_for_trigger(self, session_id: str, keep: Keep, threshold: int, *, wait: bool,
                           then: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """A commit a trigger of `threshold` tokens started: its memory budget and transcript clip follow it."""
        return self.runner.start(session_id, keep, wait=wait, then=then, memory_budget=self.budget_for_trigger(
            threshold), clip_tokens=self.clip_for_trigger(threshold))

    def _commit_again_if_due(self, session_id: str, rule: _TurnRule, finished: dict[str, Any]) -> None:
        """Turns stored while a background commit ran (and found it busy) get their commit now."""
        if finished.get("status") != "completed":
            return  # a failed commit is resumed by the next one; retrying here could loop
        self._meta_with_keep(session_id, rule.keep)
        plan = self._plan_next_call(session_id, rule, sync=False)
        if plan.action == "commit":
            self._commit_in_background(session_id, plan.keep.keep, rule)

    # -- committing -------------------------------------------------------------------------------

    def commit(self, session_id: str, keep_recent_count: int | None = None, wait: bool = True, *,
               keep: Keep | None = None,
               progress: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Compress the session's older messages into working memory → {status, task_id, archive_id, reason}.

        The raw tail kept is `keep` (`("messages", n)`, `("turns", n)` or `("tokens", n)`), or
        `keep_recent_count` messages; default none (everything live is committed). A commit already
        running for the session is returned with status `busy` instead of a second one.
        `progress(node, update)` is called after each node of a synchronous commit (the CLI's progress bar).
        """
        chosen = keep_from_args(keep, keep_recent_count, default=(MESSAGES, 0), input_limit=self.context_window)
        require_bool("wait", wait)
        self.storage.sessions.meta(session_id)  # validates the id and raises SessionNotFound for unknown sessions
        return self.runner.start(session_id, chosen, wait=wait, memory_budget=self.budget_for_trigger(
            self.commit_token_threshold), progress=progress if wait else None)

    def commit_for_call(self, session_id: str, keep: Keep, threshold: int, *, wait: bool) -> dict[str, Any]:
        """The commit an agent's model call decided: `keep` as the call's low-water mark chose it, the
        memory budget of the call's trigger; synchronous, or in the background (`wait=False`)."""
        chosen = keep_from_args(keep, None, default=self.keep, input_limit=self.context_window)
        require_bool("wait", wait)
        return self._start_for_trigger(session_id, chosen, _positive_int("threshold", threshold), wait=wait)

    def clip_for_trigger(self, threshold: int) -> int:
        """How long one message may be in the transcript of a commit started for a trigger of `threshold` tokens.
        A model's: 1/256 of the trigger (a commit reads the gist of each message; the archive keeps every message
        whole, and `archive_search` reads it there), at least 64 tokens (a user's message: 256, see
        `formatting.USER_CLIP_TOKENS`), at most the engine's `clip_tokens`. The extractive model reads for free:
        the engine's `clip_tokens`, as an explicit commit does."""
        if self.model.reads_for_free:
            return self.clip_tokens
        return min(self.clip_tokens, max(MIN_CLIP_TOKENS, threshold // TRIGGER_CLIP_SHARE))

    def task(self, task_id: str) -> dict[str, Any] | None:
        """The commit task row (status, error, attempts, archive id, result), or None."""
        require_text("task_id", task_id)
        return self.storage.tasks.get_task(task_id)

    def join_commits(self, session_id: str | None = None) -> None:
        """Block until the background commits this engine started — of `session_id`, or of every session — have
        finished, with any follow-up commit they started (`ajoin_commits` awaits the same)."""
        if session_id is not None:
            require_text("session_id", session_id)
        self.runner.wait(session_id)

    def wait(self) -> None:
        """Block until every background commit started by this engine has finished (as `join_commits()`)."""
        self.runner.wait()

    def resume_all(self) -> list[dict[str, Any]]:
        """Resume every unfinished commit under this root."""
        return self.runner.resume_all()

    def compact(self, session_id: str) -> dict[str, Any]:
        """Commit everything now (keep 0) and report the context tokens it freed.

        A background commit of this engine that is still running is waited for first.
        """
        if not self.storage.sessions.live_messages(session_id):
            return _compact_result(False, "no_messages", None, None, 0, 0)
        before = self.context_tokens(session_id)
        result = self.commit(session_id, keep_recent_count=0, wait=True)
        if result["status"] == "busy":
            self.wait()
            result = self.commit(session_id, keep_recent_count=0, wait=True)
        compacted = result["status"] == "completed"
        summary = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown")
        out = _compact_result(compacted, result.get("reason") or result["status"], summary,
                              result.get("archive_id") if compacted else None, before,
                              self.context_tokens(session_id))
        out["ok"] = result["status"] in ("completed", "skipped")
        out["task_id"] = result.get("task_id")
        return out

    def context_tokens(self, session_id: str) -> int:
        """Tokens of the summary message plus every live message (what an unbounded context would hold)."""
        wm = (self.working_memory(session_id) or {}).get("working_summary", {}).get("markdown", "")
        summary = count_tokens(SUMMARY_PREFIX + wm) if wm.strip() else 0
        return summary + sum(m["tokens"] for m in self.storage.sessions.live_messages(session_id))

    # -- reading ----------------------------------------------------------------------------------

    def assemble(self, session_id: str, token_budget: int | None = None, *,
                 pending: list[Any] | None = None) -> dict[str, Any]:
        """LangChain messages for the next model call (system addition, WM summary, live tail) + stats.

        `token_budget` defaults to the engine's `context_window`. `pending`: messages not stored yet (an
        agent's current turn), sent before the WM in the budget order; with `pending` a session that
        does not exist yet is simply empty. Hidden messages are left out.
        """
        budget = self.context_window if token_budget is None else validate_budget(token_budget)
        pending = require_list("pending", pending) if pending is not None else None
        exists = self.storage.sessions.session_exists(session_id) if pending is not None else True
        wm, archives_total = self.summary_of(session_id) if exists else ("", 0)
        live = self.shown_live(session_id) if exists else []
        try:
            return assemble_context(live, wm, archives_total, budget, self._pending(pending, self.max_message_bytes))
        except InvalidInput as exc:
            if exc.field != "token_budget":
                raise
        # The newest turn alone does not fit (one huge tool result, say): its largest messages are clipped, head
        # and tail, as the middleware shows them (at most half the window each; a token is at least one byte).
        cap = max(1024, (budget - reserve_for_reply(budget)) // 2)
        return assemble_context([clipped_entry(m, cap) for m in live], wm, archives_total, budget,
                                self._pending(clip_oversized(pending, cap) if pending else pending, cap))

    def _pending(self, pending: list[Any] | None, max_bytes: int) -> list[dict[str, Any]]:
        """Entries of messages not stored yet, for `assemble_context`."""
        return pending_entries(pending, max_bytes=max_bytes, payloads=self.payload_limits) if pending else []

    def summary_of(self, session_id: str) -> tuple[str, int]:
        """The WM markdown of the latest archive ('' before the first commit) and the archive count."""
        memory = self.memory_of(session_id)
        return memory.markdown, memory.archives_total

    def kept_tail_end(self, session_id: str) -> int:
        """The seq of the last message the newest commit kept live (0 before the first commit): the commit
        boundary at which older tool results of the kept tail are shown as their synopsis."""
        return self.memory_of(session_id).tail_end

    def read_tool_result(self, session_id: str, ref: Any = None, *, offset: Any = None, limit: Any = None,
                         query: Any = None, max_tokens: int = MAX_READ_TOKENS) -> dict[str, Any]:
        """A stored tool result read by reference, live or archived: a window of it
        (`offset`, `limit` in characters, at most `max_tokens` tokens), the windows around a literal `query` in
        it — or, without `ref`, in every tool result of the session — or, with neither, the list of the
        session's results over `max_tokens`."""
        max_tokens = _positive_int("max_tokens", max_tokens)
        if not self.session_exists(session_id):
            raise SessionNotFound(session_id)
        if ref is None:
            # the stored records only: a listing never reads a payload, a search reads one result at a time
            records = self.storage.sessions.messages_in_range(session_id, 1, max(self.next_seq(session_id) - 1, 1),
                                                              texts=False)
            if query is None:
                return {"results": listing(records, max_tokens)}
            require_text("query", query)
            matches: list[dict[str, Any]] = []
            for record in records:
                if len(matches) >= MAX_MATCHES or not agent_result(record):
                    continue
                whole = self.storage.sessions.messages_in_range(session_id, record["seq"], record["seq"])
                matches.extend(find_in(whole[0], query))
            return {"query": query, "matches": within_read_cap(matches[:MAX_MATCHES], max_tokens)}
        seq = parse_ref(ref)
        found = self.storage.sessions.messages_in_range(session_id, seq, seq) if seq < self.next_seq(session_id) else []
        if not found or result_part(found[0]) is None:
            raise InvalidInput("ref", ref, "names no stored tool result of this session")
        if query is not None:
            return {"query": query, "matches": within_read_cap(find_in(found[0], query), max_tokens)}
        return read_window(found[0], offset, limit, max_tokens)

    def shown_live(self, session_id: str) -> list[dict[str, Any]]:
        """The live messages a model may be shown: all but the hidden ones, oldest first."""
        live = self.storage.sessions.live_messages(session_id)
        hidden = self.storage.sessions.hidden(session_id) if live else set()
        return [m for m in live if m["seq"] not in hidden] if hidden else live

    # -- what the agent integration reads and records (so nothing above the engine knows the storage) --

    def session_exists(self, session_id: str) -> bool:
        """Whether the session has been created (by an append)."""
        return self.storage.sessions.session_exists(session_id)

    def live_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Every live (not yet archived) stored message, hidden ones included, oldest first."""
        return self.storage.sessions.live_messages(session_id)

    def archive_messages(self, session_id: str, archive_id: str) -> list[dict[str, Any]]:
        """The stored messages one archive covers, oldest first."""
        return self.storage.sessions.archive_messages(session_id, archive_id)

    def list_archives(self, session_id: str) -> list[dict[str, Any]]:
        """`{archive_id, abstract, start_seq, end_seq}` of every complete archive, oldest first."""
        return self.storage.sessions.list_archives(session_id)

    def hidden(self, session_id: str) -> set[int]:
        """Live seqs an agent's state no longer holds (left out of contexts and commit transcripts)."""
        return self.storage.sessions.hidden(session_id)

    # -- listing and exporting (the command line's readers) -----------------------------------------

    def read_archive(self, session_id: str, archive_id: str) -> dict[str, Any]:
        """One complete archive object (`source_turn_range`, `abstract`, sizes, model, route, guard notes);
        `ArchiveNotFound` for any other id."""
        require_text("archive_id", archive_id)
        return self.storage.sessions.read_archive(session_id, archive_id)

    def session_location(self, session_id: str) -> str:
        """Where the session's data lives, for people: its folder on files, its row and database on PostgreSQL."""
        return self.storage.sessions.location(session_id)

    def list_tasks(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Commit tasks, oldest first — every session's, or one's (`SessionNotFound` for an unknown one):
        {task_id, session_id, archive_id, status, error, attempts (resumes), created_at, updated_at, result}."""
        if session_id is not None:
            self.storage.sessions.meta(session_id)
        return self.storage.tasks.list_tasks(session_id=session_id)

    def holds_file(self, path: str | os.PathLike[str]) -> bool:
        """Whether `path` is one of workmem's own files in the data root (under `sessions/`, or a database): what an
        export must never replace. Always False on PostgreSQL."""
        return self.storage.holds_file(Path(path))

    def session_ids(self) -> list[str]:
        """The id of every stored session, as given (nothing else of a session is read)."""
        return list(self.storage.sessions.list_sessions())

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every stored session, by id: {session_id (as given), live_messages, archived_messages, commits,
        last_activity (the newest append or commit, ISO 8601)}."""
        found = []
        for session_id in self.session_ids():
            try:
                meta = self.storage.sessions.meta(session_id)
            except SessionNotFound:  # deleted since it was listed
                continue
            except (WorkmemError, OSError) as exc:  # one damaged session never hides the others: listed so
                found.append({"session_id": session_id, "live_messages": None, "archived_messages": None,
                              "commits": None, "last_activity": None, "damaged": str(exc)})
                continue
            found.append(session_summary(meta))
        return found

    def iter_messages(self, session_id: str, *, batch: int = EXPORT_BATCH) -> Iterator[dict[str, Any]]:
        """Every stored message of the session, archived and live, in seq order, each tool result whole (its
        payload inline); read `batch` seqs at a time, so a long session is never held whole.
        `SessionNotFound` is raised here, before the first message."""
        batch = _positive_int("batch", batch)
        return self._messages_by_batch(session_id, self._newest_seq(session_id), batch)

    def _newest_seq(self, session_id: str) -> int:
        """The newest stored seq: the meta's count, unless the live count and the newest archive cannot reach it
        (a `next_seq` set far ahead by hand, which `check` reports) — then the newest seq actually stored, so an
        export never walks billions of empty ranges."""
        meta = self.storage.sessions.meta(session_id)
        last, end = meta["total_message_count"], (meta.get("last_archive") or {}).get("end_seq") or 0
        if last <= end + meta["message_count"]:
            return last
        live = self.storage.sessions.live_messages(session_id, texts=False)
        ends = [a["end_seq"] for a in self.storage.sessions.list_archives(session_id)]
        return min(last, max([*(m["seq"] for m in live[-1:]), *ends], default=0))

    def _messages_by_batch(self, session_id: str, last: int, batch: int) -> Iterator[dict[str, Any]]:
        for start in range(1, last + 1, batch):
            yield from self.storage.sessions.messages_in_range(session_id, start, min(start + batch - 1, last))

    async def aiter_messages(self, session_id: str, *, batch: int = EXPORT_BATCH) -> AsyncIterator[dict[str, Any]]:
        """Async twin of `iter_messages` (each batch is read in a worker thread)."""
        batch = _positive_int("batch", batch)
        last = await asyncio.to_thread(self._newest_seq, session_id)
        for start in range(1, last + 1, batch):
            stop = min(start + batch - 1, last)
            for message in await asyncio.to_thread(self.storage.sessions.messages_in_range, session_id, start, stop):
                yield message

    def set_hidden(self, session_id: str, hide: set[int], unhide: set[int]) -> set[int]:
        """Hide and unhide live seqs (the log itself is unchanged); returns the hidden set."""
        return self.storage.sessions.set_hidden(session_id, hide, unhide)

    def next_seq(self, session_id: str) -> int:
        """The seq the session's next stored message gets (1 for a session not created yet)."""
        try:
            return self.storage.sessions.meta(session_id)["next_seq"]
        except SessionNotFound:
            return 1

    def archive_search(self, session_id: str, query: str, archive_id: str | None = None,
                       limit: int = MAX_SEARCH_HITS, *, context: int = 0) -> list[dict[str, Any]]:
        """Literal, ranked search of the archive → ≤ 12 hits {archive_id, seq, turn_id, role, content, match}.

        `match` says what a hit is: `exact` (its own text matched a query word) or `neighbour` (found only
        through a match near it), as `search_hits` defines them; `search_hits.match_counts` counts them apart.
        Spilled working-memory items are hits too: role `memory`, seq and turn_id None, with their
        `section`. `context=n` (0-3) gives each message hit a `context` list: the n messages before and after.
        """
        require_text("query", query)
        require_int("limit", limit, min=1, max=MAX_SEARCH_HITS)
        require_int("context", context, min=0, max=MAX_CONTEXT)
        self.storage.sessions.meta(session_id)  # SessionNotFound for unknown sessions
        if archive_id is not None:
            self.storage.sessions.read_archive(session_id, archive_id)  # ArchiveNotFound for unknown ids
        hits = self._windows_of_digests(session_id, query,
                                        self.storage.search.search(session_id, query, archive_id=archive_id,
                                                                   limit=limit))
        if not context:
            return hits
        return with_context(hits, context, lambda lo, hi: self.storage.sessions.messages_in_range(session_id, lo, hi))

    def _windows_of_digests(self, session_id: str, query: str, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Hits on a long message (the index holds a digest of it) show the window around the match in the
        message itself."""
        for hit in hits:
            if is_digest(hit["content"]) and hit.get("seq") is not None:
                found = self.storage.sessions.messages_in_range(session_id, hit["seq"], hit["seq"])
                hit["content"] = (from_message(hit["content"], message_text(found[0]), query) if found
                                  else hit["content"][len(DIGEST_MARK):])
        return hits

    def archive_expand(self, session_id: str, archive_id: str | None = None, *,
                       start_seq: int | None = None, end_seq: int | None = None,
                       start_turn_id: str | None = None, end_turn_id: str | None = None,
                       previews: bool = False) -> dict[str, Any]:
        """An archive's abstract and its messages as text; or any seq range (`end_seq` defaults to `start_seq`), or
        turn range, of the session. `previews`: a tool result stored as a payload shows its stored preview and how
        to read it whole, its payload never read — memory bounded by the messages, not their payloads (what the
        archive tool and `workmem expand` show)."""
        require_bool("previews", previews)
        texts = not previews
        ranges = [v is not None for v in (start_seq, end_seq, start_turn_id, end_turn_id)]
        if archive_id is not None:
            if any(ranges):
                raise InvalidInput("archive_id", archive_id, "give an archive id or a range, not both")
            archive = self.storage.sessions.read_archive(session_id, archive_id)
            messages = self.storage.sessions.archive_messages(session_id, archive_id, texts=texts)
            covered = archive.get("source_turn_range") or {}
            return _expansion(archive["archive_id"], archive.get("abstract", ""), messages,
                              (covered.get("start_seq"), covered.get("end_seq")))
        if start_turn_id is not None or end_turn_id is not None:
            if start_seq is not None or end_seq is not None:
                field, value = ("start_seq", start_seq) if start_seq is not None else ("end_seq", end_seq)
                raise InvalidInput(field, value, "give a seq range or a turn range, not both")
            first = parse_turn_id(start_turn_id, "start_turn_id")
            last = parse_turn_id(end_turn_id if end_turn_id is not None else start_turn_id, "end_turn_id")
            if last < first:
                raise InvalidInput("end_turn_id", end_turn_id, f"must not come before start_turn_id ({start_turn_id})")
            messages = self._turn_messages(session_id, first, last, texts)
            if not messages:  # as a seq past the last message is: an empty range is a wrong one, not an answer
                raise InvalidInput("start_turn_id", start_turn_id, f"no message of the session is in turns t{first}–"
                                                                   f"t{last} (past its last turn?)")
            return _expansion(None, "", messages)
        end_seq = start_seq if end_seq is None else end_seq  # one message, as a turn range without its end
        for field, value in (("start_seq", start_seq), ("end_seq", end_seq)):
            require_int(field, value, min=1)
        first_seq, last_seq = int(start_seq or 0), int(end_seq or 0)
        if last_seq < first_seq:
            raise InvalidInput("end_seq", end_seq, f"must be >= start_seq ({start_seq})")
        newest = self.storage.sessions.meta(session_id)["total_message_count"]
        if first_seq > newest:
            raise InvalidInput("start_seq", start_seq, f"past the session's last message (seq {newest})")
        return _expansion(None, "", self.storage.sessions.messages_in_range(session_id, first_seq, last_seq,
                                                                             texts=texts),
                          (first_seq, min(last_seq, newest)))

    def _turn_messages(self, session_id: str, first: int, last: int, texts: bool = True) -> list[dict[str, Any]]:
        """Messages of turns first..last: from the archives whose turn range overlaps, then the live file."""
        out: list[dict[str, Any]] = []
        for entry in self.storage.sessions.list_archives(session_id):
            rng = self.storage.sessions.read_archive(session_id, entry["archive_id"]).get("source_turn_range", {})
            lo, hi = turn_number(rng.get("start_turn_id")), turn_number(rng.get("end_turn_id"))
            if lo <= last and hi >= first:
                out.extend(self.storage.sessions.archive_messages(session_id, entry["archive_id"], texts=texts))
        out.extend(self.storage.sessions.live_messages(session_id, texts=texts))
        seen: set[int] = set()
        picked = []
        for msg in out:
            if first <= turn_number(msg["turn_id"]) <= last and msg["seq"] not in seen:
                seen.add(msg["seq"])
                picked.append(msg)
        return sorted(picked, key=lambda m: m["seq"])

    def working_memory(self, session_id: str) -> dict[str, Any] | None:
        """The latest complete archive object (with the WM markdown), or None before the first commit."""
        return self.storage.sessions.last_complete_archive(session_id)

    def delete_session(self, session_id: str) -> dict[str, Any]:
        """Delete a session: its files, full-text rows, tasks and checkpoint threads (Studio's too).

        Refused with `CommitInProgress` while a commit holds the session's lease. Crash-safe: the
        directory becomes a tombstone first, and an engine that finds one finishes the delete. The id
        can be used again at once; the session then starts at seq 1.
        """
        if not self.storage.sessions.session_exists(session_id):  # validates the id; never reads a damaged file
            raise SessionNotFound(session_id)
        lease = f"{DELETE_TASK_PREFIX}{uuid.uuid4().hex}"
        holder = acquire(self.storage.tasks, session_id, lease, self.runner.owner, ttl=self.runner.lease_ttl)
        if holder is not None:
            raise CommitInProgress(session_id, holder)
        try:
            self.storage.delete_session(session_id)
        finally:
            self.storage.tasks.release_lease(session_id, lease)
        self._memories.drop(session_id)
        self._calls.drop(session_id)
        return {"deleted": True, "session_id": session_id}

    # -- forgetting (privacy) -----------------------------------------------------------------------

    def forget_messages(self, session_id: str, seqs: list[int]) -> dict[str, Any]:
        """Remove the verbatim text of stored messages, for privacy: their live or archived lines (rows), the
        payloads no other message refers to, their search-index rows, and the checkpoints of the session's
        commits (unfinished ones are abandoned; their messages stay live) → {session_id, seqs, forgotten,
        payloads_removed, index_rows_removed, checkpoint_threads_removed, commits_abandoned,
        working_memory_rewritten: False, note}.

        Each message keeps its seq, id, turn, role and place, so seq ranges, counts and archives stay whole
        (nothing lost, nothing duplicated); its text becomes `[forgotten]` and its meta says when
        (`state.forget`). The working memory already made from it is not rewritten (the result says so; to
        drop it, delete the session — `middleware.forget` — or start a new thread), and the agent's own
        checkpoints are the caller's: a state that still holds the message shows the model its text. Unknown
        seqs → `InvalidInput` (nothing changed); a commit holding the session's lease → `CommitInProgress`.
        Crash-safe: a forget killed midway is finished by the next engine that opens the storage.
        """
        chosen = checked_seqs(seqs, self.storage.sessions.meta(session_id)["total_message_count"])
        lease = f"{FORGET_TASK_PREFIX}{uuid.uuid4().hex}"
        holder = acquire(self.storage.tasks, session_id, lease, self.runner.owner, ttl=self.runner.lease_ttl)
        if holder is not None:
            raise CommitInProgress(session_id, holder)
        with heartbeat(self.storage.tasks, session_id, lease, ttl=self.runner.lease_ttl):
            return self.storage.forget_messages(session_id, chosen)

    def _finish_forgets(self) -> None:
        """Finish the forgets a crash interrupted, each under its session's lease (one a commit holds now is
        finished by the next open, or by the session's next forget)."""
        try:
            pending = self.storage.pending_forgets()
        except (OSError, WorkmemError) as exc:
            log.warning("could not look for interrupted forgets: %s", describe_error(exc))
            return
        for intent in pending:
            session_id, lease = intent["session_id"], f"{FORGET_TASK_PREFIX}{uuid.uuid4().hex}"
            try:
                holder = acquire(self.storage.tasks, session_id, lease, self.runner.owner, ttl=self.runner.lease_ttl)
                if holder is not None:
                    log.warning("session %r: an interrupted forget waits for commit %s", session_id, holder)
                    continue
                with heartbeat(self.storage.tasks, session_id, lease, ttl=self.runner.lease_ttl):
                    self.storage.finish_forget(intent)
            except (OSError, WorkmemError) as exc:
                log.warning("session %r: could not finish an interrupted forget: %s", session_id,
                            describe_error(exc))

    def check(self, session_id: str, *, deep: bool = False) -> list[dict[str, Any]]:
        """Every anomaly of the session's stored data: `{file, line, problem}` (line 0: the whole file), the
        search index compared with the archives included (`deep=True` also reads every archive's messages)."""
        require_bool("deep", deep)
        found = self.storage.sessions.check(session_id)
        where = str(self.root / "index.sqlite") if self.root is not None else "the search index (docs)"
        try:
            listed = self.storage.sessions.list_archives(session_id)
        except DamagedFile as exc:  # the archive's own findings above say what is wrong with it
            found.append(Anomaly(where, 0, f"not compared with the archives: {exc}"))
        else:
            found += index_anomalies(
                self.storage.search.indexed_seqs(session_id), listed, where,
                archive_messages=(lambda a: self.storage.sessions.archive_messages(session_id, a)) if deep else None)
        return [{"file": a.path, "line": a.line_no, "problem": a.reason} for a in found]

    def reindex(self, session_id: str | None = None, progress: Callable[[str, str], None] | None = None
                ) -> dict[str, Any]:
        """Rebuild the full-text index from the archives (a damaged index is moved aside, its tasks re-derived)."""
        if session_id is not None:
            self.storage.sessions.meta(session_id)
        return self.storage.rebuild_index(session_id, progress)

    def repair(self) -> dict[str, Any]:
        """Move a damaged checkpoint database aside and delete checkpoint threads that no task names."""
        return self.storage.repair()

    def session_info(self, session_id: str) -> dict[str, Any]:
        """The session meta: pending tokens, counts, keep count, last archive — and `last_degradation`, its newest
        commit the extractive model stood in for ({task_id, archive_id, reason, at}, or None; read from the task
        rows, so every replica sees it; a later successful commit does not clear it)."""
        meta = self.storage.sessions.meta(session_id)
        return {**meta, "last_degradation": self.runner.last_degradation(session_id)}

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for background commits, then flush the session metas and close the databases."""
        self.runner.close()
        self.storage.close()

    def __enter__(self) -> WorkingMemoryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> WorkingMemoryEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- async twins (each runs its method in a worker thread) ------------------------------------

    aadd_messages = _async_twin(add_messages)
    aafter_turn = _async_twin(after_turn)
    acommit = _async_twin(commit)
    atask = _async_twin(task)
    ajoin_commits = _async_twin(join_commits)
    aread_archive = _async_twin(read_archive)
    alist_tasks = _async_twin(list_tasks)
    alist_sessions = _async_twin(list_sessions)
    aresume_all = _async_twin(resume_all)
    acompact = _async_twin(compact)
    acontext_tokens = _async_twin(context_tokens)
    aassemble = _async_twin(assemble)
    aarchive_search = _async_twin(archive_search)
    aarchive_expand = _async_twin(archive_expand)
    aread_tool_result = _async_twin(read_tool_result)
    aworking_memory = _async_twin(working_memory)
    adelete_session = _async_twin(delete_session)
    aforget_messages = _async_twin(forget_messages)
    acheck = _async_twin(check)
    areindex = _async_twin(reindex)
    arepair = _async_twin(repair)
    asession_info = _async_twin(session_info)
    aclose = _async_twin(close)

    async def await_commits(self) -> None:
        """Deprecated alias of `ajoin_commits()` (its name read like a blocking call); kept for one release."""
        warnings.warn("WorkingMemoryEngine.await_commits() is deprecated: use `await engine.ajoin_commits()` "
                      "(or the blocking `engine.join_commits()`)", DeprecationWarning, stacklevel=2)
        await self.ajoin_commits()


def session_summary(meta: dict[str, Any]) -> dict[str, Any]:
    """One line of `list_sessions` from a session's meta."""
    live = meta["message_count"]
    archived = (meta.get("last_archive") or {}).get("end_seq") or 0  # archives cover seqs 1..end_seq, once each
    times = [t for t in (meta.get("updated_at"), meta.get("last_commit_at"), meta.get("created_at")) if t]
    return {"session_id": meta["session_id"], "live_messages": live, "archived_messages": archived,
            "commits": meta["commit_count"], "last_activity": max(times) if times else None}


def _expansion(archive_id: str | None, abstract: str, messages: list[dict[str, Any]],
               expected: tuple[Any, Any] = (None, None)) -> dict[str, Any]:
    """An expansion of stored messages (a payload not read shows its stored preview, `with_preview`); seqs of
    the `expected` range no message holds are `missing`, and the text says so (damaged storage never reads as a
    shorter conversation)."""
    content = format_messages([with_preview(m) for m in messages], clip_tokens=0, brief_own_tools=False)
    first, last = expected
    missing: list[int] = []
    if isinstance(first, int) and isinstance(last, int):
        missing = sorted(set(range(first, last + 1)) - {m["seq"] for m in messages})
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" …" if len(missing) > 10 else "")
            content += (f"\n[workmem: {len(missing)} message(s) of seqs {first}–{last} are missing from storage "
                        f"(seqs {shown}); `workmem check` says why]")
    return {"archive_id": archive_id, "abstract": abstract,
            "start_seq": messages[0]["seq"] if messages else None,
            "end_seq": messages[-1]["seq"] if messages else None,
            "message_count": len(messages), "missing": missing, "content": content}


def _compact_result(compacted: bool, reason: str, summary: str | None, archive_id: str | None,
                    before: int, after: int) -> dict[str, Any]:
    return {"ok": True, "compacted": compacted, "reason": reason, "summary": summary, "archive_id": archive_id,
            "tokens_before": before, "tokens_after": after}


@dataclass(frozen=True)
class _TurnRule:
    """What `after_turn` decides with: the keep, the trigger and the input limit it is taken of, the tool schemas
    every call carries, the low-water mark."""

    keep: Keep
    trigger: Any
    limit: int
    tool_tokens: int
    low_water: float

    @property
    def threshold(self) -> int:
        """The trigger in tokens."""
        return trigger_tokens(self.trigger, self.limit)


def _positive_int(field: str, value: Any) -> int:
    return require_int(field, value, min=1, max=MAX_SETTING)
