"""Retention in the user's unit and the commit trigger.

The raw tail a commit keeps is `("messages", n)`, `("turns", n)` or `("tokens", n)` — the forms
`SummarizationMiddleware` uses — and the trigger is `("tokens", n)` or `("fraction", f)` of the model's
input limit. Everything here is pure: the cut over a list of token counts and turn starts, and the
parsing of the forms a caller may give (typed errors naming the form).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workmem.state.errors import InvalidInput

MESSAGES, TURNS, TOKENS, FRACTION = "messages", "turns", "tokens", "fraction"
KEEP_LIMITS = {MESSAGES: 10_000, TURNS: 10_000, TOKENS: 10_000_000}
MAX_TRIGGER_TOKENS = 10_000_000
MIN_COMMIT_SHARE = 0.25  # default floor on pending tokens: a quarter of the trigger

Keep = tuple[str, int]  # ("fraction", f) too, until `resolve_keep` makes it tokens
Trigger = tuple[str, float]
Triggers = tuple[Trigger, ...]  # any of them
KEEP_EXAMPLES = ((MESSAGES, 10), (TURNS, 3), (TOKENS, 4000), (FRACTION, 0.1))
TRIGGER_EXAMPLES = ((TOKENS, 60000), (FRACTION, 0.8), (MESSAGES, 50))
DEFAULT_TRIGGER: Trigger = (FRACTION, 0.5)  # half the model's input limit


def keep_value(value: Any, field: str = "keep") -> Keep:
    """A caller's keep as `(unit, n)`: a pair `("turns", 3)` or the CLI's `"turns:3"`; n clamped per unit.
    `("fraction", f)` (0 < f < 1) is kept as given: `resolve_keep` turns it into tokens of the model's input limit.

    Anything else (a bare int, another unit, a negative or non-integer n) → `InvalidInput(field)`, worded in the
    syntax the caller used (`messages:10` or `('messages', 10)`).
    """
    unit, n = _pair(value, field, KEEP_EXAMPLES)
    if unit == FRACTION:
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 < n < 1:
            raise InvalidInput(field, value, "a fraction keep is a number with 0 < f < 1")
        return FRACTION, float(n)  # type: ignore[return-value]
    if unit not in KEEP_LIMITS:
        raise InvalidInput(field, value, f"unit must be one of {', '.join([*KEEP_LIMITS, FRACTION])}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidInput(field, value, "the count must be an integer >= 0")
    return unit, min(n, KEEP_LIMITS[unit])


def resolve_keep(keep: Keep, input_limit: int) -> Keep:
    """`("fraction", f)` as `("tokens", f × input_limit)`; any other keep as it is."""
    unit, n = keep
    if unit != FRACTION:
        return keep
    return TOKENS, min(int(n * input_limit), KEEP_LIMITS[TOKENS])


def as_keep(value: Any, field: str = "keep") -> Keep:
    """`keep_value` for what storage and a commit run use, but an int (a stored `keep_recent_count`) counts
    messages, clamped to 0..10 000; a fraction (not resolved to tokens first) is refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        return MESSAGES, max(0, min(value, KEEP_LIMITS[MESSAGES]))
    keep = keep_value(value, field)
    if keep[0] == FRACTION:
        raise InvalidInput(field, value, "a fraction keep is resolved to tokens of an input limit first (resolve_keep)")
    return keep


def keep_from_args(keep: Any, keep_recent_count: Any, *, default: Keep, input_limit: int | None = None) -> Keep:
    """The keep a caller asked for with either argument (`keep_recent_count=n` is `("messages", n)`);
    both → InvalidInput, neither → `default`. With `input_limit`, a fraction keep comes back in tokens."""
    if keep is not None and keep_recent_count is not None:
        raise InvalidInput("keep", keep, "give keep or keep_recent_count, not both")
    if keep_recent_count is not None:
        if isinstance(keep_recent_count, bool) or not isinstance(keep_recent_count, int) or keep_recent_count < 0:
            raise InvalidInput("keep_recent_count", keep_recent_count, "must be an integer >= 0")
        return MESSAGES, min(keep_recent_count, KEEP_LIMITS[MESSAGES])
    chosen = default if keep is None else keep_value(keep)
    return chosen if input_limit is None else resolve_keep(chosen, input_limit)


