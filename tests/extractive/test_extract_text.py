"""Text helpers: sentences, one-line items, questions, keywords, identifiers and keyword overlap."""

from __future__ import annotations

from workmem.nodes.extractive.text import (
    as_sentence,
    clean,
    identifiers,
    is_question,
    keywords,
    norm,
    overlaps,
    sentences,
)


def test_sentences_skip_code_and_markers():
    text = "- First point. Second point!\n```\ncode. More code.\n```\n2) Third?"
    assert sentences(text) == ["First point.", "Second point!", "Third?"]


def test_keywords_and_overlap():
    assert keywords("Updated the importer for supplier 42") == {"updat", "impor", "suppl", "42"}
    assert overlaps("Update the importer for supplier 42", "Updated importer; supplier 42 works")
    assert not overlaps("Update the importer", "The weather is nice")
    assert not overlaps("Fix", "Fixed")  # an item needs two keywords to be matched at all


def test_items_are_one_clean_line():
    assert clean("- **Bold**   point\n  two") == "Bold point two"
    assert clean("word " * 100, limit=20).endswith("…") and len(clean("word " * 100, limit=20)) <= 20
    assert as_sentence("no stop") == "no stop." and as_sentence("Done!") == "Done!"
    assert norm("`Fix` the *Parser*.") == "fix the parser"
    assert is_question("Which one?") and is_question("Really? (no)?") and not is_question("Yes.")


def test_identifiers_ignore_dates():
    assert identifiers("Update module_7.py for supplier 42 on 2024-05-03") == {"module_7.py", "42"}
    assert not overlaps("Update module_7.py for supplier 7", "Updated module_8.py for supplier 8")


def test_identifiers_in_a_negated_clause_do_not_have_to_match():
    goal = "Put a per-supplier encoding map in the loader, not in settings.toml."
    assert overlaps(goal, "Added SUPPLIER_ENCODINGS in the loader with cp1252 for Nordhavn only.")
