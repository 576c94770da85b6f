"""Messages: normalisation of LangChain / OpenAI / workmem inputs into parts, validation, text.

LangChain messages are recognised by duck typing (`.type`, `.content`, `.tool_calls`, …) and LangChain's
dict forms go through LangChain's own converters, imported inside the function, so loading `state/`
never loads LangChain. A normalised message is `{role, parts, meta}`; the store adds `id, seq,
turn_id, created_at, tokens`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from workmem.state.archive_object import OWN_TOOLS
from workmem.state.errors import InvalidInput
from workmem.state.index_text import index_text
from workmem.state.jsonutil import dumps
from workmem.state.payloads import CLIPPED_META, PayloadLimits, externalize, is_payload, stored_parts
from workmem.state.tokens import count_tokens

ROLES = ("user", "assistant", "tool", "system")
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
CLIPPED_BYTES_META = CLIPPED_META
LC_ID_META = "lc_id"  # the LangChain message id (older stores wrote it as "source_id")
FINGERPRINT_META = "fp"
# A tool result the agent's state holds as its synopsis carries the stored original's fingerprint and the hash
# of the synopsis (`synopsis_mark`); an unedited copy is then aligned as the stored message (`SYNOPSIS_OF_META`),
# while its own fingerprint stays its content's, so a copy stored anew is never taken for the result
SYNOPSIS_FP = "workmem_fp"
SYNOPSIS_HASH = "workmem_synopsis"
SYNOPSIS_OF_META = "synopsis_of"
CONTENT_LAYOUT_META = "content_layout"  # how text parts and content blocks interleaved (see lc_messages)
INTERNAL_FLAG = "internal"  # on a part of workmem's own tool traffic: stored, never indexed
FORGOTTEN_META = "workmem_forgotten"  # when a message's text was forgotten (`state.forget`): never indexed
INVALID_CALL_NAME = "invalid_tool_call"  # the name kept for a malformed tool call that came without one
DROPPED_BLOCKS_META = "workmem_dropped_blocks"
NO_BYTE_CAP = 1 << 62  # a `max_bytes` that never clips
MAX_NESTING = 64  # levels of dicts and lists in one message (JSON encoders recurse)
PART_FIELDS = {
    "text": ("text",),
    "tool_call": ("id", "name", "arguments"),
    "tool_result": ("tool_call_id", "name", "content", "is_error"),
    "context": ("uri", "abstract"),
}
ALLOWED_PARTS = {
    "user": {"text", "context"},
    "system": {"text", "context"},
    "assistant": {"text", "tool_call", "context"},
    "tool": {"tool_result"},
}
_LC_TYPES = {
    "human": "user", "ai": "assistant", "tool": "tool", "system": "system",
    "HumanMessageChunk": "user", "AIMessageChunk": "assistant",
    "ToolMessageChunk": "tool", "SystemMessageChunk": "system",
}
_PLAIN_ROLES = frozenset(("user", "assistant", "system"))
_ROLE_ALIASES = {"human": "user", "ai": "assistant", "developer": "system"}
TEXT_BLOCKS = frozenset(("text", "input_text", "output_text"))  # content blocks whose `text` is the text
_CALL_BLOCKS = {"tool_use", "tool_call", "function_call"}
_SKIPPED_BLOCKS = {"tool_call_chunk", "invalid_tool_call"}
_DROPPED_KWARGS = {"tool_calls", "function_call"}
_PER_CALL = {"text", "cache_control"}  # a text block's keys a layout never keeps (a cache breakpoint is per call)


class Normalised:
    """A message workmem itself normalised and encoded (`prepare_message`): an append takes it as it is, so a
    message an agent's state holds is normalised once on its way to storage. Built only from `prepare_message`'s
    output; its body fits the cap it was made for."""

    __slots__ = ("msg", "body", "clipped")

    def __init__(self, msg: dict[str, Any], body: bytes, clipped: bool = False) -> None:
        self.msg, self.body, self.clipped = msg, body, clipped  # clipped: cut to the message cap


def for_storage(msg: dict[str, Any], body: bytes, payloads: PayloadLimits | None, max_bytes: int) -> Normalised:
    """A normalised message (`body`: its encoding without payloads) as an append stores it: a copy with its large
    result made a payload and the body re-encoded; one still over `max_bytes` is clipped to it
    (`clip_to_cap`, recorded in its meta)."""
    stored = {**msg, "parts": [dict(p) for p in msg["parts"]], "meta": dict(msg["meta"])}
    if payloads is not None:
        externalize(stored, payloads)
        if is_payload(stored["parts"][0]):
            body = encode_body(stored, max_bytes=NO_BYTE_CAP)
    if len(body) <= max_bytes:
        return Normalised(stored, body)
    stored = clip_to_cap(stored, max_bytes, stored=payloads is not None)
    return Normalised(stored, encode_body(stored, max_bytes=max_bytes), clipped=True)


def normalize_message(obj: Any, *, field: str = "message", max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                      payloads: PayloadLimits | None = None) -> dict[str, Any]:
    """A LangChain message, OpenAI-style dict or workmem dict as a validated `{role, parts, meta}` (with
    `payloads`, a large tool result is checked against `max_bytes` as storage will store it)."""
    return prepare_message(obj, field=field, max_bytes=max_bytes, payloads=payloads)[0]



def prepare_message(obj: Any, *, field: str = "message", max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                    payloads: PayloadLimits | None = None) -> tuple[dict[str, Any], bytes]:
    """Normalise and validate one message; also return its stored JSON body (`"meta":…,"parts":…`).

    With `payloads`, a tool result over its `payload_bytes` becomes a payload (`payloads.externalize`): the
    body leaves its text out, so only the rest of the message counts toward `max_bytes`."""
    check_nesting(obj, field)
    if isinstance(obj, dict):
        if "parts" in obj:
            msg = _from_workmem(obj, field)
        elif "role" not in obj and "type" in obj:
            msg = _from_langchain(_langchain_dict(obj, field), field)
        else:
            msg = _from_openai(obj, field)
    elif isinstance(getattr(obj, "type", None), str) and hasattr(obj, "content"):
        msg = _from_langchain(obj, field)
    else:
        raise InvalidInput(field, obj, "expected a LangChain message or a dict with 'role'")
    _mark_own_tool_parts(msg)
    msg["meta"].pop(FORGOTTEN_META, None)  # only `forget_messages` marks a message forgotten
    if isinstance(msg["parts"], list) and not _keeps_fingerprint(msg["meta"]):
        msg["meta"][FINGERPRINT_META] = fingerprint(msg)
    if payloads is not None:
        externalize(msg, payloads)
    return msg, encode_body(msg, field=field, max_bytes=max_bytes)


def _keeps_fingerprint(meta: dict[str, Any]) -> bool:
    """True when a message's given fingerprint stands: only a copy workmem clipped (`clip_to_cap`) carries its
    original's, so the agent's unclipped message still aligns with it. Any other given `fp` is recomputed — an
    edited message sent back with its old meta is an edit, never a repeat."""
    return CLIPPED_BYTES_META in meta and isinstance(meta.get(FINGERPRINT_META), str)


def synopsis_hash(text: str) -> str:
    """16 hex digits of a synopsis text: an edited copy no longer matches its mark."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def fingerprint(msg: dict[str, Any]) -> str:
    """16 hex digits identifying a message by what it says: role, text, tool calls' ids, names and arguments,
    tool results' call ids and content. Ids, times and metadata are left out,
    so a client that re-sends the same message in another shape gets the same fingerprint."""
    parts = msg["parts"]
    if (len(parts) == 1 and type(parts[0]) is dict and type(text := parts[0].get("text")) is str
            and parts[0].get("type") == "text"):
        base = _TEXT_FINGERPRINT.get(msg.get("role"))  # a plain message: the loop below, its first steps done once
        if base is not None:
            digest = base.copy()
            digest.update(text.encode("utf-8", "surrogatepass"))
            return digest.hexdigest()
    digest = hashlib.blake2b(str(msg.get("role")).encode(), digest_size=8)
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            fields: tuple[Any, ...] = ("t", part.get("text"))
        elif kind == "tool_call":
            fields = ("c", part.get("id"), part.get("name"), _canonical(part.get("arguments")))
        elif kind == "tool_result":
            fields = ("r", part.get("tool_call_id"), part.get("content"))
        else:
            fields = ("x", part.get("uri"), part.get("abstract"))
        digest.update(b"\x00" + "\x1f".join(str(f) for f in fields).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(arguments)


def same_blocks(stored: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two messages carry the same other content blocks (an image, a file), which the fingerprint leaves
    out: the same id and fingerprint with another image is an edit. A copy workmem clipped kept no blocks of its own
    to compare, so for it the fingerprint alone decides."""
    meta = stored.get("meta") or {}
    if CLIPPED_BYTES_META in meta:
        return True
    return (meta.get("content_blocks") or None) == ((other.get("meta") or {}).get("content_blocks") or None)


def lc_id(msg: dict[str, Any]) -> str | None:
    """The LangChain id a stored message came with (`meta.lc_id`; older stores called it `source_id`)."""
    meta = msg.get("meta")
    if not meta:
        return None
    value = meta.get(LC_ID_META) or meta.get("source_id")
    return value if type(value) is str else None


def _mark_own_tool_parts(msg: dict[str, Any]) -> None:
    """Flag calls to archive_search / archive_expand and results named after them."""
    parts = msg.get("parts")
    for part in parts if isinstance(parts, list) else []:
        if (isinstance(part, dict) and part.get("type") in ("tool_call", "tool_result")
                and part.get("name") in OWN_TOOLS):
            part[INTERNAL_FLAG] = True


def indexed_text(msg: dict[str, Any]) -> str:
    """What the full-text index holds of a message: its text without workmem's own tool traffic, bounded by
    `index_text.index_text` (a long message's head, then each further distinct word once); nothing of a forgotten
    message (its placeholder is no text of the conversation)."""
    if FORGOTTEN_META in (msg.get("meta") or ()):
        return ""
    if not any(p.get(INTERNAL_FLAG) for p in msg["parts"]):
        return index_text(message_text(msg))
    return index_text(message_text({**msg, "parts": [p for p in msg["parts"] if not p.get(INTERNAL_FLAG)]})) \
        if any(not p.get(INTERNAL_FLAG) for p in msg["parts"]) else ""


def check_nesting(obj: Any, field: str, limit: int = MAX_NESTING) -> None:
    """Refuse a message nested deeper than `limit` levels (dicts / lists, a LangChain message's fields
    included) before anything recursive touches it: an iterative walk, never a `RecursionError`."""
    roots = [obj] if isinstance(obj, (dict, list, tuple)) else [
        getattr(obj, name, None) for name in ("content", "additional_kwargs", "tool_calls", "invalid_tool_calls")]
    stack = [(root, 1) for root in roots if isinstance(root, (dict, list, tuple))]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            raise InvalidInput(field, f"<nested {depth}+ levels deep>", f"nested deeper than {limit} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


def prepare_messages(objs: Any, *, max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                     payloads: PayloadLimits | None = None) -> list[tuple[dict[str, Any], bytes | None]]:
    """Normalise and validate a batch (fields named `messages[i]`): `(msg, body)` per message.

    `body` is the stored JSON body encoded during validation (see `prepare_message`), or None for a
    plain text message known valid without encoding it: `{"role": user|assistant|system, "content":
    non-empty ASCII str}` whose body fits the cap even if every character were escaped (ASCII has no
    lone surrogate, so it always encodes). The store then encodes its whole line once
    (`jsonl.stored_lines`) instead of assembling it from pieces encoded twice. Anything else, a
    non-ASCII or near-cap text included, takes `prepare_message`, which names any problem.

    A plain message is stored without a fingerprint: it has no id, so it never repeats a stored message
    (`stored.repeats`), and it is never clipped, so the fingerprint alignment computes from it
    (`alignment.fingerprint_of`) is the one `prepare_message` would have recorded.
    """
    if isinstance(objs, (str, bytes, dict)) or not hasattr(objs, "__iter__"):
        raise InvalidInput("messages", objs, "must be a list of messages")
    longest_plain = (max_bytes - _PLAIN_BODY_BYTES - 2) // _MAX_JSON_BYTES_PER_ASCII_CHAR  # 2: the quotes
    out: list[tuple[dict[str, Any], bytes | None]] = []
    has_tool_parts = False
    for i, obj in enumerate(objs):
        if type(obj) is Normalised:
            if len(obj.body) > max_bytes:
                raise InvalidInput(f"messages[{i}]", f"<{len(obj.body)} bytes>",
                                   f"message is larger than the cap of {max_bytes} bytes")
            out.append((obj.msg, obj.body))
            continue
        # The plain-text test is inlined (not a helper call): it runs for every message of every append.
        if type(obj) is dict and len(obj) == 2:
            role, content = obj.get("role"), obj.get("content")
            if (type(role) is str and role in _PLAIN_ROLES and type(content) is str
                    and 0 < len(content) <= longest_plain and content.isascii()):
                out.append(({"role": role, "parts": [{"type": "text", "text": content}], "meta": {}}, None))
                continue
        out.append(prepare_message(obj, field=f"messages[{i}]", max_bytes=max_bytes, payloads=payloads))
        has_tool_parts = True
    if has_tool_parts:  # plain text messages hold no tool call or result
        _mark_nameless_own_results(out, max_bytes)
    return out


def _mark_nameless_own_results(out: list[tuple[dict[str, Any], bytes | None]], max_bytes: int) -> None:
    """A result without a tool name (an OpenAI dict) answering one of our own calls in the same batch is
    ours too: flag it (nearest preceding unanswered call of its id, as results pair with calls) and re-encode it."""
    open_calls: dict[str, list[bool]] = {}
    for i, (msg, _body) in enumerate(out):
        for part in msg["parts"]:
            if part["type"] == "tool_call" and part.get("id"):
                open_calls.setdefault(part["id"], []).append(bool(part.get(INTERNAL_FLAG)))
            elif part["type"] == "tool_result":
                stack = open_calls.get(part["tool_call_id"])
                ours = stack.pop() if stack else False
                if ours and not part.get(INTERNAL_FLAG):
                    part[INTERNAL_FLAG] = True
                    out[i] = (msg, encode_body(msg, field=f"messages[{i}]", max_bytes=max_bytes))


# `fingerprint`'s digest of a one-text-part message of each plain role, fed all but the text (copied per message)
_TEXT_FINGERPRINT = {role: hashlib.blake2b(role.encode(), digest_size=8) for role in _PLAIN_ROLES}
for _digest in _TEXT_FINGERPRINT.values():
    _digest.update(b"\x00t\x1f")
# Bytes of a plain message's body besides its JSON-encoded text: `"meta":{},"parts":[{"type":"text","text":…}]`.
_PLAIN_BODY_BYTES = len(b'"meta":{},"parts":[{"type":"text","text":}]')
# An ASCII character takes at most 6 bytes of JSON (a control character as `\u001f`).
_MAX_JSON_BYTES_PER_ASCII_CHAR = 6



def encode_body(msg: dict[str, Any], *, field: str = "message", max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """Validate a normalised message and encode its stored `"meta":…,"parts":…` as UTF-8 JSON (one encode per
    message; a payload's text is left out, `payloads.stored_parts`)."""
    role = msg.get("role")
    if role not in ROLES:
        raise InvalidInput(f"{field}.role", role, f"must be one of {', '.join(ROLES)}")
    parts = msg.get("parts")
    if not isinstance(parts, list) or not parts:
        raise InvalidInput(f"{field}.parts", parts, "empty message: no text, tool call, tool result or context")
    for i, part in enumerate(parts):
        _check_part(part, role, f"{field}.parts[{i}]")
    if role == "tool" and len(parts) != 1:
        raise InvalidInput(f"{field}.parts", len(parts), "a tool message holds exactly one tool_result")
    meta = msg.get("meta")
    if not isinstance(meta, dict):
        raise InvalidInput(f"{field}.meta", meta, "must be a dict")
    try:
        body = dumps({"meta": meta, "parts": stored_parts(parts)})[1:-1]
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        path, value, reason = _find_bad_value(msg, field)
        raise InvalidInput(path or field, value, reason or str(exc)) from exc
    if len(body) > max_bytes:
        raise InvalidInput(field, f"<{len(body)} bytes>", f"message is larger than the cap of {max_bytes} bytes")
    return body


IMAGE_TOKENS = 1_500  # one image as a provider bills a screenshot at full detail (OpenAI ~1,100, Anthropic ~1,800)
_IMAGE_BLOCKS = frozenset(("image", "image_url", "input_image"))


def is_image(block: Any) -> bool:
    """Whether a content block is an image."""
    return isinstance(block, dict) and block.get("type") in _IMAGE_BLOCKS


def content_blocks(meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A message's other content blocks (images, reasoning, …), as its meta keeps them."""
    blocks = (meta or {}).get("content_blocks")
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def image_tokens(msg: dict[str, Any]) -> int:
    """The tokens a message's image blocks cost, `IMAGE_TOKENS` each (their base64 is no measure of it)."""
    return IMAGE_TOKENS * sum(1 for b in content_blocks(msg.get("meta")) if is_image(b))


def message_tokens(msg: dict[str, Any]) -> int:
    """A message's tokens: its text's, and its images' (`image_tokens`)."""
    return count_tokens(message_text(msg)) + image_tokens(msg)


def message_text(msg: dict[str, Any]) -> str:
    """Deterministic text of a message's parts (what `tokens` counts and the full-text index holds)."""
    parts = msg["parts"]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    out: list[str] = []
    for part in parts:
        kind = part["type"]
        if kind == "text":
            out.append(part["text"])
        elif kind == "tool_call":
            args = part["arguments"]
            shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            out.append(f"{part['name']}({shown})")
        elif kind == "tool_result":
            out.append(part["content"])
        elif kind == "context":
            out.append(" ".join(x for x in (part["uri"], part["abstract"]) if x))
    return "\n".join(out)


CLIP_MARK = "…[workmem: clipped "  # how every `clip_marker` starts


def clip_marker(removed_bytes: int) -> str:
    """The visible marker put where `clip_to_cap` cut text out."""
    return f"{CLIP_MARK}{removed_bytes} bytes — the message exceeded max_message_bytes]…"


DROPPED_BLOCKS_NOTE = "…[workmem: content blocks dropped — the message exceeded max_message_bytes]…"
_MARKER_BYTES = len(clip_marker(10**20).encode("utf-8"))
_PART_KEYS_KEPT = frozenset(("type", "id", "name", "tool_call_id", "is_error", "uri", INTERNAL_FLAG))
_META_KEYS_KEPT = frozenset((LC_ID_META, FINGERPRINT_META, "name", "content_blocks", CLIPPED_BYTES_META,
                             DROPPED_BLOCKS_META))


def clip_to_cap(msg: dict[str, Any], max_bytes: int, *, stored: bool = False) -> dict[str, Any]:
    """A copy of a normalised message whose stored body fits `max_bytes` (a message that fits is returned as is).

    The largest pieces go first until it fits: a long string (text, tool-result content, context
    abstract, tool-call arguments, additional kwargs) keeps its head and tail around `clip_marker`;
    a content block (an image…) is dropped whole, since half of one is useless, counted in
    `meta["workmem_dropped_blocks"]` and noted in the text. `meta["workmem_clipped_bytes"]` records the
    original size. Roles, part order, tool-call ids and names are kept, so tool pairing survives.
    InvalidInput when the message is invalid for another reason, or when what cannot be clipped
    (ids, names, structure) alone exceeds the cap. `stored`: the size is the stored body's, where a payload's
    text does not count (and is never clipped: storage keeps it whole beside the line).
    """
    measure = (lambda m: len(encode_body(m, max_bytes=NO_BYTE_CAP))) if stored else _whole_len
    size = len(encode_body(msg, max_bytes=NO_BYTE_CAP)) if stored else _whole_len(msg)  # valid, whatever its size
    if size <= max_bytes:
        return msg
    out = copy.deepcopy(msg)
    out["meta"][CLIPPED_BYTES_META] = size
    pieces = sorted(_clippable(out, skip_payloads=stored), key=lambda piece: -len(dumps(piece[0][piece[1]])))
    for container, key in pieces:
        over = measure(out) - max_bytes
        if over <= 0:
            break
        if isinstance(container[key], str):
            container[key] = _clip_text(container[key], over)
            continue
        if DROPPED_BLOCKS_META not in out["meta"]:
            _add_note(out, DROPPED_BLOCKS_NOTE)
        container[key] = None  # a dropped content block, removed from the list below
        out["meta"][DROPPED_BLOCKS_META] = out["meta"].get(DROPPED_BLOCKS_META, 0) + 1
    if DROPPED_BLOCKS_META in out["meta"]:
        kept = [block for block in out["meta"].pop("content_blocks") if block is not None]
        if kept:
            out["meta"]["content_blocks"] = kept
    encode_body(out, max_bytes=max_bytes)  # still too large: only ids, names and structure are left
    return out


def first_image_only(msg: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """A copy of a normalised message whose images take it over `max_tokens` (each counts `IMAGE_TOKENS`, whatever
    its bytes, so `clip_to_cap` cannot bring it under) with its first image only, the others dropped and noted as
    `clip_to_cap` notes a dropped block; any other message as it is."""
    blocks = content_blocks(msg.get("meta"))
    images = [i for i, block in enumerate(blocks) if is_image(block)]
    if len(images) <= 1 or message_tokens(msg) <= max_tokens:
        return msg
    out = copy.deepcopy(msg)
    out["meta"]["content_blocks"] = [b for i, b in enumerate(blocks) if i not in images[1:]]
    if DROPPED_BLOCKS_META not in out["meta"]:
        _add_note(out, DROPPED_BLOCKS_NOTE)
    out["meta"][DROPPED_BLOCKS_META] = out["meta"].get(DROPPED_BLOCKS_META, 0) + len(images) - 1
    return out


def _whole_len(msg: dict[str, Any]) -> int:
    """Bytes of a message's body with every text in it (a payload's included)."""
    return len(dumps({"meta": msg["meta"], "parts": msg["parts"]})) - 2


def _clip_text(text: str, over: int) -> str:
    """`text` without `over` stored bytes (and room for the marker) from its middle, the marker in their place.

    `over` counts bytes of the stored JSON, where a quote or a backslash takes two and a control character six:
    the characters kept are chosen by that encoded size, so a quote-heavy JSON result keeps all it can."""
    size = _stored_len(text)
    target = max(0, size - over - _MARKER_BYTES)
    keep = int(len(text) * target / size) if size else 0
    while True:
        half = keep // 2
        head, tail = text[: keep - half], (text[len(text) - half:] if half else "")
        if keep == 0 or _stored_len(head) + _stored_len(tail) <= target:
            break
        keep = int(keep * 0.98)
    removed = text[len(head): len(text) - len(tail)]
    return head + clip_marker(len(removed.encode("utf-8"))) + tail


def _stored_len(text: str) -> int:
    """Bytes of `text` inside the stored JSON body (escapes included, the quotes not)."""
    return len(dumps(text)) - 2


def _add_note(msg: dict[str, Any], note: str) -> None:
    """Make `note` visible in the message: after the tool result's content, else as a last text part."""
    part = msg["parts"][0]
    if part["type"] == "tool_result":
        part["content"] = f"{part['content']}\n{note}" if part["content"] else note
    else:
        msg["parts"].append({"type": "text", "text": note})


def _clippable(msg: dict[str, Any], *, skip_payloads: bool = False) -> list[tuple[Any, Any]]:
    """`(container, key)` of every piece `clip_to_cap` may shorten: strings long enough that a marker
    in their middle saves room, and whole content blocks."""
    found: list[tuple[Any, Any]] = []

    def walk(container: Any, key: Any) -> None:
        value = container[key]
        if isinstance(value, str):
            if len(value) > 2 * _MARKER_BYTES:
                found.append((container, key))
        elif isinstance(value, (dict, list)):
            for k in (value if isinstance(value, dict) else range(len(value))):
                walk(value, k)

    for part in msg["parts"]:
        if skip_payloads and is_payload(part):
            continue
        for key in part:
            if key not in _PART_KEYS_KEPT:
                walk(part, key)
    meta = msg["meta"]
    for key in meta:
        if key not in _META_KEYS_KEPT:
            walk(meta, key)
    blocks = meta.get("content_blocks")
    if isinstance(blocks, list):
        found.extend((blocks, i) for i in range(len(blocks)))
    return found


# -- parts -------------------------------------------------------------------------------------------


def _check_part(part: Any, role: str, field: str) -> None:
    if not isinstance(part, dict):
        raise InvalidInput(field, part, "must be a dict")
    kind = part.get("type")
    if kind not in PART_FIELDS:
        raise InvalidInput(f"{field}.type", kind, f"must be one of {', '.join(PART_FIELDS)}")
    if kind not in ALLOWED_PARTS[role]:
        raise InvalidInput(f"{field}.type", kind, f"not allowed in a {role} message")
    if kind == "text":
        _need_str(part.get("text"), f"{field}.text")
    elif kind == "tool_call":
        _opt_str(part.get("id"), f"{field}.id")
        _need_str(part.get("name"), f"{field}.name", nonempty=True)
        if not isinstance(part.get("arguments"), (dict, str)):
            raise InvalidInput(f"{field}.arguments", part.get("arguments"), "must be an object or a string")
    elif kind == "tool_result":
        _need_str(part.get("tool_call_id"), f"{field}.tool_call_id", nonempty=True)
        _opt_str(part.get("name"), f"{field}.name")
        _need_str(part.get("content"), f"{field}.content")
        if not isinstance(part.get("is_error"), bool):
            raise InvalidInput(f"{field}.is_error", part.get("is_error"), "must be a bool")
    else:
        _need_str(part.get("uri"), f"{field}.uri")
        _need_str(part.get("abstract"), f"{field}.abstract")


def _need_str(value: Any, field: str, *, nonempty: bool = False) -> None:
    if isinstance(value, bytes):
        raise InvalidInput(field, value, "bytes are not text: decode to str (UTF-8) first")
    if not isinstance(value, str):
        raise InvalidInput(field, value, "must be a string")
    if nonempty and not value:
        raise InvalidInput(field, value, "must not be empty")


def _opt_str(value: Any, field: str) -> None:
    if value is not None:
        _need_str(value, field)


def _text(text: Any) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _tool_call(call_id: Any, name: Any, args: Any) -> dict[str, Any]:
    if isinstance(args, str):
        try:
            parsed = json.loads(args) if args.strip() else {}
        except ValueError:
            parsed = args  # malformed arguments are kept raw (→ invalid_tool_calls on the way back)
        args = parsed if isinstance(parsed, dict) else args
    elif args is None:
        args = {}
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": args}


def _tool_result(call_id: Any, name: Any, content: Any, is_error: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_call_id": call_id, "name": name, "content": content,
            "is_error": is_error}


def _content(content: Any, field: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any],
                                               list[dict[str, Any]]]:
    """Split message content into text parts, tool-call parts found in blocks, other blocks (kept in meta), and
    the layout that rebuilds the content as it came (empty when texts first, then the other blocks, rebuild it)."""
    if content is None:
        return [], [], [], []
    if isinstance(content, str):
        return ([_text(content)] if content else []), [], [], []
    if isinstance(content, bytes):
        raise InvalidInput(field, content, "bytes are not text: decode to str (UTF-8) first")
    if not isinstance(content, (list, tuple)):
        raise InvalidInput(field, content, "must be a string or a list of content blocks")
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    other: list[Any] = []
    layout: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        if isinstance(block, str):
            if block:
                layout.append({"text": len(texts), "block": {"type": "text"}})
                texts.append(_text(block))
            continue
        if not isinstance(block, dict):
            raise InvalidInput(f"{field}[{i}]", block, "content block must be a string or a dict")
        kind = block.get("type")
        if kind in TEXT_BLOCKS:
            if block.get("text"):
                layout.append({"text": len(texts), "block": {k: v for k, v in block.items() if k not in _PER_CALL}})
                texts.append(_text(block.get("text")))
        elif kind in _CALL_BLOCKS:
            args = block.get("input", block.get("args", block.get("arguments")))
            # a Responses-API `function_call` item has its own `id` (fc_…); the call is its `call_id`
            calls.append(_tool_call(block.get("call_id") or block.get("id"), block.get("name"), args))
        elif kind not in _SKIPPED_BLOCKS:
            layout.append({"other": len(other)})
            other.append(block)  # images, reasoning, …: not parts, but kept verbatim in meta
    return texts, calls, other, (layout if _laid_out(layout) else [])


def _laid_out(layout: list[dict[str, Any]]) -> bool:
    """Whether the content needs its layout to come back as it was: a text block with more than its text (an id,
    annotations, another type), or another block (reasoning, thinking, an image) before a text."""
    seen_other = False
    for entry in layout:
        if "other" in entry:
            seen_other = True
        elif seen_other or entry["block"] != {"type": "text"}:
            return True
    return False


def _joined(texts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in texts)


# -- sources -----------------------------------------------------------------------------------------


def _from_langchain(obj: Any, field: str) -> dict[str, Any]:
    kind = obj.type
    role = _LC_TYPES.get(kind)
    if kind == "chat":
        role = _role(getattr(obj, "role", None), f"{field}.role")
    if role is None:
        raise InvalidInput(f"{field}.type", kind, "unknown message type (human, ai, tool or system)")
    texts, block_calls, other, layout = _content(obj.content, f"{field}.content")
    meta: dict[str, Any] = {}
    name = getattr(obj, "name", None)
    if role == "tool":
        status = getattr(obj, "status", None)
        parts = [_tool_result(getattr(obj, "tool_call_id", None), name, _joined(texts), status == "error")]
    else:
        parts = texts
        if name is not None:
            meta["name"] = name
    if role == "assistant":
        calls = [_tool_call(c.get("id"), c.get("name"), c.get("args")) for c in _dicts(obj, "tool_calls", field)]
        # LangChain's invalid_tool_call may lack a name (a streamed call cut short): it is kept, named as such
        invalid = [_tool_call(c.get("id"), c.get("name") or INVALID_CALL_NAME, c.get("args") or "")
                   for c in _dicts(obj, "invalid_tool_calls", field)]
        unparsed = {c["id"] for c in invalid}  # a block whose arguments did not parse is its invalid call
        parts += (calls or [c for c in block_calls if c["id"] not in unparsed]) + invalid
    kwargs = getattr(obj, "additional_kwargs", None) or {}
    kept = {k: v for k, v in kwargs.items() if k not in _DROPPED_KWARGS} if isinstance(kwargs, dict) else {}
    if kept:
        meta["additional_kwargs"] = kept
    if getattr(obj, "id", None) is not None:
        meta[LC_ID_META] = obj.id
    if role == "tool" and isinstance(kwargs, dict) and isinstance(kwargs.get(SYNOPSIS_FP), str) and \
            kwargs.get(SYNOPSIS_HASH) == synopsis_hash(_joined(texts)):
        meta[SYNOPSIS_OF_META] = kwargs[SYNOPSIS_FP]
    if other:
        meta["content_blocks"] = other
    if layout:
        meta[CONTENT_LAYOUT_META] = layout
    return {"role": role, "parts": _with_blocks_only(parts, other), "meta": meta}


def _langchain_dict(d: dict[str, Any], field: str) -> Any:
    """LangChain's own dict forms — `{"type": "human", "content": …}` and `messages_to_dict`'s
    `{"type": …, "data": {…}}` — as a LangChain message, through LangChain's converters (imported here,
    so loading `state/` never loads LangChain)."""
    # only for LangChain's dict forms, so importing state/ never loads LangChain
    from langchain_core.messages import convert_to_messages, messages_from_dict  # noqa: TID251

    try:
        converted = messages_from_dict([d]) if isinstance(d.get("data"), dict) else convert_to_messages([d])
    except (ValueError, TypeError, KeyError, AttributeError, NotImplementedError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInput(field, d, f"not a message: {reason}") from None
    return converted[0]


def _dicts(obj: Any, attr: str, field: str) -> list[dict[str, Any]]:
    value = getattr(obj, attr, None) or []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, dict) for v in value):
        raise InvalidInput(f"{field}.{attr}", value, "must be a list of dicts")
    return list(value)


def _role(role: Any, field: str) -> str:
    role = _ROLE_ALIASES.get(role, role) if isinstance(role, str) else role
    if role not in ROLES:
        raise InvalidInput(field, role, f"must be one of {', '.join(ROLES)}")
    return role


def _from_openai(d: dict[str, Any], field: str) -> dict[str, Any]:
    role = _role(d.get("role"), f"{field}.role")
    texts, block_calls, other, layout = _content(d.get("content"), f"{field}.content")
    meta = _meta(d.get("meta"), f"{field}.meta")
    if role == "tool":
        is_error = bool(d.get("is_error")) or d.get("status") == "error"
        parts = [_tool_result(d.get("tool_call_id"), d.get("name"), _joined(texts), is_error)]
    else:
        parts = texts
        if d.get("name") is not None:
            _need_str(d["name"], f"{field}.name")
            meta["name"] = d["name"]
    if role == "assistant":
        raw_calls = d.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise InvalidInput(f"{field}.tool_calls", raw_calls, "must be a list")
        calls = [_openai_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(raw_calls)]
        parts += calls or block_calls
    message_id = _message_id(d.get("id"), f"{field}.id")
    if message_id:  # LangChain's dict form carries the message id: a retry is stored once
        meta.setdefault(LC_ID_META, message_id)
    if other:
        meta["content_blocks"] = other
    if layout:
        meta[CONTENT_LAYOUT_META] = layout
    return {"role": role, "parts": _with_blocks_only(parts, other), "meta": meta}


def _message_id(value: Any, field: str) -> str | None:
    """A dict message's id as stored: a string as it is, an integer (a caller's row number) as its digits — so a
    retry under it is stored once — else `InvalidInput` (a float or a bool is no id to match a retry by)."""
    if value is None or isinstance(value, str):
        return value or None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    raise InvalidInput(field, value, "must be a string (or an integer below 10**18)")


def _with_blocks_only(parts: list[dict[str, Any]], other: list[Any]) -> list[dict[str, Any]]:
    """A message holding only content blocks (an image sent without text) gets one empty text part, so it
    is not refused as empty; the blocks themselves stay in `meta.content_blocks`."""
    return parts if parts or not other else [_text("")]


def _openai_call(call: Any, field: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise InvalidInput(field, call, "must be a dict")
    fn = call.get("function")
    if isinstance(fn, dict):
        return _tool_call(call.get("id"), fn.get("name"), fn.get("arguments"))
    return _tool_call(call.get("id"), call.get("name"), call.get("args", call.get("arguments")))


def _from_workmem(d: dict[str, Any], field: str) -> dict[str, Any]:
    role = _role(d.get("role"), f"{field}.role")
    raw = d.get("parts")
    if not isinstance(raw, list):
        raise InvalidInput(f"{field}.parts", raw, "must be a list of parts")
    parts = []
    for i, part in enumerate(raw):
        if not isinstance(part, dict):
            raise InvalidInput(f"{field}.parts[{i}]", part, "must be a dict")
        kind = part.get("type")
        if kind not in PART_FIELDS:
            raise InvalidInput(f"{field}.parts[{i}].type", kind, f"must be one of {', '.join(PART_FIELDS)}")
        if kind == "text" and part.get("text") == "":
            continue
        clean = {"type": kind, **{k: part.get(k) for k in PART_FIELDS[kind]}}
        if kind == "tool_result" and clean["is_error"] is None:
            clean["is_error"] = False
        parts.append(clean)
    meta = _meta(d.get("meta"), f"{field}.meta")
    blocks = meta.get("content_blocks")
    return {"role": role, "parts": _with_blocks_only(parts, blocks if isinstance(blocks, list) else []), "meta": meta}


def _meta(meta: Any, field: str) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InvalidInput(field, meta, "must be a dict")
    return dict(meta)


def bad_value(value: Any) -> str:
    """Why a parsed value cannot be written as JSON UTF-8 text (a lone surrogate, NaN, …), '' when it can."""
    return _find_bad_value(value, "value")[2]


def _find_bad_value(value: Any, path: str) -> tuple[str, Any, str]:
    """Locate the first value that is not JSON-able UTF-8 text, for a precise error message."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path, value, "not valid UTF-8 (lone surrogate)"
        return "", None, ""
    if isinstance(value, bytes):
        return path, value, "bytes are not text: decode to str (UTF-8) first"
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return path, value, "NaN and infinity are not JSON"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path}.{k!r}", k, "keys must be strings"
            found = _find_bad_value(k, f"{path}.{k}") if k else ("", None, "")
            found = found if found[0] else _find_bad_value(v, f"{path}.{k}")
            if found[0]:
                return found
        return "", None, ""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _find_bad_value(v, f"{path}[{i}]")
            if found[0]:
                return found
        return "", None, ""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return path, value, "integer out of the 64-bit range"
    if value is None or isinstance(value, (bool, int, float)):
        return "", None, ""
    return path, value, f"{type(value).__name__} is not JSON-serializable"
