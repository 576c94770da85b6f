"""Node `validate`: classify the model's answer; problems become data in state, never exceptions."""

from __future__ import annotations

import re
from typing import Any

from workmem.nodes.recover import repair_json
from workmem.state.commit_state import CommitState, Verdict
from workmem.state.ops import CREATE_TOOL_NAME, parse_create_args, parse_update_args

_FENCED_JSON = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)(?:```|$)", re.DOTALL)


def json_in_text(text: str) -> str | None:
    """A fenced ```json block, else the span from the first `{` to the last `}` of the text."""
    if not text:
        return None
    fenced = _FENCED_JSON.search(text)
    if fenced and "{" in fenced.group(1):
        return fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        return text[start : end + 1]
    return None


def validate(state: CommitState) -> dict[str, Any]:
    """valid → ops for the guards; malformed update args → recover; else no_call or model_error."""
    if state.get("model_error"):
        return _verdict("model_error")
    return classify_answer(state.get("answer") or {}, creating=state.get("prompt_kind") == "create")


def classify_answer(answer: dict[str, Any], *, creating: bool) -> dict[str, Any]:
    """The verdict on one answer (see `validate`), with its ops when it is usable."""
    if answer.get("tool_calls"):
        call = answer["tool_calls"][0]
        if call.get("name") == CREATE_TOOL_NAME or (creating and call.get("name") is None):
            return _create_verdict(call.get("args"))
        return _update_verdict(call.get("args"))
    raw = _raw_arguments(answer)
    if raw is None:
        return _verdict("no_call", issue="no tool call in the answer")
    if creating:
        return _create_verdict(repair_json(raw))
    return _verdict("malformed", raw_args=raw, issue="malformed tool arguments")


def _raw_arguments(answer: dict[str, Any]) -> str | None:
    for call in answer.get("invalid_tool_calls") or []:
        if isinstance(call.get("args"), str) and call["args"].strip():
            return call["args"]
    return json_in_text(answer.get("text") or "")


def _update_verdict(args: Any) -> dict[str, Any]:
    parsed = parse_update_args(args)
    if not parsed.ok:
        return _verdict("no_call", issue="empty or unusable update arguments", extra=parsed.issues)
    return _verdict("valid", ops={"kind": "update", "sections": parsed.ops}, extra=parsed.issues)


def _create_verdict(args: Any) -> dict[str, Any]:
    parsed = parse_create_args(args)
    if not parsed.ok:
        return _verdict("no_call", issue="create answer failed its schema", extra=parsed.issues)
    return _verdict("valid", ops={"kind": "create", "sections": parsed.sections}, extra=parsed.issues)


def _verdict(
    verdict: Verdict,
    *,
    ops: dict[str, Any] | None = None,
    raw_args: str = "",
    issue: str = "",
    extra: list[str] | None = None,
) -> dict[str, Any]:
    issues = ([issue] if issue else []) + list(extra or [])
    return {"verdict": verdict, "ops": ops or {}, "raw_args": raw_args, "issues": issues,
            "route": ["validate"]}
