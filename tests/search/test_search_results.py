"""Hits with their neighbours (`context=n`), spilled WM items as hits, and the capped tool text."""

from __future__ import annotations

import pytest
from fakes import create_call, scripted, stored_text

from workmem.graphs.agent.tools import make_archive_tools
from workmem.graphs.context.search_results import format_hits, with_context
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput
from workmem.state.files.search_index import SearchIndex
from workmem.state.search.search_hits import shown_window
from workmem.state.tokens import count_tokens


def hit(seq: int, text: str = "match", match: str = "exact") -> dict:
    return {"archive_id": "archive_001", "seq": seq, "turn_id": f"t{seq}", "role": "user", "content": text,
            "match": match}


def test_context_adds_the_neighbours_of_each_hit_reading_each_overlapping_run_once():
    log = {i: stored_text(i, f"message {i}") for i in range(1, 31)}
    reads = []

    def fetch(lo, hi):
        reads.append((lo, hi))
        return [log[s] for s in range(lo, hi + 1) if s in log]

    out = with_context([hit(10), hit(12), hit(1), hit(25)], 2, fetch)
    assert reads == [(1, 3), (8, 14), (23, 27)]
    assert [c["seq"] for c in out[0]["context"]] == [8, 9, 11, 12]
    assert [c["seq"] for c in out[2]["context"]] == [2, 3]  # nothing before seq 1
    assert all(c["context"] is True for h in out for c in h["context"])
    assert with_context([hit(5)], 0, fetch)[0]["context"] == []


def test_the_tool_text_merges_overlapping_windows_and_caps_its_size():
    log = {i: stored_text(i, f"message number {i} " + "word " * 40) for i in range(1, 200)}
    hits = with_context([hit(s, log[s]["parts"][0]["text"]) for s in (50, 52, 100, *range(120, 200, 8))], 1,
                        lambda lo, hi: [log[s] for s in range(lo, hi + 1) if s in log])
    text = format_hits("word", hits, max_tokens=900)
    assert count_tokens(text) <= 1_000
    first_block = text.split("\n\n")[1].splitlines()
    assert [line.split("#")[1].split()[0] for line in first_block] == ["49", "50", "51", "52", "53"]
    assert [line.startswith("  (context)") for line in first_block] == [True, False, True, False, True]
    shown = text.count("[archive_001 #")
    assert 3 <= shown < len(hits) and f"[{len(hits) - shown} more not shown ({len(hits) - shown} matches, 0 " in text
    everything = format_hits("word", hits, max_tokens=100_000)
    assert everything.count("[archive_001 #") == len(hits) and "not shown" not in everything


def test_one_block_of_adjacent_hits_over_the_cap_is_cut_at_an_entry_and_says_how_many_are_left():
    # thirty adjacent hits share one block: the cap holds for it too, and the note counts what it leaves out
    log = {i: stored_text(i, f"message number {i} " + "word " * 300) for i in range(1, 31)}
    hits = [hit(s, log[s]["parts"][0]["text"]) for s in range(1, 31)]
    text = format_hits("word", hits, max_tokens=900)
    assert count_tokens(text) <= 1_000
    shown = text.count("[archive_001 #")
    assert 1 <= shown < 30 and f"[{30 - shown} more not shown ({30 - shown} matches, 0 " in text


def test_a_block_over_the_cap_holding_a_special_token_string_is_cut_as_plain_text():
    # a transcript about tokenizers quotes `<|endoftext|>`: the cut counts it as text, as every count does
    long = "the model stops at <|endoftext|> " + "word " * 2_000
    text = format_hits("endoftext", [hit(1, long)], max_tokens=300)
    assert text.count("[archive_001 #1") == 1 and count_tokens(text) <= 400
    memory = {"archive_id": "archive_001", "seq": None, "turn_id": None, "role": "memory", "section": "Key Facts",
              "content": long, "match": "exact"}
    assert count_tokens(format_hits("endoftext", [memory], max_tokens=300)) <= 400


def test_spilled_items_are_searchable_as_memory_hits(root):
    index = SearchIndex(root)
    index.index_messages("s", "archive_002", [stored_text(7, "we talked about the kiln")],
                         spilled=[{"section": "Files & Context", "item": "`kiln/firing.py` — read"},
                                  {"section": "Key Facts & Decisions", "item": "The kiln fires at 1240 C."}])
    hits = index.search("s", "kiln fires")
    memory = [h for h in hits if h["role"] == "memory"]
    assert memory[0] == {"archive_id": "archive_002", "seq": None, "turn_id": None, "role": "memory",
                         "section": "Key Facts & Decisions", "content": "The kiln fires at 1240 C.", "match": "exact"}
    assert any(h["seq"] == 7 for h in hits)
    index.index_messages("s", "archive_002", [stored_text(7, "we talked about the kiln")])  # re-index drops the items
    assert all(h["role"] != "memory" for h in index.search("s", "kiln fires"))


