"""messages.jsonl lines: parsing with torn tails and bad lines (file and line reported), encoding a batch."""

from __future__ import annotations

import json

import pytest

from workmem.state.errors import CorruptLine
from workmem.state.files import jsonl


def line(seq: int, text: str = "hi", role: str = "user") -> bytes:
    return json.dumps({"id": f"m-{seq}", "seq": seq, "turn_id": f"t{seq}", "role": role, "created_at": "x",
                       "tokens": 1, "meta": {}, "parts": [{"type": "text", "text": text}]}).encode()


def test_complete_lines_parse_and_a_torn_tail_is_ignored():
    data = line(1) + b"\n" + line(2) + b"\n" + line(3)[:20]
    parsed = jsonl.parse(data, "f.jsonl")
    assert [m["seq"] for m in parsed.messages] == [1, 2]
    assert parsed.end == len(line(1)) + len(line(2)) + 2, "bytes after the last newline are a torn write"
    assert parsed.problems == [] and parsed.lines == 2


def test_a_whole_last_message_without_its_newline_is_a_line_a_writer_ends():
    data = line(1) + b"\n" + line(2)
    parsed = jsonl.parse(data, "f.jsonl")
    assert [m["seq"] for m in parsed.messages] == [1, 2] and parsed.unterminated and parsed.end == len(data)
    assert jsonl.complete_lines(data) == data + b"\n"
    torn = line(1) + b"\n" + line(2)[:-1]
    assert not jsonl.parse(torn, "f.jsonl").unterminated and jsonl.complete_lines(torn) == line(1) + b"\n"
    cache = jsonl.ParseCache()
    assert [m["seq"] for m in cache.parse(data, "f").messages] == [1, 2]
    ended = data + b"\n" + line(3) + b"\n"
    assert [(m["seq"], n) for m, n in zip(cache.parse(ended, "f").messages, cache.parse(ended, "f").line_nos,
                                          strict=True)] == [(1, 1), (2, 2), (3, 3)]


@pytest.mark.parametrize(("bad", "reason"), [
    (b"{not json", "invalid JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"seq": 0, "role": "user", "parts": [], "tokens": 1}).encode(), "bad seq 0"),
    (json.dumps({"seq": True, "role": "user", "parts": [], "tokens": 1}).encode(), "bad seq True"),
    (json.dumps({"seq": 5, "role": "robot", "parts": [], "tokens": 1}).encode(), "bad role 'robot'"),
    (json.dumps({"seq": 5, "role": "user", "parts": {}, "tokens": 1}).encode(), "parts is not a list"),
    (json.dumps({"seq": 5, "role": "user", "parts": [], "tokens": -1}).encode(), "bad tokens -1"),
    (b"\xff\xfe", "invalid JSON"),
])
def test_a_bad_line_is_reported_with_file_and_line_and_the_rest_is_read(bad, reason):
    parsed = jsonl.parse(line(1) + b"\n\n" + bad + b"\n" + line(4) + b"\n", "dir/messages.jsonl", first_line=10)
    assert [m["seq"] for m in parsed.messages] == [1, 4]
    (problem,) = parsed.problems
    assert isinstance(problem, CorruptLine)
    assert (problem.path, problem.line_no) == ("dir/messages.jsonl", 12)
    assert reason in str(problem) and "dir/messages.jsonl" in str(problem)
    assert parsed.bad_lines == [bad], "kept verbatim so garbage collection never deletes it"


def test_stored_lines_number_turns_and_encode_one_line_each():
    prepared = [({"role": r, "parts": [{"type": "text", "text": t}], "meta": {}}, None)
                for r, t in (("assistant", "before"), ("user", "q1"), ("assistant", "a1"), ("user", "q2"))]
    stored, data, turn = jsonl.stored_lines(prepared, [1, 2, 3, 4], first_seq=7, turn=3, now="2026-01-01")
    assert [(m["seq"], m["turn_id"], m["tokens"]) for m in stored] == [(7, "t3", 1), (8, "t4", 2), (9, "t4", 3),
                                                                        (10, "t5", 4)]
    assert turn == 5
    assert data.count(b"\n") == 4 and data.endswith(b"\n")
    assert [json.loads(raw) for raw in data.splitlines()] == stored
    assert len({m["id"] for m in stored}) == 4


def test_problems_are_kept_per_file_and_replaced_by_a_new_read(tmp_path):
    problems = jsonl.Problems()
    first = [CorruptLine("a.jsonl", 3, "bad")]
    problems.note(tmp_path, tmp_path / "a.jsonl", first, replace=True)
    problems.note(tmp_path, tmp_path / "b.jsonl", [CorruptLine("b.jsonl", 1, "bad")], replace=True)
    assert len(problems.of(tmp_path)) == 2
    problems.note(tmp_path, tmp_path / "a.jsonl", [], replace=True)
    assert [p.path for p in problems.of(tmp_path)] == ["b.jsonl"]


def test_read_bytes_of_a_missing_file_is_none(tmp_path):
    assert jsonl.read_bytes(tmp_path / "nothing.jsonl") is None


def _line(seq: int, text: str = "x") -> bytes:
    return (f'{{"id":"m-{seq}","seq":{seq},"turn_id":"t1","role":"user","created_at":"now","tokens":1,'
            f'"meta":{{}},"parts":[{{"type":"text","text":"{text}"}}]}}\n').encode()


def test_the_parse_cache_parses_only_what_was_appended(monkeypatch):
    parsed_bytes: list[int] = []
    real = jsonl.parse
    monkeypatch.setattr(jsonl, "parse", lambda data, path, **kw: parsed_bytes.append(len(data)) or real(data, path,
                                                                                                           **kw))
    cache = jsonl.ParseCache()
    first = _line(1) + _line(2)
    assert [m["seq"] for m in cache.parse(first, "f").messages] == [1, 2]
    grown = first + _line(3) + b'{"torn'
    again = cache.parse(grown, "f")
    assert [m["seq"] for m in again.messages] == [1, 2, 3] and again.end == len(first) + len(_line(3))
    assert parsed_bytes == [len(first), len(grown) - len(first)], "only the appended bytes were parsed"
    completed = first + _line(3) + _line(4)
    assert [m["seq"] for m in cache.parse(completed, "f").messages] == [1, 2, 3, 4], "the torn line, completed"
    assert again.line_nos == [1, 2, 3] and cache.parse(completed, "f").line_nos == [1, 2, 3, 4]


@pytest.mark.parametrize("changed", [
    lambda data: data.replace(b'"text":"x"', b'"text":"y"', 1),  # an edit in place, same size
    lambda data: data[: len(data) // 2],  # a truncation
    lambda data: _line(7) + data,  # a rewrite that grew
], ids=["edited", "truncated", "rewritten"])
def test_the_parse_cache_parses_a_changed_file_whole(changed):
    cache = jsonl.ParseCache()
    data = _line(1) + _line(2)
    cache.parse(data, "f")
    now = changed(data)
    assert cache.parse(now, "f") == jsonl.parse(now, "f")
