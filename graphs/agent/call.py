"""One model call as the middleware reads it once: the snapshot, its counts, and what goes out.

`Call` is built once per model call (again only after a commit finished) by the middleware's `_snapshot`; the
functions here measure it without I/O: which entries the model is shown (large or, past a commit boundary, older
tool results as their synopsis), the tokens of each part, and the `CallFigures` the commit decision reads.
`Prepared` is the call as it will be sent, with the agent-state update that goes with the model's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import HumanMessage, RemoveMessage, SystemMessage
from langgraph.types import Command

from workmem.graphs.agent.settings import MiddlewareSettings, counted
from workmem.graphs.agent.view import StateView
from workmem.graphs.context.assemble import SUMMARY_PREFIX, SYSTEM_ADDITION, reserve_for_reply
from workmem.graphs.context.call_state import SessionCalls
from workmem.graphs.context.decision import CallFigures, figures_for
from workmem.graphs.context.lc_messages import to_langchain_message
from workmem.graphs.context.session_memory import SessionMemory
from workmem.graphs.context.tool_results import Synopses, offloaded, result_part, shown_as_synopsis
from workmem.state.archive_object import OWN_TOOLS
from workmem.state.messages import CLIPPED_BYTES_META, IMAGE_TOKENS, TEXT_BLOCKS, is_image
from workmem.state.retention import resolve_keep, trigger_messages
from workmem.state.tokens import count_tokens, token_head

if TYPE_CHECKING:
    from workmem.graphs.agent.session_cache import SessionCache
    from workmem.graphs.engine import WorkingMemoryEngine

SYSTEM_ADDITION_TOKENS = count_tokens(SYSTEM_ADDITION)


@dataclass
class Call:
    """The snapshot of one model call: the state aligned with the log, the memory, the input limit, the counts."""

    request: ModelRequest
    engine: WorkingMemoryEngine
    session_id: str
    calls: SessionCalls  # what the session's calls remember (the engine's)
    cache: SessionCache  # this middleware's caches of the session
    view: StateView
    memory: SessionMemory
    limit: int  # the model's input limit for this call
    threshold: int  # the trigger in tokens
    offload_limit: int  # a tool result over this many tokens is shown as its synopsis
    synopsis_size: int  # the tokens of a synopsis
    entries: list[dict[str, Any]]  # what the model may be shown besides the memory, in order
    pinned: list[dict[str, Any]]  # shown after the memory once archived: the running turn's user message, the newest
    # step of a pinned tool
    system: SystemMessage | None  # the agent's own system message, with its archived instructions (see StateView)
    own_tokens: int  # tokens of `system`
    schema_tokens: int  # every bound tool's schema
    figures: CallFigures
    events: list[dict[str, Any]] = field(default_factory=list)
    update: dict[str, Any] = field(default_factory=dict)  # the agent-state update, besides the record


@dataclass
class Prepared:
    """One model call as the middleware will send it: the request, its record, the state's removals."""

    request: ModelRequest
    sent: dict[str, Any]
    removals: list[RemoveMessage]
    update: dict[str, Any]

    def command(self) -> Command:
        """The state update that goes with the model's answer."""
        update = {**self.update, "workmem_last_call": self.sent}
        if self.removals:
            update["messages"] = self.removals
        return Command(update=update)


def out_of_view(memory: SessionMemory, entries: list[dict[str, Any]], stats: dict[str, Any]) -> bool:
    """Whether some of the session is out of the call's view — archived, shown as its synopsis or clipped, or
    dropped to fit — the only case workmem's note and tools give the agent anything to find; or the view shows a
    call of one of those tools (a provider refuses a call of a tool the request does not declare). The decision
    counts them either way: the call after a commit carries them."""
    return bool(memory.archives_total or stats["messages_dropped"]
                or any(e.get("synopsis") or e.get("view_clipped") or CLIPPED_BYTES_META in (e.get("meta") or {})
                       or _calls_own_tool(e) for e in entries))


def _calls_own_tool(entry: dict[str, Any]) -> bool:
    return any(p.get("type") in ("tool_call", "tool_result") and p.get("name") in OWN_TOOLS
               for p in entry.get("parts") or ())


