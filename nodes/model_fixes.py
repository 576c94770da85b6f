"""Fixes for known permanent refusals of a model API, learnt once and kept for the engine's life.

Two refusals are common and curable: a grammar engine (vLLM, llama.cpp) rejecting `$ref` / `$defs` in the
commit tool's schema → send the tool with the op object written out per section; a model rejecting a
sampling parameter (reasoning models refuse `temperature`) → send the request without it. `generate`
retries a refused call once when `learn` finds a new fix; every later call of the engine gets it from
the start (`apply`, `tool_schema`). Each fix has a short name recorded in the archive (`model.fixes`).
"""

from __future__ import annotations

import re
import threading
from typing import Any

INLINE_SCHEMA_FIX = "inline_tool_schema"
SAMPLING_PARAMETERS = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty", "seed")
_SCHEMA_REFUSAL = re.compile(r"\$ref|\$defs|\bdefinitions\b", re.IGNORECASE)
_PARAMETER_REFUSAL = re.compile(r"\b(" + "|".join(SAMPLING_PARAMETERS) + r")\b", re.IGNORECASE)


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

    def names(self) -> list[str]:
        """The fixes in effect, by recorded name."""
        with self._lock:
            return ([INLINE_SCHEMA_FIX] if self.inline_schema else []) + [without_fix(p) for p in sorted(self.dropped)]

    def tool_schema(self, configured: str) -> str:
        """`inline` once a `$ref` refusal was seen, else the configured schema."""
        return "inline" if self.inline_schema else configured

    def learn(self, error: str, model: Any, configured_schema: str) -> str | None:
        """The name of a new fix for the refusal `error` (now in effect), or None when none applies or it
        was tried already — a second refusal of the same kind is then reported, not retried again."""
        with self._lock:
            if _SCHEMA_REFUSAL.search(error) and configured_schema != "inline" and not self.inline_schema:
                self.inline_schema = True
                return INLINE_SCHEMA_FIX
            for found in _PARAMETER_REFUSAL.finditer(error):
                parameter = found.group(1).lower()
                if parameter not in self.dropped and getattr(model, parameter, None) is not None:
                    self.dropped.add(parameter)
                    return without_fix(parameter)
            return None

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
