"""The middleware's settings, checked once when it is built (every bad value is `InvalidInput` naming it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import BaseMessage, HumanMessage

from workmem.graphs.context.assemble import validate_budget
from workmem.graphs.context.decision import DEFAULT_LOW_WATER, check_low_water
from workmem.graphs.context.tool_results import DEFAULT_KEEP_TOOL_RESULTS
from workmem.state.archive_object import OWN_TOOLS
from workmem.state.errors import InvalidInput
from workmem.state.retention import Keep, Trigger, keep_value, trigger_value
from workmem.state.validation import require_int

log = logging.getLogger("workmem.agent")

CommitMode = Literal["background", "sync"]
MemoryMessage = Literal["human", "system"]  # where a call carries the working memory
TokenCounter = Callable[[list[BaseMessage]], int]


@dataclass(frozen=True)
class MiddlewareSettings:
    """What `WorkingMemoryMiddleware` was configured with (see its constructor for each setting)."""

    token_budget: int | None = None
    keep: Keep | None = None
    trigger: Any = None
    low_water: float = DEFAULT_LOW_WATER
    commit_mode: CommitMode = "background"
    trim_state: bool = True
    offload_tokens: int | None = None
    keep_tool_results: int = DEFAULT_KEEP_TOOL_RESULTS
    exclude_tools: frozenset[str] = OWN_TOOLS
    memory_message: MemoryMessage = "human"
    pinned_tokens: int | None = None
    pinned_tools: frozenset[str] = frozenset()
    forget_on_remove: bool = False
    token_counter: TokenCounter | None = None

    @classmethod
    def checked(cls, *, token_budget: int | None, keep: Keep | None, trigger: Trigger | int | None, low_water: Any,
                commit_mode: Any, trim_state: Any, offload_tokens: Any, keep_tool_results: Any, exclude_tools: Any,
                memory_message: Any, pinned_tokens: Any, pinned_tools: Any, forget_on_remove: Any,
                token_counter: Any) -> MiddlewareSettings:
        """The settings, each one checked (in the order the constructor names them)."""
        _check_choices(memory_message, token_counter)
        budget = None if token_budget is None else validate_budget(token_budget)
        keep = None if keep is None else keep_value(keep)
        trigger = None if trigger is None else trigger_value(trigger)
        check_low_water(low_water)
        offload = None if offload_tokens is None else require_int("offload_tokens", offload_tokens, min=1)
        kept_results = require_int("keep_tool_results", keep_tool_results, min=1)
        if exclude_tools is not None:
            _check_names("exclude_tools", exclude_tools, (list,))
        pinned = None if pinned_tokens is None else require_int("pinned_tokens", pinned_tokens, min=1)
        _check_names("pinned_tools", pinned_tools, (list, tuple))
        if commit_mode not in ("background", "sync"):
            raise InvalidInput("commit_mode", commit_mode, "must be 'background' or 'sync'")
        for name, value in (("trim_state", trim_state), ("forget_on_remove", forget_on_remove)):
            if not isinstance(value, bool):
                raise InvalidInput(name, value, "must be a bool")
        return cls(token_budget=budget, keep=keep, trigger=trigger, low_water=float(low_water),
                   commit_mode=commit_mode, trim_state=trim_state, offload_tokens=offload,
                   keep_tool_results=kept_results, exclude_tools=frozenset(exclude_tools or ()) | OWN_TOOLS,
                   memory_message=memory_message, pinned_tokens=pinned, pinned_tools=frozenset(pinned_tools),
                   forget_on_remove=forget_on_remove, token_counter=token_counter)

    @property
    def keeps_fraction(self) -> bool:
        """True when `keep` is a share of the model's input limit (resolved per call, not by the engine)."""
        return self.keep is not None and self.keep[0] == "fraction"


def _check_choices(memory_message: Any, token_counter: Any) -> None:
    if memory_message not in ("human", "system"):
        raise InvalidInput("memory_message", memory_message, "must be 'human' or 'system'")
    if token_counter is not None and not callable(token_counter):
        raise InvalidInput("token_counter", token_counter, "must be a function of a list of messages → int")
    if token_counter is not None:  # tried once here, so a counter that cannot count fails now, not mid-run
        _try_counter(token_counter)


def _try_counter(counter: TokenCounter) -> None:
    """The counter on one message: `InvalidInput` when it cannot count — but a counter that asks its provider
    (`ChatAnthropic.get_num_tokens_from_messages`) and finds it unreachable now is not refused for an outage."""
    from workmem.nodes.models import is_transport_error

    try:
        counted(counter, [HumanMessage(content="workmem tries the token counter on one message")])
    except InvalidInput as exc:
        if exc.__cause__ is None or not is_transport_error(exc.__cause__):
            raise
        log.warning("the token counter could not be tried now (%s); it is used as given", exc.__cause__)


def _check_names(field: str, value: Any, kinds: tuple[type, ...]) -> None:
    if not isinstance(value, kinds) or not all(isinstance(t, str) for t in value):
        raise InvalidInput(field, value, "must be a list of tool names")


def counted(counter: TokenCounter, messages: list[BaseMessage]) -> int:
    """The caller's counter on `messages`, checked: a count that is not a non-negative int is `InvalidInput`."""
    if not messages:
        return 0
    try:
        count = counter(messages)
    except Exception as exc:  # the caller's code: its failure is named as the setting it came through
        raise InvalidInput("token_counter", counter, f"raised {type(exc).__name__}: {exc}") from exc
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidInput("token_counter", count, "must return a non-negative int")
    return count
