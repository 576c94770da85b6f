"""Where the tests find the repository and their own files, wherever a test module sits under `tests/`."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
BENCHMARKS = TESTS / "benchmarks"
CRASH_CHILD = TESTS / "crash_child.py"
DEMO_CONVERSATION = REPO / "graphs" / "demo" / "data" / "demo_conversation.json"
