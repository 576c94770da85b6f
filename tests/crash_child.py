"""Child process of `test_commit_crash.py`: a real commit on a SQLite checkpoint, SIGKILLed inside one node.

    python crash_child.py run <root> <kill>        add the session, commit; kill = none | <node>[@<chunk>]
    python crash_child.py resume <root> [<root>…]  resume every unfinished commit of each root (a new process);
                                                   a root written `commit:<root>` gets one more turn and a
                                                   new commit instead (which must resume the killed one first)

The kill is not a hook of the library: before `graphs.commit` is imported (it binds the node
functions by name), the node's module attribute is replaced by a wrapper that runs the real node and
then SIGKILLs this process — so the node's side effects happened but its checkpoint write did not.
`persist_mid` kills persist right after the archive directory is complete, before indexing and GC.

A root with a `<root>.url` file beside it runs on that Postgres database instead of files.

The model is the deterministic extractive one, made to misbehave on chunks holding a marker, so one
commit walks every node: `[[malformed]]` → broken JSON (recover), `[[nocall]]` → a text answer to the
update prompt (create retry), `[[down]]` → connection errors every time (the retry loop of
`generate`, then the extractive fallback). `backoff` kills in the wait before the second attempt.
Every call appends `<first_seq>-<last_seq> <tool>` to `<root>.calls`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from workmem.nodes.extractive.model import ExtractiveChatModel
from workmem.nodes.formatting import HEADER_RE

SESSION = "crash"
KEEP = 2
CHUNK_TOKENS = 100  # one turn (two messages) per chunk
N_TURNS = 7
MARKERS = {1: "[[malformed]]", 2: "[[nocall]]", 3: "[[down]]"}  # turn → behaviour of its chunk

# node → (module, attribute)
NODE_FUNCTIONS = {
    "slice_turns": ("workmem.nodes.slice_turns", "slice_turns"),
    "load_memory": ("workmem.nodes.load_memory", "load_memory"),
    "generate": ("workmem.nodes.generate", "generate"),
    "validate": ("workmem.nodes.validate", "validate"),
    "recover": ("workmem.nodes.recover", "recover"),
    "create_retry": ("workmem.nodes.create_retry", "create_retry"),
    "extractive_fallback": ("workmem.nodes.extractive_fallback", "extractive_fallback"),
    "guard": ("workmem.nodes.guards", "guard"),
    "merge": ("workmem.nodes.merge", "merge"),
    "persist": ("workmem.nodes.persist", "persist"),
    "report": ("workmem.nodes.report", "report"),
}


def conversation() -> list[dict[str, Any]]:
    """N_TURNS turns of similar size, each one chunk; some carry a marker that makes the model misbehave."""
    out = []
    for i in range(N_TURNS):
        marker = MARKERS.get(i, "")
        out.append({"role": "user", "content": f"Step {i} {marker}: move the parser for feed_{i}.csv into "
                                               f"src/feeds/feed_{i}.py and keep the tests on 2024-07-{i + 1:02d}."})
        out.append({"role": "assistant", "content": f"Moved it to src/feeds/feed_{i}.py; decided to keep the old "
                                                    f"entry point because the cron job in ops/cron_{i}.sh calls it."})
    return out


class ChaosModel(ExtractiveChatModel):
    """The extractive model, logging each call and misbehaving on marked chunks (see module doc)."""

    calls_file: str

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        prompt = "\n".join(m.text for m in messages)
        text = prompt.rsplit("<messages>\n", 1)[-1].split("\n</messages>", 1)[0]  # the chunk, not the WM
        seqs = [int(m.group(1)) for line in text.splitlines() if (m := HEADER_RE.match(line))]
        tool = kwargs.get("tool_choice") or "?"
        tool = tool if isinstance(tool, str) else json.dumps(tool)
        with open(self.calls_file, "a", encoding="utf-8") as log:
            log.write(f"{seqs[0]}-{seqs[-1]} {tool}\n")
        if "[[down]]" in text:
            raise ConnectionError("model endpoint unreachable")
        updating = tool == "update_working_memory"
        if updating and "[[nocall]]" in text:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="I would rather not."))])
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        if updating and "[[malformed]]" in text:
            call = result.generations[0].message.tool_calls[0]
            raw = json.dumps(call["args"])
            broken = AIMessage(content="", invalid_tool_calls=[{
                "name": call["name"], "args": raw[: len(raw) * 3 // 4], "id": "broken", "error": "bad JSON",
                "type": "invalid_tool_call"}])
            return ChatResult(generations=[ChatGeneration(message=broken)])
        return result


def _killer(real: Any, chunk: int | None) -> Any:
    @functools.wraps(real)  # LangGraph reads the real signature and hints (runtime / error injection)
    def node(state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        result = real(state, *args, **kwargs)
        if chunk is None or state.get("chunk_index", 0) == chunk:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    return node


class _KillAfterArchive:
    """Store proxy: the archive directory is written (with `.done`), then the process dies."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def write_archive(self, *args: Any, **kwargs: Any) -> Any:
        self._store.write_archive(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def patch_kill(kill: str) -> None:
    """Replace the target node's module attribute; must run before `graphs.commit` is imported."""
    import importlib

    if kill == "none":
        return
    if kill.startswith("backoff"):  # the transport retry loop: die while waiting before attempt 2
        generate = importlib.import_module("workmem.nodes.generate")
        generate.retry_delay = lambda _backoff, attempt: os.kill(os.getpid(), signal.SIGKILL) if attempt == 2 else 0.0
        return
    if kill == "persist_mid":
        persist = importlib.import_module("workmem.nodes.persist")
        real_services = persist.services
        persist.services = lambda runtime: dataclasses.replace(
            real_services(runtime), sessions=_KillAfterArchive(real_services(runtime).sessions))
        return
    node, _, chunk = kill.partition("@")
    module_name, attr = NODE_FUNCTIONS[node]
    module = importlib.import_module(module_name)
    setattr(module, attr, _killer(getattr(module, attr), int(chunk) if chunk else None))


def engine_for(root: str, *, fast_retries: bool = True) -> Any:
    """The engine of `root`; on Postgres when `<root>.url` names a database (the root then only names files)."""
    import workmem.nodes.generate
    from workmem.graphs.engine import WorkingMemoryEngine

    if fast_retries:  # no backoff sleep (a `backoff` kill replaces it with its own)
        workmem.nodes.generate.retry_delay = lambda backoff_s, attempt: 0.0

    url = Path(f"{root}.url").read_text().strip() if Path(f"{root}.url").exists() else None
    return WorkingMemoryEngine(root=root, database_url=url, model=ChaosModel(calls_file=f"{root}.calls"),
                               chunk_tokens=CHUNK_TOKENS)


def main(argv: list[str]) -> int:
    mode, roots = argv[0], argv[1:]
    if mode == "run":
        root, kill = roots
        patch_kill(kill)
        with engine_for(root, fast_retries=not kill.startswith("backoff")) as engine:
            engine.add_messages(SESSION, conversation())
            result = engine.commit(SESSION, keep_recent_count=KEEP)
        print(json.dumps(result))
        return 0
    if mode == "resume":
        results: dict[str, Any] = {}
        for spec in roots:
            new_commit, _, root = spec.rpartition(":")
            with engine_for(root) as engine:
                if new_commit:
                    engine.add_messages(SESSION, [{"role": "user", "content": "Last step: tag the release."},
                                                  {"role": "assistant", "content": "Tagged v2.0.0."}])
                    results[root] = [engine.commit(SESSION, keep_recent_count=0)]
                else:
                    results[root] = engine.resume_all()
        print(json.dumps(results))
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
