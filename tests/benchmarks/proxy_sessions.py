"""Sessions beside the dev set: more runs of the dev sessions' two mini-swe-agent sources, in the dev file's format.

The dev sessions (`../shared/data/agent_sessions_dev.json`) come from two public repositories; other sessions of the
same sources are held out for acceptance. This script converts more runs of those sources, read from local git
clones (no network), so the replay and the handoff checks can be run on sessions no default was chosen on:

    python tests/benchmarks/proxy_sessions.py --gemini CLONE --deepseek CLONE --out /tmp/proxy.json
    WORKMEM_AGENT_SESSIONS=/tmp/proxy.json python tests/benchmarks/bench_agent_replay.py
    WORKMEM_AGENT_SESSIONS=/tmp/proxy.json python tests/benchmarks/bench_handoff.py

`--gemini`: a clone of gruckion/mini-swe-agent (mini-swe-agent 1.15, Gemini 3 Pro, one bash block per answer,
read at HEAD); `--deepseek`: a clone of SWE-agent/mini-swe-agent holding commit `DEEPSEEK_REV` (pull request 816:
mini-swe-agent 2.2, DeepSeek-chat with native tool calls). A dev session converted here gives the dev file's
messages exactly (`--check` converts them again and compares). The dev sessions' instances (`--dev`, by default
`../shared/data/agent_sessions_dev.json`; it must be there) are left out; of the rest, runs of 100-400 messages
that submitted an edit are kept, every k-th in path order up to `--per-source`. Probes are only the two kinds the
run itself states: `task_title` (the task's first line) and `file_edited` (each file of the submitted diff); the
dev file's other kinds were derived by its authors, so the replay's probe columns are not comparable with the dev
set's, its grounding and token columns are. The held-out sessions are of the same public sources, so these may
overlap them: measure on them, never choose a rule on them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

GEMINI_TRAJECTORIES = "swebench_results/20251118_gemini-3-pro-74pct/trajs/"
DEEPSEEK_REV = "e5e0fbca1c60561bde25fa473b78717aa4b3f9ec"
DEEPSEEK_RUNS = ("output/deepseek_chat_test_1-100/", "output/deepseek_chat_dev_rerun/")
DEV = Path(__file__).resolve().parents[3] / "shared" / "data" / "agent_sessions_dev.json"
MIN_MESSAGES, MAX_MESSAGES = 100, 400
_BASH_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.S)
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.M)
_PROMPT_LEAD = "Consider the following PR description:\n"


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their texts joined)."""
    if isinstance(content, list):
        return "\n".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return content or ""


def _git(clone: str, *args: str) -> str:
    return subprocess.run(["git", "-C", clone, *args], capture_output=True, text=True, check=True).stdout


