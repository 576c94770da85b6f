"""A storable form of a message workmem cannot store as it is (docs/hostile-input.md).

The engine's public entries refuse such a message with `InvalidInput`; an agent run must not stop on a tool
output or a model reply it did not choose, so its store step stores this form instead, with one WARNING. What it
repairs, and only that (a message invalid for another reason, an unknown role say, is left for validation):

- nesting deeper than the limit: every container below `FLAT_DEPTH` levels becomes its JSON text (a string in
  its place; a stored copy sent back in any shape stays far inside the limit);
- what JSON cannot hold: a lone surrogate in any string or key (a file name read with `surrogateescape`) is
  escaped as `\\udcxx` text, bytes become text the same way, a non-string key its `str`, NaN or infinity and an
  unknown object their `repr`.

The repaired message is of the caller's kind (a LangChain message stays one, a dict stays a dict) and records
what was done under `SAFE_FORM_META` in its `additional_kwargs` (LangChain) or `meta` (dicts), which storage keeps
in the stored message's meta. Pure and deterministic: the same message gives the same form, so a state that
still holds the original aligns with the stored form by id and fingerprint.
"""

from __future__ import annotations

import json
import math
from typing import Any

from workmem.state.messages import MAX_NESTING

SAFE_FORM_META = "workmem_safe_form"
CHECKPOINTED_FP = "checkpointed_fp"  # in the repair's record: the fingerprint of `as_checkpointed(original)`
FLAT_DEPTH = MAX_NESTING // 2  # containers deeper than this are stored as their JSON text
_LC_FIELDS = ("content", "additional_kwargs", "tool_calls", "invalid_tool_calls")  # as `check_nesting` walks them
_LC_TEXT_FIELDS = ("id", "name", "tool_call_id", "status")


def storable_form(message: Any, *, record: dict[str, Any] | None = None) -> tuple[Any, str | None]:
    """`(message in a storable form, note)`: `message` itself and None when it has nothing to repair; else a
    repaired copy (see the module doc) and a one-line note saying what changed, for the caller's WARNING
    (`record`: more to keep in the repair's record)."""
    return _repaired(message, _Fix(), record or {})


def as_checkpointed(message: Any) -> Any | None:
    """`message` as LangGraph's checkpoint serializer gives it back — each lone surrogate a `?` — else None
    (it has none). A state's copy after a checkpoint round trip is this, not the original: its fingerprint is
    recorded with the stored form (`CHECKPOINTED_FP`), so that copy is not taken for an edit."""
    fix = _Fix(surrogates="replace")
    replaced, _note = _repaired(message, fix, {})
    return replaced if fix.changes.get("surrogates") else None


def checkpointed_fingerprint(stored: dict[str, Any]) -> str | None:
    """The fingerprint recorded of a stored message's checkpointed original (`as_checkpointed`), else None."""
    meta = stored.get("meta") or {}
    kwargs = meta.get("additional_kwargs")  # a LangChain message's record, as storage keeps it
    record = meta.get(SAFE_FORM_META) or (kwargs.get(SAFE_FORM_META) if isinstance(kwargs, dict) else None)
    found = record.get(CHECKPOINTED_FP) if isinstance(record, dict) else None
    return found if isinstance(found, str) else None


def _repaired(message: Any, fix: _Fix, extra: dict[str, Any]) -> tuple[Any, str | None]:
    if isinstance(message, dict):
        repaired = fix.value(message, 1)
        if not fix.changes:
            return message, None
        _record(repaired, {**fix.record(), **extra})
        return repaired, fix.note()
    if not (isinstance(getattr(message, "type", None), str) and hasattr(message, "content")
            and callable(getattr(message, "model_copy", None))):
        return message, None
    update: dict[str, Any] = {}
    for name in _LC_FIELDS:
        value = getattr(message, name, None)
        fixed = fix.value(value, 1)
        if fixed is not value:
            update[name] = fixed
    for name in _LC_TEXT_FIELDS:
        value = getattr(message, name, None)
        if isinstance(value, str) and (fixed := fix.text(value)) is not value:
            update[name] = fixed
    if not fix.changes:
        return message, None
    kwargs = update.get("additional_kwargs", getattr(message, "additional_kwargs", None))
    update["additional_kwargs"] = {**(kwargs if isinstance(kwargs, dict) else {}),
                                   SAFE_FORM_META: {**fix.record(), **extra}}
    return message.model_copy(update=update), fix.note()


