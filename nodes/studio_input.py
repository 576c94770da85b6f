"""The edge out of START of the Studio graph: its input is checked before any node runs.

A routing function (not a node) so a bad input panel — no `session_id`, `keep: "messages:abc"`, a
memory budget out of range — fails the run at once with an `InvalidInput` worded in the syntax typed
(`messages:10`), leaving no task row, lease or checkpoint of a node behind.
"""

from __future__ import annotations

from typing import Any, Literal

from workmem.state.errors import InvalidInput
from workmem.state.ids import check_session_id
from workmem.state.memory import MAX_MEMORY_BUDGET, MIN_MEMORY_BUDGET
from workmem.state.messages import prepare_messages
from workmem.state.payloads import DEFAULT_LIMITS
from workmem.state.retention import keep_from_args
from workmem.state.tokens import DEFAULT_CONTEXT_WINDOW
from workmem.state.validation import require_int, require_text


def studio_keep(state: dict[str, Any]) -> tuple[str, int]:
    """The keep of a Studio input — a bare number counts messages, as on the command line — in tokens when a
    fraction (of the default 128 000-token window)."""
    keep = state.get("keep")
    if isinstance(keep, int) and not isinstance(keep, bool) or isinstance(keep, str) and keep.strip().isdigit():
        keep = f"messages:{str(keep).strip()}"
    return keep_from_args(keep, state.get("keep_recent_count"), default=("messages", 0),
                          input_limit=DEFAULT_CONTEXT_WINDOW)


def check_studio_input(state: dict[str, Any]) -> Literal["valid"]:
    """`valid`, or `InvalidInput` naming the first bad field of the Studio input."""
    check_session_id(require_text("session_id", state.get("session_id")))
    studio_keep(state)
    if state.get("memory_budget") is not None:
        require_int("memory_budget", state["memory_budget"], min=MIN_MEMORY_BUDGET, max=MAX_MEMORY_BUDGET)
    messages = state.get("messages")
    if messages is not None:
        if not isinstance(messages, list):
            raise InvalidInput("messages", type(messages).__name__, "must be a list of message objects")
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise InvalidInput(f"messages[{i}]", type(message).__name__,
                                   'must be an object such as {"role": "user", "content": "…"}')
            if not isinstance(message.get("meta") or {}, dict):
                raise InvalidInput(f"messages[{i}].meta", message["meta"], "must be an object")
        prepare_messages(messages, payloads=DEFAULT_LIMITS)  # what the append refuses, refused here, first (a large
        # tool result is a payload there, so here too)
    return "valid"
