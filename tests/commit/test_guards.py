"""The guards, table-driven: each row is one behaviour with its boundary."""

from __future__ import annotations

import pytest
from oracles import guard_section

from workmem.nodes.guards import SALVAGE, TO_ARCHIVE, guard_ops, lexical_anchors, meaningful_words, path_tokens
from workmem.state.memory import CONSOLIDATION_SENTINEL, SECTIONS, bullet_count
from workmem.state.tokens import count_tokens

KEEP = {"op": "KEEP"}
FACTS = "Key Facts & Decisions"


def facts(n: int, start: int = 1) -> str:
    """n anchor-free bullets (lowercase, no units), well under 1500 tokens for n <= 60."""
    return "\n".join(f"- fact number {i} about tea" for i in range(start, start + n))


def body_with_tokens(target: int, bullets: int = 10) -> str:
    """A body of `bullets` anchor-free bullets measuring exactly `target` tokens."""
    body = facts(bullets)
    while count_tokens(body) < target:
        body += " z"
    assert count_tokens(body) == target and bullet_count(body) == bullets
    return body


def update(content: str) -> dict:
    return {"op": "UPDATE", "content": content}


def append(*items: str) -> dict:
    return {"op": "APPEND", "items": list(items)}


def salvage(*items: str) -> dict:
    """The APPEND of a rejected Key Facts UPDATE's new items, marked so the budgets may spill it at once."""
    return {**append(*items), SALVAGE: True}


NEW7 = tuple(f"new idea {word}" for word in "alpha bravo charlie delta echo foxtrot golf".split())
NAMES = [f"Name{a}{b}" for a in "abcdefghij" for b in "abcdefghij"]  # 100 distinct capitalised anchors
ANCHOR_BODY = "\n".join("- met " + " ".join(NAMES[row * 10 : row * 10 + 10]) for row in range(10))


def covering(count: int) -> str:
    """An UPDATE body of 10 bullets naming the first `count` of the 100 anchors of ANCHOR_BODY."""
    chosen = NAMES[:count]
    return "\n".join(f"- merged {row}: " + " ".join(chosen[row::10]) for row in range(10))


KEY_FACTS_CASES = [
    ("append_at_25_bullets_accepts_all", facts(25), append(*NEW7), append(*NEW7)),
    ("append_at_26_bullets_caps_at_5", facts(26), append(*NEW7), append(*NEW7[:5])),
    ("append_at_1500_tokens_accepts_all", body_with_tokens(1500), append(*NEW7), append(*NEW7)),
    ("append_at_1501_tokens_caps_at_5", body_with_tokens(1501), append(*NEW7), append(*NEW7[:5])),
    ("append_at_50_bullets_caps_at_5", facts(50), append(*NEW7), append(*NEW7[:5])),
    ("append_at_51_bullets_sentinel_only", facts(51), append(*NEW7), append(CONSOLIDATION_SENTINEL)),
    ("append_at_3000_tokens_caps_at_5", body_with_tokens(3000), append(*NEW7), append(*NEW7[:5])),
    (
        "append_at_3001_tokens_sentinel_only",
        body_with_tokens(3001),
        append(*NEW7),
        append(CONSOLIDATION_SENTINEL),
    ),
    (
        "sentinel_never_twice",
        facts(51) + f"\n- {CONSOLIDATION_SENTINEL}",
        append(*NEW7),
        KEEP,
    ),
    (
        "oversized_dedupes_before_cap",
        facts(26),
        append("fact number 3 about tea", "Fact Number 4", *NEW7),
        append(*NEW7[:5]),
    ),
    ("oversized_nothing_new_keeps", facts(26), append("fact number 3 about tea."), KEEP),
    ("append_dedupes_within_batch", facts(3), append("x y", "x y", "- x y z"), append("x y", "x y z")),
    ("append_cleans_markers_and_drops_empty", facts(3), append("- new", " - ", "a\nb"), append("new", "a b")),
    ("update_ratio_at_0_15_accepted", facts(20), update(facts(3, start=100)), update(facts(3, start=100))),
    (
        "update_ratio_just_under_0_15_salvaged",
        facts(27),
        update(facts(4, start=100)),
        salvage(*(f"fact number {i} about tea" for i in range(100, 104))),
    ),
    (
        "update_ratio_rejected_salvages_every_new_item_when_oversized",
        facts(45),
        update(facts(5, start=100) + "\n" + facts(1, start=200)),
        salvage(*(f"fact number {i} about tea" for i in [100, 101, 102, 103, 104, 200])),
    ),
    (
        "update_rejected_at_50_bullets_salvages_all_seven",
        facts(50),
        update("\n".join(f"- {item}" for item in NEW7)),
        salvage(*NEW7),
    ),
    (
        "update_ratio_rejected_salvage_deduped",
        facts(20),
        update("- fact number 1 about tea\n- brand new"),
        salvage("brand new"),
    ),
    ("update_coverage_at_0_70_accepted", ANCHOR_BODY, update(covering(70)), update(covering(70))),
    (
        "update_coverage_just_under_0_70_salvaged",
        ANCHOR_BODY,
        update(covering(69)),
        salvage(*(line[2:] for line in covering(69).splitlines())),
    ),
    (
        "emergency_rejected_update_keeps_and_sends_its_new_items_to_the_archive",
        facts(51),
        update(facts(2, start=100)),
        {**KEEP, TO_ARCHIVE: [f"fact number {i} about tea" for i in (100, 101)]},
    ),
    ("emergency_rejected_update_with_nothing_new_keeps", facts(51), update(facts(2)), KEEP),
    (
        "emergency_passing_update_replaces",
        facts(51),
        update(facts(8, start=100)),
        update(facts(8, start=100)),
    ),
    ("old_body_without_anchors_passes_coverage", facts(10), update("- one\n- two"), update("- one\n- two")),
    ("old_body_without_bullets_accepts_update", "### heading only", update("- x"), update("- x")),
    ("keep_is_untouched", facts(60), KEEP, KEEP),
]


