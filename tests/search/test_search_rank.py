"""search_rank: term weights, the neighbour window, fusion, the length prior — pure functions, hand-made input."""

from __future__ import annotations

import pytest

from workmem.state.search import search_rank as rank


def matches(seqs, weight=1.0, spreads=True, asks=(), length=None):
    return rank.Matches({s: (length, s in asks) for s in seqs}, weight, spreads)


def test_idf_falls_as_a_term_gets_common_and_the_weight_keeps_a_floor():
    assert rank.idf(1000, 1) > rank.idf(1000, 10) > rank.idf(1000, 500) > 0
    assert rank.term_weight(1000, 1) == pytest.approx(rank.idf(1000, 1) - rank.IDF_SHIFT)
    everywhere = rank.idf(1000, 1000)
    assert rank.term_weight(1000, 1000) == pytest.approx(rank.IDF_FLOOR * everywhere)
    assert rank.idf(5, 9) > 0  # a scope estimate below the matches never breaks the log


def test_a_match_scores_its_neighbours_lower_and_more_after_a_question():
    plain = rank.score([[matches([10])]], avg_length=20)
    assert plain[10] > plain[11] > 0 and plain[10] > plain[9] > 0
    assert plain[11] == pytest.approx(rank.AFTER[0] * plain[10])
    assert plain[9] == pytest.approx(rank.BEFORE[0] * plain[10])
    assert set(plain) == {10, *(10 + o for o in range(1, len(rank.AFTER) + 1)),
                          *(10 - o for o in range(1, len(rank.BEFORE) + 1))}
    asked = rank.score([[matches([10], asks={10})]], avg_length=20)
    assert asked[11] == pytest.approx(rank.AFTER_QUESTION[0] * asked[10]) and asked[11] > plain[11]


def test_matches_that_do_not_vouch_stay_alone():
    assert set(rank.score([[matches([10, 20], spreads=False)]], avg_length=20)) == {10, 20}


def test_terms_add_up_and_a_window_covering_two_terms_beats_one_term():
    scores = rank.score([[matches([10])], [matches([11])], [matches([30])]], avg_length=20)
    assert scores[10] > scores[30] and scores[11] > scores[30]  # own word + the neighbour's word
    assert scores[10] == pytest.approx(scores[30] + rank.BEFORE[0] * scores[30])


def test_one_term_found_through_two_indexes_counts_once_at_its_best():
    both = rank.score([[matches([10], weight=2.0), matches([10], weight=0.5)]], avg_length=20)
    alone = rank.score([[matches([10], weight=2.0)]], avg_length=20)
    assert both[10] == pytest.approx(alone[10])


def test_shorter_messages_score_higher_per_term_but_the_prior_favours_longer_ones():
    short, long_ = rank.term_scores({1: (5, False), 2: (60, False)}, 1.0, avg_length=20).values()
    assert short > long_
    assert rank.length_prior(60, 20) > rank.length_prior(20, 20) > rank.length_prior(5, 20)
    assert rank.length_prior(20, 20) == pytest.approx(1.0)
    assert rank.length_prior(10_000, 20) == pytest.approx(rank.LENGTH_PRIOR_CAP ** rank.LENGTH_PRIOR)
    assert rank.length_prior(None, 20) == 1.0


def test_only_the_strongest_matches_spread(monkeypatch):
    monkeypatch.setattr(rank, "SOURCES", 1)
    scores = rank.score([[matches([10], weight=3.0)], [matches([50], weight=1.0)]], avg_length=20)
    assert 11 in scores and 51 not in scores


def test_top_is_by_score_then_newest():
    assert rank.top({1: 1.0, 2: 3.0, 3: 1.0, 4: 0.5}, 3) == [2, 3, 1]
