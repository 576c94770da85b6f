"""Payloads: a large tool result stored whole, content-addressed, beside its message.

A tool result over `payload_bytes` keeps its text out of the message's stored line: the part carries
`content_ref` (`sha256:<hex>`), `size` (UTF-8 bytes), `chars`, `sha256`, its token count (counted once, here)
and a preview, and the text itself is one payload per distinct content of a session (a file, or a row). In
memory a stored message always holds the whole text in `content` (a reader resolves it, `resolve`), so every
read path sees what was sent; only the stored form leaves it out (`stored_parts`). Beyond `max_payload_bytes`
the result is stored clipped, head and tail around a marker, and flagged (`workmem_clipped_bytes`).

What the search index holds of a large result is `state.index_text`'s rule.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workmem.state.errors import InvalidInput
from workmem.state.tokens import count_tokens

PAYLOAD_BYTES = 64 * 1024
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
PAYLOAD_FORMAT = 2  # a session holding payloads; a build that knows only format 1 cannot read such a session
REF_PREFIX = "sha256:"
PAYLOAD_FIELDS = ("content_ref", "size", "chars", "sha256", "tokens", "preview", "clipped")
PREVIEW_CHARS = 1_000  # of the head and of the tail, in the stored line (what a reader without the payload sees)
EXACT_TOKENS_CHARS = 4 << 20  # larger texts get an estimate from a sample: tiktoken over 30 MB takes seconds
SAMPLE_CHARS = 1 << 20
CACHE_CHARS = 96 << 20  # resolved payload texts kept per store
CLIPPED_META = "workmem_clipped_bytes"  # = messages.CLIPPED_BYTES_META (messages imports this module)
log = logging.getLogger("workmem.store")


@dataclass(frozen=True)
class PayloadLimits:
    """When a tool result becomes a payload (`payload_bytes`) and the most one payload holds (`max_payload_bytes`)."""

    payload_bytes: int = PAYLOAD_BYTES
    max_payload_bytes: int = MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        for name in ("payload_bytes", "max_payload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(name, value, "must be a positive integer")
        if self.payload_bytes > self.max_payload_bytes:
            raise InvalidInput("payload_bytes", self.payload_bytes,
                               f"must not exceed max_payload_bytes ({self.max_payload_bytes})")


DEFAULT_LIMITS = PayloadLimits()


def is_payload(part: Any) -> bool:
    """True for a tool-result part whose text is a payload."""
    return isinstance(part, dict) and "content_ref" in part


def ref_of(sha256: str) -> str:
    """The `content_ref` of a payload."""
    return REF_PREFIX + sha256


def externalize(msg: dict[str, Any], limits: PayloadLimits) -> None:
    """Make a normalised tool message's large result a payload: add the payload fields to its part (the text
    stays in `content`), clipping it first when it exceeds `max_payload_bytes`. Anything else is left as is."""
    if msg.get("role") != "tool" or len(msg.get("parts") or ()) != 1:
        return
    part = msg["parts"][0]
    text = part.get("content") if isinstance(part, dict) else None
    if not isinstance(text, str) or len(text) * 4 <= limits.payload_bytes:  # UTF-8: at most 4 bytes a character
        return
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: left for validation to reject with its usual error
        return
    if len(data) <= limits.payload_bytes:
        return
    clipped = len(data) > limits.max_payload_bytes
    if clipped:
        msg["meta"][CLIPPED_META] = len(data)
        text = clipped_to(data, limits.max_payload_bytes)
        part["content"] = text
        data = text.encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    part.update({"content_ref": ref_of(digest), "size": len(data), "chars": len(text), "sha256": digest,
                 "tokens": payload_tokens(text), "preview": preview(text)})
    if clipped:
        part["clipped"] = True


def clipped_to(data: bytes, limit: int) -> str:
    """UTF-8 `data` as text of at most `limit` bytes: its head and tail (errors sit at the tail) around a marker."""
    marker = f"\n…[workmem: clipped {len(data) - limit} bytes — the result exceeded max_payload_bytes]…\n"
    room = max(0, limit - len(marker.encode("utf-8")))
    head = data[: room // 2].decode("utf-8", "ignore")
    tail = data[len(data) - (room - room // 2):].decode("utf-8", "ignore") if room else ""
    return head + marker + tail


def payload_tokens(text: str) -> int:
    """cl100k tokens of a payload's text: exact up to a few MiB, beyond from a sample of its head and tail."""
    if len(text) <= EXACT_TOKENS_CHARS:
        return count_tokens(text)
    half = SAMPLE_CHARS // 2
    sample = count_tokens(text[:half]) + count_tokens(text[-half:])
    return round(sample * len(text) / SAMPLE_CHARS)


def preview(text: str) -> str:
    """The head and tail a stored line keeps of its payload."""
    if len(text) <= 2 * PREVIEW_CHARS:
        return text
    return f"{text[:PREVIEW_CHARS]}\n…[{len(text) - 2 * PREVIEW_CHARS} characters in the payload]…\n" \
           f"{text[-PREVIEW_CHARS:]}"


def stored_parts(parts: list[Any]) -> list[Any]:
    """Parts as stored: a payload part without its text (the payload holds it)."""
    if not any(is_payload(p) for p in parts):
        return parts
    return [{k: v for k, v in p.items() if k != "content"} if is_payload(p) else p for p in parts]


def payloads_of(messages: list[dict[str, Any]]) -> dict[str, bytes]:
    """sha256 → bytes of every payload the (in-memory) messages carry."""
    out: dict[str, bytes] = {}
    for msg in messages:
        for part in msg["parts"]:
            if is_payload(part) and part["sha256"] not in out:
                out[part["sha256"]] = part["content"].encode("utf-8")
    return out


