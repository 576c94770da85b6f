"""Search hits with their neighbours (`context=n`) and as the text a model reads, capped (SPEC §7).

A hit is `{archive_id, seq, turn_id, role, content}`; a spilled WM item is `{archive_id, seq: None,
turn_id: None, role: "memory", section, content}`. With `context=n` each message hit also carries
`context`: the n messages before and after it. The tool's text merges overlapping windows into one
block and stops at about `MAX_OUTPUT_TOKENS`, saying how many hits it left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workmem.state.messages import message_text
from workmem.state.tokens import count_tokens

MAX_CONTEXT = 3
MAX_OUTPUT_TOKENS = 4_000
CONTENT_CHARS = 1_500

Fetch = Callable[[int, int], list[dict[str, Any]]]


def with_context(hits: list[dict[str, Any]], n: int, fetch: Fetch) -> list[dict[str, Any]]:
    """`hits`, each message hit with `context`: the stored messages within n seqs of it (itself excluded),
    read once per run of overlapping windows through `fetch(start_seq, end_seq)`."""
    windows = sorted((max(1, h["seq"] - n), h["seq"] + n) for h in hits if h.get("seq") is not None)
    merged: list[list[int]] = []
    for lo, hi in windows:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    by_seq = {m["seq"]: m for lo, hi in merged for m in fetch(lo, hi)}
    out = []
    for hit in hits:
        if hit.get("seq") is None:
            out.append(hit)
            continue
        near = [_entry(by_seq[s]) for s in range(hit["seq"] - n, hit["seq"] + n + 1) if s != hit["seq"] and s in by_seq]
        out.append({**hit, "context": near})
    return out


def _entry(message: dict[str, Any]) -> dict[str, Any]:
    text = message_text(message)
    content = text if len(text) <= CONTENT_CHARS else text[: CONTENT_CHARS - 1] + "…"
    return {"archive_id": None, "seq": message["seq"], "turn_id": message["turn_id"], "role": message["role"],
            "content": content, "context": True}


def format_hits(query: str, hits: list[dict[str, Any]], max_tokens: int = MAX_OUTPUT_TOKENS) -> str:
    """Hits as the text a model reads: blocks best first, a block being a hit with its context (windows
    that overlap share one block, neighbours marked `(context)`), cut at about `max_tokens` with a note."""
    if not hits:
        return f"No archived message matches {query!r}. Try other keywords or an exact identifier."
    blocks: list[dict[str, Any]] = []
    for hit in hits:
        if hit.get("seq") is None:
            blocks.append({"lines": {}, "memory": hit, "hits": 1})
            continue
        lines = {hit["seq"]: (hit, True), **{c["seq"]: (c, False) for c in hit.get("context", [])}}
        target = next((b for b in blocks if b["lines"] and _overlaps(b["lines"], lines)), None)
        if target is None:
            blocks.append({"lines": lines, "hits": 1})
            continue
        for seq, (entry, is_hit) in lines.items():
            if is_hit or seq not in target["lines"]:
                target["lines"][seq] = (entry, is_hit)
        target["hits"] += 1
    rendered, used, shown = [], 0, 0
    for block in blocks:
        text = _render(block)
        cost = count_tokens(text)
        if rendered and used + cost > max_tokens:
            break
        rendered.append(text)
        used += cost
        shown += block["hits"]
    head = f"{len(hits)} archived message(s) match {query!r}, best first:\n\n"
    note = ""
    if shown < len(hits):
        note = (f"\n\n[{len(hits) - shown} more match(es) not shown (output capped at about {max_tokens} tokens): "
                "use more specific keywords, or archive_expand on a range]")
    return head + "\n\n".join(rendered) + note


def _overlaps(a: dict[int, Any], b: dict[int, Any]) -> bool:
    return min(b) <= max(a) + 1 and min(a) <= max(b) + 1


def _render(block: dict[str, Any]) -> str:
    if "memory" in block:
        hit = block["memory"]
        return f"[{hit['archive_id']} working memory, {hit.get('section') or 'item'}] {hit['content']}"
    out = []
    for seq in sorted(block["lines"]):
        entry, is_hit = block["lines"][seq]
        if is_hit:
            out.append(f"[{entry['archive_id']} #{seq} {entry['turn_id']} {entry['role']}] {entry['content']}")
        else:  # a neighbour shown for context
            out.append(f"  (context) [#{seq} {entry['turn_id']} {entry['role']}] {entry['content']}")
    return "\n".join(out)
