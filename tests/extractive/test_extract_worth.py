"""Fact worth: names, numbers, dates and decisions outrank chatter; fillers are trimmed, content kept."""

from __future__ import annotations

from workmem.nodes.extractive.facts import MIN_WORTH
from workmem.nodes.extractive.worth import (
    content_words,
    fact_worth,
    is_decision,
    sentence_worth,
    strip_meta_talk,
    trim_filler,
)


def test_worth_prefers_names_numbers_dates_and_decisions_over_chatter():
    chatter = fact_worth("That sounds so amazing, you must feel proud!")
    assert fact_worth("I adopted a greyhound called Pepper on 8 May 2031.") > fact_worth(
        "I adopted a dog recently and it was nice."
    ) > chatter
    assert fact_worth("We decided on Caddy because of automatic TLS.") >= 3
    assert fact_worth("Is it raining there today?") == 0.0
    assert fact_worth("Yes indeed.") == 0.0


def test_trim_filler_keeps_the_content():
    assert trim_filler("By the way, I moved to Leeds.") == "I moved to Leeds."
    assert trim_filler("Wow, so cool.") == "Wow, so cool."  # too little would be left


def test_decisions_and_content_words():
    assert is_decision("We chose Caddy because of automatic TLS.")
    assert not is_decision("We went to the beach.")
    assert content_words("I really love the old lighthouse at Harrow Bay") == ["lighthouse", "Harrow", "Bay"]


def test_what_someone_likes_is_worth_keeping():
    liked = "I really enjoy dramas and emotionally-driven films."
    assert fact_worth(liked) >= MIN_WORTH > fact_worth("I really watch dramas and emotionally-driven films.")
    assert fact_worth("My favorite dessert is a chocolate raspberry tart.") > fact_worth(
        "My usual dessert is a chocolate raspberry tart.")
    assert sentence_worth(liked) < MIN_WORTH  # the bonus is a conversation's: `fact_worth` adds it, not this


def test_a_preference_that_is_a_decision_counts_once():
    assert fact_worth("We prefer the quiet beach near Hove.") == sentence_worth("We prefer the quiet beach near Hove.")


def test_talk_about_the_talk_is_stripped_and_the_rest_kept():
    assert strip_meta_talk("Since we last spoke, I adopted a greyhound called Pepper.") == (
        "I adopted a greyhound called Pepper.")
    assert strip_meta_talk("Long time no chat - I moved to Leeds in March!") == "I moved to Leeds in March!"
    moved = "I moved to Leeds, since we last talked, and I love it."
    assert strip_meta_talk(moved) == "I moved to Leeds, and I love it."
    assert strip_meta_talk("I bought apples, pears, and oranges at Aldi since we last talked.") == (
        "I bought apples, pears, and oranges at Aldi.")  # a list keeps its commas
    assert strip_meta_talk("It's been ages since we caught up!") == ""
    assert strip_meta_talk("John, been a while since we chatted.") == ""
    assert strip_meta_talk("See ya soon, Deb!") == ""


def test_talk_about_the_talk_leaves_real_content_alone():
    for said in ("I got married since we last talked!",  # too short without the phrase: kept as said
                 "I will see you at the Lisbon marathon on 3 May.", "I'll catch you when I'm in Boston.",
                 "Since I talked to my lawyer, I sold the house in Leeds.",
                 "I've been a long time fan of Radiohead, and I saw them in Leeds.",
                 "We talked about the ferry to Tern Island."):
        assert strip_meta_talk(said) == said
