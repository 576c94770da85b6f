"""Which of an agent's state messages are already stored, and which are new (SPEC §7 *Idempotent ingestion*).

The state's messages are aligned with the session's newest stored messages (the live ones and the
newest archived one); only what follows the aligned run is new. Alignment is authoritative — no
stored count can make it skip a message it did not match.

- **Ids first.** The anchor is the newest stored message whose LangChain id (`meta.lc_id`) is in the
  state. After it, a state message is stored when its id matches a stored one, or when its fingerprint
  (`meta.fp`) matches the next stored message after the anchor (a run anchored by an id); anything
  else is new. A state message between two id matches that has no id match of its own (it was matched
  by fingerprint on an earlier run) is matched by fingerprint among the stored messages between them,
  else it is new — never dropped.
- **An id is not enough.** An id match whose fingerprint differs from the one recorded when the
  message was stored is an *edit* (`update_state` replacing a message by id) or a client reusing ids:
  the state's version is new, and the stored one is no longer in the state.
- **The run's own messages are new.** A message the agent produced in this run (after the state's
  newest message at the run's start, `first_output`) matches a stored one by id only, never by
  fingerprint: it did not exist before the run.
- **Fingerprints only when anchored.** Without an id match (a stateless client re-sends plain dicts,
  which get fresh ids every turn), the live messages must appear in the state as one contiguous run
  whose fingerprints match, either at the very start of the state (a session with no archive yet) or
  right after the newest archived message. When several places qualify, the one whose preceding
  messages agree longest with the newest archive wins (the earliest on a tie: storing too much beats
  losing a message). An unanchored fingerprint match is a new message: a client that sends only new
  turns and repeats an identical one stores it twice.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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

    @property
    def holds_stored(self) -> bool:
        """True when the state holds at least one stored message (live or the newest archived one)."""
        return bool(self.stored)

    def shown(self, live_seqs: set[int]) -> dict[int, Stored]:
        """Positions whose stored message is still live."""
        return {pos: m for pos, m in self.stored.items() if m["seq"] in live_seqs}


def fingerprint_of(msg: dict[str, Any]) -> str:
    """A message's fingerprint: the one recorded when it was stored, else computed from its parts."""
    recorded = (msg.get("meta") or {}).get(FINGERPRINT_META)
    return recorded if isinstance(recorded, str) else fingerprint(msg)


def align(candidates: list[dict[str, Any]], live: list[Stored],
          newest_archive: Callable[[], list[Stored]], first_output: int | None = None) -> Alignment:
    """Align normalised state messages (`candidates`, in state order) with the stored session.

    `live` are the live stored messages, oldest first; `newest_archive()` returns the newest archive's
    last messages, oldest first, `[]` before the first commit (read only when the live messages give no
    id anchor). Candidates from `first_output` on are the run's own messages (default: none).
    """
    outputs = len(candidates) if first_output is None else first_output
    found = _by_ids(candidates, live, outputs)
    if found.anchored:
        return found
    archived = newest_archive()
    if archived:
        # read after `live`: a commit that completed in between archived the start of that snapshot
        live = [m for m in live if m["seq"] > archived[-1]["seq"]]
        found = _by_ids(candidates, [archived[-1], *live], outputs)
        if found.anchored:
            return found
    return _by_fingerprints(candidates, live, archived, outputs)


def _edited(stored: Stored, candidate: dict[str, Any]) -> bool:
    recorded = (stored.get("meta") or {}).get(FINGERPRINT_META)
    return isinstance(recorded, str) and recorded != fingerprint_of(candidate)


