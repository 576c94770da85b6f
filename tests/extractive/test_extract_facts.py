"""Key Facts: date groups round-trip, newest value wins, corrections remove facts, rewrites pass the guard."""

from __future__ import annotations

from workmem.nodes.extractive.facts import (
    Fact,
    body_of,
    create_facts,
    key_facts_op,
    new_fact,
    newest_wins,
    parse_facts,
    passes_guard,
    render,
    said_words,
    select,
    target_tokens,
)
from workmem.nodes.guards import guard_ops
from workmem.nodes.spill import POINTER_TOKENS, pointer_tokens
from workmem.state.memory import (
    FULL_BUDGETS,
    MAX_BULLETS,
    POINTER_ITEM,
    Archived,
    Budgets,
    bullet_items,
    is_oversized,
    pointer_item,
)
from workmem.state.tokens import count_tokens

TARGET_TOKENS = target_tokens(FULL_BUDGETS)  # 3 000: Key Facts as the extractive model aims it


def fact(text: str, order: int, speaker: str | None = None, label: str | None = None) -> Fact:
    return Fact(text, speaker, label, order)


def test_facts_of_one_date_share_a_bullet_and_parse_back():
    facts = [
        fact("I planted 12 tomato seedlings.", 0, "Ada", "3 March, 2031"),
        fact("I built a cold frame from old windows.", 1, "Ada", "3 March, 2031"),
        fact("I booked the ferry to Tern Island.", 2, "Bram", "3 March, 2031"),
        fact("Staging runs on port 8443.", 3),
        fact("I moved to Leeds in 2029.", 4, "Bram", "17 March, 2031"),
    ]
    items = render(facts)
    assert items == [
        "3 March, 2031 — Ada: I planted 12 tomato seedlings. I built a cold frame from old windows. "
        "Bram: I booked the ferry to Tern Island.",
        "Staging runs on port 8443.",
        "17 March, 2031 — Bram: I moved to Leeds in 2029.",
    ]
    parsed = parse_facts(body_of(items), ["Ada", "Bram"])
    assert [(f.text, f.speaker, f.label) for f in parsed] == [(f.text, f.speaker, f.label) for f in facts]
    assert render(parsed) == items


def test_an_answer_renders_as_a_reply_and_parses_back_as_one():
    facts = [
        fact("I planted 12 tomato seedlings.", 0, "Ada", "3 March, 2031"),
        Fact("It is a mix of drama and romance.", "Ada", "3 March, 2031", 1, replied=True),
        fact("I wrote it over two winters in Leeds.", 2, "Ada", "3 March, 2031"),
        Fact("Mostly the 8:40 ferry to Tern Island.", "Bram", None, 3, replied=True),
    ]
    items = render(facts)
    assert items == [
        "3 March, 2031 — Ada: I planted 12 tomato seedlings. I wrote it over two winters in Leeds. "
        "Ada replied: It is a mix of drama and romance.",
        "Bram replied: Mostly the 8:40 ferry to Tern Island.",
    ]
    parsed = parse_facts(body_of(items), ["Ada", "Bram"])
    assert sorted((f.text, f.speaker, f.replied) for f in parsed) == sorted(
        (f.text, f.speaker, f.replied) for f in facts)
    assert render(parsed) == items
    answer = next(f for f in parsed if f.replied)
    assert answer.worth > fact(answer.text, 1, "Ada").worth  # an answer is worth more than the same words


def test_a_date_group_names_each_voice_once():
    day = "3 March, 2031"
    facts = [
        Fact("We moved to Leeds in 2029.", "Ada", day, 0, replied=True),
        fact("I adopted a greyhound called Pip.", 1, "Bram", day),
        Fact("The ferry leaves at 8:40 every day.", "Ada", day, 2, replied=True),
        fact("Pip came from a shelter in York.", 3, "Bram", day),
        fact("Ada started a pottery class on 2 March.", 4, "Ada", day),
    ]
    [item] = render(facts)
    assert item == (f"{day} — Ada: Ada started a pottery class on 2 March. Ada replied: We moved to Leeds in 2029. "
                    "The ferry leaves at 8:40 every day. Bram: I adopted a greyhound called Pip. "
                    "Pip came from a shelter in York.")
    parsed = parse_facts(body_of([item]), ["Ada", "Bram"])
    assert sorted((f.text, f.speaker, f.replied) for f in parsed) == sorted(
        (f.text, f.speaker, f.replied) for f in facts)  # a sentence without a head is its speaker's, as answered


def test_replied_is_read_only_after_a_dialogue_speakers_name():
    body = "- Alice replied: we ship the API on 12 May, 2031.\n- Alice replied: the budget is $1,200."
    for coding in (True, False):  # a coding session's or a plain chat's memory quoting a reply stays as it is
        parsed = parse_facts(body, coding=coding)
        assert [(f.speaker, f.answers) for f in parsed] == [(None, False), (None, False)]
        assert body_of(render(parsed)) == body
    assert [f.answers for f in parse_facts(body, ["Alice", "Bob"])] == [True, True]


