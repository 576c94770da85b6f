"""Which model a commit calls, how its one tool is forced, and which of its failures are worth a retry."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable

from workmem.nodes.extractive.model import EXTRACTIVE_MODEL_NAME, ExtractiveChatModel
from workmem.state.errors import InvalidInput, ModelUnavailable
from workmem.state.redact import describe_error

ENV_MODEL = "WORKMEM_MODEL"
ENV_MODEL_KWARGS = "WORKMEM_MODEL_KWARGS"
EXTRACTIVE_SPECS = ("", "extractive", EXTRACTIVE_MODEL_NAME)
PLACEHOLDER_API_KEY = "not-needed"
MODEL_TIMEOUT_S = 60
# The variables a provider reads its key from, named when building its model fails.
KEY_VARIABLES = {
    "openai": "OPENAI_API_KEY (or OPENAI_BASE_URL for a local OpenAI-compatible server)",
    "azure_openai": "AZURE_OPENAI_API_KEY and AZURE_OPENAI_ENDPOINT",
    "anthropic": "ANTHROPIC_API_KEY",
    "google_genai": "GOOGLE_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
    "fireworks": "FIREWORKS_API_KEY",
    "together": "TOGETHER_API_KEY",
    "cohere": "COHERE_API_KEY",
}

# Exception class names (anywhere in the MRO) that mean "the endpoint did not answer properly, try
# again": the openai SDK's (and SDKs modelled on it), httpx/httpx2 transport errors, builtins.
_TRANSPORT_NAMES = frozenset(
    "APIConnectionError APITimeoutError RateLimitError InternalServerError ServiceUnavailableError "
    "OverloadedError TransportError TimeoutException ConnectionError TimeoutError".split()
)
_RETRYABLE_STATUS = frozenset({408, 429})
ModelSpec = BaseChatModel | str


def known_providers() -> frozenset[str] | None:
    """Provider names `init_chat_model` knows (None when this langchain version does not say)."""
    try:
        from langchain.chat_models.base import _BUILTIN_PROVIDERS
    except ImportError:  # pragma: no cover - a langchain without the registry: accept any provider
        return None
    return frozenset(_BUILTIN_PROVIDERS)


def check_model(model: Any, *, field: str = "model") -> ModelSpec:
    """What `model=` (or `WORKMEM_MODEL`) may be, checked without building anything: a `BaseChatModel`,
    `'extractive'`, a `'<provider>:<model>'` string of a provider `init_chat_model` knows, or a bare model name
    it infers the provider of (returned with the provider: `'gpt-4.1-mini'` → `'openai:gpt-4.1-mini'`)."""
    if isinstance(model, BaseChatModel):
        return model
    if not isinstance(model, str):
        raise InvalidInput(field, model, "must be a LangChain chat model or a '<provider>:<model>' string")
    spec = model.strip()
    if spec in EXTRACTIVE_SPECS:
        return "extractive"
    provider, sep, name = spec.partition(":")
    known = known_providers()
    if not sep or (known is not None and provider not in known):
        inferred = infer_provider(spec)  # a bare name init_chat_model knows the provider of: 'gpt-4.1-mini'
        if inferred is not None:
            return f"{inferred}:{spec}"
    if not sep or not provider or not name.strip():
        raise InvalidInput(field, model, "expected '<provider>:<model>' (e.g. 'openai:gpt-4.1-mini'), a model name "
                                         "init_chat_model infers the provider of ('gpt-4.1-mini'), or 'extractive'")
    if known is not None and provider not in known:
        raise InvalidInput(field, model,
                           f"unknown provider {provider!r}; init_chat_model knows {', '.join(sorted(known))}")
    if name.lstrip().startswith(":") or not name.isprintable():  # 'openai::x', a NUL: a typo, not a model
        raise InvalidInput(field, model, "the model name after '<provider>:' must not start with ':' or hold "
                                         "control characters")
    return f"{provider}:{name.strip()}"


def infer_provider(name: str) -> str | None:
    """The provider `init_chat_model` would infer for a bare model name (`gpt-…` → openai, `claude…` →
    anthropic, …), or None."""
    try:
        from langchain.chat_models.base import _attempt_infer_model_provider
    except ImportError:  # pragma: no cover - a langchain without inference: a provider must be given
        return None
    return _attempt_infer_model_provider(name)


def model_spec(model: Any = None, *, env: Mapping[str, str] = os.environ) -> ModelSpec:
    """The checked spec of `model`, else of `WORKMEM_MODEL`, else the extractive model."""
    if model is not None:
        return check_model(model)
    return check_model(env.get(ENV_MODEL) or "", field=ENV_MODEL)


def build_model(spec: ModelSpec, *, env: Mapping[str, str] = os.environ,
                model_kwargs: Mapping[str, Any] | None = None) -> BaseChatModel:
    """The chat model of a checked spec; a provider that cannot be built raises `ModelUnavailable`
    naming the missing package or key variables. Every provider gets temperature 0, `max_retries=0`
    and `timeout=60` where its class accepts them (the commit graph owns retries); `model_kwargs` (else
    `WORKMEM_MODEL_KWARGS`, a JSON object) are passed on top, e.g. `{"temperature": None}` for a model that
    refuses it."""
    if isinstance(spec, BaseChatModel):
        return spec
    if spec == "extractive":
        return ExtractiveChatModel()
    extra = dict(model_kwargs_setting(model_kwargs, env=env))
    provider, _, name = spec.partition(":")
    try:
        if provider == "openai":
            return _openai_model(name, env, extra)
        from langchain.chat_models import init_chat_model

        model = init_chat_model(spec, **(_supported_settings(provider) | extra))
    except ImportError as exc:
        raise ModelUnavailable(spec, f"its provider package is missing (pip install {_package_of(provider)}): "
                                     f"{exc}") from exc
    except Exception as exc:  # the provider's client refusing to start: a missing key, or a keyword it refuses
        variables = KEY_VARIABLES.get(provider, "the provider's API key variable")
        also = f", and are the model_kwargs {sorted(extra)} ones it takes" if extra else ""
        raise ModelUnavailable(spec, f"its client could not be built ({describe_error(exc, 200)}): is {variables} "
                                     f"set{also}?") from exc
    if provider == "anthropic" and _lacks_key(model) and not _anthropic_elsewhere(extra, env):
        raise ModelUnavailable(spec, f"set {KEY_VARIABLES[provider]}")  # it would start, and fail every call
    return model


def _anthropic_elsewhere(extra: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    """True when a keyless Anthropic client authenticates another way: an auth header (a keyword or the SDK's
    variables) or a gateway URL other than Anthropic's own (the gateway adds the key)."""
    headers = extra.get("default_headers") or {}
    if isinstance(headers, Mapping) and any(str(k).lower() in ("authorization", "x-api-key") for k in headers):
        return True
    if env.get("ANTHROPIC_AUTH_TOKEN") or env.get("ANTHROPIC_CUSTOM_HEADERS"):
        return True
    url = (extra.get("base_url") or extra.get("anthropic_api_url") or env.get("ANTHROPIC_API_URL")
           or env.get("ANTHROPIC_BASE_URL") or "")
    return bool(url) and "api.anthropic.com" not in str(url)


