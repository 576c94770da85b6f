"""`graphs/context/decision.py`: the one rule for when a commit is due before a model call and what it keeps.

Pure: each row is a call's figures and the session's counters, and the plan the rule must return.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from workmem.graphs.context.decision import (
    BREAKER_NOTE,
    INEFFECTIVE_LIMIT,
    CallFigures,
    Counters,
    breaker_released,
    choose_keep,
    decide,
    decide_overflow,
    figures_for,
    judged,
    newest_step_tokens,
)
from workmem.state.turns import choose_covered_range


def figures(**changes) -> CallFigures:
    """A call of 9 000 tokens at an 8 000-token trigger: ten live messages of 500 tokens, two user turns."""
    base = CallFigures(
        call_tokens=9_000, fixed_tokens=1_000, threshold=8_000, floor=2_000, input_limit=100_000, reserve=15_000,
        live_tokens=(500,) * 10, turn_starts=(True, False, False, False, False, True, False, False, False, False),
        newest_step_tokens=500, pinned_tokens=0, keep=("messages", 2), low_water=0.5, max_messages=None,
        background_running=False)
    return replace(base, **changes)


DECISIONS = [
    # (name, figures, counters, sync, action, wait)
    ("under the trigger: nothing", figures(call_tokens=7_999), Counters(), True, "nothing", False),
    ("at the trigger, sync: commit and wait", figures(call_tokens=8_000), Counters(), True, "commit", True),
    ("at the trigger, background: commit without waiting", figures(), Counters(), False, "commit", False),
    ("over the input limit, background: commit and wait", figures(call_tokens=90_000), Counters(), False,
     "commit", True),
    ("a running background commit and over the limit: wait for it", figures(call_tokens=90_000,
     background_running=True), Counters(), False, "wait", True),
    ("a running background commit under the limit: nothing (never a second commit)",
     figures(background_running=True), Counters(), False, "nothing", False),
    ("too little to cover (under the floor): nothing", figures(floor=5_000), Counters(), True, "nothing", False),
    ("a messages trigger reached: commit", figures(call_tokens=100, max_messages=10), Counters(), True, "commit",
     True),
    ("a messages trigger not reached: nothing", figures(call_tokens=100, max_messages=11), Counters(), True,
     "nothing", False),
    ("a messages trigger with nothing outside the keep: nothing",
     figures(call_tokens=100, max_messages=10, keep=("messages", 10), low_water=0.9), Counters(), True, "nothing",
     False),
    ("the breaker engaged and pending has not grown: nothing", figures(), Counters(breaker_at=4_000), True,
     "nothing", False),
    ("the breaker engaged and pending grew by the floor: commit", figures(), Counters(breaker_at=2_000), True,
     "commit", True),
    # a trigger above the input limit less the reserve (here 9 000 of a 10 000 limit, 1 500 reserved): the call
    # over 8 500 cannot go out, so it commits before the trigger, under the floor, whatever the breaker says
    ("over the usable window below the trigger, background: commit and wait",
     figures(call_tokens=8_600, threshold=9_000, input_limit=10_000, reserve=1_500), Counters(), False, "commit",
     True),
    ("over the usable window with little to cover and the breaker engaged: commit",
     figures(call_tokens=8_600, threshold=9_000, input_limit=10_000, reserve=1_500, floor=50_000),
     Counters(breaker_at=4_000), True, "commit", True),
    ("just under the usable window below the trigger: nothing",
     figures(call_tokens=8_500, threshold=9_000, input_limit=10_000, reserve=1_500), Counters(), True, "nothing",
     False),
]


@pytest.mark.parametrize(("name", "call", "counters", "sync", "action", "wait"), DECISIONS,
                         ids=[d[0] for d in DECISIONS])
def test_decide(name, call, counters, sync, action, wait):
    plan = decide(call, counters, sync=sync)
    assert (plan.action, plan.wait) == (action, wait), name


def test_the_keep_is_capped_by_the_low_water_mark_never_below_the_newest_step():
    # keep two messages (1 000 tokens) fits 0.5 × 8 000 − 1 000 fixed = 3 000
    assert choose_keep(figures(), 4_000).keep == ("messages", 2)
    capped = choose_keep(figures(keep=("messages", 9)), 4_000)
    assert capped.capped and capped.keep == ("tokens", 3_000) and capped.window == 4_500
    assert capped.pending == 2_500, "a token keep cuts at a turn start: the newest turn (2 500 tokens) stays"
    tight = choose_keep(figures(keep=("messages", 9), fixed_tokens=10_000, newest_step_tokens=1_500), 4_000)
    assert tight.keep == ("tokens", 1_500), "never less than the newest step"
    pinned = choose_keep(figures(keep=("messages", 9), pinned_tokens=1_000), 4_000)
    assert pinned.keep == ("tokens", 2_000), "the pinned user message counts in the share"


def test_the_low_water_mark_measures_the_tail_as_the_call_after_the_commit_shows_it():
    # one turn of ten 500-token messages; past a commit the six oldest (tool results) show as 100-token synopses
    one_turn = figures(keep=("messages", 10), turn_starts=(True,) + (False,) * 9, floor=500)
    today = choose_keep(one_turn, 3_500)  # 0.5 × 7 000 less 1 000 fixed: 2 500 tokens for the tail
    assert today.keep == ("tokens", 2_500) and today.pending == 2_500, "at today's sizes five messages fit"
    shown = replace(one_turn, kept_tokens=(100,) * 6 + (500,) * 4)
    choice = choose_keep(shown, 3_500)
    assert choice.capped and choice.keep == ("messages", 9) and choice.pending == 500, "as shown: 5 × 100 + 4 × 500"
    assert choose_keep(replace(shown, keep=("messages", 7)), 3_500).keep == ("messages", 7), "never past the keep"
    floor = choose_keep(replace(shown, floor=2_000), 3_500)
    assert floor.keep == ("messages", 6) and floor.pending == 2_000, "the commit still covers the floor"
    assert decide_overflow(shown, 7_000).keep == ("tokens", 2_500), "a refused call shrinks at today's sizes"


def test_the_tail_as_shown_keeps_tool_groups_whole():
    # messages 4-7 are a call with three results; 8-9 the newest step. Within 1 400 tokens as shown, a cut at 7
    # would split the group (and the engine would keep it whole: 2 300 tokens); the cut falls before the step
    grouped = figures(keep=("messages", 10), turn_starts=(True,) + (False,) * 9, floor=500, newest_step_tokens=600,
                      kept_tokens=(100,) * 5 + (500,) * 3 + (100, 500), unit_starts=(0, 1, 2, 3, 4, 8))
    assert choose_keep(grouped, 2_400).keep == ("messages", 2)

def test_an_ineffective_commit_is_counted_and_three_engage_the_breaker():
    counters = Counters(check_next=True)
    for i in range(1, INEFFECTIVE_LIMIT):
        counters, engaged = judged(counters, 9_000, 8_000, 3_000)
        assert counters.ineffective == i and not engaged and not counters.check_next
        counters = replace(counters, check_next=True)
    counters, engaged = judged(counters, 9_000, 8_000, 3_000)
    assert engaged and counters.breaker_at == 3_000
    helped, engaged = judged(Counters(ineffective=2, check_next=True), 7_000, 8_000, 3_000)
    assert helped == Counters() and not engaged, "a commit that helped resets the count"
    assert judged(Counters(ineffective=2), 9_000, 8_000, 3_000) == (Counters(ineffective=2), False), \
        "judged only right after a commit"


def test_the_breaker_holds_until_pending_grew_by_the_floor():
    held = Counters(ineffective=3, breaker_at=3_000)
    assert breaker_released(held, 4_999, 2_000) == (held, False)
    assert breaker_released(held, 5_000, 2_000) == (Counters(), True)


def test_an_engaged_breaker_is_noted_and_engaging_it_is_reported_once():
    plan = decide(figures(), Counters(ineffective=2, check_next=True), sync=True)
    assert plan.breaker_engaged and plan.action == "nothing" and plan.breaker_note == BREAKER_NOTE
    again = decide(figures(), plan.counters, sync=True)
    assert not again.breaker_engaged and again.breaker_note == BREAKER_NOTE
    assert decide(figures(), Counters(), sync=True).breaker_note is None


def test_after_an_overflow_the_commit_aims_under_the_refused_call():
    assert decide_overflow(figures(keep=("messages", 9)), 5_000).keep == ("tokens", 1_500)
    assert decide_overflow(figures(keep=("messages", 9)), 50_000).keep == ("tokens", 3_000), \
        "never above the trigger's low-water share"


def test_the_newest_step_is_a_tool_call_with_its_results():
    live = [{"role": "user", "tokens": 10}, {"role": "assistant", "tokens": 20}, {"role": "tool", "tokens": 30},
            {"role": "tool", "tokens": 40}]
    assert newest_step_tokens(live) == 90
    assert newest_step_tokens(live[:2]) == 20
    assert newest_step_tokens([{"role": "tool", "tokens": 5}]) == 5


def _stored(seq, role, tokens, calls=(), answers=None):
    parts = [{"type": "tool_call", "id": c, "name": "t"} for c in calls]
    if answers:
        parts = [{"type": "tool_result", "tool_call_id": answers, "name": "t", "content": "x"}]
    return {"seq": seq, "role": role, "tokens": tokens, "parts": parts}


def test_a_commit_due_as_shown_covers_what_it_counts_in_whole_groups():
    # a running turn (its user message archived): a call with three 1 000-token results, then one more step; as
    # shown only the oldest result shrinks, so the tail fits and covers under the floor — the cut moves further,
    # to a group start (inside the group the engine would keep the group whole and cover nothing)
    live = [_stored(10, "assistant", 50, ("a", "b", "c")), _stored(11, "tool", 1_000, answers="a"),
            _stored(12, "tool", 1_000, answers="b"), _stored(13, "tool", 1_000, answers="c"),
            _stored(14, "assistant", 50, ("d",)), _stored(15, "tool", 300, answers="d")]
    shown = figures_for(live, call_tokens=8_500, fixed_tokens=1_000, threshold=8_000, floor=1_000,
                        input_limit=100_000, reserve=10_000, keep=("messages", 10), low_water=0.5,
                        max_messages=None, as_synopsis={11: 100})
    plan = decide(shown, Counters(), sync=True)
    assert plan.action == "commit" and plan.keep.keep == ("messages", 2) and plan.keep.pending == 3_050
    assert choose_covered_range(live, plan.keep.keep) == (10, 13), "the engine covers what pending counts"


def test_over_the_usable_window_the_commit_aims_under_half_of_it_not_half_the_trigger():
    # a trigger far above what a call may carry (8 500 of a 10 000 limit): one commit must buy several calls
    call = figures(call_tokens=8_600, threshold=1_000_000, input_limit=10_000, reserve=1_500, keep=("messages", 10))
    plan = decide(call, Counters(), sync=False)
    assert (plan.action, plan.wait) == ("commit", True)
    assert plan.keep.capped and plan.keep.allowance == 8_500 // 2 - call.fixed_tokens
