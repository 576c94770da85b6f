"""When a commit is due before a model call, and what it keeps: one pure rule for every host.

The middleware decides on the call it is about to send; `after_turn` and the CLI loops decide on the call the
stored session would make next. Both measure that call the same way (`CallFigures`) and ask `decide`, which reads
no storage and changes nothing: it returns a `Plan` (commit with this keep, wait for a running commit, or
nothing) with the session's new `Counters`. The host acts on it. docs/design.md, *The per-call path*, says why
each rule is there.

- **Due**: the call reaches the trigger and the commit would cover at least the floor (a quarter of the trigger
  by default) — or a `("messages", n)` trigger counts n live messages and anything lies outside the keep window —
  or the call is over the input limit less the reply's reserve (a trigger set above that line) and a commit would
  cover anything: such a call cannot go out, so the loop breaker does not hold it back.
- **Low-water mark**: the keep a commit uses leaves the next call at most `low_water` × the trigger (or × what a
  call may carry, when the trigger is set above it), but never
  less than the newest step (the call about to go out answers it). The middleware measures the kept tail as the
  call after the commit shows it (older tool results as their synopsis), in whole tool groups, never beyond the
  configured keep and never covering less than the floor where the tail at today's sizes would cover it.
- **No compaction loop**: after a commit, the next call says whether it helped. Three ineffective commits in a
  row engage the breaker; trigger commits then wait until pending tokens grew by the floor.
- **A commit already running**: a background commit a call started is never joined by a second one; over the input
  limit it is waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any, Literal

from workmem.state.errors import InvalidInput
from workmem.state.retention import MESSAGES, TOKENS, Keep, covered_tokens, keep_cut
from workmem.state.turns import message_units

DEFAULT_LOW_WATER = 0.5
INEFFECTIVE_LIMIT = 3  # ineffective commits in a row before the breaker engages
BREAKER_NOTE = "engaged: trigger commits pause until more tokens are stored"

Action = Literal["commit", "wait", "nothing"]


@dataclass(frozen=True)
class Counters:
    """What a session's calls remember of its commits (the loop breaker's state)."""

    ineffective: int = 0  # trigger commits in a row after which the next call was still over the trigger
    check_next: bool = False  # a trigger commit just completed: the next call says whether it helped
    breaker_at: int | None = None  # pending tokens when the breaker engaged (None: not engaged)

    @property
    def at_rest(self) -> bool:
        """True when there is nothing to remember (the default state)."""
        return self == Counters()


@dataclass(frozen=True)
class CallFigures:
    """The call about to be sent, measured once: everything `decide` reads."""

    call_tokens: int  # the whole call: system prompts, memory, pinned message, messages, tool schemas
    fixed_tokens: int  # what rides on every call whatever a commit covers, the memory's budget included
    threshold: int  # the trigger in tokens
    floor: int  # the least a trigger commit may cover
    input_limit: int  # the model's input limit for this call
    reserve: int  # tokens kept free for the reply
    live_tokens: tuple[int, ...]  # stored tokens of each live message, oldest first
    turn_starts: tuple[bool, ...]  # which live messages open a user turn
    newest_step_tokens: int  # the newest step: the last message, or a tool call with its results
    pinned_tokens: int  # the running turn's user message, shown after the memory when a commit archived it
    keep: Keep  # the configured keep, resolved against the input limit
    low_water: float
    max_messages: int | None  # a `("messages", n)` trigger's n
    background_running: bool  # a background commit started by an earlier call has not been reported yet
    newest_whole_tokens: int = 0  # the newest tool results, shown whole: fixed for the low-water mark, and never
    # what makes a commit ineffective
    kept_tokens: tuple[int, ...] = ()  # each live message as the call after a commit shows it — older tool results
    # as their synopsis (empty: not known, the tail is measured as `live_tokens`)
    unit_starts: tuple[int, ...] = ()  # where each tool group or single message starts (a commit never splits one)
    newest_step_start: int | None = None  # where the newest step starts (None: the last message)

    @property
    def usable(self) -> int:
        """What a call may carry: the model's input limit less the reply's reserve."""
        return self.input_limit - self.reserve

    @property
    def over_limit(self) -> bool:
        """True when the call would not fit the model's input limit less the reply's reserve."""
        return self.call_tokens > self.usable


@dataclass(frozen=True)
class KeepChoice:
    """The keep a commit uses, the pending tokens it covers, and whether the low-water mark capped it."""

    keep: Keep
    pending: int
    capped: bool
    window: int  # tokens the configured keep would leave live
    allowance: int  # tokens the low-water mark leaves for the live tail


@dataclass(frozen=True)
class Plan:
    """What to do before sending the call, and why."""

    action: Action
    keep: KeepChoice
    wait: bool  # commit synchronously (sync mode, or the call is over the input limit)
    counters: Counters  # the session's counters after this call
    breaker_engaged: bool = False  # the breaker engaged at this call (one WARNING and event)
    breaker_note: str | None = None  # recorded in `workmem_last_call` while the breaker holds commits back
    reason: str = "trigger"


def figures_for(live: Sequence[dict[str, Any]], *, call_tokens: int, fixed_tokens: int, threshold: int, floor: int,
                input_limit: int, reserve: int, keep: Keep, low_water: float, max_messages: int | None,
                pinned_tokens: int = 0, background_running: bool = False, newest_whole_tokens: int = 0,
                shown: dict[int, int] | None = None, as_synopsis: dict[int, int] | None = None) -> CallFigures:
    """`CallFigures` of a call whose live messages (stored, oldest first, hidden ones included) are `live`;
    `shown` (seq → tokens): what the call shows of each (a synopsis, nothing for a hidden one), else their stored
    tokens; `as_synopsis` (seq → tokens): the results the call after a commit shows as their synopsis."""
    tokens = [m["tokens"] for m in live] if shown is None else [shown.get(m["seq"], 0) for m in live]
    roles = [m["role"] for m in live]
    step = _step_start(roles)
    return CallFigures(
        call_tokens=call_tokens, fixed_tokens=fixed_tokens, threshold=threshold, floor=floor, input_limit=input_limit,
        reserve=reserve, live_tokens=tuple(tokens), turn_starts=tuple(role == "user" for role in roles),
        newest_step_tokens=sum(tokens[step:]),
        pinned_tokens=pinned_tokens, keep=keep, low_water=low_water, max_messages=max_messages,
        background_running=background_running, newest_whole_tokens=newest_whole_tokens,
        kept_tokens=() if as_synopsis is None else tuple(as_synopsis.get(m["seq"], t)
                                                         for m, t in zip(live, tokens, strict=True)),
        unit_starts=() if as_synopsis is None else tuple(lo for lo, _hi in message_units(live)),
        newest_step_start=step)


def check_low_water(low_water: Any) -> float:
    """`low_water`: a number in (0, 1), else `InvalidInput`."""
    if isinstance(low_water, bool) or not isinstance(low_water, (int, float)) or not 0 < low_water < 1:
        raise InvalidInput("low_water", low_water, "must be a number in (0, 1)")
    return float(low_water)


def newest_step_tokens(live: Sequence[dict[str, Any]]) -> int:
    """Tokens of the newest step of the live messages: the last message, or, when it answers a tool call, the
    assistant message that made the call and everything after it."""
    return sum(m["tokens"] for m in live[_step_start([m["role"] for m in live]):])


def _step_start(roles: Sequence[str]) -> int:
    """Where the newest step starts: the last message that is not a tool result (0 when every one is)."""
    return next((i for i in range(len(roles) - 1, -1, -1) if roles[i] != "tool"), 0)


def choose_keep(figures: CallFigures, target: int, *, as_shown: bool = True) -> KeepChoice:
    """The keep that leaves at most `target` tokens in the next call: the configured one, or, when its window is
    larger than the low-water mark allows (never less than the newest step), `("tokens", allowance)` — or, when the
    figures say how a commit shrinks the view (`kept_tokens`) and `as_shown`, the newest messages that fit as the
    next call shows them (`_fitting_as_shown`)."""
    window = sum(figures.live_tokens) - covered_tokens(figures.live_tokens, figures.turn_starts, figures.keep)
    allowance = max(target - figures.fixed_tokens - figures.newest_whole_tokens - figures.pinned_tokens, 0)
    allowance = max(allowance, figures.newest_step_tokens)
    capped = window > allowance
    keep = (TOKENS, max(allowance, 0)) if capped else figures.keep
    if capped and as_shown and figures.kept_tokens:
        keep = _fitting_as_shown(figures, keep)
    return KeepChoice(keep, covered_tokens(figures.live_tokens, figures.turn_starts, keep), capped, window, allowance)


def _fitting_as_shown(figures: CallFigures, at_today: Keep) -> Keep:
    """`("messages", n)`: the newest whole units (tool groups, single messages) within the allowance of `at_today`
    (a tokens keep) as the next call shows them — never more than the configured keep leaves, covering at least the
    floor whenever `at_today` does (the commit must still take something off the call), never the newest step. Every
    cut is a unit start, so the engine covers exactly what `pending` counts."""
    live, starts = figures.live_tokens, figures.turn_starts
    units = figures.unit_starts or tuple(range(len(live)))
    today = keep_cut(live, starts, at_today, boundaries=units)
    configured = keep_cut(live, starts, figures.keep, boundaries=units)
    if figures.keep[0] == MESSAGES:  # the engine keeps a group the count splits whole
        configured = max((u for u in units if u <= configured), default=0)
    cut = max(keep_cut(figures.kept_tokens, starts, at_today, boundaries=units), configured)
    floor, covered = max(figures.floor, 1), list(accumulate(live, initial=0))  # covered[u]: tokens before u
    if covered[cut] < floor:  # further, at a turn start or inside the newest turn, up to where today's cut is
        newest_turn = max((i for i, start in enumerate(starts) if start), default=0)
        further = (u for u in units if cut < u <= today and (starts[u] or u >= newest_turn))
        cut = next((u for u in further if covered[u] >= floor), max(cut, today))
    newest = len(live) - 1 if figures.newest_step_start is None else figures.newest_step_start
    step = max((u for u in units if u <= newest), default=0)
    return (MESSAGES, len(live) - min(cut, step))


def judged(counters: Counters, call_tokens: int, threshold: int, pending: int) -> tuple[Counters, bool]:
    """After a trigger commit the next call tells whether it helped → (counters, True when the breaker engages)."""
    if not counters.check_next:
        return counters, False
    if call_tokens < threshold:
        return replace(counters, check_next=False, ineffective=0), False
    ineffective = counters.ineffective + 1
    if ineffective >= INEFFECTIVE_LIMIT and counters.breaker_at is None:
        return Counters(ineffective=ineffective, check_next=False, breaker_at=pending), True
    return replace(counters, check_next=False, ineffective=ineffective), False


def breaker_released(counters: Counters, pending: int, floor: int) -> tuple[Counters, bool]:
    """No trigger commit while the breaker is engaged, until pending tokens grew by the floor since → (counters,
    True when a commit may start)."""
    if counters.breaker_at is None:
        return counters, True
    if pending >= counters.breaker_at + floor:
        return replace(counters, breaker_at=None, ineffective=0), True
    return counters, False


def decide(figures: CallFigures, counters: Counters, *, sync: bool) -> Plan:
    """Commit, wait for the running commit, or nothing — on the call about to be sent (pure)."""
    keep = choose_keep(figures, int(figures.low_water * min(figures.threshold, figures.usable)))
    counters, engaged = judged(counters, figures.call_tokens - figures.newest_whole_tokens, figures.threshold,
                               keep.pending)
    due = _due(figures, keep.pending)
    if due and not figures.over_limit:  # the breaker is asked only when a commit would otherwise start (asking
        # may release it); a call over the input limit cannot go out without one, whatever the breaker says
        counters, due = breaker_released(counters, keep.pending, figures.floor)
    if not due:
        note = BREAKER_NOTE if counters.breaker_at is not None else None
        return Plan("nothing", keep, False, counters, engaged, note)
    if figures.background_running:  # a commit a call started is still running: never a second one
        if figures.over_limit:
            return Plan("wait", keep, True, counters, engaged)  # what the running commit leaves may be enough
        return Plan("nothing", keep, False, counters, engaged, reason="commit_running")
    return Plan("commit", keep, sync or figures.over_limit, counters, engaged)


def _due(figures: CallFigures, pending: int) -> bool:
    """The call reaches the trigger with at least the floor to cover, or a messages trigger is reached — or the
    call is over the input limit less the reply's reserve (a trigger above that line) with anything to cover."""
    if figures.call_tokens >= figures.threshold and pending >= max(figures.floor, 1):
        return True
    if figures.over_limit and pending > 0:
        return True
    return (figures.max_messages is not None and len(figures.live_tokens) >= figures.max_messages
            and pending > 0)


def decide_overflow(figures: CallFigures, overflowed_tokens: int) -> KeepChoice:
    """After a context-length refusal of a call of `overflowed_tokens`: the keep of the one commit that aims
    under it (and under the trigger), measured at today's sizes: a refused call must shrink for sure."""
    return choose_keep(figures, int(figures.low_water * min(figures.threshold, overflowed_tokens)), as_shown=False)
