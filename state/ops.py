"""The model output contract: the two hand-written tool schemas, the op model and tolerant parsers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from workmem.state.memory import SECTION_KEYS, SECTIONS, strip_own_header

UPDATE_TOOL_NAME = "update_working_memory"
CREATE_TOOL_NAME = "create_working_memory"
KEEP: dict[str, Any] = {"op": "KEEP"}
OP_NAMES = ("KEEP", "UPDATE", "APPEND")

_SECTION_HINTS: dict[str, str] = {
    "Session Title": "Short, stable title.",
    "Current State": "Where the work stands, 2-5 sentences.",
    "Task & Goals": "Goals still open.",
    "Key Facts & Decisions": "Facts, decisions; names, dates, exact values.",
    "Files & Context": "Files, paths, context.",
    "Errors & Corrections": "Errors and corrections; append-only.",
    "Open Issues": "Open questions, TODOs; mark done ones [resolved].",
}
OP_REF = "#/$defs/op"


def op_schema() -> dict[str, Any]:
    """The one op object: `op` is KEEP, UPDATE or APPEND; UPDATE needs `content`, APPEND `items`
    (enforced after parsing, by `SectionOp`)."""
    return {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": list(OP_NAMES)},
            "content": {"type": "string"},
            "items": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["op"],
        "additionalProperties": False,
    }


def _tool(name: str, description: str, section_schema: Callable[[str], dict[str, Any]],
          defs: dict[str, Any] | None = None) -> dict[str, Any]:
    sections = {
        "type": "object",
        "properties": {section: section_schema(section) for section in SECTIONS},
        "required": list(SECTIONS),
        "additionalProperties": False,
    }
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"sections": sections},
        "required": ["sections"],
        "additionalProperties": False,
    }
    if defs:
        parameters["$defs"] = defs
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_UPDATE_DESCRIPTION = ("Per section: KEEP (unchanged), APPEND items (new bullets, no markers) or UPDATE content "
                       "(whole new body, no header). Prefer KEEP, then APPEND.")

UPDATE_TOOL: dict[str, Any] = _tool(UPDATE_TOOL_NAME, _UPDATE_DESCRIPTION, lambda section: {"$ref": OP_REF},
                                    defs={"op": op_schema()})
"""The update tool as sent by default: the op object once under `$defs`, a `$ref` per section."""

UPDATE_TOOL_INLINE: dict[str, Any] = _tool(UPDATE_TOOL_NAME, _UPDATE_DESCRIPTION, lambda section: op_schema())
"""The same tool with the op object written out per section, for servers whose grammar engines reject `$ref`."""

CREATE_TOOL: dict[str, Any] = _tool(
    CREATE_TOOL_NAME,
    "Create the working memory: the body of each section (no headers).",
    lambda section: {"type": "string", "description": _SECTION_HINTS[section]},
)


def update_tool(inline: bool = False) -> dict[str, Any]:
    """The update tool to bind: with `$ref` (default) or inlined."""
    return UPDATE_TOOL_INLINE if inline else UPDATE_TOOL


_NEEDS = {"UPDATE": "content: input should be a valid string", "APPEND": "items: input should be a valid list"}


class SectionOp(BaseModel):
    """One section's op as the schema allows it, with what the schema cannot say: UPDATE needs `content`,
    APPEND needs `items`; a field the op does not use is dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: Literal["KEEP", "UPDATE", "APPEND"]
    content: str | None = None
    items: list[str] | None = None

    @model_validator(mode="after")
    def _fields_of_the_op(self) -> SectionOp:
        if self.op == "UPDATE" and self.content is None:
            raise ValueError(_NEEDS["UPDATE"])
        if self.op == "APPEND" and self.items is None:
            raise ValueError(_NEEDS["APPEND"])
        keep = {"UPDATE": "content", "APPEND": "items"}.get(self.op)
        for name in ("content", "items"):
            if name != keep and getattr(self, name) is not None:
                object.__setattr__(self, name, None)
        return self

    def canonical(self) -> dict[str, Any]:
        """`{"op": "KEEP"}`, `{"op": "UPDATE", "content": …}` or `{"op": "APPEND", "items": […]}`."""
        return self.model_dump(exclude_none=True)


@dataclass
class ParsedUpdate:
    """A tolerant reading of update arguments: all seven ops, the sections given a usable op, problems."""

    ops: dict[str, dict[str, Any]]
    present: tuple[str, ...] = ()
    issues: list[str] = field(default_factory=list)
    ok: bool = True


@dataclass
class ParsedCreate:
    """A tolerant reading of create arguments: seven bodies (None when unusable) and problems."""

    sections: dict[str, str] | None
    issues: list[str] = field(default_factory=list)
    ok: bool = True


def _alias_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("&", "and"))


_ALIASES: dict[str, str] = {_alias_key(name): name for name in SECTIONS} | {
    _alias_key(key): name for name, key in SECTION_KEYS.items()
}


def resolve_section_name(key: object) -> str | None:
    """Map a key to its section name: exact, or up to case, `&`/`and`, spaces and underscores."""
    if not isinstance(key, str):
        return None
    if key in SECTIONS:
        return key
    return _ALIASES.get(_alias_key(key))


def _short(value: object, limit: int = 40) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def canonical_op(value: object) -> tuple[dict[str, Any], str | None]:
    """Turn one section value into a canonical op dict; anything unusable is KEEP plus the reason."""
    op, issue, _ = _read_op(value)
    return op, issue


