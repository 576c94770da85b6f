"""`state.forget`: what stays in place of a forgotten message, which seqs a forget may name, which commit
checkpoints go with the text (the engine's `forget_messages` on both backends: tests/engine/test_forget_messages.py)."""

from __future__ import annotations

import json

import pytest

from workmem.state.errors import InvalidInput
from workmem.state.forget import (
    FORGOTTEN_TEXT,
    checked_seqs,
    commit_threads_to_clear,
    forgotten_copy,
    is_forgotten,
)
from workmem.state.messages import FORGOTTEN_META, indexed_text, message_text, prepare_message
from workmem.state.stored import check_stored
from workmem.state.tokens import count_tokens

AT = "2026-12-01T10:00:00+00:00"
SECRET = "quorvex blimpwaddle 7731"


def stored(seq: int, role: str, parts: list[dict], meta: dict | None = None) -> dict:
    return {"id": f"m-{seq}", "seq": seq, "turn_id": "t1", "role": role, "created_at": AT, "tokens": 99,
            "meta": meta if meta is not None else {"fp": "0123456789abcdef", "lc_id": f"lc-{seq}"}, "parts": parts}


# -- the placeholder ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "parts", "kept"), [
    ("user", [{"type": "text", "text": SECRET}, {"type": "text", "text": "more"}],
     [{"type": "text", "text": FORGOTTEN_TEXT}]),
    ("assistant", [{"type": "text", "text": SECRET},
                   {"type": "tool_call", "id": "c1", "name": "look", "arguments": {"q": SECRET}}],
     [{"type": "text", "text": FORGOTTEN_TEXT}, {"type": "tool_call", "id": "c1", "name": "look", "arguments": {}}]),
    ("tool", [{"type": "tool_result", "tool_call_id": "c1", "name": "look", "content_ref": "sha256:" + "a" * 64,
               "sha256": "a" * 64, "size": 10, "preview": SECRET, "is_error": True}],
     [{"type": "tool_result", "tool_call_id": "c1", "name": "look", "content": FORGOTTEN_TEXT, "is_error": True}]),
    ("user", [{"type": "context", "uri": f"file://{SECRET}", "abstract": SECRET}],
     [{"type": "context", "uri": "", "abstract": FORGOTTEN_TEXT}]),
], ids=["text", "tool-call", "payload-result", "context"])
def test_a_forgotten_message_keeps_its_place_and_structure_but_none_of_its_text(role, parts, kept):
    msg = stored(3, role, parts, {"fp": "0123456789abcdef", "lc_id": "lc-3", "content_blocks": [SECRET],
                                  "workmem_clipped_bytes": 5})
    copy = forgotten_copy(msg, AT)
    assert {k: copy[k] for k in ("id", "seq", "turn_id", "role", "created_at")} == \
           {k: msg[k] for k in ("id", "seq", "turn_id", "role", "created_at")}
    assert copy["parts"] == kept
    assert copy["meta"] == {"lc_id": "lc-3", FORGOTTEN_META: AT}, "no fingerprint, no blocks: nothing derived"
    assert copy["tokens"] == count_tokens(message_text(copy))
    assert SECRET not in json.dumps(copy) and not check_stored(copy)
    assert is_forgotten(copy) and indexed_text(copy) == ""
    assert prepare_message(copy)[0]["parts"] == kept, "the placeholder is a valid message"


def test_forgetting_a_placeholder_again_changes_nothing_not_even_its_time():
    copy = forgotten_copy(stored(1, "user", [{"type": "text", "text": SECRET}]), AT)
    assert forgotten_copy(copy, "2030-01-01T00:00:00+00:00") == copy


def test_a_forged_forgotten_mark_neither_hides_a_message_from_forget_nor_from_the_index():
    forged = stored(1, "user", [{"type": "text", "text": SECRET}], {FORGOTTEN_META: "x"})
    assert SECRET not in json.dumps(forgotten_copy(forged, AT))
    normalised = prepare_message({"role": "user", "parts": [{"type": "text", "text": SECRET}],
                                  "meta": {FORGOTTEN_META: AT}})[0]
    assert FORGOTTEN_META not in normalised["meta"] and SECRET in indexed_text(normalised)


# -- which seqs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seqs", "reason"), [
    ([], "at least one"), ("1,2", "must be a list"), ([1, "2"], "integer"), ([True], "integer"),
    ([0], ">= 1"), ([3, 11], "newest seq is 10"),
], ids=["empty", "string", "str-seq", "bool", "zero", "past-the-end"])
def test_seqs_that_name_no_stored_message_are_refused(seqs, reason):
    with pytest.raises(InvalidInput, match=reason) as err:
        checked_seqs(seqs, 10)
    assert err.value.field == "seqs"


def test_seqs_are_distinct_and_ascending():
    assert checked_seqs((5, 1, 5, 10), 10) == [1, 5, 10]


# -- which commit checkpoints --------------------------------------------------------------------------------

def test_every_thread_goes_and_unfinished_commits_are_abandoned_unless_they_completed_their_archive():
    tasks = [{"task_id": "done", "status": "completed", "thread_id": "s/commit/done", "archive_id": "archive_001"},
             {"task_id": "pruned", "status": "completed", "thread_id": None, "archive_id": "archive_002"},
             {"task_id": "failed", "status": "failed", "thread_id": "s/commit/failed", "archive_id": "archive_003"},
             {"task_id": "wrote", "status": "running", "thread_id": "s/commit/wrote", "archive_id": "archive_003"},
             {"task_id": "skip", "status": "skipped", "thread_id": None, "archive_id": None}]
    writers = {"archive_001": "done", "archive_003": "wrote"}
    cleared, abandoned = commit_threads_to_clear(tasks, lambda t: writers.get(t["archive_id"]))
    assert [t["task_id"] for t in cleared] == ["done", "failed", "wrote"]
    assert abandoned == ["failed"], "the runner finishes `wrote` from its complete archive, without a checkpoint"


def test_an_older_lines_source_id_is_kept_as_the_placeholders_id():
    # lines written before `lc_id` name the LangChain id `source_id`: a re-sent copy must still find the placeholder
    copy = forgotten_copy(stored(2, "user", [{"type": "text", "text": SECRET}], {"source_id": "lc-2"}), AT)
    assert copy["meta"] == {"lc_id": "lc-2", FORGOTTEN_META: AT} and SECRET not in json.dumps(copy)
