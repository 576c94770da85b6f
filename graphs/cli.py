"""The `workmem` command line: every subcommand, its options and its exit code (see docs/cli.md).

Rich output for people, `--json` (before or after the subcommand) for scripts. Typed errors exit with 2; a
degraded commit (the extractive model stood in for the configured one) exits with 3 unless `--allow-degraded`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from workmem.graphs.cli_args import KEEP_HELP, add_trigger_options, check_out_file, keep_arg
from workmem.graphs.context.assemble import budget_line
from workmem.graphs.context.tool_results import MAX_READ_TOKENS
from workmem.graphs.demo.run import DEFAULT_DEMO_TRIGGER
from workmem.graphs.eval.cli import add_eval_parser
from workmem.graphs.help_format import DefaultsFormatter, readable_on_any_terminal, takes_unicode
from workmem.state.errors import CommitFailed, InvalidInput, WorkmemError
from workmem.state.redact import clean_error, describe_error
from workmem.state.retention import MESSAGES
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW
from workmem.state.turns import DEFAULT_KEEP_RECENT

if TYPE_CHECKING:  # the engine is imported when a command runs (the CLI starts fast)
    from workmem.graphs.engine import WorkingMemoryEngine

class _Console(Console):
    """rich's console, a closed pipe left to `main` (one `error:` line and exit code 2, as under `--json`): rich
    itself would exit with 1, the code of a finding, and say nothing."""

    def on_broken_pipe(self) -> None:
        """Raise `BrokenPipeError` for `main` to report (it points standard output at /dev/null)."""
        raise BrokenPipeError


console = _Console()
EXIT_DEGRADED = 3  # a commit completed, but the extractive model stood in for the configured one (2: bad input)


class CommandFailed(Exception):
    """A command could not do its job; its message is the `error:` line."""


def _engine(args: argparse.Namespace, *, create: bool = False):
    """The engine of `--root` / `--database-url`: only `add` creates a data root; every other command refuses
    one with no workmem data (`DataRootNotFound`: a mistyped path is never created)."""
    from workmem.graphs.engine import WorkingMemoryEngine

    return WorkingMemoryEngine(root=args.root, database_url=args.database_url, create=create)


def _emit(args: argparse.Namespace, data: Any, render) -> None:
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        render(data)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the bundled sample session through several commits offline and show the result (without --root, in
    workmem/demo of the cache directory, started afresh at each run)."""
    from workmem.graphs.demo.run import run_demo

    unicode = readable_on_any_terminal()
    summary = run_demo(root=args.root, trigger=args.trigger, keep=args.keep, console=console,
                       quiet=args.json, model=args.model or "extractive")
    degraded = [c for c in summary["commits"] if c.get("degraded")]
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=not unicode, default=str))
    elif degraded:
        console.print(Text(f"degraded: {len(degraded)} of {len(summary['commits'])} commit(s) fell back to the "
                           f"extractive model ({degraded[-1].get('reason') or 'the model failed'})"), style="yellow")
    return EXIT_DEGRADED if degraded and not args.allow_degraded else 0


def read_messages(file: str | None) -> list[Any]:
    """Messages from a file (or stdin: none, or `-`): a JSON list, or JSONL with one message per line."""
    from_stdin = file in (None, "-")
    source = "<stdin>" if from_stdin else str(file)
    try:
        text = sys.stdin.read() if from_stdin else Path(str(file)).read_text(encoding="utf-8")
        messages = json.loads(text) if text.lstrip().startswith("[") else _jsonl(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidInput("file", source, f"cannot read messages: {exc}") from exc
    except RecursionError as exc:
        raise InvalidInput("file", source, "JSON nested too deeply") from exc
    if not isinstance(messages, list):
        raise InvalidInput("file", source, "expected a JSON list of messages or JSONL")
    if not messages:
        raise InvalidInput("file", source, "no messages to add")
    return messages


def _jsonl(text: str) -> list[Any]:
    """One message per non-blank line; a bad line is named by its own line number (lines end at `\\n` only: a
    U+2028 inside a JSON string is text)."""
    messages = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                messages.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"line {number}: {exc.msg} (column {exc.colno})") from exc
    return messages