def test_new_fact_keeps_worthy_sentences_only():
    assert new_fact("By the way, I moved to Leeds in 2029", "Bram", None, 1) == fact(
        "I moved to Leeds in 2029.", 1, "Bram"
    )
    assert new_fact("That is so cool!", "Ada", None, 2) is None


def test_a_fact_of_a_dialogue_keeps_what_was_said_not_the_photo_caption_or_the_talk_about_the_talk():
    shared = "I finished my first screenplay last Friday! [image: a photo of a stack of papers on a desk]"
    assert new_fact(shared, "Ada", None, 1).text == "I finished my first screenplay last Friday!"
    only_photo = "Wow, check this out! [image: a photo of a red Tesla Model 3 in a garage]"
    assert said_words(only_photo) == only_photo  # the words alone, `Wow` aside, say too little
    assert said_words("I finished it on Friday! [image: a [b] c]") == "I finished it on Friday!"
    moved = new_fact("Since we last talked, I moved to Leeds in 2029.", "Bram", None, 3)
    assert moved.text == "I moved to Leeds in 2029."
    assert new_fact("It's been ages since we last talked, Ada!", "Bram", None, 4) is None


def test_a_coding_agents_sentence_is_kept_as_written():
    said = "Since we last talked, I fixed `parse_date` in src/app.py because the 2031 date failed."
    assert new_fact(said, "Agent", None, 1, coding=True).text == said
    assert new_fact(said, None, None, 1).text == said  # a plain chat's line


def test_what_someone_likes_raises_a_fact_of_a_conversation_between_people_only():
    liked = "I really enjoy dramas and emotionally-driven films."
    assert new_fact(liked, "Ada", "3 March, 2031", 1) is not None  # a speaker of a dialogue
    assert new_fact(liked, None, None, 1) is None  # an assistant's or a user's line in a plain chat
    assert new_fact(liked, "Ada", None, 1, coding=True) is None  # an agent's session


def test_among_equal_facts_the_one_with_a_word_said_nowhere_else_is_kept():
    pool = [
        fact("I baked a cake with apple filling on Sunday.", 0, "Ada", "3 March, 2031"),
        fact("I baked a cake with raspberry jam on Sunday.", 1, "Ada", "3 March, 2031"),
        fact("I baked a cake with walnut filling on Sunday.", 2, "Ada", "3 March, 2031"),
        fact("I baked a cake with cream filling on Sunday.", 3, "Ada", "3 March, 2031"),
    ]
    assert len({count_tokens(f.text) for f in pool}) == 1 and len({f.worth for f in pool}) == 1
    room = count_tokens(body_of(render(pool[:1]))) + 2
    assert select(pool, room, MAX_BULLETS) == [pool[1]]  # "raspberry" and "jam" are said by no other fact
    assert select([pool[0], pool[2], pool[3]], room, MAX_BULLETS) == [pool[3]]  # one such word each: the newest
    plain = [Fact(f.text, None, None, f.order) for f in pool]  # a plain chat: no speakers, no such bonus
    assert select(plain, room, MAX_BULLETS) == [plain[3]]


def test_newest_value_wins():
    facts = [
        fact("The staging URL is staging.example.org.", 0),
        fact("All 4 loader tests pass.", 1),
        fact("The staging URL is stage2.example.org.", 2),
        fact("All 9 loader tests pass.", 3),
        fact("Pepper is a greyhound.", 4, "Ada"),
        fact("Pepper is a greyhound and she is 3 years old.", 5, "Ada"),
    ]
    assert [f.text for f in newest_wins(facts)] == [
        "The staging URL is stage2.example.org.",
        "All 9 loader tests pass.",
        "Pepper is a greyhound and she is 3 years old.",
    ]


def test_small_section_gets_an_append_of_all_new_facts():
    old = [fact("Nordhavn switched to semicolons on 2024-05-14.", 0)]
    new = [fact("We agreed with Nordhavn on 2024-05-20 to fix duplicates by June.", 1000)]
    op = key_facts_op(body_of(render(old)), old, new, [])
    assert op == {"op": "APPEND", "items": ["We agreed with Nordhavn on 2024-05-20 to fix duplicates by June."]}
    assert key_facts_op(body_of(render(old)), old, [], []) == {"op": "KEEP"}


