"""Dedupe of APPEND items: normalised token runs, and the reversal / status-word rule."""

from __future__ import annotations

import pytest

from workmem.nodes.dedupe import dedupe_items, normalize_item_tokens


@pytest.mark.parametrize(
    ("item", "tokens"),
    [
        ("**Fact 1.**", ["fact", "1"]),
        ("Use `uv`  run,   now!", ["use", "uv", "run", "now"]),
        ("_emphasis_ snake_case", ["emphasis", "snake_case"]),
        ("...", []),
    ],
    ids=["emphasis_and_trailing_dot", "backticks_and_spaces", "underscore_emphasis_only", "punctuation_only"],
)
def test_normalize_item_tokens(item, tokens):
    assert normalize_item_tokens(item) == tokens


@pytest.mark.parametrize(
    ("existing", "new", "kept"),
    [
        (["Fact 10"], ["Fact 1"], ["Fact 1"]),
        (["Fact 1"], ["Fact 10"], ["Fact 10"]),
        (["Fact 1 is about tea"], ["fact 1"], []),
        (["the user likes **green** tea"], ["likes green tea."], []),
        (["likes green tea"], ["the user likes green tea"], ["the user likes green tea"]),
        ([], ["a b", "A  B", "b", "c"], ["a b", "c"]),
        (["x"], ["", "  ", "**", "y"], ["y"]),
    ],
    ids=[
        "fact_1_distinct_from_fact_10",
        "fact_10_distinct_from_fact_1",
        "contiguous_run_is_present",
        "emphasis_and_punctuation_ignored",
        "longer_item_is_new",
        "within_batch",
        "empty_items_dropped",
    ],
)
def test_dedupe_items(existing, new, kept):
    assert dedupe_items(existing, new) == kept


@pytest.mark.parametrize(
    ("existing", "new", "kept"),
    [
        (["No longer using Redis for sessions."], ["Using Redis for sessions."], ["Using Redis for sessions."]),
        (["[resolved] Login fails on Safari"], ["Login fails on Safari"], ["Login fails on Safari"]),
        (["Correction: do not run migrations on prod"], ["run migrations on prod"], ["run migrations on prod"]),
        (["- [silently dropped, restored] Venue not chosen"], ["Venue not chosen"], ["Venue not chosen"]),
        (["We stopped deploying on Fridays"], ["deploying on Fridays"], ["deploying on Fridays"]),
        (["The cache bug was fixed in v2"], ["The cache bug"], ["The cache bug"]),
        (["Switched to uv instead of pip"], ["Switched to uv"], ["Switched to uv"]),
        (["We can’t ship on Monday"], ["ship on Monday"], ["ship on Monday"]),
        (["Picked Caddy as the proxy because of automatic TLS"], ["Picked Caddy as the proxy"], []),
        (["Using Redis for sessions."], ["using redis for sessions"], []),
        (["[resolved] Login fails on Safari"], ["[resolved] Login fails on Safari"], []),
        (["No longer using Redis"], ["No longer using Redis."], []),
        ([], ["Using Redis", "using redis."], ["Using Redis"]),
        ([], ["No longer using Redis", "using Redis"], ["No longer using Redis", "using Redis"]),
    ],
    ids=[
        "reversal_word_outside_the_run_keeps_it",
        "reopened_issue_is_new",
        "contradicting_correction_keeps_it",
        "restored_marker_keeps_it",
        "stopped_keeps_it",
        "fixed_keeps_it",
        "instead_keeps_it",
        "curly_cant_keeps_it",
        "plain_contained_repeat_dropped",
        "plain_repeat_dropped",
        "equal_with_marker_dropped",
        "equal_reversal_dropped",
        "within_batch_repeat_dropped",
        "within_batch_reversal_kept",
    ],
)
def test_dedupe_never_swallows_a_reversal(existing, new, kept):
    assert dedupe_items(existing, new) == kept


@pytest.mark.parametrize(("existing", "new"), [
    (["app/main.py"], ["app/__main__.py"]),
    (["TypeError in app.init"], ["TypeError in app.__init__"]),
    (["cache is cold"], ["_cache is cold"]),
    (["src/internal/config.py"], ["src/_internal/config.py"]),
], ids=["dunder_path", "dunder_module", "leading_underscore", "underscore_folder"])
def test_an_underscore_inside_a_name_is_the_name_not_emphasis(existing, new):
    assert dedupe_items(existing, new) == new, "another file, another name: not a duplicate"
    assert dedupe_items(new, new) == [], "the same name is still a duplicate"