def cmd_add(args: argparse.Namespace) -> int:
    """Append messages (a JSON list or JSONL from a file or stdin) to a session."""
    messages = read_messages(args.file)
    with _engine(args, create=True) as engine:
        before = engine.next_seq(args.session)
        stored = engine.add_messages(args.session, messages)
        pending = _pending_tokens_after_append(engine, args.session)
    seqs = sorted({m["seq"] for m in stored})  # a message given twice is stored once
    added = [seq for seq in seqs if seq >= before]  # the others repeat stored messages (same id and content)
    _emit(args, {"added": len(added), "already_stored": len(seqs) - len(added),
                 "first_seq": added[0] if added else None, "pending_tokens": pending},
          lambda d: console.print(f"added {d['added']} message(s)"
                                  + (f" ({d['already_stored']} already stored)" if d["already_stored"] else "")
                                  + (f"; pending tokens {d['pending_tokens']}" if d["pending_tokens"] is not None
                                     else "")))
    return 0


def _pending_tokens_after_append(engine: WorkingMemoryEngine, session_id: str) -> int | None:
    """The session's pending tokens once an append succeeded — None, with a warning, when they cannot be read (a
    damaged index): the batch is stored, and a failed `add` would make a retry store it twice."""
    try:
        return engine.session_info(session_id).get("pending_tokens")
    except (WorkmemError, OSError) as exc:
        print(f"warning: the messages are stored, but the session could not be read back: {describe_error(exc)}",
              file=sys.stderr)
        return None


def cmd_commit(args: argparse.Namespace) -> int:
    """Commit a session synchronously (a progress bar of its chunks on a terminal)."""
    with _engine(args) as engine:
        before = engine.context_tokens(args.session)
        with CommitProgress(enabled=not args.json and console.is_terminal) as progress:
            result = engine.commit(args.session, keep=args.keep, wait=True, progress=progress)
        for done in [*result.get("resumed", ()), result]:
            if done["status"] == "completed":
                done["covered"] = _covered(engine, args.session, done["archive_id"])
        if result["status"] == "completed" or result.get("resumed"):
            result["tokens_before"], result["tokens_after"] = before, engine.context_tokens(args.session)
    if result["status"] == "failed":
        if not args.json:  # what was finished before it failed is said too
            _render_interrupted(result)
        raise CommitFailed(args.session, result["task_id"], result.get("reason") or "unknown reason")
    _emit(args, result, _render_commit)
    if result.get("degraded") and not args.allow_degraded:
        return EXIT_DEGRADED
    return 0 if result["status"] in ("completed", "skipped") else 1  # busy: another commit runs


def _covered(engine: WorkingMemoryEngine, session_id: str, archive_id: str) -> dict[str, int]:
    rng = engine.read_archive(session_id, archive_id)["source_turn_range"]
    return {"start_seq": rng["start_seq"], "end_seq": rng["end_seq"], "messages": rng["end_seq"] - rng["start_seq"] + 1}


def _render_interrupted(r: dict[str, Any]) -> None:
    for earlier in r.get("resumed", ()):  # an interrupted commit this one finished (or gave up) first
        _render_one(earlier, "resumed: ")


def _render_commit(r: dict[str, Any]) -> None:
    _render_interrupted(r)
    if r["status"] == "skipped" and r.get("resumed"):
        console.print(f"nothing more to commit (task {r['task_id']})")
    else:
        _render_one(r)
    if "tokens_before" in r:
        console.print(f"context tokens {r['tokens_before']} → {r['tokens_after']}")


