"""Shared pytest fixtures: every test gets its own data root; the network stays blocked."""

from __future__ import annotations

import pytest


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A fresh workmem data root, also exported as WORKMEM_HOME for code that reads the env."""
    path = tmp_path / "wm"
    monkeypatch.setenv("WORKMEM_HOME", str(path))
    return path