def _by_ids(candidates: list[dict[str, Any]], stored: list[Stored], outputs: int) -> Alignment:
    by_id = {key: m for m in stored if (key := lc_id(m))}  # a reused id: the newest stored message wins
    hits = {pos: by_id[key] for pos, c in enumerate(candidates) if (key := lc_id(c)) in by_id}
    if not hits:
        return Alignment()
    anchor = max(hits, key=lambda pos: hits[pos]["seq"])
    edited = {pos for pos, m in hits.items() if _edited(m, candidates[pos])}
    found = Alignment(stored={pos: m for pos, m in hits.items() if pos not in edited}, anchor=anchor)
    taken = {m["seq"] for m in hits.values()}
    _fill_gaps(candidates, stored, found, hits, taken, outputs)
    _after_anchor(candidates, stored, found, hits, taken, outputs, fresh=anchor in edited)
    found.new = sorted({*found.new, *edited})
    return found


def _fill_gaps(candidates: list[dict[str, Any]], stored: list[Stored], found: Alignment,
               hits: dict[int, Stored], taken: set[int], outputs: int) -> None:
    """State messages between the first id match and the anchor without an id match of their own: the
    stored message between their neighbours with the same fingerprint, else new."""
    anchor_seq = hits[found.anchor]["seq"]
    seqs = [m["seq"] for m in stored]  # oldest first
    previous_seq = 0
    for pos in range(min(hits), found.anchor):
        if pos in hits:
            previous_seq = hits[pos]["seq"]
            continue
        prints = fingerprint_of(candidates[pos])
        match = None
        if pos < outputs:
            for j in range(bisect_right(seqs, previous_seq), bisect_left(seqs, anchor_seq)):
                if seqs[j] not in taken and fingerprint_of(stored[j]) == prints:
                    match = stored[j]
                    break
        if match is None:
            found.new.append(pos)
            continue
        found.stored[pos] = match
        taken.add(match["seq"])
        previous_seq = match["seq"]


def _after_anchor(candidates: list[dict[str, Any]], stored: list[Stored], found: Alignment,
                  hits: dict[int, Stored], taken: set[int], outputs: int, *, fresh: bool) -> None:
    """After the anchor: id matches are stored; the others match the stored messages after the anchor by
    fingerprint, in order, until the first that does not (from there on everything is new). After an
    edited anchor everything is new."""
    anchor_seq = hits[found.anchor]["seq"]
    rest = [m for m in stored if m["seq"] > anchor_seq and m["seq"] not in taken]
    k = 0
    for pos in range(found.anchor + 1, len(candidates)):
        if pos in hits:
            fresh = fresh or pos not in found.stored
            continue
        if not fresh and pos < outputs and k < len(rest) and fingerprint_of(rest[k]) == fingerprint_of(candidates[pos]):
            found.stored[pos] = rest[k]
            k += 1
            continue
        found.new.append(pos)
        fresh = True


def _by_fingerprints(candidates: list[dict[str, Any]], live: list[Stored], archived: list[Stored],
                     outputs: int) -> Alignment:
    """The live run found contiguously in the state, at its start (no archive yet) or right after the
    newest archived message; among several places, the one whose preceding state messages agree longest
    with the newest archive, the earliest on a tie (storing too much beats losing a message)."""
    run = [fingerprint_of(m) for m in live]
    prints = [fingerprint_of(c) for c in candidates[:outputs]]  # the run's own messages are new
    size = len(run)
    if not archived:  # nothing archived yet: the run starts the state (an empty session anchors nothing)
        starts = [0] if size and prints[:size] == run else []
    else:
        before = fingerprint_of(archived[-1])
        starts = [p for p in range(1, len(prints) - size + 1)
                  if prints[p - 1] == before and prints[p:p + size] == run]
    if not starts:
        return Alignment(new=list(range(len(candidates))))
    history = [fingerprint_of(m) for m in archived]
    p = max(starts, key=lambda s: (_agreement(prints[:s], history), -s))
    stored = {p + i: m for i, m in enumerate(live)}
    if archived:
        stored[p - 1] = archived[-1]
    return Alignment(stored=stored, new=list(range(p + size, len(candidates))), anchor=p + size - 1)


def _agreement(before: list[str], history: list[str]) -> int:
    """How many of the newest `history` fingerprints the end of `before` repeats, newest first."""
    n = 0
    while n < min(len(before), len(history)) and before[-1 - n] == history[-1 - n]:
        n += 1
    return n
