"""Model metrics of `workmem eval`: answer a question four ways, judge it, count the tokens.

Modes: `full_context` (the whole transcript), `wm_tail` (working memory + live tail, no tools),
`wm_tail_tools` (the same plus `archive_search` / `archive_expand`, at most 4 tool rounds) and
`summary_baseline` (a free-form running summary made by the same model at the same commit points, plus
the same live tail). Tokens are counted with the one cl100k counter over the text of every prompt
message and every completion (tool calls included), per model call; judge calls are counted apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from workmem.state.tokens import count_tokens

MODES = ("full_context", "wm_tail", "wm_tail_tools", "summary_baseline")
MODE_LABELS = {"full_context": "full context", "wm_tail": "WM + tail", "wm_tail_tools": "WM + tail + tools",
               "summary_baseline": "summary baseline"}
MAX_TOOL_ROUNDS = 4
ADVERSARIAL_GOLD = "Not mentioned in the conversation (the question's premise is false)"

ANSWER_SYSTEM = (
    "You answer questions about a long conversation between two people, using only the context you are "
    "given. Answer with a short phrase: a name, a date, a number or a short list. Resolve relative dates "
    "('yesterday', 'last week') against the session dates noted in the conversation and give an absolute "
    "date. If the context does not contain the answer, say that it is not mentioned."
)
TOOLS_SYSTEM = (
    "Older messages are not in your context: call archive_search with 2-3 keywords and archive_expand on a "
    "hit to read them before saying something is not mentioned."
)
SUMMARY_SYSTEM = (
    "You maintain a running summary of a conversation between two people. Rewrite the summary so it also "
    "covers the new messages. Keep names, dates, numbers and events. Reply with the summary text only."
)
JUDGE_SYSTEM = (
    "You grade answers to questions about a conversation. Be generous: label CORRECT when the generated "
    "answer refers to the same thing as the gold answer, even if it is longer, worded differently or adds "
    "detail; for dates and times, CORRECT when it names the same date or period in any format. Label WRONG "
    "when it contradicts or misses the gold answer, or says it does not know. Reply with one word: CORRECT "
    "or WRONG."
)
QUESTION_TEMPLATE = "Question: {question}\nShort answer:"
SUMMARY_LABEL = "[Conversation Summary]"
_VERDICT = re.compile(r"\b(CORRECT|INCORRECT|WRONG)\b")


@dataclass
class Answer:
    """One answer of one mode: the text, tokens spent, tool calls made, and any model error."""

    text: str
    tokens: int
    tool_calls: int = 0
    error: str | None = None


def message_tokens(message: BaseMessage) -> int:
    """cl100k tokens of a message's text plus its tool calls (name and JSON arguments)."""
    calls = getattr(message, "tool_calls", None) or []
    extra = "".join(f"{c['name']}({json.dumps(c.get('args'), ensure_ascii=False)})" for c in calls)
    return count_tokens(str(message.text)) + count_tokens(extra)


def _call(model: Any, messages: list[BaseMessage]) -> tuple[AIMessage, int]:
    """One model call → (reply, prompt + completion tokens)."""
    reply = model.invoke(messages)
    return reply, sum(message_tokens(m) for m in messages) + message_tokens(reply)


def question_message(question: str) -> HumanMessage:
    """The question as the last human message."""
    return HumanMessage(QUESTION_TEMPLATE.format(question=question))


def answer_full_context(model: Any, transcript: str, question: str) -> Answer:
    """Mode (a): the whole transcript, then the question."""
    prompt = [SystemMessage(ANSWER_SYSTEM), HumanMessage(f"<conversation>\n{transcript}\n</conversation>"),
              question_message(question)]
    return _plain(model, prompt)


def answer_from_messages(model: Any, context: Sequence[BaseMessage], question: str) -> Answer:
    """Modes (b) and (d): a prepared context (summary message + live tail), then the question."""
    return _plain(model, [SystemMessage(ANSWER_SYSTEM), *context, question_message(question)])


def _plain(model: Any, prompt: list[BaseMessage]) -> Answer:
    try:
        reply, tokens = _call(model, prompt)
    except Exception as exc:  # a failed call is a wrong answer, recorded, never the end of the run
        return Answer("", sum(message_tokens(m) for m in prompt), error=_error(exc))
    return Answer(str(reply.text), tokens)


def answer_with_tools(model: Any, context: Sequence[BaseMessage], tools: Sequence[Any], question: str,
                      system_addition: str = "", max_rounds: int = MAX_TOOL_ROUNDS) -> Answer:
    """Mode (c): context + archive tools; after `max_rounds` tool rounds one last call without tools."""
    system = "\n\n".join(p for p in (ANSWER_SYSTEM, TOOLS_SYSTEM, system_addition) if p)
    messages: list[BaseMessage] = [SystemMessage(system), *context, question_message(question)]
    by_name = {t.name: t for t in tools}
    tokens = calls = 0
    try:
        bound = model.bind_tools(list(tools))
        for _round in range(max_rounds):
            reply, spent = _call(bound, messages)
            tokens += spent
            if not reply.tool_calls:
                return Answer(str(reply.text), tokens, calls)
            messages.append(reply)
            for call in reply.tool_calls:
                calls += 1
                tool = by_name.get(call["name"])
                messages.append(tool.invoke({**call, "type": "tool_call"}) if tool else _unknown_tool(call))
        reply, spent = _call(_without_tools(model, tools), messages)
        return Answer(str(reply.text), tokens + spent, calls)
    except Exception as exc:  # recorded as a wrong answer
        return Answer("", tokens, calls, error=_error(exc))


