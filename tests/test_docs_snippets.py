"""Every Python snippet of README.md and docs/*.md runs, offline, in a temporary directory.

How a snippet takes part is said in its fence's info string (the words after the language), as
`docs/snippets.md` documents: `notest` leaves it out, `continuation` runs it after the snippets before it
(back to the last one without `continuation`) with the names they defined, and `fixture:NAME` gives it the
value of the fixture `NAME` below as a global — `fixture:model` for a chat model (the project's scripted
fake), `fixture:my_tools`, `fixture:history`, `fixture:openai_key`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes import ScriptedToolModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from markdown_it import MarkdownIt
from paths import REPO
from pytest_markdown_docs.plugin import extract_fence_tests

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ENV_SETTINGS = ("WORKMEM_HOME", "WORKMEM_DATABASE_URL", "POSTGRES_URI", "WORKMEM_MODEL", "WORKMEM_DATABASE_SCHEMA")


@dataclass(frozen=True)
class Snippet:
    """One runnable fence: its code (a `continuation` one prefixed by the code it continues, padded so that line
    numbers are the file's) and the fixtures of the whole chain."""

    path: Path
    line: int
    source: str
    fixtures: tuple[str, ...]


def _snippets(path: Path) -> list[Snippet]:
    """The Python fences of one Markdown file, parsed by pytest-markdown-docs (its info-string vocabulary)."""
    found: list[Snippet] = []
    for fence in extract_fence_tests(MarkdownIt("commonmark"), path.read_text(encoding="utf-8"), 0, path):
        previous = found[-1] if found else None
        continues = previous is not None and fence.source.startswith(previous.source)
        fixtures = (*(previous.fixtures if continues else ()), *fence.fixture_names)
        found.append(Snippet(path, fence.start_line, fence.source, tuple(dict.fromkeys(fixtures))))
    return found


SNIPPETS = [s for path in DOCS for s in _snippets(path)]


@pytest.fixture
def model() -> Any:
    """The chat model a snippet's agent talks to: the project's scripted fake, answering every call in text."""
    return ScriptedToolModel(messages=(AIMessage(content=f"Answer {i}.") for i in itertools.count(1)))


@pytest.fixture
def my_tools() -> list[Any]:
    """A snippet's own agent tools: one harmless tool."""

    @tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        return f"contents of {path}"

    return [read_file]


@pytest.fixture
def history() -> list[dict[str, str]]:
    """The whole conversation a stateless client re-sends each turn."""
    return [{"role": "user", "content": "Why does the import fail?"},
            {"role": "assistant", "content": "The delimiter changed."},
            {"role": "user", "content": "Fix it, please."}]


@pytest.fixture
def openai_key(monkeypatch) -> str:
    """A placeholder `OPENAI_API_KEY`, for a snippet that builds (never calls) an OpenAI model."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-placeholder-for-docs")
    return "sk-placeholder-for-docs"


def test_docs_have_python_snippets():
    assert SNIPPETS, f"no Python snippet found in {[str(p.relative_to(REPO)) for p in DOCS]}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: f"{s.path.relative_to(REPO)}:{s.line}")
def test_snippet_runs(snippet: Snippet, request, tmp_path, monkeypatch):
    for name in ENV_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    names: dict[str, Any] = {"__name__": "__main__"}
    names.update({name: request.getfixturevalue(name) for name in snippet.fixtures})
    exec(compile(snippet.source, str(snippet.path), "exec"), names)  # tracebacks name the file's own lines