def _package_of(provider: str) -> str:
    """The pip package of a LangChain provider (`bedrock` → langchain-aws), from LangChain's own table."""
    from langchain.chat_models.base import _BUILTIN_PROVIDERS

    entry = _BUILTIN_PROVIDERS.get(provider)
    return entry[0].split(".")[0].replace("_", "-") if entry else "langchain-" + provider.split("_")[0]


def _lacks_key(model: Any) -> bool:
    """True when the built client has API key fields and every one is empty (its provider's variable unset)."""
    keys = [getattr(model, name, None) for name in getattr(type(model), "model_fields", {}) if name.endswith("api_key")]
    values = [k.get_secret_value() if hasattr(k, "get_secret_value") else k for k in keys]
    return bool(keys) and not any(values)


def model_kwargs_setting(value: Any = None, *, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Checked extra keyword arguments for a string model: `value`, else `WORKMEM_MODEL_KWARGS` (JSON)."""
    field = "model_kwargs"
    if value is None:
        raw = (env.get(ENV_MODEL_KWARGS) or "").strip()
        if not raw:
            return {}
        field = ENV_MODEL_KWARGS
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(field, raw, f"must be a JSON object ({exc})") from None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise InvalidInput(field, value, "must be a mapping of keyword names to values, e.g. {'temperature': None}")
    return dict(value)


def resolve_model(model: Any = None, *, env: Mapping[str, str] = os.environ) -> BaseChatModel:
    """`build_model(model_spec(model))`: the model to call now."""
    return build_model(model_spec(model, env=env), env=env)


def _supported_settings(provider: str) -> dict[str, Any]:
    """temperature 0, max_retries 0 and timeout 60, for the fields the provider's class has."""
    from langchain.chat_models.base import _BUILTIN_PROVIDERS

    wanted = {"temperature": 0, "max_retries": 0, "timeout": MODEL_TIMEOUT_S}
    entry = _BUILTIN_PROVIDERS.get(provider)
    if entry is None:
        return wanted
    module = __import__(entry[0], fromlist=[entry[1]])
    fields = getattr(getattr(module, entry[1]), "model_fields", {})
    names = set(fields) | {f.alias for f in fields.values() if getattr(f, "alias", None)}
    return {key: value for key, value in wanted.items() if key in names}


def _openai_model(name: str, env: Mapping[str, str], extra: dict[str, Any]) -> BaseChatModel:
    from langchain_openai import ChatOpenAI  # lazy: importing the OpenAI stack costs seconds

    base_url = (env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_BASE") or "").strip() or None
    api_key = (env.get("OPENAI_API_KEY") or "").strip() or None
    if api_key is None and base_url is not None:
        api_key = PLACEHOLDER_API_KEY  # local OpenAI-compatible servers ignore the key but the client wants one
    kwargs: dict[str, Any] = {"model": name, "temperature": 0, "max_retries": 0, "timeout": MODEL_TIMEOUT_S}
    if base_url is not None:
        kwargs["base_url"] = base_url
    if api_key is not None:
        kwargs["api_key"] = api_key
    return ChatOpenAI(**(kwargs | extra))


class LazyModel:
    """A checked model spec, built on first use (the first commit) and then reused; thread-safe."""

    def __init__(self, spec: ModelSpec, model_kwargs: Mapping[str, Any] | None = None) -> None:
        self.spec = spec
        self.model_kwargs = model_kwargs
        self._model: BaseChatModel | None = spec if isinstance(spec, BaseChatModel) else None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """`provider:model`, `workmem-extractive`, or the given model's own name."""
        if isinstance(self.spec, BaseChatModel):
            return model_name(self.spec)
        return EXTRACTIVE_MODEL_NAME if self.spec == "extractive" else self.spec

    @property
    def reads_for_free(self) -> bool:
        """True for a model no provider bills — workmem's extractive model (`reads_for_free` on its class)."""
        return self.spec == "extractive" or getattr(self.spec, "reads_for_free", False) is True

    def get(self) -> BaseChatModel:
        """The built model; `ModelUnavailable` when it cannot be built (retried on the next call)."""
        with self._lock:
            if self._model is None:
                self._model = build_model(self.spec, model_kwargs=self.model_kwargs)
            return self._model


def model_name(model: Any) -> str:
    """A short name for archives and logs: `openai:<model>`, `workmem-extractive`, or the model's own name."""
    while hasattr(model, "bound") and not isinstance(model, BaseChatModel):
        model = model.bound  # unwrap RunnableBinding / configurable wrappers
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    if type(model).__name__ in ("ChatOpenAI", "AzureChatOpenAI") and isinstance(name, str):
        return f"openai:{name}"
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