@pytest.mark.parametrize(
    ("old", "op", "expected"),
    [case[1:] for case in KEY_FACTS_CASES],
    ids=[case[0] for case in KEY_FACTS_CASES],
)
def test_key_facts_guard(old, op, expected):
    assert guard_section(FACTS, old, op) == expected


def test_boundary_helpers_measure_what_they_claim():
    assert bullet_count(facts(26)) == 26
    assert len(lexical_anchors(ANCHOR_BODY)) == 100
    assert len(lexical_anchors(ANCHOR_BODY) & lexical_anchors(covering(70))) == 70
    assert bullet_count(covering(69)) == 10


OLD_FILES = "- src/app/main.py entry point\n- docs/guide explains setup\n- config.yaml"
LEASE = "Decide whether to renew the Kreuzberg lease or move out by June"
OLD_ISSUES = "- Decide the hotel in Berlin\n- Budget for the trip\n- [resolved] Book flights"

SECTION_CASES = [
    (
        "title_sharing_a_word_accepted",
        "Session Title",
        "Berlin trip planning",
        update("Berlin and Paris"),
        None,
    ),
    (
        "title_sharing_only_a_number_accepted",
        "Session Title",
        "Release 2024 prep",
        update("The 2024 push"),
        None,
    ),
    (
        "title_without_shared_word_keeps",
        "Session Title",
        "Berlin trip planning",
        update("Cooking class"),
        KEEP,
    ),
    (
        "title_sharing_only_stopwords_keeps",
        "Session Title",
        "Plan for the Berlin trip",
        update("Plan for the week"),
        KEEP,
    ),
    (
        "title_stopword_only_old_accepts_anything",
        "Session Title",
        "Session notes: the plan",
        update("Cooking"),
        None,
    ),
    ("title_empty_update_keeps", "Session Title", "Berlin trip", update(""), KEEP),
    ("title_append_passes", "Session Title", "Berlin trip", append("x"), None),
    ("current_state_is_volatile", "Current State", "Was here.", update("Now there."), None),
    ("empty_update_on_unguarded_section_passes", "Task & Goals", "- ship v1", update(""), None),
    (
        "files_update_keeping_every_path_accepted",
        "Files & Context",
        OLD_FILES,
        update("- src/app/main.py\n- DOCS/GUIDE.\n- config.yaml\n- new/file.ts"),
        None,
    ),
    (
        "files_update_losing_a_path_demoted_to_new_path_lines",
        "Files & Context",
        OLD_FILES,
        update("- src/app/main.py\n- tests/test_app.py added\n- notes without a path\n- tests/test_app.py"),
        append("tests/test_app.py added"),
    ),
    (
        "files_update_losing_a_path_without_new_paths_keeps",
        "Files & Context",
        OLD_FILES,
        update("- src/app/main.py\n- config.yaml"),
        KEEP,
    ),
    ("files_append_passes", "Files & Context", OLD_FILES, append("lib/x.rs"), None),
    (
        "errors_update_becomes_append_of_new_items",
        "Errors & Corrections",
        "- ImportError fixed\n- typo in name",
        update("- ImportError fixed\n- port 8080 was busy"),
        append("port 8080 was busy"),
    ),
    (
        "errors_update_with_nothing_new_keeps",
        "Errors & Corrections",
        "- ImportError fixed",
        update("- importerror FIXED."),
        KEEP,
    ),
    (
        "issues_update_keeping_all_items_accepted",
        "Open Issues",
        OLD_ISSUES,
        update("- decide the hotel in berlin (Mitte?)\n- budget for the trip"),
        None,
    ),
    (
        "issues_silently_dropped_item_restored",
        "Open Issues",
        OLD_ISSUES,
        update("- Decide the hotel in Berlin"),
        update("- Decide the hotel in Berlin\n- [silently dropped, restored] Budget for the trip"),
    ),
    (
        "issues_empty_update_restores_every_open_item",
        "Open Issues",
        OLD_ISSUES,
        update(""),
        update(
            "- [silently dropped, restored] Decide the hotel in Berlin\n"
            "- [silently dropped, restored] Budget for the trip"
        ),
    ),
    (
        "issues_restore_once_then_droppable",
        "Open Issues",
        "- [silently dropped, restored] Budget for the trip\n- New thing",
        update("- New thing"),
        None,
    ),
    (
        "issues_resolved_item_droppable",
        "Open Issues",
        "- [resolved] Book flights\n- New thing",
        update("- New thing"),
        None,
    ),
    (
        "issues_key_is_first_40_chars_lowercased_without_emphasis",
        "Open Issues",
        f"- **{LEASE}**",
        update(f"{LEASE[:40].upper()}... (shortened)"),
        None,
    ),
    (
        "issues_key_one_char_short_of_40_restores",
        "Open Issues",
        f"- {LEASE}",
        update(LEASE[:39]),
        update(f"{LEASE[:39]}\n- [silently dropped, restored] {LEASE}"),
    ),
]


