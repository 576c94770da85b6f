"""The notebooks are executed offline; their cells assert what they show, so a failing cell fails here."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from paths import REPO

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


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
