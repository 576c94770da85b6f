"""Both backends find the same lines of a large tool result (docs/search.md): a phrase in the part the index holds
in order, a single word anywhere in its digest, and nothing past what a Postgres `tsvector` can match."""

from __future__ import annotations

from collections import Counter

import pytest
from engine_helpers import assistant, tool_turn
from pg_support import Backend

from workmem.state.index_text import (
    _TOKENS,
    INDEX_CHARS,
    INDEX_POSITIONS,
    INDEX_REPEATS,
    index_text,
    is_digest,
)

LINE = "2026-11-30 10:00:00 INFO compiled module pkg/{i:07d}.go in {ms} ms worker-{w} queue={q}\n"


def log(lines: int) -> str:
    return "".join(LINE.format(i=i, ms=i % 97, w=i % 13, q=i * 7 % 1000) for i in range(lines))


def queries(lines: int) -> list[str]:
    picks = [3, lines // 3, lines // 2, lines - 40, lines - 2]
    return [q for i in picks for q in (f"pkg/{i:07d}.go", f"queue={i * 7 % 1000}", f"module pkg/{i:07d}.go in",
                                       f"{i % 97} ms worker-{i % 13}")]


def exact_hits(backend: Backend, text: str, asked: list[str]) -> dict[str, list[int]]:
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [*tool_turn("Build it.", "build", text, "c"), assistant("Built.")])
        engine.commit("s", keep_recent_count=0)
        return {q: [h["seq"] for h in engine.archive_search("s", q) if h["match"] == "exact"] for q in asked}


@pytest.mark.parametrize("lines", [1_450, 6_000])  # held verbatim up to the limits, and a digest
def test_files_and_postgres_find_the_same_lines_of_a_large_payload(root, database_url, lines):
    text = log(lines)
    asked = queries(lines)
    on_files = exact_hits(Backend("file", root), text, asked)
    on_postgres = exact_hits(Backend("postgres", root, database_url), text, asked)
    assert on_files == on_postgres
    assert on_files[asked[0]] == [3] and on_files[asked[-1]] == [3], "the head and the tail are found"


def test_the_index_text_stays_within_what_a_tsvector_matches_in_order():
    for text in (log(1_450), log(6_000), "word " * 300, ("x" * 9 + " ") * 20_000):
        held = index_text(text)
        words = _TOKENS.findall(held)
        assert len(words) <= INDEX_POSITIONS and len(held) <= INDEX_CHARS + 1
        assert max(Counter(w.lower() for w in words).values()) <= INDEX_REPEATS + 10
    assert index_text("short text") == "short text"
    assert index_text(log(100)) == log(100), "a text within the limits is held as it is"
    assert is_digest(index_text("word " * 300)), "a word repeated past the limit: a digest"
