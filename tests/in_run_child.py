"""Child process of `agent/test_in_run_crash.py`: a single-task agent run whose in-run commit is SIGKILLed.

    python in_run_child.py run <root> <node>     start the run; the commit a model call starts dies inside <node>
    python in_run_child.py resume <root>         a new process: resume the killed commit, then the agent's run

The agent checkpoints in `<root>.agent.sqlite`, so the resumed process continues the same run. The fake model
derives each step from the newest tool result it is shown (`step <i> done`), so it answers the same way in
either process. A root with a `<root>.url` file beside it runs on that Postgres database instead of files.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the test helpers (PYTHONSAFEPATH leaves it out)

from crash_child import patch_kill  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

STEPS = 12
TRIGGER = 3_000
TASK = "Investigate the slow report job and fix it."
THREAD = {"configurable": {"thread_id": "task"}}


class StepModel(GenericFakeChatModel):
    """Calls `work` for step 0, 1, … (the step after the newest result it sees), then answers."""

    messages: Any = iter(())

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        # a result shown as its synopsis still shows its head: "step <i> done"
        done = [int(found.group(1)) for m in messages if isinstance(m, ToolMessage)
                and (found := re.search(r"^step (\d+) done", m.text, re.M))]
        step = max(done) + 1 if done else 0
        if step >= STEPS:
            reply = AIMessage(content="The report job is fixed.")
        else:
            reply = AIMessage(content="", tool_calls=[{"name": "work", "args": {"step": step}, "id": f"call_{step}",
                                                       "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def work(step: int) -> str:
    """Do one step of the task."""
    return f"step {step} done: " + " ".join(f"detail{step}_{i}" for i in range(120))


def agent_for(root: str) -> tuple[Any, Any, sqlite3.Connection]:
    from langchain.agents import create_agent
    from langgraph.checkpoint.sqlite import SqliteSaver

    from workmem.graphs.agent.middleware import WorkingMemoryMiddleware
    from workmem.graphs.engine import WorkingMemoryEngine

    url = Path(f"{root}.url").read_text().strip() if Path(f"{root}.url").exists() else None
    engine = WorkingMemoryEngine(root=root, database_url=url, durable=True)
    conn = sqlite3.connect(f"{root}.agent.sqlite", check_same_thread=False)
    middleware = WorkingMemoryMiddleware(engine, session_id="task", trigger=("tokens", TRIGGER), commit_mode="sync")
    agent = create_agent(StepModel(), tools=[work], middleware=[middleware], checkpointer=SqliteSaver(conn))
    return agent, engine, conn


def main(argv: list[str]) -> int:
    mode, root = argv[0], argv[1]
    if mode == "run":
        patch_kill(argv[2])
        agent, engine, _conn = agent_for(root)
        agent.invoke({"messages": [HumanMessage(TASK, id="task-message")]}, THREAD)
        print(json.dumps({"finished": True}))
        return 0
    agent, engine, _conn = agent_for(root)
    resumed = engine.resume_all()
    state = agent.invoke(None, THREAD)
    print(json.dumps({"resumed": [r["status"] for r in resumed], "answer": state["messages"][-1].text}))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
