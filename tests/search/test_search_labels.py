"""Every archive-search hit says what it is (`match`: `exact` or `neighbour`, defined in `search_hits`), and
the hits and the tool's text count matches and neighbouring messages apart, alike on both backends."""

from __future__ import annotations

import re

import pytest
from engine_helpers import assistant, user
from pg_support import Backend

from workmem.graphs.agent.tools import make_archive_tools
from workmem.graphs.cli import main
from workmem.graphs.context.search_results import count_phrase, format_hits
from workmem.state.search.search_hits import match_counts

WALK = [
    user("We went walking along the lake on Sunday morning."),
    assistant("That sounds lovely, how was the weather there?"),
    user("Cold, but we saw a blue heron standing in the reeds."),
    assistant("Wonderful! They are patient hunters."),
    user("It stood still for ten minutes and then caught a fish."),
    assistant("Did you manage to take a photo?"),
    user("Only a blurry one, sadly."),
    assistant("Next time bring the long lens."),
    user("Let us talk about the budget for next quarter."),
    assistant("Sure, the spreadsheet is in the shared drive."),
    user("The marketing line went up by twelve percent."),
    assistant("We should trim the travel costs instead."),
    user("Agreed, and the painting for the lobby is already paid."),
    assistant("Good, the framing shop delivers it on Friday."),
    user("Then we are done for today."),
    assistant("See you tomorrow."),
    user("Two herons nested by the boathouse last spring."),
    assistant("Old config lives in config/app.toml now."),
    user("Thanks, that was all."),
]
WORDS = re.compile(r"\b(?:blue|herons?)\b", re.IGNORECASE)  # what "blue heron" finds in WALK, stemmed
STAMPED = [
    user("[session 1 — 1:00 pm on 3 March, 2024]"),
    user("Ana: I repainted the kitchen yellow."),
    assistant("Bo: Bold choice, I love it."),
    user("[session 2 — 9:00 am on 8 June, 2024]"),
    user("Ana: The garden is full of tomatoes."),
]


def engine_with(backend: Backend, messages: list[dict]):
    engine = backend.engine(durable=False)
    engine.add_messages("s", messages)
    assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
    return engine


def labels(hits: list[dict]) -> list[tuple[int | None, str]]:
    return [(h["seq"], h["match"]) for h in hits]


def test_only_hits_holding_a_query_word_are_exact_and_the_rest_are_neighbours(backend):
    with engine_with(backend, WALK) as engine:
        hits = engine.archive_search("s", "blue heron")
    assert all(h["match"] in ("exact", "neighbour") for h in hits)
    exact = {h["seq"] for h in hits if h["match"] == "exact"}
    assert exact == {3, 17}, "the message saying 'herons' matches through the stem, like the index"
    for h in hits:
        assert bool(WORDS.search(h["content"])) == (h["match"] == "exact"), h
    assert match_counts(hits) == (2, len(hits) - 2) and len(hits) - 2 >= 4, "neighbours came in and are counted"


def test_the_tool_text_counts_matches_and_neighbours_apart_and_labels_every_hit(backend):
    with engine_with(backend, WALK) as engine:
        message = make_archive_tools(engine, "s")[0].invoke(
            {"type": "tool_call", "id": "c1", "name": "archive_search", "args": {"query": "blue heron"}})
    hits = message.artifact
    neighbours = len(hits) - 2
    assert message.content.startswith(f"2 matches, {neighbours} neighbouring messages for 'blue heron', best first")
    assert "neighbour: holds none" in message.content.splitlines()[0]
    lines = [line for line in message.content.splitlines() if line.startswith("[archive_001 #")]
    assert len(lines) == len(hits)
    for h in hits:
        assert any(line.startswith(f"[archive_001 #{h['seq']} {h['turn_id']} {h['role']} · {h['match']}]")
                   for line in lines), h


def test_substring_matches_are_exact_and_their_neighbours_are_not(backend):
    with engine_with(backend, WALK) as engine:
        hits = engine.archive_search("s", "app.toml")
    assert labels(hits)[0] == (18, "exact") and len(hits) > 1
    assert all(h["match"] == "neighbour" and "app.toml" not in h["content"] for h in hits[1:])


def test_a_matching_date_stamp_is_exact_and_the_messages_it_dates_are_neighbours(backend):
    with engine_with(backend, STAMPED) as engine:
        hits = engine.archive_search("s", "March 2024")
    found = dict(labels(hits))
    assert found[1] == "exact" and found[2] == found[3] == "neighbour"
    assert found.get(4) == "exact", "the June 2024 stamp matches '2024' itself"


def test_both_backends_label_alike(root, database_url):
    queries = ["blue heron", "heron", "lake photo", "budget painting", "app.toml", "herons nested"]
    found = {}
    for backend in (Backend("file", root, None), Backend("postgres", root, database_url)):
        with engine_with(backend, WALK) as engine:
            found[backend.name] = {q: labels(engine.archive_search("s", q)) for q in queries}
    assert found["file"] == found["postgres"]
    assert any(match == "neighbour" for q in queries for _seq, match in found["file"][q])


def hit(seq: int | None, match: str, text: str = "words " * 60) -> dict:
    if seq is None:
        return {"archive_id": "archive_001", "seq": None, "turn_id": None, "role": "memory",
                "section": "Key Facts & Decisions", "content": text, "match": match}
    return {"archive_id": "archive_001", "seq": seq, "turn_id": f"t{seq}", "role": "user", "content": text,
            "match": match}


@pytest.mark.parametrize(("matches", "phrase"), [
    (["exact"], "1 match, 0 neighbouring messages"),
    (["exact", "exact", "neighbour"], "2 matches, 1 neighbouring message"),
    (["neighbour", "neighbour"], "0 matches, 2 neighbouring messages"),
])
def test_count_phrase(matches, phrase):
    hits = [hit(i, m) for i, m in enumerate(matches, 1)]
    assert count_phrase(hits) == phrase
    assert format_hits("q", hits).startswith(f"{phrase} for 'q', best first")


def test_the_neighbour_note_appears_only_with_neighbours_and_a_cut_counts_what_it_left_out():
    assert "neighbour: holds none" not in format_hits("q", [hit(1, "exact"), hit(None, "exact")])
    assert "[archive_001 working memory, Key Facts & Decisions · exact]" in format_hits("q", [hit(None, "exact")])
    hits = [hit(s, "exact" if s % 30 == 0 else "neighbour") for s in range(10, 400, 10)]  # one block each
    text = format_hits("q", hits, max_tokens=300)
    shown = [h for h in hits if f"#{h['seq']} " in text]
    assert 0 < len(shown) < len(hits)
    exact_left, neighbours_left = match_counts(hits[len(shown):])
    assert f"[{len(hits) - len(shown)} more not shown ({exact_left} matches, {neighbours_left} neighbouring " \
           "messages; output capped" in text


def test_the_cli_shows_each_hit_s_label_and_the_counts(root, capsys):
    with engine_with(Backend("file", root, None), WALK):
        pass
    assert main(["--root", str(root), "search", "s", "blue", "heron"]) == 0
    out = capsys.readouterr().out
    assert "match" in out and "neighbour" in out and "exact" in out
    assert re.search(r"2 matches, \d+ neighbouring messages for 'blue heron'", out)
