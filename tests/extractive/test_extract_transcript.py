"""Reading the commit prompt: transcript blocks, dialogue speakers, date notes, sentence lines."""

from __future__ import annotations

import pytest
from fakes import stored_messages
from langchain_core.messages import HumanMessage, SystemMessage

from workmem.nodes.extractive.transcript import (
    block,
    dialogue_speakers,
    lines_of,
    note_date,
    parse_transcript,
    prompt_text,
    untag,
)
from workmem.nodes.formatting import format_messages

DIALOGUE = [
    "[session 1 — 9:15 am on 3 March, 2031]",
    "Ada: Hi Bram! I planted 12 tomato seedlings yesterday.",
    "Bram: Nice. Which variety?",
    "Ada: Mostly cherry tomatoes.",
    "[session 2 — 6:40 pm on 17 March, 2031]",
    "Bram: I finally booked the ferry to Tern Island for 2 April.",
    "Ada: Note: bring a rain jacket.",
]


def dialogue_transcript(texts: list[str] = DIALOGUE) -> str:
    return format_messages(stored_messages([{"role": "user", "content": t} for t in texts]))


def test_blocks_and_prompt_text():
    lines = ["<a>", "x", "</a>", "<b>", "y", "</b>", "z", "</b>"]
    assert block(lines, "a") == ("x", 3)
    assert block(lines, "b", start=3, last_close=True) == ("y\n</b>\nz", 8)
    assert block(lines, "c") == (None, 0)
    assert block(["<a>", "open"], "a") == ("open", 2)
    assert prompt_text([SystemMessage("rules"), HumanMessage("data")]) == "data"
    assert untag("\\</messages>\n\\# kept") == "</messages>\n\\# kept"


def test_dialogue_speakers_and_dates_are_attached_to_each_message():
    msgs = parse_transcript(dialogue_transcript())
    assert dialogue_speakers(msgs) == ["Ada", "Bram"]
    notes = [m for m in msgs if m.is_note]
    assert [m.date for m in notes] == ["3 March, 2031", "17 March, 2031"]
    said = [(m.speaker, m.date) for m in msgs if not m.is_note]
    assert said[:2] == [("Ada", "3 March, 2031"), ("Bram", "3 March, 2031")]
    assert msgs[-1].speaker == "Ada" and msgs[-1].date == "17 March, 2031"
    assert msgs[-1].body == "Note: bring a rain jacket."  # `Note:` is a label, not a speaker
    assert msgs[1].party == "Ada"


def test_a_start_date_dates_the_messages_before_the_first_note():
    msgs = parse_transcript(dialogue_transcript(DIALOGUE[1:3]), start_date="1 March, 2031")
    assert {m.date for m in msgs} == {"1 March, 2031"}


@pytest.mark.parametrize(
    ("texts", "speakers"),
    [
        (["Ada: one", "Ada: two"], ["Ada"]),
        (["Ada: one", "Bram: two"], ["Ada", "Bram"]),  # every message opens with a name: a chat log
        (["Ada: one", "Bram: two", "Please fix it."], []),  # one name per message is not enough otherwise
        (["Ada: one", "Please fix it."], []),
        (["Note: one", "Note: two"], []),  # label words are never speakers
        (["TODO: one", "TODO: two"], []),
        (["Step 1: do it", "Step 2: do it"], []),
    ],
)
def test_speaker_rule(texts, speakers):
    assert dialogue_speakers(parse_transcript(dialogue_transcript(texts))) == speakers


@pytest.mark.parametrize(
    ("text", "date"),
    [
        ("[session 4 — 1:14 pm on 7 May, 2023]", "7 May, 2023"),
        ("[2031-03-03 standup]", "2031-03-03"),
        ("[Monday]", "Monday"),
        ("We deploy on 2031-03-03.", None),  # not a bracketed note
        ("[image: a cat]", None),
    ],
)
def test_note_date(text, date):
    assert note_date(text) == date


def test_agent_transcripts_have_no_speakers_and_roles_as_parties():
    msgs = parse_transcript(format_messages(stored_messages([
        {"role": "user", "content": "Please fix app/x.py."},
        {"role": "assistant", "content": "Fixed it. Tests pass."},
    ])))
    assert dialogue_speakers(msgs) == [] and [m.party for m in msgs] == ["user", "assistant"]
    assert [x.text for x in lines_of(msgs)] == ["Please fix app/x.py.", "Fixed it.", "Tests pass."]
    orders = [x.order for x in lines_of(msgs)]
    assert orders == sorted(orders) and len(set(orders)) == 3