def _render_one(r: dict[str, Any], label: str = "") -> None:
    reason = "" if r.get("degraded") else (r.get("reason") or "")
    console.print(f"{label}[bold]{r['status']}[/] task {r['task_id']} archive {r.get('archive_id') or '-'} "
                  f"{reason}".rstrip())
    if r.get("degraded"):
        console.print(Text(f"degraded: {r.get('reason') or 'the extractive model stood in'}"), style="yellow")
    covered = r.get("covered")
    if covered:
        console.print(f"covered seqs {covered['start_seq']}–{covered['end_seq']} ({covered['messages']} messages)")


class CommitProgress:
    """A rich progress bar of a commit's chunks, fed by `engine.commit(progress=…)`; silent when disabled."""

    def __init__(self, *, enabled: bool) -> None:
        self._bar = Progress(console=console, transient=True, disable=not enabled)
        self._task: Any = None

    def __enter__(self) -> CommitProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.__exit__(None, None, None)

    def __call__(self, node: str, update: dict[str, Any]) -> None:
        if node == "slice_turns" and update.get("chunks"):
            self._task = self._bar.add_task("committing chunks", total=len(update["chunks"]))
        elif node == "merge" and self._task is not None:
            self._bar.advance(self._task)


def message_json(message: Any) -> dict[str, Any]:
    """A LangChain message as a small JSON object: role, content, workmem tag, tool wiring."""
    roles = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
    out: dict[str, Any] = {"role": roles.get(message.type, message.type), "content": message.content,
                           "workmem": message.additional_kwargs.get("workmem")}
    if getattr(message, "tool_calls", None):
        out["tool_calls"] = [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in message.tool_calls]
    if message.type == "tool":
        out["tool_call_id"] = message.tool_call_id
    return out


def cmd_context(args: argparse.Namespace) -> int:
    """Show the engine's context for the next model call (system addition, working memory, live tail), without the
    middleware's per-call rules (an agent's last call is in its state's `workmem_last_call`)."""
    with _engine(args) as engine:
        result = engine.assemble(args.session, args.budget)
    data = {"messages": [message_json(m) for m in result["messages"]], "stats": result["stats"]}
    _emit(args, data, _render_context)
    return 0


def _render_context(data: dict[str, Any]) -> None:
    for m in data["messages"]:
        label = m["role"] + (f" ({m['workmem']})" if m["workmem"] else "")
        if m.get("tool_call_id"):
            label += f" ← {m['tool_call_id']}"
        console.rule(Text(label, style="bold"))
        content = m["content"] if isinstance(m["content"], str) else json.dumps(m["content"], ensure_ascii=False)
        if content:
            console.print(Text(content))
        for call in m.get("tool_calls", []):
            console.print(Text(f"→ {call['name']} {json.dumps(call['args'], ensure_ascii=False)} [{call['id']}]"))
    s = data["stats"]
    console.print(f"{budget_line(s)}; {s['messages_included']} message(s), {s['messages_dropped']} dropped; "
                  f"{s['archives_total']} archive(s)")


def cmd_search(args: argparse.Namespace) -> int:
    """Search the archived messages of a session (literal words, best first)."""
    query = " ".join(args.query)
    with _engine(args) as engine:
        hits = engine.archive_search(args.session, query, archive_id=args.archive, limit=args.limit)
    _emit(args, hits, lambda rows: _render_hits(query, rows))
    return 0


def _render_hits(query: str, hits: list[dict[str, Any]]) -> None:
    if not hits:
        console.print(Text(f"no archived message matches {query!r}"))
        return
    from workmem.graphs.context.search_results import count_phrase

    table = Table("archive", "seq", "turn", "role", "match", "content")
    for h in hits:
        table.add_row(h["archive_id"], str(h["seq"]), h["turn_id"], h["role"], h["match"], Text(h["content"][:300]))
    console.print(table)
    console.print(Text(f"{count_phrase(hits)} for {query!r}"))


