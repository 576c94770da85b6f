"""The one place public entries check their arguments: typed errors naming the field.

The engine, the CLI and the tools call these at the boundary; the layers below trust what they get
and keep only their invariants.
"""

from __future__ import annotations

from typing import Any

from workmem.state.errors import InvalidInput


def require_int(field: str, value: Any, *, min: int | None = None, max: int | None = None) -> int:  # noqa: A002
    """`value` if it is an int (not a bool) within [min, max], else `InvalidInput(field)`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, value, "must be an integer")
    if min is not None and value < min:
        raise InvalidInput(field, value, f"must be >= {min}" if max is None else f"must be between {min} and {max}")
    if max is not None and value > max:
        raise InvalidInput(field, value, f"must be <= {max}" if min is None else f"must be between {min} and {max}")
    return value


def require_bool(field: str, value: Any) -> bool:
    """`value` if it is a bool, else `InvalidInput(field)`."""
    if not isinstance(value, bool):
        raise InvalidInput(field, value, "must be a bool")
    return value


def require_text(field: str, value: Any) -> str:
    """A non-blank string, else `InvalidInput(field)`."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, value, "must be a non-empty string")
    return value


def require_list(field: str, value: Any) -> list[Any]:
    """A list or tuple (of messages, say) as a list; a str, bytes or dict is refused."""
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, (list, tuple)):
        raise InvalidInput(field, value, "must be a list")
    return list(value)
