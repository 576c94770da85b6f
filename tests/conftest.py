"""Shared pytest fixtures: every test gets its own data root; the network stays blocked."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from openai_stub import stub  # noqa: F401 (the loopback OpenAI-compatible server fixture)
from pg_support import Backend, required, server_or_reason

REPO = Path(__file__).resolve().parent.parent
# The repository root must not be importable: `graphs/`, `nodes/` and `state/` exist only as
# workmem.graphs / .nodes / .state, so a stray `from state.x import …` fails here as it would for a user.
sys.path[:] = [p for p in sys.path if Path(p or os.curdir).resolve() != REPO]
os.environ["PYTHONSAFEPATH"] = "1"  # the same for every subprocess a test starts from the repository

REAL_MODEL_FLAG = "WORKMEM_REAL_MODEL_TESTS"


def pytest_collection_modifyitems(config, items):
    """Real-model tests run only when asked for (WORKMEM_REAL_MODEL_TESTS=1 and a WORKMEM_MODEL)."""
    if os.environ.get(REAL_MODEL_FLAG) == "1" and os.environ.get("WORKMEM_MODEL"):
        return
    skip = pytest.mark.skip(reason=f"set {REAL_MODEL_FLAG}=1 and WORKMEM_MODEL=openai:<model> to run")
    for item in items:
        if "real_model" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def offline_model(request, monkeypatch):
    """Every other test uses the offline default, whatever WORKMEM_MODEL the developer's shell has."""
    if "real_model" not in request.keywords:
        monkeypatch.delenv("WORKMEM_MODEL", raising=False)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh workmem data root, also exported as WORKMEM_HOME for code that reads the env."""
    path = tmp_path / "wm"
    monkeypatch.setenv("WORKMEM_HOME", str(path))
    return path


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server for the whole run (see pg_support); skipped, or failed when required, without one."""
    server, reason = server_or_reason()
    if server is None:
        if required():
            pytest.fail(f"WORKMEM_TEST_POSTGRES=required but no PostgreSQL server: {reason}")
        pytest.skip(f"no PostgreSQL server ({reason}); set WORKMEM_TEST_DATABASE_URL or install postgresql")
    yield server
    server.stop()


@pytest.fixture
def database_url(pg_server):
    """A fresh, empty database of the test server, dropped afterwards."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


@pytest.fixture(params=["file", "postgres"])
def backend(request, root):
    """The storage backend a test runs on: every test using it runs once on files, once on Postgres."""
    url = request.getfixturevalue("database_url") if request.param == "postgres" else None
    return Backend(request.param, root, url)


@pytest.fixture
def make_engine(root):
    """`make(model, **settings)` → a non-durable engine on `root`; every engine made is closed afterwards."""
    from workmem.graphs.engine import WorkingMemoryEngine

    engines = []

    def make(model, **kwargs):
        engine = WorkingMemoryEngine(root=root, model=model, durable=False, **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
