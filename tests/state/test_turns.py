"""The covered range and the tool-pair rule: a tool call and its results are never split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import compute_pending_tokens

from workmem.state.errors import InvalidInput
from workmem.state.turns import choose_covered_range, message_units, tool_groups, validate_keep


def _msg(seq, role, parts, tokens=1):
    return {"seq": seq, "turn_id": "t1", "role": role, "parts": parts, "tokens": tokens}


def user(seq, text="q"):
    return _msg(seq, "user", [{"type": "text", "text": text}])


def call(seq, *ids):
    return _msg(seq, "assistant", [{"type": "tool_call", "id": i, "name": "f", "arguments": {}} for i in ids])


def result(seq, call_id):
    return _msg(seq, "tool", [{"type": "tool_result", "tool_call_id": call_id, "name": "f", "content": "r",
                               "is_error": False}])


def test_plain_cut_keeps_the_newest_k():
    msgs = [user(i) for i in range(1, 8)]
    assert choose_covered_range(msgs, 3) == (1, 4)
    assert choose_covered_range(msgs, 0) == (1, 7)
    assert choose_covered_range(msgs, 7) is None
    assert choose_covered_range(msgs, 50) is None
    assert choose_covered_range([], 0) is None


def test_cut_inside_a_tool_group_moves_earlier():
    msgs = [user(1), call(2, "a"), result(3, "a"), user(4), call(5, "b", "c"), result(6, "b"), result(7, "c")]
    assert choose_covered_range(msgs, 1) == (1, 4)  # cut between 6 and 7 → before 5
    assert choose_covered_range(msgs, 2) == (1, 4)
    assert choose_covered_range(msgs, 3) == (1, 4)  # cut exactly before the group: unchanged
    assert choose_covered_range(msgs, 5) == (1, 1)  # cut between 2 and 3 → before 2
    assert choose_covered_range(msgs, 6) == (1, 1)
    assert choose_covered_range(msgs, 7) is None


def test_group_at_the_start_covers_nothing():
    msgs = [call(1, "a"), result(2, "a"), user(3)]
    assert choose_covered_range(msgs, 2) is None


def test_interleaved_groups_merge():
    msgs = [user(1), call(2, "a"), call(3, "b"), result(4, "a"), user(5), result(6, "b"), user(7)]
    assert tool_groups(msgs) == [(1, 5)]
    assert message_units(msgs) == [(0, 0), (1, 5), (6, 6)]
    assert choose_covered_range(msgs, 2) == (1, 1)


def test_orphan_results_and_abandoned_calls_are_single_units():
    msgs = [result(1, "gone"), call(2, "x"), user(3)]  # a later user message: call x was abandoned
    assert tool_groups(msgs) == []
    assert choose_covered_range(msgs, 1) == (1, 2)


@pytest.mark.parametrize(("msgs", "keep", "covered"), [
    pytest.param([user(1), call(2, "a")], 0, (1, 1), id="unanswered-call-stays-live"),
    pytest.param([call(1, "a")], 0, None, id="unanswered-call-alone-covers-nothing"),
    pytest.param([user(1), call(2, "a"), result(3, "a")], 0, (1, 3), id="answered-call-is-covered"),
    pytest.param([user(1), call(2, "a", "b"), result(3, "a")], 0, (1, 1), id="partly-answered-call-stays-live"),
    pytest.param([user(1), call(2, "a"), call(3, "b"), result(4, "a")], 0, (1, 1),
                 id="answered-group-overlapping-an-open-one-stays-live"),
    pytest.param([user(1), call(2, "a"), _msg(3, "assistant", [{"type": "text", "text": "wait"}])], 0, (1, 1),
                 id="open-until-the-next-user-message"),
    pytest.param([user(1), call(2, "a"), user(3), call(4, "b")], 0, (1, 3), id="abandoned-call-does-not-pin-the-tail"),
    pytest.param([user(1), result(2, "a"), call(3, "a")], 0, (1, 2), id="a-result-before-its-call-does-not-answer-it"),
])
def test_a_call_waiting_for_its_result_is_never_covered(msgs, keep, covered):
    """A call of the newest turn without its result yet is an open tool group reaching to the end."""
    assert choose_covered_range(msgs, keep) == covered


def test_pending_tokens_brute_force_definition():
    msgs = [_msg(i, "user", [{"type": "text", "text": "x"}], tokens=i) for i in range(1, 6)]
    assert compute_pending_tokens(msgs, 2) == 1 + 2 + 3
    assert compute_pending_tokens(msgs, 0) == 15
    assert compute_pending_tokens(msgs, 10) == 0


@st.composite
def conversations(draw):
    """Random conversations: users, plain replies, multi-call assistants, results answered out of order
    and interleaved with other calls, orphan results and calls never answered."""
    msgs, open_calls, next_call = [], [], 0
    for _ in range(draw(st.integers(0, 40))):
        seq = len(msgs) + 1
        kind = draw(st.sampled_from(["user", "text", "call", "result", "result", "orphan"]))
        if kind == "user":
            msgs.append(user(seq))
        elif kind == "text":
            msgs.append(_msg(seq, "assistant", [{"type": "text", "text": "a"}]))
        elif kind == "call":
            ids = [f"c{next_call + i}" for i in range(draw(st.integers(1, 3)))]
            next_call += len(ids)
            open_calls += ids
            msgs.append(call(seq, *ids))
        elif kind == "result" and open_calls:
            msgs.append(result(seq, open_calls.pop(draw(st.integers(0, len(open_calls) - 1)))))
        elif kind == "orphan":
            msgs.append(result(seq, f"orphan{seq}"))
    return msgs


def _waiting_calls(msgs):
    """Indexes of the assistant messages of the newest turn holding a call no later message answers."""
    last_user = max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=-1)
    waiting = []
    for j, m in enumerate(msgs):
        ids = {p["id"] for p in m["parts"] if p["type"] == "tool_call"}
        answered = {p["tool_call_id"] for n in msgs[j + 1:] for p in n["parts"] if p["type"] == "tool_result"}
        if j > last_user and ids - answered:
            waiting.append(j)
    return waiting


def _splits(msgs, cut):
    """True when some tool result and its call end up on different sides of `cut`, or a call still waiting
    for its result would be covered (its result, stored later, would then be cut off from it)."""
    where = {p["id"]: i for i, m in enumerate(msgs) for p in m["parts"] if p["type"] == "tool_call"}
    for i, m in enumerate(msgs):
        for p in m["parts"]:
            j = where.get(p.get("tool_call_id"))
            if p["type"] == "tool_result" and j is not None and (i < cut) != (j < cut):
                return True
    return any(j < cut for j in _waiting_calls(msgs))


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(0, 45))
def test_no_cut_ever_separates_a_result_from_its_call(msgs, keep):
    covered = choose_covered_range(msgs, keep)
    target = len(msgs) - keep
    if covered is None:
        assert all(_splits(msgs, c) for c in range(1, target + 1))  # no smaller valid cut existed
        return
    start, end = covered
    cut = next(i for i, m in enumerate(msgs) if m["seq"] == end) + 1
    assert start == msgs[0]["seq"]
    assert cut <= target  # the tail holds at least keep messages
    assert not _splits(msgs, cut)
    assert all(_splits(msgs, c) for c in range(cut + 1, target + 1))  # the largest valid cut


@settings(max_examples=200, deadline=None)
@given(conversations())
def test_units_partition_the_conversation(msgs):
    units = message_units(msgs)
    flat = [i for lo, hi in units for i in range(lo, hi + 1)]
    assert flat == list(range(len(msgs)))
    for lo, _hi in units:
        assert not _splits(msgs, lo)


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(0, 45))
def test_a_waiting_call_is_never_covered_so_its_late_result_finds_it_live(msgs, keep):
    covered = choose_covered_range(msgs, keep)
    cut = sum(1 for m in msgs if covered and m["seq"] <= covered[1])
    assert all(j >= cut for j in _waiting_calls(msgs)), "a call waiting for its result was archived"
    late = [p["id"] for j in _waiting_calls(msgs) for p in msgs[j]["parts"] if p["type"] == "tool_call"]
    answered = [*msgs, *(result(len(msgs) + 1 + k, i) for k, i in enumerate(late))]
    assert not _splits(answered, cut), "a result stored after the commit is cut off from its call"


@pytest.mark.parametrize(("value", "expected"), [(0, 0), (7, 7), (10_000, 10_000), (99_999, 10_000)])
def test_validate_keep_clamps_huge_counts(value, expected):
    assert validate_keep(value) == expected


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_validate_keep_names_the_field(bad):
    with pytest.raises(InvalidInput, match="keep_recent_count"):
        validate_keep(bad)
