"""The five memory layers of the token benchmark, each run as a `create_agent` agent turn by turn.

Every layer gets the same agent fake, trigger and keep: workmem's `WorkingMemoryMiddleware`
(`commit_mode="sync"`), LangChain's `SummarizationMiddleware`, LangMem's `summarize_messages` (called
before each model call with `max_tokens_before_summary = max_tokens = trigger`, `max_summary_tokens =
800`), the full history, and last-N truncation (once the history reaches the trigger, all but the
newest `keep` messages are dropped; the same sawtooth as the summarisers, without a summary).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain_core.messages import SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from token_fakes import CountingModel, agent_model, commit_model, message_tokens, summary_model

from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
from workmem.graphs.engine import WorkingMemoryEngine

LAYERS = ("workmem", "summarization", "langmem", "full history", "last-N")
MAX_SUMMARY_TOKENS = 800


@dataclass
class LayerRun:
    """What one layer cost over a session: agent calls, maintenance calls, the final context, time."""

    layer: str
    agent_calls: list[tuple[int, int]]
    agent_parts: list[tuple[int, int]]
    maintenance_calls: list[tuple[int, int]]
    final_context: str
    layer_seconds: float
    turns: int
    extra: dict[str, Any] = field(default_factory=dict)


class LastN(AgentMiddleware):
    """Last-N truncation with a trigger: once the sent history reaches `trigger` tokens, keep the newest `keep`."""

    def __init__(self, trigger: int, keep: int) -> None:
        super().__init__()
        self.trigger, self.keep, self.cut = trigger, keep, 0

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Send the messages from the cut on, moving the cut when they reach the trigger."""
        messages = list(request.messages)
        if message_tokens(messages[self.cut:]) >= self.trigger:
            self.cut = max(len(messages) - self.keep, 0)
        return handler(request.override(messages=messages[self.cut:]))


class LangMemLayer(AgentMiddleware):
    """LangMem's `summarize_messages` before each model call, its running summary kept here."""

    def __init__(self, model: CountingModel, trigger: int) -> None:
        super().__init__()
        self.model, self.trigger, self.running = model, trigger, None

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Replace the messages by LangMem's summary + the messages it has not summarised."""
        from langmem.short_term import summarize_messages

        result = summarize_messages(list(request.messages), running_summary=self.running, model=self.model,
                                    max_tokens=self.trigger, max_tokens_before_summary=self.trigger,
                                    max_summary_tokens=MAX_SUMMARY_TOKENS, token_counter=message_tokens)
        self.running = result.running_summary or self.running
        system = [m for m in result.messages if isinstance(m, SystemMessage)]
        rest = [m for m in result.messages if not isinstance(m, SystemMessage)]
        return handler(request.override(messages=rest, system_message=system[0] if system else None))


def _middleware(layer: str, trigger: int, keep: int, maintainer: CountingModel, root: str) -> tuple[list[Any], Any]:
    if layer == "workmem":
        engine = WorkingMemoryEngine(root=root, model=maintainer, keep=("messages", keep), durable=False)
        return [WorkingMemoryMiddleware(engine, session_id="bench", trigger=("tokens", trigger),
                                        commit_mode="sync")], engine
    if layer == "summarization":
        return [SummarizationMiddleware(maintainer, trigger=("tokens", trigger), keep=("messages", keep),
                                        token_counter=message_tokens)], None
    if layer == "langmem":
        return [LangMemLayer(maintainer, trigger)], None
    if layer == "last-N":
        return [LastN(trigger, keep)], None
    return [], None


def run_layer(layer: str, turns: Sequence[str], reply: str, *, trigger: int, keep: int) -> LayerRun:
    """Feed each user message as one agent run on one thread; count every model call."""
    agent_fake = agent_model(reply)
    maintainer = commit_model() if layer == "workmem" else summary_model()
    with tempfile.TemporaryDirectory(prefix="workmem-bench-tokens-") as root:
        middleware, engine = _middleware(layer, trigger, keep, maintainer, root)
        agent = create_agent(agent_fake, tools=[], middleware=middleware, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "bench"}}
        wall = 0.0
        for text in turns:
            start = time.perf_counter()
            agent.invoke({"messages": [{"role": "user", "content": text}]}, config)
            wall += time.perf_counter() - start
        extra = {}
        if engine is not None:
            extra["commits"] = engine.session_info("bench").get("commit_count")
            engine.close()
    final = "\n\n".join(m.text for m in agent_fake.last_prompt)
    return LayerRun(layer, agent_fake.calls, agent_fake.parts, maintainer.calls, final,
                    wall - agent_fake.seconds - maintainer.seconds, len(turns), extra)
