"""The `workmem` command line: demo, add, commit, tasks, resume, reindex (rich output, `--json`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from state.errors import WorkmemError

console = Console()


def _engine(args: argparse.Namespace):
    from graphs.engine import WorkingMemoryEngine

    return WorkingMemoryEngine(root=args.root)


def _emit(args: argparse.Namespace, data: Any, render) -> None:
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        render(data)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the bundled sample session through several commits offline and show the result."""
    from graphs.demo import run_demo

    summary = run_demo(root=args.root, threshold=args.threshold, keep=args.keep, console=console,
                       quiet=args.json)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False, default=str))
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    """Append messages (a JSON list or JSONL from a file or stdin) to a session."""
    text = Path(args.file).read_text(encoding="utf-8") if args.file else sys.stdin.read()
    text = text.strip()
    messages = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines() if line]
    with _engine(args) as engine:
        stored = engine.add_messages(args.session, messages)
        info = engine.session_info(args.session)
    _emit(args, {"added": len(stored), "first_seq": stored[0]["seq"] if stored else None,
                 "pending_tokens": info.get("pending_tokens")},
          lambda d: console.print(f"added {d['added']} message(s); pending tokens {d['pending_tokens']}"))
    return 0


def cmd_commit(args: argparse.Namespace) -> int:
    """Commit a session synchronously."""
    with _engine(args) as engine:
        result = engine.commit(args.session, keep_recent_count=args.keep, wait=True)
    _emit(args, result, lambda r: console.print(
        f"[bold]{r['status']}[/] task {r['task_id']} archive {r.get('archive_id') or '-'} {r.get('reason') or ''}"))
    return 0 if result["status"] in ("completed", "skipped") else 1


def cmd_tasks(args: argparse.Namespace) -> int:
    """List commit tasks."""
    with _engine(args) as engine:
        rows = engine.index.list_tasks(session_id=args.session)
    _emit(args, rows, _render_tasks)
    return 0


def _render_tasks(rows: list[dict[str, Any]]) -> None:
    table = Table("task", "session", "archive", "status", "attempts", "updated", "error")
    for row in rows:
        table.add_row(row["task_id"][:12], row["session_id"], row.get("archive_id") or "-", row["status"],
                      str(row.get("attempts", 0)), str(row.get("updated_at", "")), (row.get("error") or "")[:60])
    console.print(table)


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume every unfinished commit."""
    with _engine(args) as engine:
        results = engine.resume_all()
    _emit(args, results, lambda rs: console.print(f"resumed {len(rs)} commit(s)")
          if rs else console.print("nothing to resume"))
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild the SQLite full-text index from the archive files."""
    with _engine(args) as engine:
        count = engine.index.reindex(engine.store)
    _emit(args, {"indexed": count}, lambda d: console.print(f"reindexed {d['indexed']} archived message(s)"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="workmem", description="Working memory for long agent sessions.")
    parser.add_argument("--root", help="data root (default: $WORKMEM_HOME or ./.workmem)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help=cmd_demo.__doc__)
    demo.add_argument("--threshold", type=int, default=2500, help="pending tokens that trigger a commit")
    demo.add_argument("--keep", type=int, default=10, help="recent messages kept raw")
    demo.set_defaults(func=cmd_demo)

    add = sub.add_parser("add", help=cmd_add.__doc__)
    add.add_argument("session")
    add.add_argument("file", nargs="?", help="JSON list or JSONL of messages (default: stdin)")
    add.set_defaults(func=cmd_add)

    commit = sub.add_parser("commit", help=cmd_commit.__doc__)
    commit.add_argument("session")
    commit.add_argument("--keep", type=int, default=10, help="recent messages kept raw")
    commit.set_defaults(func=cmd_commit)

    tasks = sub.add_parser("tasks", help=cmd_tasks.__doc__)
    tasks.add_argument("--session")
    tasks.set_defaults(func=cmd_tasks)

    sub.add_parser("resume", help=cmd_resume.__doc__).set_defaults(func=cmd_resume)
    sub.add_parser("reindex", help=cmd_reindex.__doc__).set_defaults(func=cmd_reindex)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workmem` console script."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkmemError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
