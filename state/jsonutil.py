"""Compact UTF-8 JSON for the hot path: orjson when installed (it ships with langsmith, a dependency
of langchain-core), else the standard library. Both refuse what is not JSON: lone surrogates,
non-string keys, NaN and infinity, unknown types."""

from __future__ import annotations

import json
import math
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - PyPy or a trimmed environment
    orjson = None  # type: ignore[assignment]

_OPTIONS = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS) if orjson else 0


def dumps(obj: Any) -> bytes:
    """`obj` as compact UTF-8 JSON bytes (key order kept); TypeError or ValueError when it is not JSON."""
    if orjson is None:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    try:
        out = orjson.dumps(obj, option=_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from exc
    if b"null" in out and _has_nonfinite(obj):  # orjson writes NaN and infinity as null
        raise ValueError("NaN and infinity are not JSON")
    return out


def _has_nonfinite(obj: Any) -> bool:
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_has_nonfinite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_nonfinite(v) for v in obj)
    return False
