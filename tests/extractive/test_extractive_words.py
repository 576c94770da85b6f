"""nodes/extractive/words.py: the extractive model's tables are well formed and the rule built from each
table recognises every one of its entries (in the context the rule reads it in)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from word_tables import repeats, tables

from workmem.nodes.extractive import artifacts, cues, facts, text, tracking, transcript, words, worth
from workmem.nodes.extractive.facts import Fact
from workmem.nodes.extractive.transcript import Result

TABLES = tables(words)
CASED = {"FIRST_PERSON", "EXCEPTION_SUFFIXES"}  # matched case-sensitively: written as they are spelled


def _subject(sentence: str) -> str | None:
    return facts._subject(Fact(sentence, None, None, 0))


def _speaker(label: str) -> str | None:
    msgs = transcript.parse_transcript(f"[#1 user]\n{label}: bring a jacket\n[#2 user]\n{label}: and boots")
    return msgs[0].speaker


def _done(sentence: str) -> str | None:
    found = cues._DONE_RE.search(sentence)
    return found.group(1) if found else None


CHECKS: dict[str, Callable[[str], object]] = {
    "WEEKDAYS": lambda w: text.DATE_RE.fullmatch(w.capitalize()),
    "NEGATIONS": lambda w: text._NEGATED_CLAUSE_RE.match(f"{w} redis, but").group() == f"{w} redis",
    "KEYWORD_STOPWORDS": lambda w: text.keywords(f"{w} {w.capitalize()} parser") == text.keywords("parser"),
    "CONTENT_STOPWORDS": lambda w: worth.content_words(f"{w} {w.capitalize()} parser") == ["parser"],
    "WEAK_TERMS": lambda w: cues.negated_terms(f"Use redis, not {w}.") == set(),
    "NOT_SPEAKERS": lambda w: _speaker(w.capitalize()) is None and _speaker("Ada") == "Ada",
    "DECISION_CUES": lambda w: worth._DECISION_RE.search(f"so {w} it").group(1) == w,
    "FILLERS": lambda w: worth.trim_filler(f"{w.capitalize()}, we adopted a dog in May.") == "We adopted a dog in May.",
    "SIDE_NOTE_KINDS": lambda w: worth.trim_filler(f"On a {w} note - we adopted a dog.") == "We adopted a dog.",
    "EVENT_VERBS": lambda w: worth._EVENT_RE.search(f"she {w} it").group() == w,
    "FEELING_WORDS": lambda w: worth._FEELING_RE.search(f"so {w} today").group() == w,
    "TALK_VERBS": lambda w: worth.strip_meta_talk(f"Since we last {w}, I adopted a dog.") == "I adopted a dog."
    and worth.strip_meta_talk(f"Been ages since we {w}.") == "",
    "LONG_WHILES": lambda w: worth.strip_meta_talk(f"It's been {w} - I adopted a dog.") == "I adopted a dog.",
    "FAREWELLS": lambda w: worth.strip_meta_talk(f"{w.capitalize()}, Ada!") == "",
    "PREFERENCES": lambda w: worth._PREFERENCE_RE.search(f"so {w} it").group() == w,
    "FIRST_PERSON": lambda w: worth._FIRST_PERSON_RE.search(f"so {w} said"),  # `I` already finds `I'm`
    "SECOND_PERSON": lambda w: worth._SECOND_PERSON_RE.search(f"so {w.upper()} said"),  # `you` finds `you're`
    "REACTIONS": lambda w: worth.REACTION_RE.match(f"{w.capitalize()}! The parser works."),
    "TIME_WORDS": lambda w: worth._TIME_RE.search(f"so {w} then").group() == w,
    "LEAD_WORDS": lambda w: cues.core(f"{w.capitalize()}, fix the parser") == "fix the parser",
    "REQUEST_OPENERS": lambda w: cues.is_request(f"{w.capitalize()} fix the parser")
    and cues.is_polite_request(f"{w} fix the parser?"),
    "POLITE_OPENERS": lambda w: cues.core(f"{w.capitalize()} fix the parser") == "fix the parser",
    "IMPERATIVES": lambda w: cues.is_request(f"{w.capitalize()} the parser now"),
    "OPENERS": lambda w: cues.as_task(f"{w.capitalize()}, return 400 here") == "Return 400 here",
    "WANT_CUES": lambda w: cues.is_request(f"The parser {w} be fixed"),
    "SOCIAL_PHRASES": lambda w: cues._SOCIAL_RE.match(f"{w.capitalize()}!"),
    "PICTURES": lambda w: cues._SOCIAL_RE.match(f"Send me some {w}s") and cues._SOCIAL_RE.match(f"send a {w}"),
    "ACKS": lambda w: cues.is_ack(f"{w.capitalize()}!"),
    "PLANNING": lambda w: cues.is_plan(f"I'm {w} visit Paris with Caroline this summer.")
    and cues.is_plan(f"We are {w} visit Paris with Caroline this summer."),
    "PLAN_VERBS": lambda w: cues.is_plan(f"We {w} to visit Paris with Caroline this summer."),
    "PLAN_NOUNS": lambda w: cues.is_plan(f"My {w} is visiting Paris with Caroline this summer."),
    "FUTURE_PLANS": lambda w: cues.is_plan(f"I'll {w} visiting Paris with Caroline this summer."),
    "PLAN_PERIODS": lambda w: cues.is_plan(f"Visiting Paris with Caroline next {w}."),
    "CORRECTION_OPENERS": lambda w: cues.is_correction(f"{w.capitalize()}, use Postgres.", False),
    "THAT_IS_WRONG": lambda w: cues.is_correction(f"That's {w}.", False) and cues.is_correction(f"That is {w}.", False),
    "DONT_ACTIONS": lambda w: cues.is_correction(f"Don't {w} the config.", False)
    and cues.negated_terms(f"Never {w} the config.") == {"config"},
    "ISSUE_CUES": lambda w: cues.is_issue(f"{w.capitalize()}: the parser"),
    "NEXT_OPENERS": lambda w: cues.is_next_step(f"{w.capitalize()} the parser"),
    "NEXT_ANYWHERE": lambda w: cues.is_next_step(f"The parser, {w} it"),
    "DONE_WORDS": lambda w: _done(f"the parser {w}") == w,
    "DONE_PARTICIPLES": lambda w: _done(f"the parser is {w} to pass") == f"is {w}",
    "FINISHED_FORMS": lambda w: _done(f"the parser was {w}") == f"was {w}",
    "NOT_DONE_AFTER": lambda w: not cues.reports_done(f"It was designed {w} last.")
    and cues.reports_done("It was designed."),
    "REPORTS": lambda w: cues._REPORT_RE.match(f"We {w} the parser."),
    "PAST_WORDS": lambda w: tracking._PAST_RE.search(f"she {w} it").group() == w,
    "SUBJECT_DETERMINERS": lambda w: _subject(f"{w.capitalize()} parser port is 8080.") == "parser port",
    "COPULAS": lambda w: _subject(f"The parser port {w} 8080.") == "parser port",
    "SUBJECT_PRONOUNS": lambda w: _subject(f"The parser {w} is broken.") is None
    and _subject("The parser port is broken.") == "parser port",
    "EXCEPTION_SUFFIXES": lambda w: artifacts.error_items(Result("pytest", True, ["Traceback:", f"app.Bad{w}: boom"]))
    == [f"app.Bad{w}: boom"],
    "ERROR_WORDS": lambda w: artifacts.error_items(Result("sh", False, [f"{w.upper()}: disk full"]))
    == [f"{w.upper()}: disk full"],
    "PATH_KEYS": lambda w: artifacts._arg_paths(json.dumps({f"the_{w}s": "docs/a.txt", "name": "docs/b.txt"}))
    == ["docs/a.txt"],
}


def test_every_table_has_a_check():
    assert set(TABLES) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_table_repeats_an_entry(name):
    assert repeats(TABLES[name]) == []


@pytest.mark.parametrize("name", sorted(set(TABLES) - CASED))
def test_entries_are_lowercase(name):
    """The rules match case-insensitively or compare lowercased words: a capital would never match."""
    assert [e for e in TABLES[name] if e != e.lower()] == []


@pytest.mark.parametrize(("name", "entry"), [(name, entry) for name in sorted(TABLES) for entry in TABLES[name]])
def test_the_rule_built_from_a_table_recognises_each_entry(name, entry):
    assert CHECKS[name](entry), f"the rule built from {name} misses {entry!r}"


def test_the_cased_tables_stay_case_sensitive():
    assert not worth._FIRST_PERSON_RE.search("i think MY plan")
    assert artifacts.error_items(Result("pytest", True, ["app.Badexception: boom", "x"])) == ["app.Badexception: boom"]
    assert not artifacts._EXC_RE.match("app.Badexception: boom")


def test_month_prefixes_find_every_month_form():
    for name in ("Jan", "Sept.", "september", "May"):
        assert text.DATE_RE.search(f"on 7 {name} 2023"), name