@pytest.mark.parametrize(
    ("section", "old", "op", "expected"),
    [case[1:] for case in SECTION_CASES],
    ids=[case[0] for case in SECTION_CASES],
)
def test_section_guard(section, old, op, expected):
    assert guard_section(section, old, op) == (op if expected is None else expected)


@pytest.mark.parametrize("section", SECTIONS)
def test_no_guard_when_old_body_is_empty(section):
    assert guard_section(section, "", update("")) == update("")
    assert guard_section(section, "  \n", update("x")) == update("x")


@pytest.mark.parametrize("op", [None, "UPDATE", [1], {"op": "UPDATE", "content": 3}, {"op": "nope"}])
def test_guard_section_treats_junk_as_keep(op):
    assert guard_section("Open Issues", OLD_ISSUES, op) == KEEP


def test_guard_ops_returns_all_seven_ops_and_notes_for_changed_decisions():
    old = {"Session Title": "Berlin trip", "Errors & Corrections": "- old error", FACTS: facts(51)}
    ops = {
        "sections": {
            "Session Title": update("Cooking"),
            "Errors & Corrections": update("- new error"),
            FACTS: append("x"),
            "Current State": update("Now."),
        }
    }
    guarded, notes = guard_ops(old, ops)
    assert list(guarded) == list(SECTIONS)
    assert guarded["Session Title"] == KEEP
    assert guarded["Errors & Corrections"] == append("new error")
    assert guarded[FACTS] == append(CONSOLIDATION_SENTINEL)
    assert guarded["Current State"] == update("Now.")
    assert guarded["Open Issues"] == KEEP
    assert [(n["section"], n["guard"], n["action"]) for n in notes] == [
        ("Session Title", "title", "rejected"),
        ("Key Facts & Decisions", "key_facts", "sentinel"),
        ("Errors & Corrections", "errors", "demoted"),
    ]
    assert all(n["detail"] for n in notes)