def _read_op(value: object) -> tuple[dict[str, Any], str | None, bool]:
    """(canonical op, issue, usable): `usable` is False when the value was junk and fell back to KEEP."""
    if not isinstance(value, Mapping):
        return dict(KEEP), f"not an object ({_short(value)}) -> KEEP", False
    op = value.get("op")
    name = op.strip().upper() if isinstance(op, str) else op
    if name not in OP_NAMES:
        return dict(KEEP), f"unknown op {_short(op)} -> KEEP", False
    issue = None
    candidate: dict[str, Any] = {"op": name}
    if name == "UPDATE":
        candidate["content"] = value.get("content")
    elif name == "APPEND":
        items = value.get("items")
        if isinstance(items, list):
            kept = [item for item in items if isinstance(item, str)]
            if len(kept) < len(items):
                if not kept:
                    return dict(KEEP), "APPEND has no string items -> KEEP", False
                issue = f"{len(items) - len(kept)} non-string APPEND item(s) dropped"
            items = kept
        candidate["items"] = items
    try:
        return SectionOp.model_validate(candidate).canonical(), issue, True
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        text = first["msg"].lower().removeprefix("value error, ")
        return dict(KEEP), f"{name} {where + ': ' if where else ''}{text} -> KEEP", False


def _load_object(raw: object) -> tuple[object, str | None]:
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
            if isinstance(raw, str):  # arguments encoded twice
                raw = json.loads(raw)
        except (ValueError, RecursionError) as err:
            return None, f"arguments are not valid JSON: {err}"
    if raw is None:
        return None, "arguments are null"
    if not isinstance(raw, Mapping):
        return None, f"arguments are not an object ({type(raw).__name__})"
    if not raw:
        return None, "arguments are an empty object"
    return raw, None


def _section_mapping(args: Mapping[Any, Any]) -> tuple[Mapping[Any, Any], list[str]]:
    """Unwrap `sections` when it holds an object (or a JSON string of one); else use the top level."""
    wrapped = args.get("sections")
    if isinstance(wrapped, str):
        try:
            wrapped = json.loads(wrapped)
        except (ValueError, RecursionError):
            return args, ["'sections' is an unparseable string; reading the top level"]
    if isinstance(wrapped, Mapping):
        extra = [key for key in args if key != "sections"]
        return wrapped, ([f"ignored top-level keys {extra}"] if extra else [])
    return args, []


def _by_section(mapping: Mapping[Any, Any]) -> tuple[dict[str, object], list[str]]:
    found: dict[str, object] = {}
    issues = []
    for key, value in mapping.items():
        name = resolve_section_name(key)
        if name is None:
            issues.append(f"unknown section {_short(key)} ignored")
        elif name in found:
            issues.append(f"{name}: given twice, first kept")
        else:
            if key != name:
                issues.append(f"section {_short(key)} read as {name!r}")
            found[name] = value
    return found, issues


def canonical_ops(ops: object) -> dict[str, dict[str, Any]]:
    """All seven canonical ops from any value (wrapped or bare mapping); junk of any kind means KEEP."""
    if not isinstance(ops, Mapping):
        return {name: dict(KEEP) for name in SECTIONS}
    given, _ = _by_section(_section_mapping(ops)[0])
    return {name: canonical_op(given[name])[0] if name in given else dict(KEEP) for name in SECTIONS}


def parse_update_args(raw: object) -> ParsedUpdate:
    """Read update-tool arguments (dict or JSON string) tolerantly; problems are returned as data."""
    args, problem = _load_object(raw)
    all_keep = {name: dict(KEEP) for name in SECTIONS}
    if args is None:
        return ParsedUpdate(ops=all_keep, issues=[problem or "no arguments"], ok=False)
    mapping, issues = _section_mapping(args)
    given, more = _by_section(mapping)
    issues += more
    if not given:
        return ParsedUpdate(ops=all_keep, issues=issues + ["no section ops found"], ok=False)
    ops = {}
    present = []
    for name in SECTIONS:
        if name not in given:
            ops[name] = dict(KEEP)
            issues.append(f"{name}: missing -> KEEP")
            continue
        ops[name], issue, usable = _read_op(given[name])
        if issue:
            issues.append(f"{name}: {issue}")
        if usable:
            present.append(name)
    if not present:
        return ParsedUpdate(ops=ops, issues=issues + ["no usable section op"], ok=False)
    return ParsedUpdate(ops=ops, present=tuple(present), issues=issues, ok=True)


def parse_create_args(raw: object) -> ParsedCreate:
    """Read create-tool arguments tolerantly: missing or non-string bodies become '' and are reported."""
    args, problem = _load_object(raw)
    if args is None:
        return ParsedCreate(sections=None, issues=[problem or "no arguments"], ok=False)
    mapping, issues = _section_mapping(args)
    given, more = _by_section(mapping)
    issues += more
    sections = {}
    for name in SECTIONS:
        value = given.get(name)
        if name not in given:
            issues.append(f"{name}: missing -> empty")
        elif not isinstance(value, str):
            issues.append(f"{name}: not a string ({_short(value)}) -> empty")
        sections[name] = value if isinstance(value, str) else ""
    if not any(body.strip() for body in sections.values()):
        return ParsedCreate(sections=None, issues=issues + ["no section has a body"], ok=False)
    return ParsedCreate(sections=sections, issues=issues, ok=True)


def create_as_update_ops(sections: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Turn a create answer into UPDATE ops so it passes the guards; a missing or empty section is KEEP."""
    given = sections if isinstance(sections, Mapping) else {}
    ops: dict[str, dict[str, Any]] = {}
    for name in SECTIONS:
        body = given.get(name)
        usable = isinstance(body, str) and bool(strip_own_header(name, body).strip())
        ops[name] = {"op": "UPDATE", "content": body} if usable else dict(KEEP)
    return ops
