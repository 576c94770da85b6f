"""Build the context a model sees: system addition + WM summary + live messages, within a budget."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from graphs.lc_messages import to_langchain_messages
from state.errors import InvalidInput
from state.tokens import count_tokens

SUMMARY_PREFIX = "[Session History Summary]\n"
SYSTEM_ADDITION = (
    "This session uses workmem. The [Session History Summary] message is a lossy working memory of "
    "older turns; the raw messages after it are recent and win over the summary on any conflict. "
    "Before saying something is unknown or was never discussed, call `archive_search` with 2–3 "
    "keywords, then `archive_expand` on the best hit to read the original messages."
)
MAX_BUDGET = 10_000_000
LARGE_BUDGET = 40_000


def reserve_for_reply(token_budget: int) -> int:
    """Tokens kept free for the model's reply: max(15 %, 20 000) from 40 000 up, else 15 %."""
    share = (token_budget * 15 + 99) // 100
    return max(share, 20_000) if token_budget >= LARGE_BUDGET else share


def validate_budget(token_budget: Any) -> int:
    """A token budget is a positive int of at most 10 000 000."""
    if isinstance(token_budget, bool) or not isinstance(token_budget, int):
        raise InvalidInput("token_budget", token_budget, "must be an integer")
    if token_budget <= 0 or token_budget > MAX_BUDGET:
        raise InvalidInput("token_budget", token_budget, f"must be between 1 and {MAX_BUDGET}")
    return token_budget


def message_units(live: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Live messages grouped so a tool call and its results are never separated; orphans dropped."""
    units: list[list[dict[str, Any]]] = []
    open_calls: set[str] = set()
    for message in live:
        result_ids = {p["tool_call_id"] for p in message["parts"] if p.get("type") == "tool_result"}
        if units and result_ids and result_ids & open_calls:
            units[-1].append(message)
            open_calls -= result_ids
            continue
        if result_ids and message["role"] == "tool":
            continue  # a result whose call is archived cannot be sent to a model without it
        units.append([message])
        open_calls = {p["id"] for p in message["parts"] if p.get("type") == "tool_call"}
    return units


def _newest_user_turn_start(units: list[list[dict[str, Any]]]) -> int:
    for i in range(len(units) - 1, -1, -1):
        if units[i][0]["role"] == "user":
            return i
    return len(units)


def assemble_context(
    live: list[dict[str, Any]], working_memory: str, archives_total: int, token_budget: int
) -> dict[str, Any]:
    """Pick what fits by priority (system, newest user turn, WM whole or not at all, older units)."""
    budget = validate_budget(token_budget)
    reserve = reserve_for_reply(budget)
    available = budget - reserve
    system_tokens = count_tokens(SYSTEM_ADDITION)
    units = message_units(live)
    newest = _newest_user_turn_start(units)
    newest_tokens = sum(m["tokens"] for unit in units[newest:] for m in unit)
    if system_tokens + newest_tokens > available:
        raise InvalidInput("token_budget", token_budget,
                           f"{available} tokens after the reply reserve cannot hold the newest user turn "
                           f"({system_tokens + newest_tokens} tokens)")
    used = system_tokens + newest_tokens
    summary_text = SUMMARY_PREFIX + working_memory if working_memory else ""
    summary_tokens = count_tokens(summary_text) if summary_text else 0
    include_summary = bool(summary_text) and used + summary_tokens <= available
    used += summary_tokens if include_summary else 0
    first_kept = newest
    for i in range(newest - 1, -1, -1):
        unit_tokens = sum(m["tokens"] for m in units[i])
        if used + unit_tokens > available:
            break
        used += unit_tokens
        first_kept = i
    kept = [m for unit in units[first_kept:] for m in unit]
    messages: list[BaseMessage] = [SystemMessage(content=SYSTEM_ADDITION, additional_kwargs={"workmem": "system"})]
    if include_summary:
        messages.append(HumanMessage(content=summary_text, additional_kwargs={"workmem": "summary"}))
    messages.extend(to_langchain_messages(kept))
    stats = {
        "budget": budget,
        "reserve": reserve,
        "available": available,
        "system_tokens": system_tokens,
        "summary_tokens": summary_tokens if include_summary else 0,
        "summary_included": include_summary,
        "messages_tokens": sum(m["tokens"] for m in kept),
        "messages_included": len(kept),
        "messages_dropped": len(live) - len(kept),
        "total_tokens": used,
        "archives_total": archives_total,
    }
    return {"messages": messages, "stats": stats}
