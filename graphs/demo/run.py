"""`workmem demo`: a bundled coding session ingested turn by turn, committed offline, then shown."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.progress import Progress
from rich.table import Table

from workmem.graphs.context.assemble import budget_line
from workmem.state.errors import CommitFailed, InvalidInput
from workmem.state.memory import parse_sections, render_sections
from workmem.state.retention import (
    MESSAGES,
    TOKENS,
    Keep,
    Trigger,
    keep_value,
    trigger_value,
)
from workmem.state.turns import DEFAULT_KEEP_RECENT, validate_keep

DEMO_SESSION = "demo"
CONTEXT_BUDGET = 40_000
DEFAULT_DEMO_TRIGGER: Trigger = (TOKENS, 4000)  # tokens of the next call: two commits over the bundled session
DEMO_MEMORY_BUDGET = 1_500  # a working memory that holds the session's files and errors without spilling
EMPTY_SECTION = "_(none yet)_"


def demo_conversation() -> list[dict[str, Any]]:
    """The bundled sample conversation (OpenAI-style message dicts)."""
    text = resources.files("workmem.graphs.demo").joinpath("data/demo_conversation.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return data["messages"] if isinstance(data, dict) else data


def split_turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group messages into turns: each user message starts a new one."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def default_demo_root() -> Path:
    """The one folder the demo uses when no root is given: `workmem/demo` in the user's cache directory
    (`$XDG_CACHE_HOME`, else `~/.cache`); each run starts the demo session in it afresh."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "workmem" / "demo"


def run_demo(root: str | Path | None = None, *, trigger: Trigger | int = DEFAULT_DEMO_TRIGGER,
             keep: Keep | int = (MESSAGES, DEFAULT_KEEP_RECENT), console: Console | None = None, quiet: bool = False,
             model: Any = "extractive") -> dict[str, Any]:
    """Ingest the demo session turn by turn, committing when `after_turn`'s rule says so for `trigger` (of a
    model whose input limit is the demo's context budget); return a summary.

    Offline whatever `WORKMEM_MODEL` says: the demo uses the extractive model unless `model` names another.
    Without `root` it uses `default_demo_root()` and replaces the demo session there; a `root` that already
    holds a `demo` session is refused (`InvalidInput`), never appended to. A commit that fails stops the demo
    with `CommitFailed` naming the cause (a missing API key, say)."""
    from workmem.graphs.engine import WorkingMemoryEngine

    console = console or Console()
    keep = (MESSAGES, validate_keep(keep, "keep")) if isinstance(keep, int) else keep_value(keep, "keep")
    trigger = trigger_value(trigger)
    root_path = Path(root) if root else default_demo_root()
    commits: list[dict[str, Any]] = []
    with WorkingMemoryEngine(root=root_path, model=model, keep=keep, context_window=CONTEXT_BUDGET,
                             memory_budget=DEMO_MEMORY_BUDGET) as engine:
        _start_afresh(engine, root_path, replace=not root)
        turns = split_turns(demo_conversation())
        with Progress(console=console, transient=True, disable=quiet) as progress:
            bar = progress.add_task("ingesting turns", total=len(turns))
            for turn in turns:
                done = engine.after_turn(DEMO_SESSION, turn, trigger=trigger, keep=keep, wait=True)
                if done["commit"] is not None:
                    commits.append(_committed(done["commit"]))
                progress.advance(bar)
        archive = engine.working_memory(DEMO_SESSION) or {}
        archives = engine.list_archives(DEMO_SESSION)
        info = engine.session_info(DEMO_SESSION)
        context = engine.assemble(DEMO_SESSION, token_budget=CONTEXT_BUDGET)
        session_dir = engine.session_location(DEMO_SESSION)
    summary = {
        "root": str(root_path),
        "session_dir": session_dir,
        "commits": commits,
        "archives": archives,
        "working_memory": archive.get("working_summary", {}).get("markdown", ""),
        "live_messages": info.get("message_count"),
        "pending_tokens": info.get("pending_tokens"),
        "context": {"stats": context["stats"], "messages": [_outline(m) for m in context["messages"]]},
    }
    if not quiet:
        _show(console, summary)
    return summary


def _start_afresh(engine: Any, root: Path, *, replace: bool) -> None:
    """The demo session starts empty: in the demo's own folder an earlier run's is deleted; a root the user
    gave that already holds one is refused."""
    if not engine.session_exists(DEMO_SESSION):
        return
    if not replace:
        raise InvalidInput("root", str(root), f"already holds a {DEMO_SESSION!r} session; give another root "
                                              f"(or delete it: workmem delete {DEMO_SESSION} --yes)")
    engine.delete_session(DEMO_SESSION)


def _committed(result: dict[str, Any]) -> dict[str, Any]:
    """A demo commit's result; a failed one stops the demo, naming its cause."""
    if result["status"] == "failed":
        raise CommitFailed(DEMO_SESSION, result.get("task_id"), result.get("reason") or "unknown reason")
    return result


def _show(console: Console, summary: dict[str, Any]) -> None:
    console.print(Panel(Markdown(marked_empty(summary["working_memory"]) or "_no commit yet_"),
                        title="working memory after the last commit", expand=False))
    table = Table("archive", "seqs", "abstract", title="archives (searchable, expandable)")
    for entry in summary["archives"]:
        table.add_row(entry["archive_id"], f"{entry['start_seq']}–{entry['end_seq']}", entry.get("abstract", ""))
    console.print(table)
    context = Table("#", "role", "preview", title="context assembled for the next model call")
    for i, line in enumerate(summary["context"]["messages"]):
        context.add_row(str(i), line["role"], line["preview"])
    console.print(context)
    stats = summary["context"]["stats"]
    console.print(f"context: {budget_line(stats)}, {stats['messages_dropped']} live message(s) left out")
    console.print(f"{len(summary['commits'])} commit(s); {summary['live_messages']} message(s) still live "
                  f"({summary['pending_tokens']} pending tokens).")
    console.print(f"Files: {summary['session_dir']}")
    console.print(f"Explore: workmem --root {summary['root']} search {DEMO_SESSION} WORDS")


def marked_empty(markdown: str) -> str:
    """The working memory with `(none yet)` under each empty section, so no heading stands alone."""
    if not markdown:
        return markdown
    sections = parse_sections(markdown)
    return render_sections({name: body or EMPTY_SECTION for name, body in sections.items()})


def _outline(message: Any) -> dict[str, str]:
    """A message of the assembled context as role (with workmem's tag) and its first words."""
    tag = message.additional_kwargs.get("workmem")
    calls = ", ".join(c["name"] for c in getattr(message, "tool_calls", []) or [])
    text = " ".join(message.text.split())
    preview = (text[:90] + "…" if len(text) > 90 else text) or f"→ {calls}"
    return {"role": message.type + (f" ({tag})" if tag else ""), "preview": preview}
