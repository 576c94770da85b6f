"""Build the context a model sees: system addition + WM summary + live messages, within a budget.

Priority with what is left after the reply reserve: the system addition; the messages that are not
stored yet (an agent's current run) or, when there are none, the newest user turn (either must fit,
else `InvalidInput("token_budget")`); the working memory, whole or not at all; then the other live
messages newest-first in whole tool groups, stopping at the first that does not fit. The output
keeps the order it was given. Token counts of messages are their stored `tokens` fields. A tool
call is sent only with all its results (a result pairs with the nearest preceding unanswered call of its id):
one still waiting for a result is left out (and counted in `messages_dropped`) until the result is stored.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from workmem.graphs.context.injected import SUMMARY_MARKER, clean_messages
from workmem.graphs.context.lc_messages import to_langchain_message
from workmem.graphs.context.tool_results import result_part
from workmem.state.errors import InvalidInput
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, message_tokens
from workmem.state.payloads import PayloadLimits
from workmem.state.tokens import count_tokens
from workmem.state.turns import message_units as unit_spans
from workmem.state.turns import tool_pairs

SUMMARY_PREFIX = SUMMARY_MARKER + "\n"
SYSTEM_ADDITION = (
    "[Session History Summary] is a lossy memory of older turns; newer messages win. Before saying something "
    "is unknown, try archive_search, then archive_expand."
)
MAX_BUDGET = 10_000_000
LARGE_BUDGET = 40_000
MIN_LARGE_RESERVE = 20_000

Unit = list[dict[str, Any]]


def reserve_for_reply(token_budget: int) -> int:
    """Tokens kept free for the model's reply: max(15 %, 20 000) from 40 000 up, else 15 % (rounded up)."""
    share = (token_budget * 15 + 99) // 100
    return max(share, MIN_LARGE_RESERVE) if token_budget >= LARGE_BUDGET else share


def validate_budget(token_budget: Any) -> int:
    """A token budget is an int between 1 and 10 000 000."""
    if isinstance(token_budget, bool) or not isinstance(token_budget, int):
        raise InvalidInput("token_budget", token_budget, "must be an integer")
    if token_budget <= 0 or token_budget > MAX_BUDGET:
        raise InvalidInput("token_budget", token_budget, f"must be between 1 and {MAX_BUDGET}")
    return token_budget


def pending_entries(messages: list[Any], *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                    payloads: PayloadLimits | None = None) -> list[dict[str, Any]]:
    """Not-yet-stored messages (e.g. the agent's current turn) as entries `assemble_context` can budget.

    Injected content is stripped as `after_turn` would; an unchanged LangChain message is sent as is.
    """
    entries = []
    for i, msg, changed in clean_messages(list(messages), max_bytes=max_bytes, payloads=payloads):
        original = messages[i]
        entry = {**msg, "tokens": message_tokens(msg)}
        entry["lc"] = original if isinstance(original, BaseMessage) and not changed else to_langchain_message(msg)
        entries.append(entry)
    return entries


def message_units(messages: list[dict[str, Any]]) -> list[Unit]:
    """Messages grouped so a tool call and its results stay together.

    Left out: results whose call is archived or missing, and a call not answered in full — mid-turn its
    result is not stored yet (it then joins the context with its call), or the call was abandoned; a
    provider rejects a tool call sent without its results.
    """
    pairs, unanswered = tool_pairs(messages)
    paired = {result for _call, result in pairs}
    incomplete = set(unanswered)
    units: list[Unit] = []
    for lo, hi in unit_spans(messages):
        if incomplete.intersection(range(lo, hi + 1)):
            continue
        unit = [messages[i] for i in range(lo, hi + 1) if messages[i]["role"] != "tool" or i in paired]
        if unit:
            units.append(_results_first(unit))
    return units


def _results_first(unit: Unit) -> Unit:
    """A tool group with each call's results right after it, then what came in between (a tool's `Command` added
    a message, or a call of its own, while a parallel call's result was still due): providers want them so."""
    if all(m["role"] == "tool" for m in unit[1:]):  # one call and its results: the usual unit, as it is
        return unit
    out: Unit = []
    rest = list(unit)
    while rest:
        message = rest.pop(0)
        out.append(message)
        for call_id in [p.get("id") for p in message["parts"] if p.get("type") == "tool_call"]:
            at = next((i for i, m in enumerate(rest) if m["role"] == "tool"
                       and (result_part(m) or {}).get("tool_call_id") == call_id), None)
            if at is not None:
                out.append(rest.pop(at))
    return out