def _unknown_tool(call: dict[str, Any]) -> BaseMessage:
    from langchain_core.messages import ToolMessage

    return ToolMessage(f"Unknown tool {call['name']!r}.", tool_call_id=call.get("id") or "", status="error")


def _without_tools(model: Any, tools: Sequence[Any]) -> Any:
    """The model with tools still declared (the history holds tool calls) but not callable."""
    try:
        return model.bind_tools(list(tools), tool_choice="none")
    except (TypeError, NotImplementedError, ValueError):
        return model


def running_summary(model: Any, chunks: Sequence[str]) -> tuple[str, int, list[str]]:
    """Baseline (d): fold each commit's covered messages into a free-form summary → (summary, tokens, errors)."""
    summary, tokens, errors = "", 0, []
    for chunk in chunks:
        prompt = [SystemMessage(SUMMARY_SYSTEM),
                  HumanMessage(f"<summary>\n{summary}\n</summary>\n\n<new_messages>\n{chunk}\n</new_messages>")]
        try:
            reply, spent = _call(model, prompt)
        except Exception as exc:  # keep the previous summary, as a summarising agent would
            errors.append(_error(exc))
            continue
        tokens += spent
        summary = str(reply.text).strip() or summary
    return summary, tokens, errors


def summary_context(summary: str, tail: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The baseline's context: the summary as one human message, then the live tail."""
    head = [HumanMessage(f"{SUMMARY_LABEL}\n{summary}")] if summary else []
    return [*head, *tail]


def judge(model: Any, question: str, gold: str, response: str) -> tuple[bool, int, str | None]:
    """Lenient CORRECT/WRONG verdict of the judge model → (correct, tokens, error)."""
    prompt = [SystemMessage(JUDGE_SYSTEM),
              HumanMessage(f"Question: {question}\nGold answer: {gold}\nGenerated answer: {response}")]
    try:
        reply, tokens = _call(model, prompt)
    except Exception as exc:
        return False, 0, _error(exc)
    return parse_verdict(str(reply.text)), tokens, None


def parse_verdict(text: str) -> bool:
    """True when the first verdict word of the judge's reply is CORRECT."""
    found = _VERDICT.search(text.upper())
    return bool(found) and found.group(1) == "CORRECT"


def _error(exc: BaseException) -> str:
    from workmem.state.redact import redact_secrets

    return redact_secrets(f"{type(exc).__name__}: {exc}")[:300]


def answer_questions(engine: Any, session_id: str, transcript: str, rows: list[dict[str, Any]], model: Any,
                     judge_model: Any, budget: int, advance: Callable[[], None] | None = None) -> dict[str, Any]:
    """Answer every question row in the four modes and judge each answer; fills `row["answers"]`.

    Returns the tokens spent outside QA (judge, baseline summaries) and the model errors met.
    """
    from workmem.graphs.agent.tools import make_archive_tools
    from workmem.graphs.context.lc_messages import to_langchain_messages
    from workmem.state.messages import message_text

    assembled = engine.assemble(session_id, budget)["messages"]
    system_addition = "\n\n".join(str(m.text) for m in assembled if _tag(m) == "system")
    wm_context = [m for m in assembled if _tag(m) != "system"]
    tools = make_archive_tools(engine, session_id)
    chunks = ["\n".join(message_text(m) for m in engine.archive_messages(session_id, a["archive_id"]))
              for a in engine.list_archives(session_id)]
    summary, summary_tokens, errors = running_summary(model, chunks)
    baseline = summary_context(summary, to_langchain_messages(engine.live_messages(session_id)))
    judge_tokens = 0
    for row in rows:
        question = row["question"]
        gold = row["answer"] if row["answer"] is not None else ADVERSARIAL_GOLD
        for mode in MODES:
            if mode == "full_context":
                answer = answer_full_context(model, transcript, question)
            elif mode == "wm_tail":
                answer = answer_from_messages(model, wm_context, question)
            elif mode == "wm_tail_tools":
                answer = answer_with_tools(model, wm_context, tools, question, system_addition)
            else:
                answer = answer_from_messages(model, baseline, question)
            correct, spent, judge_error = (False, 0, None) if answer.error else judge(
                judge_model, question, gold, answer.text)
            judge_tokens += spent
            errors += [e for e in (answer.error, judge_error) if e]
            row["answers"][mode] = {"response": answer.text, "correct": correct, "tokens": answer.tokens,
                                    "tool_calls": answer.tool_calls, "judge_tokens": spent,
                                    "error": answer.error or judge_error}
            if advance:
                advance()
    return {"judge_tokens": judge_tokens, "baseline_summary_tokens": summary_tokens, "errors": errors}


def _tag(message: BaseMessage) -> Any:
    return (getattr(message, "additional_kwargs", None) or {}).get("workmem")
