"""Layering: `state` ← `nodes` ← `graphs`, never upward; above `state/` only the storage interface (§11)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Modules of a storage backend: only `state/` itself may import them.
BACKEND = {"store", "file_storage", "archives", "meta", "jsonl", "fsutil", "locks", "sqlite", "tasks", "search_index",
           "search_candidates", "fts_query", "pg_storage", "pg_sessions", "pg_tasks", "pg_search", "pg_schema",
           "pg_checks"}
LAYERS = {"state": 0, "nodes": 1, "graphs": 2}


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.startswith("workmem.")]


SOURCES = sorted(p for layer in LAYERS for p in (REPO / layer).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_respect_the_layers_and_the_storage_interface(path):
    layer = path.relative_to(REPO).parts[0]
    for module in imports(path):
        parts = module.split(".")
        target = parts[1] if len(parts) > 1 else ""
        if target in LAYERS:
            assert LAYERS[target] <= LAYERS[layer], f"{path.name} imports {module}: upward"
        if layer != "state" and target == "state" and len(parts) > 2:
            assert parts[2] not in BACKEND, f"{path.name} imports the backend module {module}"
