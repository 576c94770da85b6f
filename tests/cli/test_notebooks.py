"""The notebooks are executed offline; their cells assert what they show, so a failing cell fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from paths import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def _workmem_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, imported name or None) of every `workmem` import in the notebook's code cells."""
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "workmem":
                found += [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "workmem"]
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_public_names(path: Path):
    """The front door's names, or a module the README or docs name as a public path."""
    import workmem

    documented = "\n".join(p.read_text(encoding="utf-8") for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    for module, name in _workmem_imports(path):
        if module == "workmem":
            assert name in workmem.__all__, f"{path.name}: workmem.{name} is not in workmem.__all__"
        else:
            assert f"`{module}" in documented, f"{path.name}: {module} is not a documented public path"


def test_the_three_walkthroughs_exist():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb", "02_fallback_chain.ipynb", "03_crash_and_resume.ipynb"]


@pytest.mark.slow
@pytest.mark.allow_hosts(["127.0.0.1"])  # the kernel talks to its client over loopback zmq
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKMEM_HOME", str(tmp_path / "wm"))
    monkeypatch.delenv("WORKMEM_MODEL", raising=False)
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code"
              for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
    assert all(cell.get("execution_count") for cell in notebook.cells if cell.cell_type == "code")
