"""Layering, as folder rules (no hand list of modules):

- `state` ← `nodes` ← `graphs`, never upward (the front door `workmem/` may import any of them);
- nothing outside `workmem.state` imports a storage backend package (`workmem.state.files`, `workmem.state.postgres`):
  above `state/` only the storage interface of `workmem.state.storage` is known;
- the backends never import each other, only the neutral core;
- the neutral core imports a backend only inside a function (`open_storage` picks one), never at module level.

`tests/` are exempt. ruff's TID251 (the `ruff.toml` of each folder) bans the same imports while editing, and LangChain
in `state/` (where the one function-local import is marked).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"state": 0, "nodes": 1, "graphs": 2}
BACKENDS = ("files", "postgres")
SOURCES = sorted(p for top in [*LAYERS, "workmem"] for p in (REPO / top).rglob("*.py"))


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported workmem module, imported at module level) of every import statement in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.append((max((n for n in names if _is_module_path(n)), key=len, default=node.module),
                          id(node) in top_level))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top_level) for alias in node.names)
    return [(name, top) for name, top in found if name.startswith("workmem.")]


def _is_module_path(name: str) -> bool:
    """`from workmem.state import files` imports the package `workmem.state.files`: count it as that."""
    parts = name.split(".")
    return len(parts) < 3 or parts[2] in BACKENDS or len(parts) > 3


def room(path: Path) -> tuple[str, str | None]:
    """(top folder, backend folder under `state/` or None) of a source file."""
    parts = path.relative_to(REPO).parts
    backend = parts[1] if parts[0] == "state" and len(parts) > 2 and parts[1] in BACKENDS else None
    return parts[0], backend


def backend_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "state" and parts[2] in BACKENDS else None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_respect_the_layers_and_the_backend_folders(path):
    top, own_backend = room(path)
    for module, at_module_level in imports(path):
        target = module.split(".")[1] if "." in module else ""
        if top in LAYERS and target in LAYERS:
            assert LAYERS[target] <= LAYERS[top], f"{path.name} imports {module}: upward"
        backend = backend_of(module)
        if backend is None:
            continue
        assert top == "state", f"{path.name} imports the backend module {module}: use workmem.state.storage"
        if own_backend is not None:
            assert backend == own_backend, f"{path.name} ({own_backend}) imports the other backend's {module}"
        else:
            assert not at_module_level, f"the neutral {path.name} imports {module} at module level"


def test_the_rule_sees_every_backend_import_there_is():
    """The folder rule is not vacuous: the backends exist and the neutral core reaches them only through
    `open_storage`'s function-local imports."""
    by_backend = {b: [p for p in SOURCES if room(p)[1] == b] for b in BACKENDS}
    assert all(len(files) >= 5 for files in by_backend.values()), by_backend
    neutral_users = {p.name for p in SOURCES if room(p) == ("state", None)
                     for module, _ in imports(p) if backend_of(module)}
    assert neutral_users == {"storage.py"}


def test_ruff_bans_per_folder_what_the_layers_forbid():
    """Each folder's ruff.toml bans what this test forbids there — another backend, an upward import, LangChain
    in state/ — with the repository-wide bans kept, so an editor flags it before the suite does."""
    import tomllib

    backends = {"workmem.state.files", "workmem.state.postgres"}
    no_langchain = {"langchain", "langchain_core"}
    expected = {"graphs": backends,
                "nodes": backends | {"workmem.graphs"},
                "workmem": backends,
                "state": {"workmem.nodes", "workmem.graphs"} | no_langchain,
                "state/files": {"workmem.state.postgres", "workmem.nodes", "workmem.graphs"} | no_langchain,
                "state/postgres": {"workmem.state.files", "workmem.nodes", "workmem.graphs"} | no_langchain}
    for folder, banned in expected.items():
        config = tomllib.loads((REPO / folder / "ruff.toml").read_text())
        assert config["extend"].endswith("pyproject.toml")
        api = config["lint"]["flake8-tidy-imports"]["banned-api"]
        assert banned | {"state", "nodes", "graphs"} == set(api), folder


ENGINE_OWNERS = {REPO / "graphs" / "engine.py", REPO / "graphs" / "runner.py"}


def _storage_reads(path: Path) -> list[int]:
    """Lines of `path` that read `.storage` off an engine (`engine.storage`, `self.engine.storage`, …)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "storage":
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
            if "engine" in name.lower():
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("path", [p for p in SOURCES if p not in ENGINE_OWNERS], ids=lambda p: str(p.relative_to(REPO)))
def test_only_the_engine_and_the_runner_read_engine_storage(path):
    """The engine is the only way in: the middleware, the CLI, the demo and the eval use its methods, so a storage
    change stops at the engine."""
    assert _storage_reads(path) == [], f"{path.relative_to(REPO)} reads engine.storage"


def test_the_engine_storage_rule_sees_a_read():
    """The rule is not vacuous: a planted read is found."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        planted = Path(folder) / "planted.py"
        planted.write_text("def f(engine):\n    return engine.storage.sessions.meta('s')\n", encoding="utf-8")
        assert _storage_reads(planted) == [2]
