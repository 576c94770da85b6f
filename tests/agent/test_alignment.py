"""`graphs/agent/alignment.py` on its own: which state messages are already stored and which are new.

The behaviour files (test_agent_ingestion.py, test_alignment_hostile_inputs.py) drive alignment through a
real agent; here `align` is called directly on normalised state messages and on messages stored in a real
root, one rule per case: ids first, an edit is new, the run's own messages match by id only, fingerprints
count only when anchored, a stateless history is matched in order with at least two messages, and the
newest archive is read only when the live messages give no id anchor.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from oracles import source_turn_range

from workmem.graphs.agent.alignment import MIN_FINGERPRINT_RUN, Alignment, align, archive_keys, fingerprint_of
from workmem.state.messages import FINGERPRINT_META, fingerprint, normalize_message
from workmem.state.storage import open_storage

WM = "# Working Memory\n\n## Session Title\nAlignment\n"


@pytest.fixture
def storage(root):
    opened = open_storage(root, durable=False)
    yield opened
    opened.close()


def h(text: str, id: str | None = None) -> HumanMessage:
    return HumanMessage(content=text, id=id)


def a(text: str, id: str | None = None, calls: list[tuple[str, str]] | None = None) -> AIMessage:
    tool_calls = [{"id": cid, "name": name, "args": {}, "type": "tool_call"} for cid, name in calls or []]
    return AIMessage(content=text, id=id, tool_calls=tool_calls)


def norm(messages: list[Any]) -> list[dict[str, Any]]:
    return [normalize_message(m) for m in messages]


def store(storage: Any, messages: list[Any], session: str = "s") -> list[dict[str, Any]]:
    """Append to the real session and return its live messages (what the middleware aligns against)."""
    storage.sessions.append(session, messages)
    return storage.sessions.live_messages(session)


def no_archive() -> list[dict[str, Any]]:
    return []


def never_read() -> list[dict[str, Any]]:
    raise AssertionError("the newest archive was read although the live messages gave an id anchor")


# -- the outcome type -----------------------------------------------------------------------------------

def test_an_empty_alignment_is_unanchored_and_holds_nothing():
    found = Alignment()
    assert (found.anchored, found.holds_stored, found.by_ids, found.new, found.anchor) == (False, False, True, [], -1)
    assert found.shown({1, 2}) == {}


def test_shown_keeps_only_positions_whose_stored_message_is_live():
    found = Alignment(stored={0: {"seq": 3}, 2: {"seq": 7}, 4: {"seq": 9}}, anchor=4)
    assert found.shown({7, 9, 11}) == {2: {"seq": 7}, 4: {"seq": 9}}
    assert found.anchored and found.holds_stored


def test_fingerprint_of_prefers_the_recorded_one_and_otherwise_computes_it():
    msg = normalize_message(h("hello"))
    assert fingerprint_of(msg) == msg["meta"][FINGERPRINT_META] == fingerprint(msg)
    assert fingerprint_of({**msg, "meta": {FINGERPRINT_META: "recorded-when-stored"}}) == "recorded-when-stored"
    assert fingerprint_of({**msg, "meta": {}}) == fingerprint(msg)
    assert fingerprint_of({**msg, "meta": {FINGERPRINT_META: 42}}) == fingerprint(msg), "a non-string is ignored"
    assert fingerprint_of(normalize_message(h("hello", id="x"))) == fingerprint_of(msg), "ids are not in it"
    assert fingerprint_of(normalize_message(a("hello"))) != fingerprint_of(msg), "the role is"


# -- ids first ------------------------------------------------------------------------------------------

def test_nothing_stored_means_every_state_message_is_new(storage):
    found = align(norm([h("one", "h1"), a("two", "a1")]), [], no_archive)
    assert (found.new, found.stored, found.anchored) == ([0, 1], {}, False)
    assert align([], [], no_archive).new == []


def test_messages_matched_by_id_are_stored_and_what_follows_the_anchor_is_new(storage):
    live = store(storage, [h("one", "h1"), a("two", "a1")])
    found = align(norm([h("one", "h1"), a("two", "a1"), h("three", "h2")]), live, never_read)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {0: 1, 1: 2}
    assert (found.new, found.anchor, found.by_ids) == ([2], 1, True)


def test_the_anchor_is_the_newest_stored_message_found_by_id(storage):
    live = store(storage, [h("one", "h1"), a("two", "a1"), h("three", "h2"), a("four", "a2")])
    # the state lost its middle (RemoveMessage): the anchor is still the newest id match
    found = align(norm([h("one", "h1"), a("four", "a2"), h("five", "h3")]), live, never_read)
    assert found.anchor == 1 and found.stored[1]["seq"] == 4 and found.new == [2]
    assert found.shown({m["seq"] for m in live}) == {0: live[0], 1: live[3]}


def test_a_same_id_with_other_content_is_an_edit_and_is_new(storage):
    live = store(storage, [h("one", "h1"), a("the answer is 4", "a1")])
    found = align(norm([h("one", "h1"), a("the answer is 5", "a1")]), live, never_read)
    assert found.new == [1] and 1 not in found.stored and found.stored[0]["seq"] == 1


def test_the_same_words_with_another_image_under_one_id_is_an_edit(storage):
    def shot(data: str) -> HumanMessage:
        return HumanMessage([{"type": "text", "text": "what is on this chart?"},
                             {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}], id="h1")

    live = store(storage, [shot("AAAA"), a("a bar chart", "a1")])
    assert align(norm([shot("AAAA"), a("a bar chart", "a1")]), live, never_read).new == []
    found = align(norm([shot("BBBB"), a("a bar chart", "a1")]), live, never_read)
    assert 0 in found.new and 0 not in found.stored


def test_after_an_edited_anchor_everything_is_new(storage):
    live = store(storage, [h("one", "h1"), a("two", "a1"), h("three", "h2")])
    state = norm([h("one", "h1"), a("two", "a1"), h("three, edited", "h2"), a("four")])
    found = align(state, live, never_read)
    assert found.new == [2, 3] and set(found.stored) == {0, 1}


def test_after_the_anchor_the_next_stored_message_matches_by_fingerprint(storage):
    # the same reply came back with a fresh id (a client regenerating ids): anchored, so it is the stored one
    live = store(storage, [h("one", "h1"), a("two", "a-old"), h("three", "h2-old")])
    found = align(norm([h("one", "h1"), a("two", "a-new"), h("three", "h2-new"), a("new reply")]), live, never_read)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {0: 1, 1: 2, 2: 3}
    assert found.new == [3]


def test_after_the_anchor_the_first_mismatch_makes_the_rest_new(storage):
    live = store(storage, [h("one", "h1"), a("two", "a-old"), h("three", "h2-old")])
    state = norm([h("one", "h1"), a("something else"), h("three", "h2-new")])
    found = align(state, live, never_read)
    assert found.new == [1, 2], "an identical message after a mismatch is not matched out of order"


def test_the_runs_own_messages_match_by_id_only(storage):
    live = store(storage, [h("one", "h1"), a("ok")])
    state = norm([h("one", "h1"), a("ok", "fresh-id")])
    assert align(state, live, never_read).stored.keys() == {0, 1}, "from the input: matched by fingerprint"
    own = align(state, live, never_read, first_output=1)
    assert own.new == [1] and own.stored.keys() == {0}, "the agent's own reply did not exist before the run"


def test_a_gap_between_id_matches_is_filled_by_fingerprint_or_is_new(storage):
    live = store(storage, [h("one", "h1"), a("two", "a-stored"), h("three", "h2")])
    matched = align(norm([h("one", "h1"), a("two", "a-other"), h("three", "h2")]), live, never_read)
    assert {pos: m["seq"] for pos, m in matched.stored.items()} == {0: 1, 1: 2, 2: 3} and matched.new == []
    unmatched = align(norm([h("one", "h1"), a("never stored", "x"), h("three", "h2")]), live, never_read)
    assert unmatched.new == [1] and set(unmatched.stored) == {0, 2}, "never dropped"


def test_a_reused_id_matches_the_newest_stored_message_with_it(storage):
    live = store(storage, [h("first question", "same"), a("first answer"), h("second question", "same")])
    found = align(norm([h("second question", "same"), a("second answer")]), live, never_read)
    assert found.stored[0]["seq"] == 3 and found.new == [1]


# -- fingerprints only when anchored (stateless clients) ------------------------------------------------

def test_an_unanchored_single_fingerprint_match_is_a_new_message(storage):
    live = store(storage, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    found = align(norm([{"role": "user", "content": "hi"}]), live, no_archive)
    assert found.new == [0] and not found.anchored, "a client repeating an identical turn stores it again"
    assert MIN_FINGERPRINT_RUN == 2


def test_a_stateless_history_is_matched_in_order_from_the_start(storage):
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    live = store(storage, history)
    found = align(norm([*history, {"role": "user", "content": "and now?"}]), live, no_archive)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {0: 1, 1: 2}
    assert (found.new, found.anchor, found.by_ids) == ([2], 1, False)


def test_a_stored_message_without_a_recorded_fingerprint_is_hashed_once_per_alignment(storage, monkeypatch):
    import workmem.graphs.agent.alignment as alignment

    # the newest archived reply "ok" recurs in the client's history: every place after it is a possible start,
    # and each start matches against the live messages again
    said = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    later = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(20)]
    stored = store(storage, [*said, *later])
    archived, live = stored[:2], stored[2:]
    assert all("fp" not in m["meta"] for m in stored), "plain id-less messages are stored without one"
    hashed: list[int] = []
    real = alignment.fingerprint
    monkeypatch.setattr(alignment, "fingerprint", lambda msg: hashed.append(msg.get("seq")) or real(msg))
    client = norm([*said, said[1], said[1], *later, {"role": "user", "content": "and now?"}])
    found = align(client, live, lambda: archived)
    assert {m["seq"] for m in live} <= {m["seq"] for m in found.stored.values()}
    assert found.new == [len(client) - 1], "only the new question is new"
    stored_hashes = [seq for seq in hashed if seq is not None]
    assert len(stored_hashes) == len(set(stored_hashes)), "each stored message hashed at most once"


def test_a_stateless_history_must_repeat_stored_messages_in_their_order(storage):
    live = store(storage, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                           {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}])
    later = align(norm([{"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]), live, no_archive)
    assert later.stored.keys() == {0, 1} and later.new == [], "stored messages the client does not hold are skipped"
    swapped = align(norm([{"role": "assistant", "content": "d"}, {"role": "user", "content": "c"}]), live,
                    no_archive)
    assert swapped.new == [0, 1], "one message in order is below the two-message run: all new"


def test_stored_tool_traffic_the_client_does_not_hold_is_skipped(storage):
    live = store(storage, [{"role": "user", "content": "read it"},
                           {"role": "assistant", "content": "",
                            "tool_calls": [{"id": "c1", "type": "function",
                                            "function": {"name": "read_file", "arguments": "{}"}}]},
                           {"role": "tool", "tool_call_id": "c1", "content": "file body"},
                           {"role": "assistant", "content": "It says hello."}])
    state = norm([{"role": "user", "content": "read it"}, {"role": "assistant", "content": "It says hello."},
                  {"role": "user", "content": "thanks"}])
    found = align(state, live, no_archive)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {0: 1, 1: 4} and found.new == [2]


def test_a_plain_text_resend_of_a_reply_that_carried_tool_calls_is_the_same_message(storage):
    live = store(storage, [h("check the logs"), a("Let me look.", calls=[("c1", "grep")]),
                           ToolMessage(content="no errors", tool_call_id="c1")])
    state = norm([{"role": "user", "content": "check the logs"}, {"role": "assistant", "content": "Let me look."},
                  {"role": "user", "content": "and?"}])
    found = align(state, live, no_archive)
    assert set(found.stored) == {0, 1} and found.new == [2]


def test_after_an_archive_a_stateless_history_is_matched_right_after_the_newest_archived_message(storage):
    history = [{"role": "user", "content": f"question {i}"} if i % 2 == 0 else
               {"role": "assistant", "content": f"answer {i}"} for i in range(4)]
    storage.sessions.append("s", history)
    covered = storage.sessions.live_messages("s")[:2]
    storage.sessions.write_archive("s", {"archive_id": "archive_001", "session_id": "s",
                                         "source_turn_range": source_turn_range(covered)}, covered, WM, "x")
    live = storage.sessions.live_messages("s")
    archived = storage.sessions.archive_messages("s", "archive_001")
    found = align(norm([*history, {"role": "user", "content": "new"}]), live, lambda: archived)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {1: 2, 2: 3, 3: 4}
    assert found.new == [4] and not found.by_ids
    only_new = align(norm([{"role": "user", "content": "new"}]), live, lambda: archived)
    assert only_new.new == [0] and not only_new.anchored


def archive_first(storage: Any, messages: list[Any], covered: int) -> tuple[list[Any], Any]:
    """Store `messages` in session "s", archive the first `covered`; return the live messages and the archive's
    keys as the middleware reads them."""
    storage.sessions.append("s", messages)
    older = storage.sessions.live_messages("s")[:covered]
    storage.sessions.write_archive("s", {"archive_id": "archive_001", "session_id": "s",
                                         "source_turn_range": source_turn_range(older)}, older, WM, "x")
    archived = storage.sessions.archive_messages("s", "archive_001")
    return storage.sessions.live_messages("s"), (lambda: archived, lambda: archive_keys(archived))


def test_a_history_the_agent_trimmed_is_matched_after_its_leading_archived_messages(storage):
    """A client keeping what the agent returned: the state lost the archived messages it knew by id (here the
    newest archived one) and kept the others; its live run follows the archived messages it still holds."""
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(8)]
    live, (newest, keys) = archive_first(storage, turns, covered=5)
    client = norm([*turns[:4], *turns[5:], {"role": "user", "content": "new"}])  # "turn 4" trimmed
    found = align(client, live, newest, archived_keys=keys)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {4: 6, 5: 7, 6: 8}
    assert found.new == [7], "only the new message is new"
    trimmed_to_live = align(norm([*turns[5:], {"role": "user", "content": "new"}]), live, newest,
                            archived_keys=keys)
    assert trimmed_to_live.new == [3], "a state trimmed down to the live run aligns from its start"


def test_archived_messages_before_a_single_repeated_live_one_never_make_a_new_message_stored(storage):
    """A client sending its system prompt (or an old reply) and one new turn that repeats a live message: the
    archived messages counted toward the two-message run and the new "yes" was taken for the stored one: lost."""
    turns = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Question 0?"},
             {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Question 1?"},
             {"role": "user", "content": "yes"}, {"role": "assistant", "content": "Answer 1."}]
    live, (newest, keys) = archive_first(storage, turns, covered=4)  # the newest archived: "Question 1?"
    prompt_then_yes = align(norm([turns[0], {"role": "user", "content": "yes"}]), live, newest, archived_keys=keys)
    assert prompt_then_yes.new == [1] and not prompt_then_yes.stored, "the prompt is stored, the turn is new"
    ok_then_yes = align(norm([{"role": "assistant", "content": "ok"}, {"role": "user", "content": "yes"}]), live,
                        newest, archived_keys=keys)
    assert ok_then_yes.new == [0, 1], "a repeated turn is stored again, never lost"


def test_an_archived_system_prompt_a_client_re_sends_is_not_stored_again(storage):
    turns = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi?"},
             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "More?"}]
    live, (newest, keys) = archive_first(storage, turns, covered=2)
    found = align(norm([turns[0], {"role": "user", "content": "Next?"}]), live, newest, archived_keys=keys)
    assert found.new == [1] and not found.stored


def test_a_history_of_archived_messages_only_is_not_taken_for_the_live_run(storage):
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"} for i in range(6)]
    live, (newest, keys) = archive_first(storage, turns, covered=4)
    only_archived = align(norm([*turns[:3], {"role": "user", "content": "fork"}]), live, newest, archived_keys=keys)
    assert not only_archived.stored


def test_a_parallel_calls_results_re_sent_in_another_order_are_the_stored_ones(storage):
    calls = {"role": "assistant", "content": "reading both", "tool_calls": [
        {"id": c, "type": "function", "function": {"name": "cat", "arguments": "{}"}} for c in ("c1", "c2")]}
    results = [{"role": "tool", "tool_call_id": c, "content": f"body of {c}"} for c in ("c1", "c2")]
    history = [{"role": "user", "content": "read"}, calls, *results, {"role": "assistant", "content": "done"}]
    live = store(storage, history)
    found = align(norm([*history[:2], results[1], results[0], history[-1], {"role": "user", "content": "more"}]),
                  live, no_archive)
    assert {pos: m["seq"] for pos, m in found.stored.items()} == {0: 1, 1: 2, 2: 4, 3: 3, 4: 5}
    assert found.new == [5]


def test_among_several_places_the_one_agreeing_longest_with_the_archive_wins(storage):
    # the newest archived message ("ok") appears twice in the state; only the second place is preceded by
    # the archive's own history, so matching starts after it
    turns = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "ok"},
             {"role": "user", "content": "y"}, {"role": "assistant", "content": "ok"}]
    storage.sessions.append("s", [*turns, {"role": "user", "content": "z"}])
    covered = storage.sessions.live_messages("s")[:4]
    storage.sessions.write_archive("s", {"archive_id": "archive_001", "session_id": "s",
                                         "source_turn_range": source_turn_range(covered)}, covered, WM, "x")
    live, archived = storage.sessions.live_messages("s"), storage.sessions.archive_messages("s", "archive_001")
    found = align(norm([*turns, {"role": "user", "content": "z"}, {"role": "user", "content": "new"}]), live,
                  lambda: archived)
    assert found.stored[3]["seq"] == 4 and found.stored[4]["seq"] == 5 and found.new == [5]


def test_the_newest_archive_is_read_only_without_a_live_id_anchor(storage):
    live = store(storage, [{"role": "user", "content": "no id"}])
    reads: list[int] = []

    def newest_archive() -> list[dict[str, Any]]:
        reads.append(1)
        return []

    align(norm([h("something", "h9")]), live, newest_archive)
    assert reads == [1]
    anchored = store(storage, [h("with id", "h1")], session="t")
    align(norm([h("with id", "h1")]), anchored, never_read)  # never_read raises if called


def test_an_id_anchor_on_the_newest_archived_message_counts_when_nothing_live_matches(storage):
    """A fork from an archived checkpoint: its newest message is archived, so the archive supplies the anchor."""
    storage.sessions.append("s", [h("one", "h1"), a("two", "a1"), h("three", "h2")])
    covered = storage.sessions.live_messages("s")[:2]
    storage.sessions.write_archive("s", {"archive_id": "archive_001", "session_id": "s",
                                         "source_turn_range": source_turn_range(covered)}, covered, WM, "x")
    live, archived = storage.sessions.live_messages("s"), storage.sessions.archive_messages("s", "archive_001")
    found = align(norm([h("one", "h1"), a("two", "a1"), h("fork question", "f1")]), live, lambda: archived)
    assert found.by_ids and found.anchor == 1 and found.stored[1]["seq"] == 2 and found.new == [2]
    assert found.shown({m["seq"] for m in live}) == {}, "the archived anchor is not a live message"