def newest_turn_start(units: list[Unit]) -> int:
    """Index of the unit that opens the newest user turn; 0 when its user message is already archived."""
    for i in range(len(units) - 1, -1, -1):
        if units[i][0]["role"] == "user":
            return i
    return 0


def _tokens(unit: Unit) -> int:
    return sum(m["tokens"] for m in unit)


def assemble_context(
    live: list[dict[str, Any]], working_memory: str, archives_total: int, token_budget: int,
    pending: list[dict[str, Any]] | None = None, pinned: dict[str, Any] | list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pick what fits by priority (system, newest user turn, WM whole or not at all, older units).

    `pinned`: what stays in view after the WM once a commit archived it — the running turn's user message, the
    newest step of a pinned tool (a list of entries, or one) — shown right after the
    WM, required like the newest turn. A stored entry with an `original` (the agent state's own message) is
    sent as that object."""
    pinned = [pinned] if isinstance(pinned, dict) else list(pinned or [])
    budget = validate_budget(token_budget)
    reserve = reserve_for_reply(budget)
    available = budget - reserve
    system_tokens = count_tokens(SYSTEM_ADDITION)
    candidates = [*live, *(pending or [])]
    units = message_units(candidates)
    unstored = [i for i, unit in enumerate(units) if any("lc" in m for m in unit)]
    if unstored:
        required = set(unstored)
    elif any(p.get("role") == "user" for p in pinned):  # the running turn's user message is archived: its newest
        # step must go out, older ones may not
        required = {len(units) - 1} if units else set()
    else:
        required = set(range(newest_turn_start(units), len(units)))
    pinned_tokens = sum(p["tokens"] for p in pinned)
    newest_tokens = sum(_tokens(units[i]) for i in required) + pinned_tokens
    if system_tokens + newest_tokens > available:
        what = "the messages not stored yet" if unstored else "the newest user turn"
        raise InvalidInput("token_budget", token_budget,
                           f"{available} tokens after the reply reserve of {reserve} cannot hold the system "
                           f"addition and {what} ({system_tokens + newest_tokens} tokens)")
    used = system_tokens + newest_tokens
    summary_text = SUMMARY_PREFIX + working_memory if working_memory.strip() else ""
    summary_tokens = count_tokens(summary_text) if summary_text else 0
    include_summary = bool(summary_text) and used + summary_tokens <= available
    used += summary_tokens if include_summary else 0
    chosen = set(required)
    for i in range(len(units) - 1, -1, -1):
        if i in required:
            continue
        if used + _tokens(units[i]) > available:
            break
        used += _tokens(units[i])
        chosen.add(i)
    kept = [m for i, unit in enumerate(units) if i in chosen for m in unit]
    messages: list[BaseMessage] = [SystemMessage(content=SYSTEM_ADDITION, additional_kwargs={"workmem": "system"})]
    if include_summary:
        messages.append(HumanMessage(content=summary_text, additional_kwargs={"workmem": "summary"}))
    messages.extend(p.get("lc") or to_langchain_message(p) for p in pinned)
    messages.extend(m["lc"] if "lc" in m else m.get("original") or to_langchain_message(m) for m in kept)
    stats = {
        "budget": budget,
        "reserve": reserve,
        "available": available,
        "system_tokens": system_tokens,
        "summary_tokens": summary_tokens if include_summary else 0,
        "summary_included": include_summary,
        "working_memory_tokens": summary_tokens,
        "newest_turn_tokens": newest_tokens,
        "messages_tokens": sum(m["tokens"] for m in kept),
        "messages_included": len(kept),
        "pinned_tokens": pinned_tokens,
        "messages_dropped": len(candidates) - len(kept),
        "pending_included": sum("lc" in m for m in kept),
        "total_tokens": used,
        "archives_total": archives_total,
    }
    return {"messages": messages, "stats": stats}


def budget_line(stats: dict[str, Any]) -> str:
    """How much of the budget an assembled context used, in the one phrasing every surface prints:
    `3565 of 20000 tokens (40000 budget − 20000 reply reserve)`."""
    return (f"{stats['total_tokens']} of {stats['available']} tokens ({stats['budget']} budget − "
            f"{stats['reserve']} reply reserve)")