def from_bash_blocks(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mini-swe-agent 1.x: an answer with exactly one bash block becomes a `bash` tool call (its text without the
    block), the observation after it that call's tool message; any other answer and message stays as it was."""
    out: list[dict[str, Any]] = []
    pending: str | None = None
    calls = 0
    for m in messages:
        role, content = m["role"], _text(m["content"])
        if role == "assistant":
            blocks = _BASH_BLOCK.findall(content)
            pending = None
            if len(blocks) == 1:
                calls += 1
                pending = f"call_{calls}"
                out.append({"role": "assistant", "content": _BASH_BLOCK.sub("", content).strip(), "tool_calls": [
                    {"id": pending, "type": "function",
                     "function": {"name": "bash", "arguments": json.dumps({"command": blocks[0]})}}]})
                continue
        elif role == "user" and pending and len(out) > 1:
            out.append({"role": "tool", "tool_call_id": pending, "content": content})
            pending = None
            continue
        out.append({"role": role, "content": content})
    return out


def from_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """mini-swe-agent 2.x: the provider's fields dropped; the closing `exit` message (the submitted diff) becomes
    the tool message of the last call, which must still be unanswered (`ValueError` otherwise: not this shape)."""
    out: list[dict[str, Any]] = []
    unanswered: list[str] = []
    for m in messages:
        role, content = m["role"], _text(m.get("content"))
        if role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            calls = [{"id": c["id"], "type": "function",
                      "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                     for c in m.get("tool_calls") or []]
            if calls:
                message["tool_calls"] = calls
                unanswered = [c["id"] for c in calls]
            out.append(message)
        elif role in ("tool", "exit"):
            call_id = m["tool_call_id"] if role == "tool" else (unanswered or [None])[-1]
            if call_id is None or call_id not in unanswered:
                raise ValueError(f"a {role} message answers no open tool call")
            unanswered.remove(call_id)
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        else:
            out.append({"role": role, "content": content})
    return out


def session(trajectory: dict[str, Any], prefix: str, source: str) -> dict[str, Any]:
    """One trajectory as a dev-format session record with its `task_title` and `file_edited` probes."""
    native = any(m.get("tool_calls") for m in trajectory["messages"])
    messages = (from_tool_calls if native else from_bash_blocks)(trajectory["messages"])
    prompt = messages[1]["content"] if len(messages) > 1 else ""
    task = prompt.split(_PROMPT_LEAD, 1)[-1].split("</pr_description>")[0].strip()
    edited = sorted(set(_DIFF_FILE.findall(trajectory.get("info", {}).get("submission") or "")))
    title = task.splitlines()[0].strip() if task else ""
    probes = [{"kind": "task_title", "text": title, "first_seen_message_index": 1}]
    probes += [{"kind": "file_edited", "text": f, "first_seen_message_index": len(messages) - 1} for f in edited]
    return {"id": prefix + trajectory["instance_id"], "source": source, "licence": "MIT", "split": "proxy",
            "task": task, "messages": messages, "probes": probes, "meta": {}}


def _dev_instances(dev: Path) -> set[str]:
    return {r["source"].rsplit("/", 1)[-1].removesuffix(".traj.json") for r in json.loads(dev.read_text("utf-8"))}


def _trajectories(clone: str, rev: str, roots: tuple[str, ...]) -> list[str]:
    names = _git(clone, "ls-tree", "-r", "--name-only", rev).split()
    return sorted(p for p in names if p.endswith(".traj.json") and p.startswith(roots))


def sample(clone: str, rev: str, roots: tuple[str, ...], prefix: str, per_source: int,
           dev: set[str]) -> list[dict[str, Any]]:
    """Every k-th usable run of one source, the `dev` instances left out."""
    usable = []
    for path in _trajectories(clone, rev, roots):
        if path.rsplit("/", 1)[-1].removesuffix(".traj.json") in dev:
            continue
        try:
            record = session(json.loads(_git(clone, "show", f"{rev}:{path}")), prefix, f"{rev}:{path}")
        except (subprocess.CalledProcessError, json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError):
            continue  # a file the clone lacks (a large one left out) or another shape
        if MIN_MESSAGES <= len(record["messages"]) <= MAX_MESSAGES and len(record["probes"]) > 1:
            usable.append(record)
    step = max(1, len(usable) // max(per_source, 1))
    return usable[::step][:per_source]


def check(dev: Path, gemini: str | None, deepseek: str | None) -> int:
    """Convert the dev sessions of these sources again and count the ones whose messages differ (0: exact)."""
    wrong = 0
    for record in json.loads(dev.read_text("utf-8")):
        repository, _, rest = record["source"].removeprefix("github:").partition("@")  # owner/name@rev:path
        clone = {"gruckion/mini-swe-agent": gemini, "SWE-agent/mini-swe-agent": deepseek}.get(repository)
        if clone is None:
            continue
        converted = session(json.loads(_git(clone, "show", rest)), "", "")
        same = converted["messages"] == record["messages"]
        wrong += not same
        print(f"{record['id']}: {'same messages' if same else 'DIFFERENT'}")
    return wrong


def main(argv: list[str]) -> int:
    """Write the proxy sessions (or, with `--check`, compare the dev sessions' conversion)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemini", help="clone of gruckion/mini-swe-agent")
    parser.add_argument("--deepseek", help=f"clone of SWE-agent/mini-swe-agent with {DEEPSEEK_REV[:8]}")
    parser.add_argument("--per-source", type=int, default=16)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--dev", type=Path, default=DEV, help="the dev sessions, whose instances are left out")
    parser.add_argument("--check", action="store_true", help="convert the dev sessions and compare")
    args = parser.parse_args(argv)
    if not (args.gemini or args.deepseek):
        parser.error("give --gemini or --deepseek (a local clone)")
    if not args.dev.is_file():  # without it the dev instances could not be left out
        parser.error(f"the dev sessions are not at {args.dev} (--dev PATH)")
    if args.check:
        return 1 if check(args.dev, args.gemini, args.deepseek) else 0
    if args.out is None:
        parser.error("--out is required")
    dev = _dev_instances(args.dev)
    records: list[dict[str, Any]] = []
    if args.gemini:
        records += sample(args.gemini, "HEAD", (GEMINI_TRAJECTORIES,), "proxy-gemini__", args.per_source, dev)
    if args.deepseek:
        records += sample(args.deepseek, DEEPSEEK_REV, DEEPSEEK_RUNS, "proxy-deepseek__", args.per_source, dev)
    args.out.write_text(json.dumps(records), encoding="utf-8")
    print(f"{len(records)} sessions, {sum(len(r['messages']) for r in records):,} messages → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
