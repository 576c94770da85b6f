"""Commit models that behave the ways real ones do, and a session that plants facts: does the memory budget hold?

Six fake commit models read the commit prompt (the current working memory, the transcript, the
`<section_size_warnings>`) and answer with the memory tool, each with one habit:

- `joins`: told to consolidate a section, UPDATEs it with its bullets joined in pairs (`a; b`) — fewer
  bullets, every anchor kept, no token saved; otherwise APPENDs what is new;
- `never`: never consolidates; APPENDs up to five new items to every list section;
- `rewrites`: UPDATEs every list section with all its old items and the new ones;
- `shrinks`: UPDATEs every list section to one bullet;
- `junk`: every other answer is broken (no tool call, then malformed arguments); the others are `never`'s;
- `obedient`: told to consolidate, UPDATEs the section to its newest items within the warning's target.

New items are the informative sentences of the transcript (`token_fakes.select`), filed by the extractive
model's cues (`token_fakes.section_of`). The session is the token benchmark's seeded coding session, whose
planted facts are ticket ids, paths, error texts and the decisions of user corrections. `run` feeds it through
`create_agent` + `WorkingMemoryMiddleware(commit_mode="sync")` and records, after every commit, the rendered
working memory's tokens against the commit's memory budget; `run_summarization` counts
`SummarizationMiddleware`'s summaries on the same session, trigger and keep.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from token_fakes import (
    LIST_SECTIONS,
    CountingModel,
    agent_model,
    fixed_reply,
    message_tokens,
    section_of,
    select,
    summary_model,
)

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine
from workmem.nodes.extractive.transcript import block, parse_transcript, untag
from workmem.state.memory import SECTIONS, bullet_items, parse_sections, split_pointer
from workmem.state.ops import CREATE_TOOL_NAME
from workmem.state.tokens import count_tokens

MODELS = ("joins", "never", "rewrites", "shrinks", "junk", "obedient")
SESSION = "budget"
APPEND_ITEMS = 5
_WARNED = re.compile(r'^- "([^"]+)" (?:has \d+ bullets|is at ~\d+ of its (\d+) tokens)(?:.*?<=(\d+) tokens)?',
                     re.M)
_TICKET = re.compile(r"\bOPS-\d+\b")
_PATH = re.compile(r"\b(?:app|lib|api|jobs|db)/\w+\.py\b")
_ERROR = re.compile(r"\b(?:KeyError: '[^']+'|TimeoutError after \d+s|AssertionError: expected \d+ rows, got \d+|"
                    r"ValueError: invalid literal for int\(\): 'x\d+'|ConnectionResetError on port \d+)")
_DECISION = re.compile(r"keep the retry limit at \d+ and fix \S+ instead")


@dataclass
class Prompt:
    """What a commit prompt tells a model: the old bodies (pointers taken out), the new items, the warnings."""

    old: dict[str, list[str]]
    fresh: dict[str, list[str]]
    warned: dict[str, int]  # section → the token target the warning names
    last: str


def read_prompt(messages: Sequence[BaseMessage]) -> Prompt:
    """The parts of a commit prompt a fake model acts on."""
    lines = "\n\n".join(m.text for m in messages if m.type != "system").replace("\r\n", "\n").split("\n")
    wm, after = block(lines, "current_working_memory")
    warnings, _ = block(lines, "section_size_warnings")
    transcript, _ = block(lines, "messages", start=after, last_close=True)
    old = {name: bullet_items(split_pointer(body)[0]) for name, body in parse_sections(untag(wm or "")).items()}
    said = [(None, "\n".join(m.text)) for m in parse_transcript(transcript or "") if m.role in ("user", "assistant")]
    fresh: dict[str, list[str]] = {name: [] for name in LIST_SECTIONS}
    for _origin, sentence in select(said):
        name = section_of(sentence)
        if sentence not in old.get(name, []):
            fresh[name].append(sentence)
    warned = {}
    for match in _WARNED.finditer(warnings or ""):
        warned[match.group(1)] = int(match.group(3) or match.group(2) or 0)
    return Prompt(old, fresh, warned, said[-1][1].split("\n")[0] if said else "Nothing yet.")


def _update(items: list[str]) -> dict[str, Any]:
    return {"op": "UPDATE", "content": "\n".join(f"- {i}" for i in items)}


def _append(items: list[str]) -> dict[str, Any]:
    return {"op": "APPEND", "items": items} if items else {"op": "KEEP"}


def _joined(items: list[str]) -> list[str]:
    return ["; ".join(items[i:i + 2]) for i in range(0, len(items), 2)]


def _newest_within(items: list[str], target: int) -> list[str]:
    kept: list[str] = []
    for item in reversed(items):
        if count_tokens("\n".join(f"- {i}" for i in [item, *kept])) > max(target * 3 // 4, 1):
            break
        kept.insert(0, item)
    return kept


def section_ops(habit: str, p: Prompt) -> dict[str, Any]:
    """One habit's ops for the list sections (title and current state are common to all)."""
    ops: dict[str, Any] = {}
    for name in LIST_SECTIONS:
        old, new = p.old.get(name, []), p.fresh[name][:APPEND_ITEMS]
        if habit == "joins" and name in p.warned:
            ops[name] = _update(_joined(old) + new)
        elif habit == "rewrites":
            ops[name] = _update(old + new) if new else {"op": "KEEP"}
        elif habit == "shrinks":
            ops[name] = _update([(new or old or ["nothing yet"])[-1]])
        elif habit == "obedient" and name in p.warned:
            ops[name] = _update(_newest_within(old + new, p.warned[name]))
        else:  # never, junk, and joins / obedient when not warned
            ops[name] = _append(new)
    return ops