def test_a_correction_removes_an_earlier_fact_on_its_topic():
    old = [fact("The delimiter is a tab.", 0), fact("Tabs are rare in supplier feeds.", 1)]
    op = key_facts_op(body_of(render(old)), old, [], [(5000, "No, the delimiter is a semicolon, not a tab.")])
    assert op == {"op": "UPDATE", "content": "- Tabs are rare in supplier feeds."}
    later = [fact("The delimiter is a tab.", 6000)]  # said after the correction: kept
    assert key_facts_op("", [], later, [(5000, "No, the delimiter is a semicolon, not a tab.")])["op"] == "APPEND"


def many_facts(n: int, start: int = 0) -> list[Fact]:
    people = ["Ada", "Bram", "Cleo", "Dev", "Esme"]
    return [
        fact(f"{people[i % 5]} Lindqvist paid ${100 + i} for {i % 7 + 2} tickets to Orla Hall on {i % 28 + 1} "
             f"June 2031 because the Tuesday show sold out.", start + i)
        for i in range(n)
    ]


def test_oversized_section_is_rewritten_within_limits_and_passes_the_guard():
    old = many_facts(40)
    old_body = body_of(render(old))
    assert is_oversized(len(bullet_items(old_body)), count_tokens(old_body))
    op = key_facts_op(old_body, old, many_facts(10, start=1000), [])
    assert op["op"] == "UPDATE"
    assert len(bullet_items(op["content"])) <= MAX_BULLETS and count_tokens(op["content"]) <= TARGET_TOKENS
    assert passes_guard(old_body, bullet_items(op["content"]))
    guarded, notes = guard_ops({"Key Facts & Decisions": old_body}, {"Key Facts & Decisions": op})
    assert notes == [] and guarded["Key Facts & Decisions"] == op


def test_a_rewrite_takes_old_facts_back_until_the_anchor_guard_passes():
    names = "Ada Bram Cleo Dev Esme Finn Gus Hana Ivo Jun Kai Lev Mia Nils Oda Per Quin Rui Sami Tove".split()
    old = [fact(f"{name} owns the {name.lower()}-service module.", i) for i, name in enumerate(names)]
    old += [fact(f"The release {i} shipped with {i} fixes on 2031-03-{i + 1:02d}.", 100 + i) for i in range(20)]
    old_body = body_of(render(old))
    strong = [fact(f"Orla paid ${500 + i} for {i + 2} tickets on 2031-04-{i + 1:02d} because it rained.", 1000 + i)
              for i in range(60)]
    op = key_facts_op(old_body, old, strong, [])
    assert op["op"] == "UPDATE" and passes_guard(old_body, bullet_items(op["content"]))
    assert sum(name in op["content"] for name in names) >= 14  # names carried back in for the guard
    assert guard_ops({"Key Facts & Decisions": old_body}, {"Key Facts & Decisions": op})[1] == []


def test_create_keeps_the_best_facts_within_the_limits():
    body = create_facts(many_facts(60), [])
    assert 0 < len(bullet_items(body)) <= MAX_BULLETS and count_tokens(body) <= TARGET_TOKENS


def test_select_fills_the_budget_and_never_passes_it():
    """Facts are taken pass after pass while one still fits (the estimates count a name for every fact, grouping
    writes it once per voice), and the body never passes the budget, whatever the budget."""
    days = ["3 March, 2031", "17 March, 2031", "2 April, 2031"]
    pool = [Fact(f"I moved crate {n} of the {w} order to bay {n * 7} in Leeds.", ("Ada", "Bram")[n % 3 == 0],
                 days[n % 3], n, replied=n % 2 == 0) for n, w in enumerate(["Harlow", "Tern", "Oakes"] * 14)]
    largest = max(count_tokens(f"- {days[0]} — Bram replied: {f.text}") for f in pool)
    whole = count_tokens(body_of(render(pool)))
    for budget in range(40, whole + 50, 7):
        tokens = count_tokens(body_of(render(select(pool, budget, MAX_BULLETS))))
        assert tokens <= budget
        assert tokens > min(budget, whole) - largest, f"budget {budget}: {tokens} tokens left room for another fact"


def test_a_body_written_with_a_head_before_every_answer_keeps_its_statements():
    """Memories written before a date's voices were named once: a sentence after `X replied: …` is X's statement
    unless the body shows it names each voice once (no voice's head twice in a date, no statement after an answer)."""
    old_style = ("- 3 March, 2031 — Bram replied: It is a mix of drama and romance. I wrote it over two winters. "
                 "Bram replied: The 8:40 ferry to Tern Island.")
    assert [(f.text, f.replied) for f in parse_facts(old_style, ["Ada", "Bram"])] == [
        ("It is a mix of drama and romance.", True), ("I wrote it over two winters.", False),
        ("The 8:40 ferry to Tern Island.", True)]
    new_style = "- 3 March, 2031 — Bram replied: It is a mix of drama and romance. The 8:40 ferry to Tern Island."
    assert [f.replied for f in parse_facts(new_style, ["Ada", "Bram"])] == [True, True]
    mixed = f"{old_style}\n{new_style.replace('3 March', '9 April')}"  # each date group is read as it was written
    assert [f.replied for f in parse_facts(mixed, ["Ada", "Bram"])] == [True, False, True, True, True]