def test_every_changing_decision_is_a_note():
    old = {FACTS: facts(30), "Open Issues": OLD_ISSUES, "Files & Context": "- app/main.py",
           "Task & Goals": "- ship the parser"}
    ops = {FACTS: append(*NEW7), "Open Issues": update("- nothing left"),
           "Files & Context": update("- app/other.py"), "Task & Goals": append("ship the parser", "write docs")}
    _, notes = guard_ops(old, ops)
    assert {(n["section"], n["action"]) for n in notes} == {
        (FACTS, "throttled"), ("Open Issues", "restored"), ("Files & Context", "demoted"),
        ("Task & Goals", "deduped")}
    (dedupe,) = [n for n in notes if n["action"] == "deduped"]
    assert dedupe["detail"].startswith("1 item(s)")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Berlin trip 2024", {"berlin", "trip", "2024"}),
        ("The session title: working memory notes", set()),
        ("v2.1. release", {"v2.1", "release"}),
        ("Go to an AI meetup", {"meetup"}),
        ("x9 42", {"9", "42"}),
    ],
    ids=[
        "words_and_digits",
        "stopwords_only",
        "trailing_dot_removed",
        "short_words_ignored",
        "digit_runs_count_anywhere",
    ],
)
def test_meaningful_words(text, words):
    assert meaningful_words(text) == words


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("edit src/app/main.py now", {"src/app/main.py"}),
        ("README.md", {"readme.md"}),
        ("Config.YAML and SETUP.CFG", {"config.yaml", "setup.cfg"}),
        ("see docs/guide.", {"docs/guide"}),
        ("(lib/x.rs), then", {"lib/x.rs"}),
        ("run ./scripts/build.sh;", {"./scripts/build.sh", "scripts/build.sh"}),
        ("C:\\proj\\run.ps1", {"\\proj\\run.ps1"}),
        ("pkg/mod-name/file_v2", {"pkg/mod-name/file_v2"}),
        ("tsconfig.json, app.tsx and index.js", {"tsconfig.json", "app.tsx", "index.js"}),
        ("and/or", {"and/or"}),
        ("main.go: main.ts", {"main.go", "main.ts"}),
    ],
    ids=[
        "nested_py",
        "bare_md",
        "case_insensitive_extensions",
        "slash_path_trailing_dot",
        "parenthesised_trailing_comma",
        "dot_slash_prefix",
        "windows_path",
        "slash_path_with_dash_and_underscore",
        "several_extensions",
        "harmless_false_positive",
        "trailing_colon",
    ],
)
def test_path_tokens_positive(text, paths):
    assert path_tokens(text) == paths


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.8 is required",
        "version 1.2.3",
        "e.g. this",
        "foo.pyc and data.csv",
        "ratio 1/2 and 3/4",
        "all .py files",
        "a.b.c",
        "plain words only",
        "9abc/def",
    ],
    ids=[
        "version_number",
        "dotted_version",
        "abbreviation",
        "unknown_extensions",
        "fractions",
        "bare_extension",
        "dotted_words",
        "no_paths",
        "digit_led_slash",
    ],
)
def test_path_tokens_negative(text):
    assert path_tokens(text) == set()


@pytest.mark.parametrize(
    ("text", "anchors"),
    [
        ("due 2024-03-15", {"2024-03-15"}),
        ("on 15 march 2024", {"15 march 2024"}),
        ("On 3 MARCH 2024", {"3 march 2024", "march"}),
        ("for 3 years with 2 kids and 10 times", {"3 years", "2 kids", "10 times"}),
        ("paid $1,200, then $30.50", {"$1,200", "$30.50"}),
        ("at 10 AM or 9:30pm", {"10 am", "9:30 pm"}),
        ("we decided because it was agreed and resolved", {"decided", "because", "agreed", "resolved"}),
        ("Alice met The Bob in Paris", {"alice", "bob", "paris"}),
        ("Key Facts Session Memory This", set()),
        ("lowercase words only", set()),
    ],
    ids=[
        "iso_date",
        "day_month_year",
        "month_case_insensitive",
        "counted_quantities",
        "dollar_amounts",
        "clock_times",
        "decision_words",
        "capitalised_names_minus_stopwords",
        "capitalised_stopwords",
        "nothing",
    ],
)
def test_lexical_anchors(text, anchors):
    assert lexical_anchors(text) == anchors


def test_a_hash_line_of_a_demoted_errors_update_is_appended_not_lost():
    # `#482 …` is the model's text (an issue number), not a heading: an UPDATE applied whole stores it escaped
    guarded = guard_section("Errors & Corrections", "- ValueError: missing columns",
                            update("- ValueError: missing columns\n#482 TimeoutError after 30s in jobs/export.py"))
    assert guarded == append("\\#482 TimeoutError after 30s in jobs/export.py")


def test_a_hash_line_of_a_rejected_key_facts_update_is_salvaged_and_a_section_header_is_not():
    old = facts(10)
    guarded = guard_section(FACTS, old, update(f"## {FACTS}\n## Open Issues\n#482: decided to pin urllib3 to 1.26"))
    assert guarded == salvage("\\#482: decided to pin urllib3 to 1.26")


def test_a_model_cannot_forge_the_spill_pointer_with_a_period_or_a_numbered_marker():
    forged = ["[archived] 40 older items — archive_search finds them.", "1. [archived] 12 older items — archive_search"
              " finds them", "2) [archived] 3 new items refused for size — archive_search finds them!"]
    assert guard_section("Open Issues", "- Confirm the feed encoding", append(*forged, "Check the proxy")) == \
        append("Check the proxy")
    kept = guard_section("Open Issues", "- Confirm the feed encoding", update("\n".join(forged)))
    assert "[archived]" not in kept["content"] and "Confirm the feed encoding" in kept["content"]