def test_engine_search_with_context_and_spilled_items_through_a_real_spill(root):
    paths = [f"src/module_{i:03d}/handler.py" for i in range(400)]
    conversation = [m for i, path in enumerate(paths) for m in (
        {"role": "user", "content": f"Look at module {i}."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read_file", "arguments": f'{{"path": "{path}"}}'}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "name": "read_file", "content": f"handler {i}"})]
    files = "\n".join(f"- `{path}` — read" for path in paths)  # far over the section's budget: the oldest spill
    model = scripted(create_call({"Session Title": "Modules", "Files & Context": files}))
    with WorkingMemoryEngine(root, model=model, durable=False) as engine:
        engine.add_messages("big", conversation)
        engine.commit("big", keep_recent_count=0)
        assert engine.storage.sessions.spilled_items("big", "archive_001"), "the premise: Files & Context spilled"
        hits = engine.archive_search("big", "module_000/handler.py")
        assert any(h["role"] == "memory" and h["section"] == "Files & Context" for h in hits)
        with_neighbours = engine.archive_search("big", "Look at module 7", context=1)
        top = with_neighbours[0]
        assert top["seq"] == 22 and [c["seq"] for c in top["context"]] == [21, 23]
        for bad in (4, -1, True, "1"):
            with pytest.raises(InvalidInput, match="context"):
                engine.archive_search("big", "module", context=bad)
        search = make_archive_tools(engine, "big")[0]
        text = search.invoke({"query": "Look at module 7", "context": 1})
        assert "(context) [#21" in text and "(context) [#23" in text


def test_a_hit_deep_inside_a_long_message_shows_the_window_around_the_match(backend):
    log = "\n".join(f"line {i}: request served" for i in range(2_000)) + "\nFATAL quota_exceeded on /var/data\n" + \
        "\n".join(f"after {i}" for i in range(200))
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "Why did it stop?"},
                                  {"role": "assistant", "content": log}, {"role": "user", "content": "ok"}])
        engine.commit("s", keep_recent_count=0)
        hit = engine.archive_search("s", "quota_exceeded")[0]
        assert hit["seq"] == 2 and "FATAL quota_exceeded on /var/data" in hit["content"]
        assert len(hit["content"]) <= 1_500 and hit["content"].startswith("…")
        head = engine.archive_search("s", "request served")[0]
        assert head["seq"] == 2 and head["content"].startswith("line 0: request served") and head["content"][-1] == "…"


def test_an_identifier_or_a_common_word_beside_a_rare_one_shows_the_window_of_the_rare_match(backend):
    """`handler_450` (and `handler 450`) showed the head of a file of 600 handlers: the window went to the first
    query word the text held, `handler`, in its first line."""
    code = "\n".join(f"line {i}: def handler_{i}(row): return parse(row)" for i in range(600))
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user", "content": "Read the handlers."},
                                  {"role": "assistant", "content": code}, {"role": "user", "content": "ok"}])
        engine.commit("s", keep_recent_count=0)
        for query in ("handler_450", "handler 450", "def handler_450(row)"):
            hit = engine.archive_search("s", query)[0]
            assert hit["seq"] == 2 and "handler_450(row)" in hit["content"] and hit["content"].startswith("…"), query


def test_an_id_that_no_message_holds_has_no_exact_hit_among_other_ids(backend):
    """`TICKET3` was an `exact` hit of TICKET10, TICKET8 … through the stem-relatives channel."""
    with backend.engine(durable=False) as engine:
        engine.add_messages("s", [{"role": "user" if i % 4 == 0 else "assistant",
                                   "content": f"the code is TICKET{i} for host db{i}"} for i in range(0, 12, 2)])
        engine.commit("s", keep_recent_count=0)
        assert engine.archive_search("s", "TICKET3") == []
        hits = engine.archive_search("s", "TICKET4")
        assert [h["content"] for h in hits if h["match"] == "exact"] == ["the code is TICKET4 for host db4"]


def test_a_plain_question_with_a_clitic_shows_the_window_of_its_match():
    """"I'm" is no identifier: the window went to the log's first line, which starts with "I'm"."""
    log = "I'm starting the server now.\n" + "\n".join(f"INFO request {i} ok" for i in range(400)) + \
        "\nERROR: disk full at /var/lib/db\n"
    shown = shown_window(log, ["I", "m", "seeing", "a", "disk", "full", "error"], "I'm seeing a disk full error")
    assert "disk full" in shown and shown.startswith("…")
