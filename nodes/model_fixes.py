"""Fixes for known permanent refusals of a model API, learnt once and kept for the engine's life.

Two refusals are common and curable: a grammar engine (vLLM, llama.cpp) rejecting `$ref` / `$defs` in the
commit tool's schema → send the tool with the op object written out per section; a model rejecting a
sampling parameter (reasoning models refuse `temperature`) → send the request without it. `generate`
retries a refused call once when `learn` finds a new fix, and keeps the fix only when that retry gets past
the refusal; every later call of the engine gets it from the start (`apply`, `tool_schema`), and a call sent
before another commit learnt it retries with it when refused (`since`). The fixes in
effect are recorded by name in the archive (`model.fixes`).
"""

from __future__ import annotations

import re
import threading
from typing import Any

INLINE_SCHEMA_FIX = "inline_tool_schema"
SAMPLING_PARAMETERS = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty", "seed")
_SCHEMA_REFUSAL = re.compile(r"\$ref|\$defs")
_PARAMETER = re.compile(r"\b(" + "|".join(SAMPLING_PARAMETERS) + r")\b", re.IGNORECASE)
# What a refusal of a parameter says (OpenAI, vLLM, Anthropic, Gemini wordings), so a 400 that merely quotes
# the request is not taken for one.
_REFUSAL_WORDS = re.compile(r"\b(?:unsupported|not supported|does not support|unrecognized|unknown|not allowed|"
                            r"not permitted|extra (?:inputs|fields)|invalid)\b", re.IGNORECASE)


def without_fix(parameter: str) -> str:
    """The recorded name of the fix that drops `parameter` from every request."""
    return f"without_{parameter}"


class ModelFixes:
    """The refusal fixes one engine has learnt; shared by its commits (thread-safe)."""

    def __init__(self) -> None:
        self.inline_schema = False
        self.dropped: set[str] = set()
        self._lock = threading.Lock()
        self._patched: dict[int, tuple[Any, frozenset[str], Any]] = {}
        self._learnt: dict[str, list[str]] = {}
        self._useless: set[str] = set()  # fixes (parameters, the schema) whose retry was refused too: not again

    def names(self) -> list[str]:
        """The fixes in effect, by recorded name."""
        with self._lock:
            return ([INLINE_SCHEMA_FIX] if self.inline_schema else []) + [without_fix(p) for p in sorted(self.dropped)]

    def tool_schema(self, configured: str) -> str:
        """`inline` once a `$ref` refusal was seen, else the configured schema."""
        return "inline" if self.inline_schema else configured

    def learn(self, error: str, model: Any, configured_schema: str, param: str | None = None) -> str | None:
        """A new fix for the refusal `error` (now in effect), named; None when none applies or it was tried.
        `param` is the parameter the API named (OpenAI errors carry one); else every sampling parameter the
        refusal names beside words of refusal — all dropped in one retry. `forget(name)` takes a fix back when
        its retry was refused too."""
        with self._lock:
            if (_SCHEMA_REFUSAL.search(error) and configured_schema != "inline" and not self.inline_schema
                    and INLINE_SCHEMA_FIX not in self._useless):
                self.inline_schema = True
                return INLINE_SCHEMA_FIX
            named = [param.lower()] if isinstance(param, str) and param.lower() in SAMPLING_PARAMETERS else (
                [m.group(1).lower() for m in _PARAMETER.finditer(error)] if _REFUSAL_WORDS.search(error) else [])
            wanted = [p for p in dict.fromkeys(named) if p not in self.dropped | self._useless
                      and getattr(model, p, None) is not None]
            if not wanted:
                return None
            self.dropped.update(wanted)
            name = "+".join(without_fix(p) for p in sorted(wanted))
            self._learnt[name] = wanted
            return name

    def since(self, sent: list[str]) -> str | None:
        """The fixes in effect now that a request sent with the fixes `sent` (`names()` when it was sent) lacked,
        named; None when there are none. A commit refused for what another commit of the engine has fixed since
        retries with the fix instead of degrading (it is that commit's fix: the retry never takes it back)."""
        newer = [name for name in self.names() if name not in sent]
        return "+".join(newer) if newer else None

    def forget(self, name: str) -> None:
        """Take back a fix whose retry did not get past the refusal (nothing is kept that fixed nothing)."""
        with self._lock:
            if name == INLINE_SCHEMA_FIX:
                self.inline_schema = False
                self._useless.add(name)
            params = self._learnt.pop(name, [])
            self.dropped.difference_update(params)
            self._useless.update(params)

    def apply(self, model: Any) -> Any:
        """`model` without the dropped sampling parameters (a copy, made once per model and set of fixes)."""
        with self._lock:
            dropped = frozenset(p for p in self.dropped if getattr(model, p, None) is not None)
            if not dropped or not hasattr(model, "model_copy"):
                return model
            cached = self._patched.get(id(model))
            if cached is not None and cached[0] is model and cached[1] == dropped:
                return cached[2]
            patched = model.model_copy(update=dict.fromkeys(dropped))
            self._patched[id(model)] = (model, dropped, patched)
            return patched