def cmd_expand(args: argparse.Namespace) -> int:
    """Print an archive (by id) or a seq / turn range of a session verbatim; or read a tool result by reference."""
    ranges = {"archive_id": args.archive_id, "--start-seq": args.start_seq, "--end-seq": args.end_seq,
              "--start-turn": args.start_turn, "--end-turn": args.end_turn}
    reads = {"--offset": args.offset, "--limit": args.limit}
    if args.ref is not None or args.query is not None:
        given = [name for name, value in ranges.items() if value is not None]
        if given:
            raise CommandFailed(f"--ref / --query read a tool result: {', '.join(given)} cannot go with them")
    elif any(value is not None for value in reads.values()):
        raise CommandFailed("--offset and --limit go with --ref")
    with _engine(args) as engine:
        if args.ref is not None or args.query is not None:
            from workmem.graphs.agent.tools import format_read

            found = engine.read_tool_result(args.session, args.ref, offset=args.offset, limit=args.limit,
                                            query=args.query, max_tokens=args.max_tokens)
            _emit(args, found, lambda data: console.print(Text(format_read(data))))
            return 0
        if args.archive_id is None and args.start_seq is None and args.start_turn is None:
            raise CommandFailed("say what to expand: an archive id (e.g. archive_001), --start-seq N [--end-seq M], "
                                "--start-turn tN [--end-turn tM], or --ref / --query for tool results")
        found = engine.archive_expand(args.session, args.archive_id, start_seq=args.start_seq, end_seq=args.end_seq,
                                      start_turn_id=args.start_turn, end_turn_id=args.end_turn, previews=True)
    _emit(args, found, lambda data: _render_expansion(data, args.session))
    return 0


def _render_expansion(found: dict[str, Any], session: str) -> None:
    if found["archive_id"]:
        console.print(Text(f"{found['archive_id']}: {found['abstract']}", style="bold"))
    console.print(f"{found['message_count']} message(s), seq {found['start_seq']}–{found['end_seq']}")
    console.print(Text(found["content"]))
    if "reads it by windows]" in found["content"]:  # a large tool result was shown as its preview
        console.print(Text(f"read a large tool result whole: workmem expand {session} --ref seq:N "
                           "[--offset N --limit N] (or --query TEXT)"))


def cmd_tasks(args: argparse.Namespace) -> int:
    """List commit tasks (a task resumed after a crash or failure counts its resumes)."""
    with _engine(args) as engine:
        rows = engine.list_tasks(args.session)
    _emit(args, rows, _render_tasks)
    return 0


def _render_tasks(rows: list[dict[str, Any]]) -> None:
    table = Table("task", "session", "archive", "status", "resumes", "updated")
    for row in rows:
        table.add_row(row["task_id"][:8], Text(row["session_id"]), row.get("archive_id") or "-", row["status"],
                      str(row.get("attempts", 0)), _when(row.get("updated_at")))
    console.print(table)
    for row in rows:  # below the table, so a long error wraps as a paragraph at any terminal width
        if row.get("error"):
            console.print(Text(f"{row['task_id'][:8]} {row['status']}: {row['error']}"))


def _when(stamp: Any) -> str:
    """An ISO 8601 time as `YYYY-MM-DD HH:MM` (UTC, as stored)."""
    return str(stamp or "")[:16].replace("T", " ")


def cmd_sessions(args: argparse.Namespace) -> int:
    """List the stored sessions: messages live and archived, commits, last activity."""
    with _engine(args) as engine:
        rows = engine.list_sessions()
    _emit(args, rows, _render_sessions)
    return 0


