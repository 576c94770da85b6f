"""Which of an agent's state messages are already stored, and which are new (SPEC §7 *Idempotent ingestion*).

The state's messages are aligned with the session's newest stored messages (the live ones and the
newest archived one); only what follows the aligned run is new. Alignment is authoritative — no
stored count can make it skip a message it did not match.

- **Ids first.** The anchor is the newest stored message whose LangChain id (`meta.lc_id`) is in the
  state. After it, a state message is stored when its id matches a stored one, or when its fingerprint
  (`meta.fp`) matches the next stored message after the anchor (a run anchored by an id); anything
  else is new.
- **Fingerprints only when anchored.** Without an id match (a stateless client re-sends plain dicts,
  which get fresh ids every turn), the live messages must appear in the state as one contiguous run
  whose fingerprints match, either at the very start of the state (a session with no archive yet) or
  right after the newest archived message. An unanchored fingerprint match is a new message: a client
  that sends only new turns and repeats an identical one stores it twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workmem.state.messages import FINGERPRINT_META, fingerprint, lc_id

Stored = dict[str, Any]


@dataclass
class Alignment:
    """The outcome: positions are indexes into the candidate list given to `align`."""

    stored: dict[int, Stored] = field(default_factory=dict)  # position → the stored message it is
    new: list[int] = field(default_factory=list)  # positions to store, in order
    anchor: int = -1  # position of the last aligned message (-1: nothing aligned)

    @property
    def anchored(self) -> bool:
        """True when an id or an anchored fingerprint run matched."""
        return self.anchor >= 0

    def shown(self, live_seqs: set[int]) -> dict[int, Stored]:
        """Positions whose stored message is still live."""
        return {pos: m for pos, m in self.stored.items() if m["seq"] in live_seqs}


def fingerprint_of(msg: dict[str, Any]) -> str:
    """A message's fingerprint: the one recorded when it was stored, else computed from its parts."""
    recorded = (msg.get("meta") or {}).get(FINGERPRINT_META)
    return recorded if isinstance(recorded, str) else fingerprint(msg)


def align(candidates: list[dict[str, Any]], live: list[Stored],
          newest_archived: Callable[[], Stored | None]) -> Alignment:
    """Align normalised state messages (`candidates`, in state order) with the stored session.

    `live` are the live stored messages, oldest first; `newest_archived()` returns the newest archived
    message (read only when the live messages give no id anchor).
    """
    found = _by_ids(candidates, live)
    if found.anchored:
        return found
    archived = newest_archived()
    if archived is not None:
        found = _by_ids(candidates, [archived, *live])
        if found.anchored:
            return found
    return _by_fingerprints(candidates, live, archived)


def _by_ids(candidates: list[dict[str, Any]], stored: list[Stored]) -> Alignment:
    by_id = {key: m for m in stored if (key := lc_id(m))}
    matched = {pos: by_id[key] for pos, c in enumerate(candidates) if (key := lc_id(c)) in by_id}
    if not matched:
        return Alignment()
    anchor = max(matched, key=lambda pos: matched[pos]["seq"])
    return _after_anchor(candidates, stored, Alignment(stored=matched, anchor=anchor))


def _after_anchor(candidates: list[dict[str, Any]], stored: list[Stored], found: Alignment) -> Alignment:
    """After the anchor: id matches are stored; the others match the stored messages after the anchor by
    fingerprint, in order, until the first that does not (from there on everything is new)."""
    anchor_seq = found.stored[found.anchor]["seq"]
    taken = {m["seq"] for m in found.stored.values()}
    rest = [m for m in stored if m["seq"] > anchor_seq and m["seq"] not in taken]
    k = 0
    for pos in range(found.anchor + 1, len(candidates)):
        if pos in found.stored:
            continue
        if not found.new and k < len(rest) and fingerprint_of(rest[k]) == fingerprint_of(candidates[pos]):
            found.stored[pos] = rest[k]
            k += 1
            continue
        found.new.append(pos)
    return found


def _by_fingerprints(candidates: list[dict[str, Any]], live: list[Stored], archived: Stored | None) -> Alignment:
    """The live run found contiguously in the state, at its start (no archive yet) or right after the
    newest archived message; the earliest such place wins (storing too much beats losing a message)."""
    run = [fingerprint_of(m) for m in live]
    prints = [fingerprint_of(c) for c in candidates]
    size = len(run)
    if archived is None:  # nothing archived yet: the run starts the state (an empty session anchors nothing)
        starts = [0] if size and prints[:size] == run else []
    else:
        before = fingerprint_of(archived)
        starts = [p for p in range(1, len(prints) - size + 1)
                  if prints[p - 1] == before and prints[p:p + size] == run]
    if not starts:
        return Alignment(new=list(range(len(candidates))))
    p = starts[0]
    stored = {p + i: m for i, m in enumerate(live)}
    if archived is not None:
        stored[p - 1] = archived
    return Alignment(stored=stored, new=list(range(p + size, len(candidates))), anchor=p + size - 1)
