"""workmem installs one import name and works inside an ordinary LangGraph project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKMEM = shutil.which("workmem", path=str(Path(sys.executable).parent)) or "workmem"

ROUND_TRIP = textwrap.dedent("""
    import state, nodes, graph, graphs                      # the project's own modules come first
    assert state.MINE and nodes.MINE and graph.MINE and graphs.MINE
    import workmem
    from workmem import WorkingMemoryEngine
    with WorkingMemoryEngine(root="wm") as engine:
        engine.add_messages("s", [{"role": "user", "content": "Ship the parser on 2024-05-14."},
                                  {"role": "assistant", "content": "Noted: parser ships 2024-05-14."}])
        assert engine.commit("s", keep_recent_count=0)["status"] == "completed"
        assert engine.archive_search("s", "parser")
    print("ok", workmem.__version__)
""")


@pytest.fixture
def user_project(tmp_path) -> Path:
    """A LangGraph-style project with its own state.py, nodes.py, graph.py and graphs/ package."""
    project = tmp_path / "my_agent"
    (project / "graphs").mkdir(parents=True)
    for name in ("state.py", "nodes.py", "graph.py", "graphs/__init__.py"):
        (project / name).write_text("MINE = True\n")
    return project


def _user_env() -> dict[str, str]:
    """A user's shell: the current directory is importable (no PYTHONSAFEPATH), no workmem settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKMEM_")}
    env.pop("PYTHONSAFEPATH", None)
    return env


@pytest.mark.slow
def test_workmem_beside_a_projects_own_state_and_nodes(user_project):
    done = subprocess.run([sys.executable, "-c", ROUND_TRIP], cwd=user_project, env=_user_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


@pytest.mark.slow
def test_workmem_demo_from_inside_such_a_project(user_project):
    done = subprocess.run([WORKMEM, "demo", "--root", "demo-root", "--json"], cwd=user_project, env=_user_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert (user_project / "demo-root" / "sessions" / "demo" / "history" / "archive_001" / ".done").exists()


def test_the_data_layer_loads_no_langchain():
    code = ("import sys, workmem, workmem.state.memory, workmem.state.files.store, workmem.state.storage; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'langchain', 'langgraph')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_no_top_level_state_nodes_or_graphs_is_importable(tmp_path):
    """The folders exist in the repository but only as workmem.state / .nodes / .graphs. Checked in a fresh
    interpreter outside the repository, as a user's project sees it (pytest puts `tests/`, which has test folders
    named after the packages, on this process's path)."""
    code = ("import importlib.util; "
            "print([n for n in ('state', 'nodes', 'graphs') if importlib.util.find_spec(n) is not None])")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"a top-level package is importable: {done.stdout}"


@pytest.mark.slow
def test_the_wheel_holds_only_workmem(tmp_path):
    source = tmp_path / "src"  # a copy, so the build leaves nothing behind in the repository
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__",
                                                                 ".workmem", ".pytest_cache", ".ruff_cache"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("workmem-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"workmem"}
    for expected in ("workmem/__init__.py", "workmem/py.typed", "workmem/state/memory.py", "workmem/nodes/merge.py",
                     "workmem/graphs/commit.py", "workmem/graphs/eval/run.py",
                     "workmem/graphs/demo/data/demo_conversation.json"):
        assert expected in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "workmem = workmem.graphs.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