def _record(message: dict[str, Any], record: dict[str, Any]) -> None:
    """Put the repair record where normalisation keeps it: `meta` of a workmem or OpenAI-style dict, the
    `additional_kwargs` of LangChain's dict forms."""
    if "parts" in message or "role" in message:
        meta = message.get("meta")
        message["meta"] = {**(meta if isinstance(meta, dict) else {}), SAFE_FORM_META: record}
        return
    target = message
    if isinstance(message.get("data"), dict):
        target = message["data"] = dict(message["data"])
    kwargs = target.get("additional_kwargs")
    target["additional_kwargs"] = {**(kwargs if isinstance(kwargs, dict) else {}), SAFE_FORM_META: record}


class _Fix:
    """One repair pass: the changed copy of each value, and what was changed. `surrogates`: how a lone surrogate
    is written — `backslashreplace` (`\\udcxx` text, what is stored) or `replace` (`?`, as LangGraph's checkpoint
    serializer writes it)."""

    def __init__(self, surrogates: str = "backslashreplace") -> None:
        self.changes: dict[str, int] = {}
        self.deepest = 0
        self.surrogates = surrogates

    def value(self, value: Any, depth: int) -> Any:
        """`value` (at `depth` levels) repaired; the same object when nothing in it needed repair."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (dict, list, tuple)):
            if depth > FLAT_DEPTH:
                deepest = depth - 1 + _depth(value)
                if deepest > MAX_NESTING:  # deeper than the limit: this container goes as its JSON text
                    self.deepest = max(self.deepest, deepest)
                    self._count("flattened")
                    return self.text(json_text(value))
            return self._container(value, depth)
        if value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            self._count("not_json")
            return repr(value)
        if isinstance(value, (bytes, bytearray)):
            self._count("bytes")
            return self.text(bytes(value).decode("utf-8", "backslashreplace"))
        self._count("not_json")
        return self.text(repr(value))

    def _container(self, value: Any, depth: int) -> Any:
        # An iterative walk would be needed only past FLAT_DEPTH, where everything is flattened above.
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            changed = False
            for key, child in value.items():
                new_key = self.text(key) if isinstance(key, str) else self._key(key)
                new_child = self.value(child, depth + 1)
                changed |= new_key is not key or new_child is not child
                out[new_key] = new_child
            return out if changed else value
        items = [self.value(child, depth + 1) for child in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)

    def _key(self, key: Any) -> str:
        self._count("not_json")
        return self.text(str(key))

    def text(self, text: str) -> str:
        """`text` with each lone surrogate written the pass's way (the same object when it has none)."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            fixed = text.encode("utf-8", self.surrogates).decode("utf-8")
            self._count("surrogates", sum(1 for c in text if "\ud800" <= c <= "\udfff"))
            return fixed
        return text

    def _count(self, kind: str, n: int = 1) -> None:
        self.changes[kind] = self.changes.get(kind, 0) + n

    def record(self) -> dict[str, Any]:
        """What the stored meta says of the repair."""
        return {**self.changes, **({"depth": self.deepest} if self.deepest else {})}

    def note(self) -> str:
        """One line for the caller's WARNING."""
        said = []
        if "flattened" in self.changes:
            said.append(f"content nested {self.deepest} levels deep (the limit is {MAX_NESTING}) is stored with "
                        f"its parts below {FLAT_DEPTH} levels as JSON text")
        if "surrogates" in self.changes:
            said.append(f"{self.changes['surrogates']} lone surrogate(s) escaped as \\udcxx text")
        if "bytes" in self.changes:
            said.append("bytes stored as text")
        if "not_json" in self.changes:
            said.append(f"{self.changes['not_json']} value(s) JSON cannot hold stored as text")
        return "; ".join(said)




def _depth(value: Any) -> int:
    """Levels of dicts and lists in `value` (1 for a flat one), iteratively: no `RecursionError` at any depth."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return deepest


def json_text(value: Any) -> str:
    """`value` as compact JSON text, written iteratively (any depth); what JSON cannot hold is written as the
    string of its `repr` (a lone surrogate stays in the text, for the caller to escape)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, _Token):
            out.append(node.text)
        elif isinstance(node, dict):
            out.append("{")
            items: list[Any] = [_Token("}")]
            for i, (key, child) in enumerate(reversed(list(node.items()))):
                items.append(child)
                items.append(_Token(_scalar(key if isinstance(key, str) else str(key)) + ":"))
                if i < len(node) - 1:
                    items.append(_Token(","))
            stack.extend(items)
        elif isinstance(node, (list, tuple)):
            out.append("[")
            items = [_Token("]")]
            for i, child in enumerate(reversed(node)):
                items.append(child)
                if i < len(node) - 1:
                    items.append(_Token(","))
            stack.extend(items)
        else:
            out.append(_scalar(node))
    return "".join(out)


class _Token:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _scalar(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (bytes, bytearray)):
        return json.dumps(bytes(value).decode("utf-8", "backslashreplace"), ensure_ascii=False)
    return json.dumps(repr(value), ensure_ascii=False)