@dataclass
class HabitModel:
    """The `answer` of a `CountingModel` acting out one habit; counts its calls to alternate `junk`."""

    habit: str
    answered: int = 0

    def __call__(self, messages: list[BaseMessage], tools: list[Any], choice: Any) -> AIMessage:
        name = choice if isinstance(choice, str) else (tools[0].get("function") or tools[0])["name"]
        self.answered += 1
        if self.habit == "junk" and self.answered % 2 == 0:
            if self.answered % 4 == 0:
                return AIMessage(content="I would rather summarise this in prose.")
            return AIMessage(content="", invalid_tool_calls=[{"name": name, "args": '{"sections": {"Key Facts',
                                                               "id": "junk", "error": "bad JSON",
                                                               "type": "invalid_tool_call"}])
        p = read_prompt(messages)
        if name == CREATE_TOOL_NAME:
            bodies = {s: "\n".join(f"- {i}" for i in p.fresh.get(s, [])) for s in SECTIONS}
            bodies["Session Title"], bodies["Current State"] = "Nightly export and CI upkeep", p.last
            args: dict[str, Any] = {"sections": bodies}
        else:
            args = {"sections": {"Session Title": {"op": "KEEP"},
                                 "Current State": {"op": "UPDATE", "content": p.last},
                                 **section_ops(self.habit, p)}}
        return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call_habit",
                                                  "type": "tool_call"}])


def habit_model(habit: str) -> CountingModel:
    """A counting commit model with one habit."""
    if habit not in MODELS:
        raise ValueError(f"unknown habit {habit!r}; one of {MODELS}")
    return CountingModel(answer=HabitModel(habit))


def padded(turns: Sequence[str], lines: int) -> list[str]:
    """`turns` each followed by `lines` lines of a bland build log (no digits, paths or names): a session that
    reaches a large trigger in few turns without planting anything."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    log = "\n".join(f"building module {letters[i % 26]} ok, nothing to report" for i in range(lines))
    return [f"{text}\n{log}" for text in turns]


def planted_facts(turns: Sequence[str]) -> list[str]:
    """Every ticket id, path, error text and correction decision the session's user messages carry."""
    found: list[str] = []
    for text in turns:
        for pattern in (_TICKET, _PATH, _ERROR, _DECISION):
            found += [m.group() for m in pattern.finditer(text)]
    return list(dict.fromkeys(found))


@dataclass
class BudgetRun:
    """One habit on one session at one trigger: per commit (WM tokens, budget), commits, facts, storage."""

    habit: str
    trigger: int
    turns: int
    commits: list[tuple[int, int]] = field(default_factory=list)  # (rendered WM tokens, memory budget)
    missing_facts: list[str] = field(default_factory=list)
    spilled: int = 0
    stored_once: bool = False
    fed: int = 0

    @property
    def worst(self) -> float:
        """The largest WM ÷ budget over the commits (0 when there was none)."""
        return max((wm / budget for wm, budget in self.commits), default=0.0)

    @property
    def per_100(self) -> float:
        """Commits per 100 turns."""
        return 100 * len(self.commits) / self.turns


def _fact_kept(engine: WorkingMemoryEngine, fact: str, memory: str, live: str) -> bool:
    if fact in memory or fact in live:
        return True
    return any(fact in hit["content"] for hit in engine.archive_search(SESSION, fact, limit=12))


def run(habit: str, turns: Sequence[str], *, trigger: int, keep: int,
        on_commit: Callable[[str, int], None] | None = None) -> BudgetRun:
    """Feed `turns` (one user message per agent run) through the middleware with one habit's commit model."""
    reply = fixed_reply()
    result = BudgetRun(habit, trigger, len(turns))
    with tempfile.TemporaryDirectory(prefix="workmem-bench-budget-") as root:
        engine = WorkingMemoryEngine(root=root, model=habit_model(habit), keep=("messages", keep), durable=False)
        middleware = WorkingMemoryMiddleware(engine, session_id=SESSION, trigger=("tokens", trigger),
                                             commit_mode="sync")
        agent = create_agent(agent_model(reply), tools=[], middleware=[middleware], checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": SESSION}}
        budget = engine.budget_for_trigger(trigger)
        seen = 0
        for text in turns:
            agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
            info = engine.session_info(SESSION)
            if info["commit_count"] > seen:
                seen = info["commit_count"]
                memory = engine.working_memory(SESSION)["working_summary"]["markdown"]
                result.commits.append((count_tokens(memory), budget))
                if on_commit is not None:
                    on_commit(memory, budget)
        result.fed = 2 * len(turns)
        info = engine.session_info(SESSION)
        memory = (engine.working_memory(SESSION) or {"working_summary": {"markdown": ""}})["working_summary"][
            "markdown"]
        live = "\n".join(json.dumps(m, ensure_ascii=False) for m in engine.storage.sessions.live_messages(SESSION))
        result.missing_facts = [f for f in planted_facts(turns) if not _fact_kept(engine, f, memory, live)]
        result.stored_once = info["total_message_count"] == result.fed
        engine.close()
    return result


def run_summarization(turns: Sequence[str], *, trigger: int, keep: int) -> int:
    """How many summaries `SummarizationMiddleware` makes on the same session, trigger and keep."""
    maintainer = summary_model()
    middleware = SummarizationMiddleware(maintainer, trigger=("tokens", trigger), keep=("messages", keep),
                                         token_counter=message_tokens)
    agent = create_agent(agent_model(fixed_reply()), tools=[], middleware=[middleware], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": SESSION}}
    for text in turns:
        agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
    return len(maintainer.calls)
