"""Pure helpers over an ordered list of stored messages: tool groups, the covered range, pending tokens.

A *tool group* is an assistant message with tool calls plus the tool results that answer it.
Spans are inclusive index ranges into the list; overlapping groups (interleaved parallel calls)
are merged so a cut never lands inside any of them. A call of the newest turn still waiting for
its result is an *open* group reaching to the end of the list: its result is stored later, and it
must find the call still live. Once a user message follows, an unanswered call was abandoned and
stands alone (otherwise one dangling call would keep every later message live forever).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.retention import Keep, as_keep, keep_cut
from workmem.state.validation import require_int

DEFAULT_KEEP_RECENT = 10
MAX_KEEP_RECENT = 10_000
_TURN_ID = re.compile(r"t([0-9]{1,9})")


def validate_keep(value: Any, field: str = "keep_recent_count") -> int:
    """A keep count from a caller: an int ≥ 0 (else InvalidInput naming `field`), clamped to 10 000."""
    return min(require_int(field, value, min=0), MAX_KEEP_RECENT)


def turn_number(turn_id: Any) -> int:
    """n of a stored `t<n>` turn id; 0 for anything else."""
    match = _TURN_ID.fullmatch(turn_id) if isinstance(turn_id, str) else None
    return int(match.group(1)) if match else 0


def parse_turn_id(value: Any, field: str = "turn_id") -> int:
    """n of a caller's turn id such as `t3`; InvalidInput naming `field` for anything else."""
    match = _TURN_ID.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(field, value, "must be a turn id like 't3'")
    return int(match.group(1))


def tool_pairs(messages: Sequence[dict[str, Any]]) -> tuple[list[tuple[int, int]], list[int]]:
    """`(call index, result index)` pairs and the indexes of messages holding a call nothing answers.

    A result pairs with the **nearest preceding unanswered** call of its id, never with an earlier,
    already answered one: some backends send `call_0` on every turn, and an imported transcript may
    repeat ids. A result with no such call pairs with nothing.
    """
    open_calls: dict[str, list[int]] = {}
    pairs: list[tuple[int, int]] = []
    for i, msg in enumerate(messages):
        for part in msg["parts"]:
            if part["type"] == "tool_call" and part.get("id"):
                open_calls.setdefault(part["id"], []).append(i)
            elif part["type"] == "tool_result":
                stack = open_calls.get(part["tool_call_id"])
                if stack:
                    pairs.append((stack.pop(), i))
    return pairs, sorted({i for stack in open_calls.values() for i in stack})


def tool_groups(messages: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """Inclusive index spans of the tool groups of `messages`, merged where they overlap, in order."""
    pairs, unanswered = tool_pairs(messages)
    ends: dict[int, int] = {}
    for call, result in pairs:
        ends[call] = max(ends.get(call, call), result)
    waiting = _first_waiting(messages, unanswered)
    if waiting is not None:
        ends[waiting] = len(messages) - 1
    spans: list[tuple[int, int]] = []
    for lo in sorted(ends):
        hi = ends[lo]
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    return spans


def first_waiting_call(messages: Sequence[dict[str, Any]]) -> int | None:
    """Index of the first assistant message of the newest turn holding a tool call that no later
    message answers (its result is not stored yet), or None."""
    return _first_waiting(messages, tool_pairs(messages)[1])


def _first_waiting(messages: Sequence[dict[str, Any]], unanswered: list[int]) -> int | None:
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    return next((i for i in unanswered if i > last_user), None)


def message_units(messages: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """Partition `messages` into inclusive index spans that must stay together (tool groups or singles)."""
    units: list[tuple[int, int]] = []
    i = 0
    for lo, hi in tool_groups(messages):
        units.extend((k, k) for k in range(i, lo))
        units.append((lo, hi))
        i = hi + 1
    units.extend((k, k) for k in range(i, len(messages)))
    return units


def choose_covered_range(messages: Sequence[dict[str, Any]], keep: Keep | int) -> tuple[int, int] | None:
    """`(start_seq, end_seq)` a commit covers: all but the tail `keep` asks for, never
    splitting a tool group nor covering a call still waiting for its result (the cut moves earlier so
    the group stays in the tail); None when nothing is covered. An int `keep` counts messages."""
    unit, n = as_keep(keep)
    units = message_units(messages)
    cut = keep_cut([m["tokens"] for m in messages], [m["role"] == "user" for m in messages], (unit, n),
                   boundaries=[lo for lo, _hi in units])
    waiting = first_waiting_call(messages)
    if waiting is not None:
        cut = min(cut, waiting)  # its open group reaches past the end: it stays in the tail
    for lo, hi in units:  # the messages unit may cut anywhere: move the cut before the unit it splits
        if lo < cut <= hi:
            cut = lo
            break
    if cut <= 0:
        return None
    return messages[0]["seq"], messages[cut - 1]["seq"]
