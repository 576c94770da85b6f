"""Properties of merge over random op sequences: no loss where the guards promise none, canonical output."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workmem.nodes.guards import path_tokens
from workmem.nodes.merge import merge_working_memory
from workmem.state.memory import (
    CONSOLIDATION_SENTINEL,
    SECTIONS,
    bullet_items,
    escape_body,
    parse_sections,
    render_sections,
)
from workmem.state.ops import canonical_ops

FRAGMENTS = [
    "src/app/main.py",
    "docs/guide",
    "README.md",
    "Config.YAML",
    "and/or",
    "Alice",
    "Berlin",
    "2024-03-15",
    "$1,200",
    "3 years",
    "decided",
    "fact",
    "Fact 1",
    "Fact 10",
    "#",
    "## Session Title",
    "## Open Issues",
    "# Working Memory",
    "- ",
    "* ",
    "1.",
    "[resolved]",
    "[silently dropped, restored]",
    CONSOLIDATION_SENTINEL,
    "`code`",
    "**bold**",
    "\r\n",
    "\n",
    "\r",
    "  ",
]

words = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6))
lines = st.lists(words, max_size=5).map(" ".join)
bodies = st.lists(st.tuples(st.sampled_from(["", "- ", "  "]), lines), max_size=6).map(
    lambda rows: "\n".join(prefix + line for prefix, line in rows)
)
junk = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.just({"op": "DELETE"}),
)
op_name = st.sampled_from(["KEEP", "UPDATE", "APPEND", "keep", "update", "append"])
section_ops = st.one_of(
    st.builds(lambda name: {"op": name}, op_name),
    st.builds(lambda name, content: {"op": name, "content": content}, op_name, bodies),
    st.builds(
        lambda name, items: {"op": name, "items": items},
        op_name,
        st.lists(st.one_of(lines, junk), max_size=7),
    ),
    junk,
)
section_maps = st.dictionaries(st.sampled_from([*SECTIONS, "Mood", "sections"]), section_ops, max_size=8)
ops_values = st.one_of(section_maps, section_maps.map(lambda m: {"sections": m}), junk)
documents = st.one_of(
    st.dictionaries(st.sampled_from([*SECTIONS, "Mood"]), bodies).map(render_sections),
    st.lists(st.tuples(st.sampled_from([*SECTIONS, "Mood"]), bodies), max_size=9).map(
        lambda parts: "\n".join(f"## {name}\n{body}" for name, body in parts)
    ),
    bodies,
)

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_round(old: str, ops: object) -> str:
    before = copy.deepcopy(ops)
    new = merge_working_memory(old, ops)
    assert merge_working_memory(old, ops) == new, "merge is deterministic"
    assert ops == before, "merge does not mutate its ops"
    assert [line.strip() for line in new.splitlines() if line.strip().startswith("## ")] == [
        f"## {name}" for name in SECTIONS
    ]
    assert new.startswith("# Working Memory\n\n## Session Title") and new.endswith("\n")
    old_sections, new_sections = parse_sections(old), parse_sections(new)
    assert list(new_sections) == list(SECTIONS)
    old_errors = old_sections.get("Errors & Corrections", "")
    new_errors = new_sections["Errors & Corrections"]
    if old_errors:
        assert new_errors.startswith(old_errors)
        assert bullet_items(new_errors)[: len(bullet_items(old_errors))] == bullet_items(old_errors)
    assert path_tokens(old_sections.get("Files & Context", "")) <= path_tokens(
        new_sections["Files & Context"]
    )
    for name, op in canonical_ops(ops).items():
        if op == {"op": "KEEP"}:
            assert new_sections[name] == old_sections.get(name, "")
    return new


@PROPERTY_SETTINGS
@given(documents, st.lists(ops_values, min_size=1, max_size=4))
def test_random_op_sequences_keep_the_promises(old, sequence):
    doc = old
    for ops in sequence:
        doc = _check_round(doc, ops)


@PROPERTY_SETTINGS
@given(documents)
def test_all_keep_is_idempotent_rendering(old):
    once = merge_working_memory(old, None)
    assert merge_working_memory(once, None) == once
    assert merge_working_memory(once, {name: {"op": "KEEP"} for name in SECTIONS}) == once


@PROPERTY_SETTINGS
@given(st.dictionaries(st.sampled_from(SECTIONS), bodies.map(escape_body)))
def test_escaped_bodies_survive_render_and_parse(mapping):
    reparsed = parse_sections(render_sections(mapping))
    assert reparsed == {name: mapping.get(name, "").strip() for name in SECTIONS}