def trigger_value(value: Any, field: str = "trigger") -> Trigger | Triggers:
    """A caller's trigger: `("tokens", n)` (1..10 000 000), `("fraction", f)` (0 < f <= 1) of the model's input
    limit, `("messages", n)` (the call carries n messages or more), or a non-empty list of these — a commit
    is due when any of them is reached (a tuple of pairs comes back). An int is tokens; `"tokens:60000"` too."""
    if isinstance(value, (list, tuple)) and not _is_pair(value):
        if not value:
            raise InvalidInput(field, value, "a list of triggers needs at least one")
        if any(isinstance(v, (list, tuple)) and not _is_pair(v) for v in value):
            raise InvalidInput(field, value, "a list of triggers holds single triggers, not lists")
        triggers = []
        for i, item in enumerate(value):
            try:
                triggers.append(trigger_value(item, field))
            except InvalidInput as exc:  # named with what the caller typed, the whole list
                raise InvalidInput(field, value, f"item {i}: {exc.reason}") from None
        return triggers[0] if len(triggers) == 1 else tuple(triggers)  # type: ignore[return-value]
    given = value  # errors name what the caller typed
    if isinstance(value, int) and not isinstance(value, bool):
        value = (TOKENS, value)
    unit, n = _pair(value, field, TRIGGER_EXAMPLES)
    if unit == TOKENS:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_TRIGGER_TOKENS:
            raise InvalidInput(field, given, f"a token trigger is an integer between 1 and {MAX_TRIGGER_TOKENS}")
        return TOKENS, n
    if unit == FRACTION:
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 < n <= 1:
            raise InvalidInput(field, given, "a fraction trigger is a number with 0 < f <= 1")
        return FRACTION, float(n)
    if unit == MESSAGES:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= KEEP_LIMITS[MESSAGES]:
            raise InvalidInput(field, given, f"a messages trigger is an integer between 1 and {KEEP_LIMITS[MESSAGES]}")
        return MESSAGES, n
    raise InvalidInput(field, given, f"unit must be {TOKENS!r}, {FRACTION!r} or {MESSAGES!r}")


def _is_pair(value: Any) -> bool:
    """`("tokens", 5)` or the JSON form `["tokens", 5]`: a unit name (no `unit:n` string) and one more item."""
    return len(value) == 2 and isinstance(value[0], str) and ":" not in value[0]


def _members(trigger: Trigger | Triggers) -> Triggers:
    return (trigger,) if isinstance(trigger[0], str) else trigger  # type: ignore[return-value]


def trigger_messages(trigger: Trigger | Triggers) -> int | None:
    """The smallest `("messages", n)` of a trigger (or list), or None when it counts no messages."""
    counts = [int(n) for unit, n in _members(trigger) if unit == MESSAGES]
    return min(counts) if counts else None


def _pair(value: Any, field: str, examples: tuple[tuple[str, Any], ...]) -> tuple[Any, Any]:
    if isinstance(value, str):
        wanted = "expected " + _either([f"{u}:{n}" for u, n in examples])
        if value.count(":") != 1:
            raise InvalidInput(field, value, wanted)
        unit, raw = value.split(":")
        try:
            number: Any = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
        except ValueError:
            raise InvalidInput(field, value, wanted) from None
        return unit.strip(), number
    if isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str):
        return value[0], value[1]
    raise InvalidInput(field, value, "expected " + _either([repr(e) for e in examples]))


def _either(forms: list[str]) -> str:
    return ", ".join(forms[:-1]) + " or " + forms[-1]


def trigger_tokens(trigger: Trigger | Triggers, input_limit: int) -> int:
    """The trigger in tokens: n itself, or f × the model's input limit (at least 1); of a list, the lowest.
    A trigger that counts only messages is the input limit itself (a commit still comes before an overflow)."""
    tokens = [int(n) if unit == TOKENS else max(1, int(n * input_limit))
              for unit, n in _members(trigger) if unit in (TOKENS, FRACTION)]
    return min(tokens) if tokens else max(1, input_limit)


def keep_cut(tokens: Sequence[int], turn_starts: Sequence[bool], keep: Keep, *,
             boundaries: Sequence[int] | None = None) -> int:
    """How many of the oldest messages a commit may cover so the tail holds `keep` (tool pairs aside).

    `tokens[i]` and `turn_starts[i]` (a user message opens a turn) describe the live messages, oldest
    first. The turns and tokens units never split a turn: the cut falls at a turn start — for tokens the
    oldest one whose tail fits. When even the newest turn exceeds the token keep, the cut falls inside
    it at the oldest of `boundaries` (tool-group starts; default every message) whose tail fits, i.e.
    the newest boundary that keeps what fits. The messages unit cuts anywhere (its callers then move
    the cut before a tool group it would split).
    """
    unit, n = keep
    total = len(tokens)
    if unit == MESSAGES:
        return max(0, total - n)
    starts = [i for i, start in enumerate(turn_starts) if start]
    if unit == TURNS:
        if n == 0:
            return total
        return starts[-n] if n <= len(starts) else 0
    suffix = [0] * (total + 1)
    for i in range(total - 1, -1, -1):
        suffix[i] = suffix[i + 1] + tokens[i]
    for start in [0, *starts]:
        if suffix[start] <= n:
            return start
    newest = starts[-1] if starts else 0
    inside = [b for b in (boundaries if boundaries is not None else range(total)) if b > newest]
    return next((b for b in sorted(inside) if suffix[b] <= n), total)


def covered_tokens(tokens: Sequence[int], turn_starts: Sequence[bool], keep: Keep) -> int:
    """Tokens of the live messages outside the keep window (`pending_tokens`; for tokens, tool groups of an
    oversized turn are not known here, so the value is an upper bound)."""
    return sum(tokens[: keep_cut(tokens, turn_starts, keep)])
