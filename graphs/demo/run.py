"""`workmem demo`: a bundled coding session ingested turn by turn, committed offline, then shown."""

from __future__ import annotations

import json
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.progress import Progress
from rich.table import Table

DEMO_SESSION = "demo"
CONTEXT_BUDGET = 40_000
DEMO_TRIGGER = 4_000  # tokens of the next call: two commits over the bundled session
DEMO_MEMORY_BUDGET = 1_500  # a working memory that holds the session's files and errors without spilling


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


def run_demo(root: str | None = None, *, threshold: int = DEMO_TRIGGER, keep: int = 10,
             console: Console | None = None, quiet: bool = False, model: Any = "extractive") -> dict[str, Any]:
    """Ingest the demo session turn by turn, committing when the next call reaches `threshold` tokens; return a
    summary.

    Offline whatever `WORKMEM_MODEL` says: the demo uses the extractive model unless `model` names another."""
    from workmem.graphs.engine import WorkingMemoryEngine

    console = console or Console()
    root_path = Path(root) if root else Path(tempfile.mkdtemp(prefix="workmem-demo-"))
    commits: list[dict[str, Any]] = []
    with WorkingMemoryEngine(root=root_path, model=model, keep_recent_count=keep,
                             memory_budget=DEMO_MEMORY_BUDGET) as engine:
        turns = split_turns(demo_conversation())
        with Progress(console=console, transient=True, disable=quiet) as progress:
            bar = progress.add_task("ingesting turns", total=len(turns))
            for turn in turns:
                done = engine.after_turn(DEMO_SESSION, turn, trigger=("tokens", threshold), keep=("messages", keep),
                                         wait=True)
                if done["commit"] is not None:
                    commits.append(done["commit"])
                progress.advance(bar)
        archive = engine.working_memory(DEMO_SESSION) or {}
        archives = engine.storage.sessions.list_archives(DEMO_SESSION)
        info = engine.session_info(DEMO_SESSION)
        context = engine.assemble(DEMO_SESSION, token_budget=CONTEXT_BUDGET)
    summary = {
        "root": str(root_path),
        "session_dir": str(engine.storage.sessions.location(DEMO_SESSION)),
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


def _show(console: Console, summary: dict[str, Any]) -> None:
    console.print(Panel(Markdown(summary["working_memory"] or "_no commit yet_"),
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
    console.print(f"context: {stats['total_tokens']} of {stats['budget']} tokens "
                  f"({stats['reserve']} reserved for the reply), {stats['messages_dropped']} live message(s) left out")
    console.print(f"{len(summary['commits'])} commit(s); {summary['live_messages']} message(s) still live "
                  f"({summary['pending_tokens']} pending tokens).")
    console.print(f"Files: {summary['session_dir']}")


def _outline(message: Any) -> dict[str, str]:
    """A message of the assembled context as role (with workmem's tag) and its first words."""
    tag = message.additional_kwargs.get("workmem")
    calls = ", ".join(c["name"] for c in getattr(message, "tool_calls", []) or [])
    text = " ".join(message.text.split())
    preview = (text[:90] + "…" if len(text) > 90 else text) or f"→ {calls}"
    return {"role": message.type + (f" ({tag})" if tag else ""), "preview": preview}