def shrinkable(entry: dict[str, Any], exclude_tools: frozenset[str]) -> bool:
    """A stored tool result that may be shown as its synopsis (never one of `exclude_tools`, workmem's own)."""
    part = result_part(entry) if "lc" not in entry else None
    return part is not None and part.get("name") not in exclude_tools


def shown_entries(entries: list[dict[str, Any]], live: list[dict[str, Any]], *, boundary: int, line: int, size: int,
                  settings: MiddlewareSettings, synopses: Synopses) -> list[dict[str, Any]]:
    """`entries` with each result over the `line` — or, up to the commit `boundary`, each result over `size` older
    than the newest `keep_tool_results` kept ones — shown as its synopsis of `size` tokens."""
    exclude = settings.exclude_tools
    older = set(shrunk_at_boundary([m for m in live if m["seq"] <= boundary], settings))
    return [offloaded(e, synopses, size)
            if shrinkable(e, exclude) and shown_as_synopsis(e, line, size, older) else e
            for e in entries]


def shown_pinned(pinned: dict[str, Any] | None, max_tokens: int | None) -> dict[str, Any] | None:
    """The running turn's user message as a call shows it once a commit archived it: whole, or — over `max_tokens`
    — its first lines within them and one marker line (the archive keeps it whole). Same message, same bytes."""
    if pinned is None or max_tokens is None or pinned["tokens"] <= max_tokens:
        return pinned
    return shortened(pinned, max_tokens)


def shown_pinned_step(step: list[dict[str, Any]], line: int, size: int) -> list[dict[str, Any]]:
    """A pinned tool's newest step as a call shows it: each result over the offload `line` as its first lines within
    the synopsis `size`, as a live result over the line is shown as its synopsis (the archive keeps it whole)."""
    return [shortened(e, size) if e["role"] == "tool" and e["tokens"] > line else e for e in step]


