"""The data root holds whole conversations: new roots, folders and files are owner-only."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.errors import InvalidInput

CONVERSATION = [
    {"role": "user", "content": "Deploy the billing service."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "deploy", "content": "deployed\n" * 20_000},  # a payload
    {"role": "assistant", "content": "Deployed."},
]


def modes(root):
    """mode of every file and folder under `root` (the root included)."""
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def use(root) -> None:
    with WorkingMemoryEngine(root, durable=False, keep_recent_count=1) as engine:
        engine.add_messages("s", CONVERSATION)
        engine.add_messages("s", [{"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Done."}])
        assert engine.commit("s")["status"] == "completed"
        assert engine.archive_search("s", "billing")


def test_a_new_root_and_everything_in_it_is_owner_only(tmp_path, monkeypatch):
    monkeypatch.delenv("WORKMEM_FILE_MODE", raising=False)
    root = tmp_path / "wm"
    use(root)
    found = modes(root)
    assert any("payloads" in p for p in found) and any(p.endswith("index.sqlite") for p in found)
    wrong = {p: oct(m) for p, m in found.items() if m != (0o700 if (root / p).is_dir() else 0o600)}
    assert wrong == {}


def test_the_mode_is_configurable(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKMEM_FILE_MODE", "640")
    root = tmp_path / "shared"
    use(root)
    assert {m for p, m in modes(root).items() if not (root / p).is_dir()} == {0o640}
    assert {m for p, m in modes(root).items() if (root / p).is_dir()} == {0o750}


@pytest.mark.parametrize("value", ["rw", "777", "0", "1000", "400x"])
def test_a_bad_mode_is_a_typed_error_and_nothing_is_written(tmp_path, monkeypatch, value):
    monkeypatch.setenv("WORKMEM_FILE_MODE", value)
    with pytest.raises(InvalidInput) as err, WorkingMemoryEngine(tmp_path / "wm", durable=False) as engine:
        engine.add_messages("s", CONVERSATION[:1])
    assert err.value.field == "WORKMEM_FILE_MODE"


def test_an_existing_open_root_gets_a_warning_from_check_never_a_chmod(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WORKMEM_FILE_MODE", raising=False)
    root = tmp_path / "open"
    root.mkdir()
    os.chmod(root, 0o755)
    use(root)
    with caplog.at_level(logging.WARNING, logger="workmem.store"), WorkingMemoryEngine(root) as engine:
        engine.check("s")
        engine.check("s")
    warned = [r.getMessage() for r in caplog.records if "open to group or others" in r.getMessage()]
    assert len(warned) == 1 and "755" in warned[0]
    assert stat.S_IMODE(root.stat().st_mode) == 0o755, "never changed behind the owner's back"