def with_given_texts(result: list[dict[str, Any]], given: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An append's result (`merge_repeats`, in batch order) with each repeat's payload text taken from the
    message the caller gave in its place: same fingerprint, same text — so a repeat needs no payload read (and
    a damaged stored payload never fails a retry that carries the text)."""
    out = []
    for msg, mine in zip(result, given, strict=True):
        texts = {p["sha256"]: p["content"] for p in mine["parts"] if is_payload(p) and "content" in p}
        if texts and any(is_payload(p) and "content" not in p for p in msg["parts"]):
            msg = {**msg, "parts": [{**p, "content": texts[p["sha256"]]}
                                    if is_payload(p) and "content" not in p and p.get("sha256") in texts else p
                                    for p in msg["parts"]]}
        out.append(msg)
    return out


def refs_of(msg: dict[str, Any]) -> list[str]:
    """sha256 of each payload a stored message refers to."""
    return [p["sha256"] for p in msg.get("parts") or () if is_payload(p) and isinstance(p.get("sha256"), str)]


def payload_damage(data: bytes, part: dict[str, Any]) -> str:
    """Why a payload's bytes are not the text its part refers to ('' when they are): a size or sha256 mismatch, or
    bytes that are not UTF-8. No path in it: a reader may show it to a model."""
    if len(data) != part.get("size") or hashlib.sha256(data).hexdigest() != part.get("sha256"):
        return f"does not match its reference (size {len(data)}, expected {part.get('size')})"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"is not UTF-8: {exc}"
    return ""


def damaged_text(part: dict[str, Any], reason: str) -> str:
    """What a reader gets for a payload it cannot read: the stored preview and a marked note naming the payload's
    reference and how to repair it (docs/repair.md) — never a path."""
    return (f"{part.get('preview') or ''}\n…[workmem: payload {part.get('content_ref')} {reason}; only the preview "
            "above is left. To repair: send the tool result again, or forget the message (workmem forget-messages). "
            "`workmem check` lists damaged payloads]…")


class PayloadCache:
    """Checked payload texts by (session, sha256), least recently used first out, at most `CACHE_CHARS` in all
    (but always the newest one, however large: a huge result read on every call is read once)."""

    def __init__(self, limit: int = CACHE_CHARS) -> None:
        self.limit = limit
        self._texts: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._chars = 0

    def get(self, key: tuple[str, str]) -> str | None:
        text = self._texts.get(key)
        if text is not None:
            self._texts.move_to_end(key)
        return text

    def put(self, key: tuple[str, str], text: str) -> None:
        if key in self._texts:
            return
        self._texts[key] = text
        self._chars += len(text)
        while self._chars > self.limit and len(self._texts) > 1:  # the newest stays, however large
            _, old = self._texts.popitem(last=False)
            self._chars -= len(old)

    def forget(self, session: str) -> None:
        """Drop a session's texts (it was deleted)."""
        for key in [k for k in self._texts if k[0] == session]:
            self._chars -= len(self._texts.pop(key))


def resolve(messages: list[dict[str, Any]], fetch: Callable[[list[str]], dict[str, bytes | str]], session: str,
            cache: PayloadCache) -> list[dict[str, Any]]:
    """Stored messages with the text of every payload part filled in (copies of those that change; a cached
    list of the caller is never altered).

    `fetch(shas)` returns the bytes of each payload, or why it cannot be read. A payload that cannot be read or
    does not match its reference reads as `damaged_text` — its preview and a marked note — with the reason in the
    part's `damaged` field (never stored: the stored line keeps its reference, so a later repair heals every
    reader); one WARNING per payload. Damage stays local: the session's other messages, its commits and its
    reads go on. Checked texts are cached, so a session's payloads are read and hashed once."""
    wanted = [p for m in messages for p in m["parts"] if is_payload(p) and "content" not in p]
    if not wanted:
        return messages
    texts: dict[str, str] = {}
    damaged: dict[str, str] = {}
    missing = []
    for part in wanted:
        sha = str(part.get("sha256"))
        text = cache.get((session, sha))
        if text is None:
            missing.append(sha)
        else:
            texts[sha] = text
    if missing:
        found = fetch(sorted(set(missing)))
        for part in wanted:
            sha = str(part.get("sha256"))
            if sha in texts or sha in damaged:
                continue
            data = found.pop(sha, "is missing")  # each payload's bytes go as soon as its text is made
            reason = data if isinstance(data, str) else payload_damage(data, part)
            if reason:
                damaged[sha] = reason
                texts[sha] = damaged_text(part, reason)
                _warn_damaged(session, part, reason)
                continue
            texts[sha] = data.decode("utf-8")
            del data
            cache.put((session, sha), texts[sha])

    def filled(part: dict[str, Any]) -> dict[str, Any]:
        sha = str(part["sha256"])
        return {**part, "content": texts[sha], **({"damaged": damaged[sha]} if sha in damaged else {})}

    return [m if not any(is_payload(p) and "content" not in p for p in m["parts"]) else
            {**m, "parts": [filled(p) if is_payload(p) and "content" not in p else p for p in m["parts"]]}
            for m in messages]


_WARNED: set[tuple[str, str, str]] = set()


def _warn_damaged(session: str, part: dict[str, Any], reason: str) -> None:
    key = (session, str(part.get("sha256")), reason)
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("session %r: payload %s %s; it reads as its preview with a note (see docs/repair.md)",
                    session, part.get("content_ref"), reason)
