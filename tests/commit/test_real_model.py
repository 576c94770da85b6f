"""A real commit against the model named by WORKMEM_MODEL (skipped unless WORKMEM_REAL_MODEL_TESTS=1).

These tests never hold a behaviour alone: every path they touch is also proven offline with scripted
models. They exist to catch drift between the tool schemas / prompts and a real endpoint.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from workmem.graphs.engine import WorkingMemoryEngine
from workmem.state.memory import SECTIONS, parse_sections

pytestmark = [pytest.mark.real_model, pytest.mark.enable_socket]


def test_real_model_commits_the_demo_session_without_falling_back(root):
    demo = resources.files("workmem.graphs.demo").joinpath("data/demo_conversation.json")
    conversation = json.loads(demo.read_text())
    with WorkingMemoryEngine(root) as engine:
        engine.add_messages("real", conversation["messages"][:40])
        result = engine.commit("real", keep_recent_count=10)
        archive = engine.working_memory("real")
    assert result["status"] == "completed", result
    assert archive["model"]["name"].startswith("openai:")
    assert not archive["model"]["degraded"], archive["model"]["route"]
    sections = parse_sections(archive["working_summary"]["markdown"])
    assert list(sections) == list(SECTIONS)
    assert "csv_loader.py" in sections["Files & Context"]