def test_a_fact_said_by_no_one_or_reading_like_a_head_keeps_its_speaker():
    day = "3 March, 2031"
    facts = [Fact("I adopted a greyhound called Pip.", "Ada", day, 0, replied=True),
             fact("The clinic opens at 9 on Mondays.", 1, None, day),
             Fact("Animal Crossing: New Horizons is really calming.", "Ada", day, 2, replied=True)]
    [item] = render(facts)
    assert item == (f"{day} — The clinic opens at 9 on Mondays. Ada replied: I adopted a greyhound called Pip. "
                    "Ada replied: Animal Crossing: New Horizons is really calming.")
    parsed = parse_facts(body_of([item]), ["Ada", "Animal Crossing"])
    assert sorted((f.text, f.speaker, f.replied) for f in parsed) == sorted(
        (f.text, f.speaker, f.replied) for f in facts)


def test_the_target_leaves_room_for_the_archive_pointer_at_its_widest():
    pointed = f"- {POINTER_ITEM.format(n=3)}\n- 3 March, 2031 — Ada: I moved to Leeds."
    assert target_tokens(FULL_BUDGETS, pointed) == TARGET_TOKENS - POINTER_TOKENS < TARGET_TOKENS
    refusing = f"- {pointer_item(Archived(3, 7))}\n- 3 March, 2031 — Ada: I moved to Leeds."
    assert target_tokens(FULL_BUDGETS, refusing) == TARGET_TOKENS - pointer_tokens(7) < TARGET_TOKENS - POINTER_TOKENS


def test_an_append_never_takes_the_section_past_its_budget():
    """Appended items repeat their date's label: the section as it will stand must fit, else it is rewritten."""
    places = ("Leeds York Hull Derby Bath Wells Ely Ripon Truro Exeter Durham Carlisle Preston Lancaster Chester "
              "Salford Bangor Perth Stirling Dundee Inverness Oban Wick Thurso Kendal").split()
    things = ("kayak guitar greyhound telescope sourdough pottery violin bonsai marathon chess quilt canoe harp tandem "
              "easel falcon loom kiln lathe drone").split()
    days = [f"{d} March, 2031" for d in range(1, 9)]
    old = [Fact(f"I bought a {things[n % 20]} in {places[n]} for my sister's birthday last spring.",
                ("Ada", "Bram")[n % 2], days[n % 8], n, replied=n % 3 == 0) for n in range(25)]
    old_body = body_of(render(old))
    assert not is_oversized(len(bullet_items(old_body)), count_tokens(old_body))
    trips = [f"Bram took the {t} to {p} by train." for t in things for p in places]
    fresh = [fact(text, 100 + i, "Bram", days[i % 8]) for i, text in enumerate(trips)]
    for k in (230, 240, 249, 260):
        op = key_facts_op(old_body, parse_facts(old_body, ["Ada", "Bram"]), fresh[:k], [])
        section = old_body + "\n" + body_of(op["items"]) if op["op"] == "APPEND" else op["content"]
        assert count_tokens(section) <= TARGET_TOKENS, (k, op["op"])


def test_old_facts_taken_back_for_the_guard_do_not_take_a_rewrite_past_its_budget():
    """A rewrite that drops anchor-carrying old facts takes some back until the guard passes, then leaves out its
    least worthy facts until it fits again (the guard still passing)."""
    names = ["Abernethy", "Blackwood", "Carrington", "Dunmore", "Ellsworth", "Fairbanks", "Glenrothes", "Harrowgate",
             "Inverurie", "Jedburgh", "Kirkwall", "Lockerbie", "Montrose", "Newmilns", "Oldmeldrum", "Peebles",
             "Quarrier", "Rothesay", "Stonehaven", "Tillicoultry"]
    old = [fact(f"Ada met {names[n]} and {names[(n + 7) % 20]} Trust near Castle {names[(n + 3) % 20]}.", n, "Ada",
                "3 March, 2031") for n in range(20)]
    body = body_of(render(old))
    new = [Fact(f'I paid $1,{n:03d} for "The {n} Rooms" on 4 May, 2031 at 10 AM because it was decided.', "Bram",
                "4 March, 2031", 100 + n, replied=True) for n in range(40)]
    limits = Budgets.of_sections({**dict(FULL_BUDGETS.sections), "Key Facts & Decisions": 150})
    op = key_facts_op(body, parse_facts(body, ["Ada", "Bram"]), new, [], limits)
    assert op["op"] == "UPDATE" and count_tokens(op["content"]) <= 150
    assert passes_guard(body, bullet_items(op["content"]))
