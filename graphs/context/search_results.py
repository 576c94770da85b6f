"""Search hits with their neighbours (`context=n`) and as the text a model reads, capped.

A hit is `{archive_id, seq, turn_id, role, content, match}`; a spilled WM item is `{archive_id, seq: None,
turn_id: None, role: "memory", section, content, match}`; `match` is `exact` (the hit's own text matched
a query word) or `neighbour` (found only through a match near it; `search_hits` defines both). With
`context=n` each message hit also carries `context`: the n messages before and after it. The tool's text
counts matches and neighbouring messages apart, labels every hit, merges overlapping windows into one
block and stops at about `MAX_OUTPUT_TOKENS`, saying how many hits it left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workmem.state.messages import message_text
from workmem.state.search.search_hits import match_counts
from workmem.state.tokens import count_tokens, token_head

MAX_CONTEXT = 3
MAX_OUTPUT_TOKENS = 4_000
CONTENT_CHARS = 1_500

Fetch = Callable[[int, int], list[dict[str, Any]]]
NEIGHBOUR_NOTE = " (exact: holds a query word; neighbour: holds none, sits near a match)"


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


def count_phrase(hits: list[dict[str, Any]]) -> str:
    """How many of `hits` are matches and how many neighbouring messages: `2 matches, 5 neighbouring messages`."""
    exact, neighbours = match_counts(hits)
    return (f"{exact} match{'' if exact == 1 else 'es'}, "
            f"{neighbours} neighbouring message{'' if neighbours == 1 else 's'}")


def format_hits(query: str, hits: list[dict[str, Any]], max_tokens: int = MAX_OUTPUT_TOKENS) -> str:
    """Hits as the text a model reads: a head counting matches and neighbouring messages apart, then blocks
    best first, a block being a hit with its context (windows that overlap share one block, each hit
    labelled `exact` or `neighbour`, context lines marked `(context)`), cut at about `max_tokens` with a note."""
    if not hits:
        return f"No archived message matches {query!r}. Try other keywords or an exact identifier."
    blocks: list[dict[str, Any]] = []
    for hit in hits:
        if hit.get("seq") is None:
            blocks.append({"lines": {}, "memory": hit, "members": [hit]})
            continue
        lines = {hit["seq"]: (hit, True), **{c["seq"]: (c, False) for c in hit.get("context", [])}}
        target = next((b for b in blocks if b["lines"] and _overlaps(b["lines"], lines)), None)
        if target is None:
            blocks.append({"lines": lines, "members": [hit]})
            continue
        for seq, (entry, is_hit) in lines.items():
            if is_hit or seq not in target["lines"]:
                target["lines"][seq] = (entry, is_hit)
        target["members"].append(hit)
    rendered, used, cut = [], 0, []
    for block in blocks:
        text = _render(block)
        cost = count_tokens(text)
        if rendered and used + cost > max_tokens:
            break
        if cost > max_tokens:  # one block over the cap alone (adjacent hits share a block): its first lines
            text, cut = _first_lines(block, max_tokens)
            rendered.append(text)
            break
        rendered.append(text)
        used += cost
    head = f"{count_phrase(hits)} for {query!r}, best first" + (NEIGHBOUR_NOTE if match_counts(hits)[1] else "")
    left = cut + [hit for block in blocks[len(rendered):] for hit in block["members"]]
    note = ""
    if left:
        note = (f"\n\n[{len(left)} more not shown ({count_phrase(left)}; output capped at about {max_tokens} "
                "tokens): use more specific keywords, or archive_expand on a range]")
    return head + ":\n\n" + "\n\n".join(rendered) + note


def _first_lines(block: dict[str, Any], max_tokens: int) -> tuple[str, list[dict[str, Any]]]:
    """A block over `max_tokens` as its first entries that fit (at least its first, cut to the cap), and the hits
    of the entries left out."""
    if "memory" in block:  # one working-memory item: its head
        return token_head(_render(block), max_tokens), []
    kept, shown, used = [], set(), 0
    for seq in sorted(block["lines"]):
        text = _line(seq, *block["lines"][seq])
        cost = count_tokens(text) + 1
        if kept and used + cost > max_tokens:
            break
        kept.append(text if cost <= max_tokens else token_head(text, max_tokens))
        shown.add(seq)
        used += cost
    return "\n".join(kept), [hit for hit in block["members"] if hit.get("seq") not in shown]


def _overlaps(a: dict[int, Any], b: dict[int, Any]) -> bool:
    return min(b) <= max(a) + 1 and min(a) <= max(b) + 1


def _render(block: dict[str, Any]) -> str:
    if "memory" in block:
        hit = block["memory"]
        section = hit.get("section") or "item"
        return f"[{hit['archive_id']} working memory, {section} · {hit['match']}] {hit['content']}"
    return "\n".join(_line(seq, *block["lines"][seq]) for seq in sorted(block["lines"]))


def _line(seq: int, entry: dict[str, Any], is_hit: bool) -> str:
    if is_hit:
        head = f"[{entry['archive_id']} #{seq} {entry['turn_id']} {entry['role']} · {entry['match']}]"
        return f"{head} {entry['content']}"
    return f"  (context) [#{seq} {entry['turn_id']} {entry['role']}] {entry['content']}"  # a neighbour, for context