def _render_sessions(rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print("no session stored yet")
        return
    table = Table("session", "live", "archived", "commits", "last activity")
    for row in rows:
        if row.get("damaged"):
            table.add_row(Text(row["session_id"]), "–", "–", "–", Text(f"{row['damaged']} (workmem check)"))
            continue
        table.add_row(Text(row["session_id"]), str(row["live_messages"]), str(row["archived_messages"]),
                      str(row["commits"]), _when(row["last_activity"]))
    console.print(table)


def cmd_export(args: argparse.Namespace) -> int:
    """Write every stored message of a session (archived and live) in seq order as JSONL, tool results whole."""
    check_out_file("out", args.out)
    with _engine(args) as engine:
        messages = engine.iter_messages(args.session)  # SessionNotFound before anything is written
        stored = engine.session_info(args.session)["total_message_count"]
        if args.out is None:
            count = write_jsonl(messages, sys.stdout)
            return _exported_all(count, stored, args.session)
        out = Path(args.out)
        if engine.holds_file(out):
            raise InvalidInput("out", args.out, "is one of workmem's own files in the data root")
        count = _write_export(messages, out)
    _emit(args, {"session_id": args.session, "messages": count, "out": str(out)},
          lambda d: console.print(Text(f"exported {d['messages']} message(s) of {d['session_id']!r} to {d['out']}")))
    return _exported_all(count, stored, args.session)


def _write_export(messages: Any, out: Path) -> int:
    """Write the export to `out` → how many messages: a regular file (or a new one; through a link, the file it
    names) replaced whole, so a reader never sees half an export; a FIFO or a device written through."""
    out = out.resolve() if out.is_symlink() else out
    if out.exists() and not out.is_file():
        with out.open("w", encoding="utf-8") as handle:
            return write_jsonl(messages, handle)
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            count = write_jsonl(messages, handle)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return count


def _exported_all(count: int, stored: int, session: str) -> int:
    """0 when the export holds every seq the session gave out; else a warning on stderr and 1 (a finding)."""
    if count >= stored:
        return 0
    print(f"warning: {stored - count} of the session's {stored} message(s) are missing from storage and not in "
          f"the export (workmem check {session})", file=sys.stderr)
    return 1


def write_jsonl(messages: Any, handle: Any) -> int:
    """Write messages one JSON object per line; returns how many. To an output that cannot take every character
    (`PYTHONIOENCODING=ascii`) the lines are ASCII-escaped JSON, the same data."""
    count = 0
    escaped = not takes_unicode(handle)
    for message in messages:
        handle.write(json.dumps(message, ensure_ascii=escaped, separators=(",", ":")) + "\n")
        count += 1
    return count


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume every unfinished commit: each one finished, abandoned (its session gone, or never started) or not
    resumable now (a failure: exit 2, the task stays resumable)."""
    with _engine(args) as engine:
        results = engine.resume_all()
    _emit(args, results, _render_resumed)
    failed = [r for r in results if r.get("status") == "failed"]
    if failed:
        return _fail(f"{len(failed)} commit(s) could not be resumed: {failed[0].get('reason') or 'failed'}")
    return EXIT_DEGRADED if any(r.get("degraded") for r in results) and not args.allow_degraded else 0


def _render_resumed(results: list[dict[str, Any]]) -> None:
    if not results:
        console.print("nothing to resume")
        return
    finished = sum(r.get("status") == "completed" for r in results)
    console.print(f"resumed {finished} of {len(results)} unfinished commit(s)")
    for r in results:
        if r.get("degraded"):
            console.print(Text(f"degraded: task {r['task_id'][:8]}: {r.get('reason') or ''}"), style="yellow")
        elif r.get("status") != "completed":
            console.print(Text(f"{r.get('status')}: task {r['task_id'][:8]}: {r.get('reason') or ''}"))


def cmd_delete(args: argparse.Namespace) -> int:
    """Delete a session: its files, index rows, tasks and checkpoints (asks for --yes)."""
    if not args.yes:
        raise CommandFailed(f"deleting session {args.session!r} cannot be undone: add --yes to confirm")
    with _engine(args) as engine:
        result = engine.delete_session(args.session)
    _emit(args, result, lambda r: console.print(f"deleted session {r['session_id']!r}"))
    return 0


def cmd_forget_messages(args: argparse.Namespace) -> int:
    """Remove the verbatim text of stored messages, by seq (their place stays; the working memory is not rewritten)."""
    with _engine(args) as engine:
        result = engine.forget_messages(args.session, args.seqs)
    _emit(args, result, lambda r: console.print(Text(
        f"forgot {len(r['forgotten'])} message(s) of {r['session_id']!r}; removed {r['payloads_removed']} payload(s), "
        f"{r['index_rows_removed']} index row(s), {r['checkpoint_threads_removed']} checkpoint thread(s)\n"
        f"note: {r['note']}")))
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild the full-text index from the archive files (a damaged index.sqlite is moved aside first)."""
    with _engine(args) as engine:
        result = engine.reindex()
    _emit(args, result, lambda d: console.print(
        f"reindexed {d['indexed']} archived message(s)"
        + (f"; the damaged index was moved to {d['moved_aside']} and {d['tasks_rederived']} task(s) re-derived"
           if d["moved_aside"] else "")))
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    """Move a damaged checkpoints.sqlite aside; delete checkpoint threads that no task names."""
    with _engine(args) as engine:
        result = engine.repair()
    _emit(args, result, lambda d: console.print(
        (f"moved the damaged checkpoints to {d['moved_aside']}; " if d["moved_aside"] else "")
        + f"deleted {d['orphan_threads_deleted']} orphan checkpoint thread(s)"))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """List every anomaly of a session's files, with file and line (exit 1 when there is one)."""
    with _engine(args) as engine:
        found = engine.check(args.session, deep=args.deep)
    _emit(args, found, _render_check)
    return 1 if found else 0


def _render_check(found: list[dict[str, Any]]) -> None:
    if not found:
        console.print("no anomaly found")
        return
    table = Table("file", "line", "problem")
    for row in found:
        table.add_row(Text(row["file"]), str(row["line"] or "-"), Text(row["problem"]))
    console.print(table)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="workmem", description="Working memory for long agent sessions.",
                                     formatter_class=DefaultsFormatter)
    parser.add_argument("--root", help="data root (default: $WORKMEM_HOME or ./.workmem)")
    parser.add_argument("--database-url", help="PostgreSQL URL, for many replicas (default: $WORKMEM_DATABASE_URL, "
                                               "else $POSTGRES_URI unless $WORKMEM_HOME is set)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    common = argparse.ArgumentParser(add_help=False)  # the same options also work after the subcommand
    common.add_argument("--root", default=argparse.SUPPRESS, help="data root (default: $WORKMEM_HOME or ./.workmem)")
    common.add_argument("--database-url", default=argparse.SUPPRESS,
                        help="PostgreSQL URL (default: $WORKMEM_DATABASE_URL, else $POSTGRES_URI unless "
                             "$WORKMEM_HOME is set)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    subparsers = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Any) -> argparse.ArgumentParser:
        cmd = subparsers.add_parser(name, help=func.__doc__, description=func.__doc__, parents=[common],
                                    formatter_class=DefaultsFormatter)
        cmd.set_defaults(func=func)
        return cmd

    demo = command("demo", cmd_demo)
    for action in demo._actions:  # the demo's own default root (the shared help names the others')
        if action.dest == "root":
            action.help = "data root (default: workmem/demo in the cache directory, whatever $WORKMEM_HOME says)"
    add_trigger_options(demo, DEFAULT_DEMO_TRIGGER)
    demo.add_argument("--keep", type=keep_arg, default=(MESSAGES, DEFAULT_KEEP_RECENT), metavar="UNIT:N",
                      help=f"{KEEP_HELP} (default: messages:{DEFAULT_KEEP_RECENT})")
    demo.add_argument("--model", metavar="PROVIDER:MODEL",
                      help="commit with this model (default: the offline extractive one, whatever WORKMEM_MODEL says)")
    demo.add_argument("--allow-degraded", action="store_true",
                      help=f"exit 0, not {EXIT_DEGRADED}, when the extractive model had to stand in for the model")

    add = command("add", cmd_add)
    add.add_argument("session")
    add.add_argument("file", nargs="?", help="JSON list or JSONL of messages (default, or `-`: stdin)")

    commit = command("commit", cmd_commit)
    commit.add_argument("session")
    commit.add_argument("--keep", type=keep_arg, default=f"messages:{DEFAULT_KEEP_RECENT}", metavar="UNIT:N",
                        help=KEEP_HELP)
    commit.add_argument("--allow-degraded", action="store_true",
                        help=f"exit 0, not {EXIT_DEGRADED}, when the extractive model had to stand in for the model")

    context = command("context", cmd_context)
    context.add_argument("session")
    context.add_argument("--budget", type=int, default=DEFAULT_CONTEXT_WINDOW, help="token budget of the model call")

    search = command("search", cmd_search)
    search.add_argument("session")
    search.add_argument("query", nargs="+", help="words to look for (use -- before a query starting with -)")
    search.add_argument("--archive", help="only this archive, e.g. archive_002")
    search.add_argument("--limit", type=int, default=12, help="at most this many hits (1–12)")

    expand = command("expand", cmd_expand)
    expand.add_argument("session")
    expand.add_argument("archive_id", nargs="?", help="e.g. archive_002 (or give a range)")
    expand.add_argument("--start-seq", type=int, help="first seq of a range of the session")
    expand.add_argument("--end-seq", type=int, help="last seq (default: the start seq)")
    expand.add_argument("--start-turn", help="first turn id, e.g. t3")
    expand.add_argument("--end-turn", help="last turn id (default: the start turn)")
    expand.add_argument("--ref", help="a tool result's reference, e.g. seq:12 (read by window)")
    expand.add_argument("--offset", type=int, help="with --ref: the first character (default 0)")
    expand.add_argument("--limit", type=int, help="with --ref: how many characters")
    expand.add_argument("--query", help="with --ref: the windows around this text; alone: in every tool result")
    expand.add_argument("--max-tokens", type=int, default=MAX_READ_TOKENS,
                        help="with --ref: the most one read shows")

    tasks = command("tasks", cmd_tasks)
    tasks.add_argument("--session", help="only this session's commit tasks")
    command("sessions", cmd_sessions)
    export = command("export", cmd_export)
    export.add_argument("session")
    export.add_argument("--out", metavar="FILE", help="write the JSONL here (default: standard output)")

    resume = command("resume", cmd_resume)
    resume.add_argument("--allow-degraded", action="store_true",
                        help=f"exit 0, not {EXIT_DEGRADED}, when a resumed commit was degraded")
    delete = command("delete", cmd_delete)
    delete.add_argument("session")
    delete.add_argument("--yes", action="store_true", help="confirm: the session cannot be restored")
    forget = command("forget-messages", cmd_forget_messages)
    forget.add_argument("session")
    forget.add_argument("seqs", nargs="+", type=int, metavar="SEQ", help="seqs of the messages to forget")
    command("reindex", cmd_reindex)
    command("repair", cmd_repair)
    check = command("check", cmd_check)
    check.add_argument("session")
    check.add_argument("--deep", action="store_true",
                       help="also compare the search index with every archive's messages (reads them all)")
    add_eval_parser(subparsers, parents=[common])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `workmem` console script: every failure is one `error:` line and exit code 2."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # `workmem … --json | head`: stop quietly, without a traceback at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return _fail("output pipe closed")
    except KeyboardInterrupt:
        return _fail("interrupted", code=130)
    except (WorkmemError, CommandFailed) as exc:
        return _fail(str(exc))
    except OSError as exc:  # a bad or unwritable --root, a full disk
        return _fail(clean_error(f"{exc.strerror or type(exc).__name__}: {exc.filename or exc}"))
    except Exception as exc:  # never a traceback; the type says where to look
        return _fail(describe_error(exc))


def _fail(message: str, *, code: int = 2) -> int:
    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(f"error: {message}"))
    return code


if __name__ == "__main__":
    sys.exit(main())