def clip_cap(budget: int) -> int:
    """The most one message may show when the run itself does not fit `budget` (one huge tool output): half the
    window after the reply's reserve, at least 1,024."""
    return max(1024, (budget - reserve_for_reply(budget)) // 2)


def within_window(pinned: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """What stays pinned, each entry at most a quarter of `clip_cap(budget)` (its first lines), whatever
    `pinned_tokens` says: a pinned message never crowds the run out of the window, nor makes every call commit."""
    cap = clip_cap(budget) // 4  # a pinned call's arguments are the call: never shortened
    return [shortened(p, cap) if p["tokens"] > cap and p["role"] != "assistant" else p for p in pinned]


def shortened(entry: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """A pinned entry (its `lc`: the agent state's message) as its first lines within `max_tokens` and one marker
    line; of content blocks, the text's first lines and the first image (a screenshot is what the agent looks at)."""
    original = entry["lc"]
    content = original.content
    kind = "text"
    if isinstance(content, str):
        text, image = content, None
    else:
        texts = [b for b in content if isinstance(b, str) or (isinstance(b, dict) and b.get("type") in TEXT_BLOCKS)]
        text = "\n".join(b if isinstance(b, str) else str(b.get("text") or "") for b in texts)
        kind = next((b["type"] for b in texts if isinstance(b, dict)), kind)  # `input_text` stays `input_text`
        image = next((b for b in content if is_image(b)), None)
    shown = _head_lines(text, max_tokens) if count_tokens(text) > max_tokens else text
    if image is None and not isinstance(content, str) and not shown:
        return entry  # nothing but blocks that are no image (a file, reasoning): shown as they are
    blocks = [*([{"type": kind, "text": shown}] if shown else []), *([image] if image is not None else [])]
    lc = original.model_copy(update={"content": shown if isinstance(content, str) else blocks})
    tokens = count_tokens(shown) + (IMAGE_TOKENS if image is not None else 0)
    parts = [{"type": "text", "text": shown}] if entry["role"] == "user" else entry["parts"]
    return {**entry, "parts": parts, "tokens": tokens, "lc": lc}


@lru_cache(maxsize=256)
def _head_lines(text: str, max_tokens: int) -> str:
    """The first whole lines of `text` within `max_tokens`, then one marker line naming only how many lines are
    left out (at least the first line's head)."""
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = count_tokens(line) + 1
        if used + cost > max_tokens:
            break
        kept.append(line)
        used += cost
    if not kept:
        kept = [token_head(lines[0] if lines else text, max_tokens)]
    left = len(lines) - len(kept)
    return "\n".join(kept) + f"\n[… {left} more line(s) of this message are archived: archive_search finds them]"


def call_tokens(system: SystemMessage | None, memory: SessionMemory, entries: list[dict[str, Any]],
                pinned: list[dict[str, Any]], *, own_tokens: int, schema_tokens: int,
                settings: MiddlewareSettings) -> tuple[int, int]:
    """(the whole call as it would go out if nothing were dropped, what rides on every call: the system prompts
    and the tool schemas). `system`: the agent's own system message. With a `token_counter`, the call's messages
    are counted by it (tool schemas still by cl100k: a message counter does not see them)."""
    if settings.token_counter is not None:
        return _counted(system, memory, entries, pinned, schema_tokens, settings)
    fixed = own_tokens + SYSTEM_ADDITION_TOKENS + schema_tokens
    shown = sum(p["tokens"] for p in pinned) + sum(e["tokens"] for e in entries)
    return fixed + memory.tokens + shown, fixed


def _counted(own: SystemMessage | None, memory: SessionMemory, entries: list[dict[str, Any]],
             pinned: list[dict[str, Any]], schema_tokens: int, settings: MiddlewareSettings) -> tuple[int, int]:
    counter = settings.token_counter
    assert counter is not None
    system = [m for m in (own, SystemMessage(content=SYSTEM_ADDITION)) if m is not None]
    summary = [HumanMessage(content=SUMMARY_PREFIX + memory.markdown)] if memory.markdown.strip() else []
    shown = [p.get("lc") or to_langchain_message(p) for p in pinned]
    tail = [e["lc"] if "lc" in e else e.get("original") or to_langchain_message(e) for e in entries]
    fixed = counted(counter, system) + schema_tokens
    return fixed + counted(counter, [*summary, *shown, *tail]), fixed


def newest_whole_tokens(entries: list[dict[str, Any]]) -> int:
    """Tokens of the newest tool results (those after the last assistant message) shown whole."""
    total = 0
    for entry in reversed(entries):
        if entry.get("role") != "tool":
            break
        if not entry.get("synopsis"):
            total += entry["tokens"]
    return total


def figures_of(view: StateView, entries: list[dict[str, Any]], *, tokens: tuple[int, int], threshold: int,
               floor: int, limit: int, memory_budget: int, pinned_tokens: int, settings: MiddlewareSettings,
               engine_keep: Any, engine_trigger: Any, background_running: bool, synopsis_size: int) -> CallFigures:
    """What the commit decision reads, from a measured call (`tokens`: its whole and its fixed tokens)."""
    shown = {e["seq"]: e["tokens"] for e in entries if "lc" not in e and "seq" in e}
    return figures_for(
        view.live, call_tokens=tokens[0], fixed_tokens=tokens[1] + memory_budget, threshold=threshold, floor=floor,
        input_limit=limit, reserve=reserve_for_reply(limit),
        keep=resolve_keep(settings.keep or engine_keep, limit),  # a fraction: of the model's input limit
        low_water=settings.low_water, max_messages=trigger_messages(settings.trigger or engine_trigger),
        pinned_tokens=pinned_tokens, background_running=background_running,
        newest_whole_tokens=newest_whole_tokens(entries),
        shown=shown, as_synopsis={seq: min(shown[seq], synopsis_size)
                                  for seq in shrunk_at_boundary(view.live, settings) if seq in shown})


def shrunk_at_boundary(live: list[dict[str, Any]], settings: MiddlewareSettings) -> list[int]:
    """Seqs of the live tool results a commit boundary shows as their synopsis (when over its size): every
    shrinkable one but the newest `keep_tool_results`."""
    results = [m["seq"] for m in live if shrinkable(m, settings.exclude_tools)]
    return results[:max(len(results) - settings.keep_tool_results, 0)]
