"""Which model a commit calls, how its one tool is forced, and which of its failures are worth a retry."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable

from nodes.extractive import EXTRACTIVE_MODEL_NAME, ExtractiveChatModel
from state.errors import InvalidInput

ENV_MODEL = "WORKMEM_MODEL"
OPENAI_PREFIX = "openai:"
PLACEHOLDER_API_KEY = "not-needed"
MODEL_TIMEOUT_S = 60

# Exception class names (anywhere in the MRO) that mean "the endpoint did not answer properly, try
# again": the openai SDK's (and SDKs modelled on it), httpx/httpx2 transport errors, builtins.
_TRANSPORT_NAMES = frozenset(
    "APIConnectionError APITimeoutError RateLimitError InternalServerError ServiceUnavailableError "
    "OverloadedError TransportError TimeoutException ConnectionError TimeoutError".split()
)
_RETRYABLE_STATUS = frozenset({408, 429})


def resolve_model(
    model: BaseChatModel | None = None, *, env: Mapping[str, str] = os.environ
) -> BaseChatModel:
    """The model to call: `model` if given, else `WORKMEM_MODEL` (`openai:<name>` or the extractive one)."""
    if model is not None:
        return model
    spec = (env.get(ENV_MODEL) or "").strip()
    if spec in ("", "extractive", EXTRACTIVE_MODEL_NAME):
        return ExtractiveChatModel()
    if spec.startswith(OPENAI_PREFIX) and spec[len(OPENAI_PREFIX) :].strip():
        return _openai_model(spec[len(OPENAI_PREFIX) :].strip(), env)
    raise InvalidInput(ENV_MODEL, spec, "expected empty, 'extractive' or 'openai:<model>'")


def _openai_model(name: str, env: Mapping[str, str]) -> BaseChatModel:
    from langchain_openai import ChatOpenAI  # lazy: importing the OpenAI stack costs seconds

    base_url = (env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_BASE") or "").strip() or None
    api_key = (env.get("OPENAI_API_KEY") or "").strip() or None
    if api_key is None and base_url is not None:
        api_key = (
            PLACEHOLDER_API_KEY  # local OpenAI-compatible servers ignore the key but the client wants one
        )
    kwargs: dict[str, Any] = {"model": name, "temperature": 0, "max_retries": 0, "timeout": MODEL_TIMEOUT_S}
    if base_url is not None:
        kwargs["base_url"] = base_url
    if api_key is not None:
        kwargs["api_key"] = api_key
    return ChatOpenAI(**kwargs)


def model_name(model: Any) -> str:
    """A short name for archives and logs: `openai:<model>`, `workmem-extractive`, or the model's own name."""
    while hasattr(model, "bound") and not isinstance(model, BaseChatModel):
        model = model.bound  # unwrap RunnableBinding / configurable wrappers
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    if type(model).__name__ in ("ChatOpenAI", "AzureChatOpenAI") and isinstance(name, str):
        return f"{OPENAI_PREFIX}{name}"
    if isinstance(name, str) and name:
        return name
    llm_type = getattr(model, "_llm_type", None)
    return llm_type if isinstance(llm_type, str) and llm_type else type(model).__name__


def is_transport_error(exc: BaseException) -> bool:
    """True for failures to reach or hear from the model (connection, timeout, rate limit, 5xx): retry.

    False for everything about the answer itself — JSON, pydantic and parsing errors, bad requests,
    authentication — which no retry can fix. Matched by class name so no SDK has to be imported.
    """
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _TRANSPORT_NAMES:
        return True
    status = getattr(exc, "status_code", None)
    if "APIStatusError" in names and isinstance(status, int):
        return status in _RETRYABLE_STATUS or status >= 500
    return False


def is_api_refusal(exc: BaseException) -> bool:
    """True when the model API answered with a non-retryable error status (bad key, unknown model,
    request refused): a configuration problem to report, not malformed output and not worth a retry."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "APIStatusError" in names and not is_transport_error(exc)


def bind_commit_tool(model: Any, tool: dict[str, Any]) -> Runnable[LanguageModelInput, AIMessage]:
    """Bind the one commit tool and force it; models without `tool_choice` get the tool unforced."""
    name = tool.get("function", {}).get("name") or tool.get("name")
    try:
        return model.bind_tools([tool], tool_choice=name)
    except TypeError:  # bind_tools() without a tool_choice parameter
        return model.bind_tools([tool])
    except NotImplementedError:  # no tool calling at all: the prompt asks for a fenced JSON answer
        return model
