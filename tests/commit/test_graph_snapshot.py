"""The commit graph's topology as a stored mermaid text: adding or dropping an edge is a
visible diff, and every fallback edge is drawn with its label. Regenerate after a deliberate change
with `WORKMEM_UPDATE_SNAPSHOTS=1 pytest tests/test_graph_snapshot.py` and review the diff."""

from __future__ import annotations

import ast
import re

import pytest
from paths import REPO, TESTS
from snapshot import assert_snapshot

from workmem.graphs.commit import compile_commit_graph, graph
from workmem.state.commit_state import RESET

SNAPSHOTS = TESTS / "snapshots"
EDGE = re.compile(r"^\s*(\w+) -\. &nbsp;(\w+)&nbsp; \.-> (\w+);$")

# (source, label, target): every conditional edge of the commit, fallbacks first
LABELLED_EDGES = [
    ("generate", "retry", "generate"),
    ("generate", "exhausted", "extractive_fallback"),
    ("generate", "answered", "validate"),
    ("validate", "malformed", "recover"),
    ("validate", "no_usable_call", "create_retry"),
    ("validate", "fallback", "extractive_fallback"),
    ("recover", "no_usable_call", "create_retry"),
    ("recover", "fallback", "extractive_fallback"),
    ("recover", "recovered", "guard"),
    ("validate", "valid", "guard"),
    ("slice_turns", "covered", "load_memory"),
    ("slice_turns", "nothing_to_cover", "report"),
    ("merge", "next_chunk", "generate"),
    ("merge", "done", "persist"),
]
PLAIN_EDGES = ["create_retry --> generate", "extractive_fallback --> guard", "guard --> merge",
               "load_memory --> generate", "persist --> report"]
GRAPHS = {
    "commit_graph.mmd": (lambda: graph, [("__start__", "valid", "take_lease"), ("take_lease", "leased", "slice_turns"),
                                         ("take_lease", "busy", "__end__")]),
    "commit_graph_engine.mmd": (lambda: compile_commit_graph(), []),
}


def mermaid(name: str) -> str:
    return GRAPHS[name][0]().get_graph().draw_mermaid(with_styles=False)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_drawing_matches_the_snapshot(name):
    assert_snapshot(name, mermaid(name))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_fallback_edge_is_drawn_with_its_label(name):
    drawn = mermaid(name)
    labelled = {m.groups() for line in drawn.splitlines() if (m := EDGE.match(line))}
    assert labelled == set(LABELLED_EDGES) | set(GRAPHS[name][1])
    for edge in PLAIN_EDGES:
        assert f"\t{edge};" in drawn, edge


def route_names_in_the_nodes() -> set[str]:
    """Every name a node can append to `route`: string items of `"route": [...]` lists in nodes/*.py."""
    found: set[str] = set()
    for path in (REPO / "nodes").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "route" and isinstance(value, ast.List):
                        found |= {e.value for e in value.elts
                                  if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return found - {RESET}


def test_every_route_name_recorded_anywhere_is_a_drawn_node():
    """The drawing (`get_graph(xray=True)`, as Studio shows it) names every step a route can record."""
    from test_commit_graph import CASES, FIRST_COMMIT_CASES

    drawn = set(graph.get_graph(xray=True).nodes)
    recorded = route_names_in_the_nodes() | {name for case in [*CASES, *FIRST_COMMIT_CASES] for name in case[2]}
    assert len(recorded) >= 12 and {"generate", "extractive_fallback", "take_lease", "release_lease"} <= recorded
    assert recorded <= drawn, recorded - drawn
