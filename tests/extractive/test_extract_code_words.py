"""nodes/extractive/code_words.py: the tables are well formed and the rule built from each recognises every entry
(in the context the rule reads it in)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from word_tables import repeats, tables

from workmem.nodes.extractive import code_words, prose, steps, task, transcript, worth
from workmem.nodes.extractive.shell import command_touches

TABLES = tables(code_words)


def kinds(command: str) -> list[tuple[str, str]]:
    return [(t.path, t.kind) for t in command_touches(command)]


CHECKS: dict[str, Callable[[str], object]] = {
    "READERS": lambda w: kinds(f"{w} a.py") == [("a.py", "read")],
    "SEARCHERS": lambda w: kinds(f"{w} pat a.py") == [("a.py", "searched")],
    "INTERPRETERS": lambda w: kinds(f"{w} run.py") == [("run.py", "ran")],
    "TEST_RUNNERS": lambda w: kinds(f"{w} tests/t.py") == [("tests/t.py", "tested")],
    "TEST_MODULES": lambda w: kinds(f"python -m {w} tests/t.py") == [("tests/t.py", "tested")],
    "PREFIX_COMMANDS": lambda w: kinds(f"{w} cat a.py") == [("a.py", "read")],
    "HEAD_OPTIONS": lambda w: kinds(f"head {w} 5 a.py") == [("a.py", "read")],
    "SEARCH_OPTIONS": lambda w: kinds(f"grep {w} v.x pat a.py") == [("a.py", "searched")],
    "SED_OPTIONS": lambda w: ("a.py", "read") in kinds(f"sed -n {w} v.x '1,2p' a.py")
    and "v.x" not in {p for p, _ in kinds(f"sed -n {w} v.x '1,2p' a.py")},
    "TEST_OPTIONS": lambda w: kinds(f"pytest {w} v.py tests/t.py") == [("tests/t.py", "tested")],
    "EDIT_VERBS": lambda w: steps._verb(f"{w}_file") == "edited",
    "WRITE_VERBS": lambda w: steps._verb(f"{w}_file") == "created",
    "READ_VERBS": lambda w: steps._verb(f"{w}_file") == "read",
    "SEARCH_VERBS": lambda w: steps._verb(f"{w}_files") == "searched",
    "TEST_VERBS": lambda w: steps._verb(f"{w}_suite") == "tested",
    "RUN_VERBS": lambda w: steps._verb(f"{w}_script") == "ran",
    "SHELL_TOOLS": lambda w: [t.kind for t in steps.call_touches(w, "cat a.py")] == ["read"],
    "COMMAND_KEYS": lambda w: [t.kind for t in steps.call_touches("tool", {w: "cat a.py"})] == ["read"],
    "EDITOR_COMMANDS": lambda w: len(steps.call_touches("str_replace_editor", {"command": w, "path": "a.py"})) == 1,
    "COMMAND_WORDS": lambda w: prose.is_command(f"{w} -x a && b."),
    "THOUGHT_LABELS": lambda w: prose.strip_label(f"{w.upper()}: The parser works.") == "The parser works.",
    "GLUE_ENDS": lambda w: prose.is_fragment(f"It stops right at {w}") and not prose.is_fragment("It stops here."),
    "FINDING_CUES": lambda w: worth._FINDING_RE.search(f"so {w} it"),
    "RESULT_CUES": lambda w: worth._RESULT_RE.search(f"it {w} here"),
    "HEDGES": lambda w: worth.HEDGE_RE.match(f"{w.capitalize()}, the parser works."),
    "SKIPPED_BLOCKS": lambda w: task.salient_lines(f"<{w}>\nNoise here\n</{w}>\nFix it") == ["Fix it"],
    "CONSTRAINT_CUES": lambda w: task._CONSTRAINT_RE.search(f"It {w} work."),
    "HARNESS_NOTES": lambda w: transcript.is_harness_note(f"{w.capitalize()}, then more.")
    and not transcript.is_harness_note(f"Fix it. {w}"),
}


def test_every_table_has_a_check():
    assert set(TABLES) == set(CHECKS)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_no_table_repeats_an_entry_and_entries_are_lowercase(name):
    assert repeats(TABLES[name]) == []
    assert [e for e in TABLES[name] if e != e.lower()] == [] or name.endswith("OPTIONS")


@pytest.mark.parametrize(("name", "entry"), [(name, entry) for name in sorted(TABLES) for entry in TABLES[name]])
def test_the_rule_built_from_a_table_recognises_each_entry(name, entry):
    assert CHECKS[name](entry), f"the rule built from {name} misses {entry!r}"
