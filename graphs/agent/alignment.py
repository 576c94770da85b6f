"""Which of an agent's state messages are already stored, and which are new.

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
  which get fresh ids every turn), the state's messages are matched in order against the live ones,
  from the very start of the state (a session with no archive yet), right after the newest archived
  message, or right after the state's leading messages an archive holds (a client re-sending what the agent
  returned: the state lost the archived messages known by id, kept the others), skipping stored messages the
  client does not hold (tool calls and results a chat front end leaves out; the answer to a request the
  client retried); the results of one parallel call match in any order; the first state message that
  matches nothing, and all after it, are new. At least two messages must match (counting those that repeat
  the newest archived ones; after the leading archived messages alone, two live ones): a client that sends
  only new turns and repeats an identical one stores it twice. A system prompt the client re-sends, leading
  and archived, is never new. Among several places, the one whose preceding messages agree longest with the newest
  archive wins (the earliest on a tie: storing too much beats losing a message).
- **Before the first match.** A state message before the first id match that matches a live stored message
  by fingerprint is stored; any other is new unless an archive holds it — it was put in front of the history
  (a summary another middleware wrote, a note `update_state` inserted) and is never dropped.
- **What an archive holds is never new.** A state message an archive holds — the same LangChain id with the
  same fingerprint — is stored, wherever it sits: a fork from a checkpoint an older archive covers, the kept
  messages after a note put in front. Another fingerprint under an archived id is an edit, and new.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workmem.state.messages import FINGERPRINT_META, SYNOPSIS_OF_META, fingerprint, lc_id, same_blocks
from workmem.state.safe_form import checkpointed_fingerprint

Stored = dict[str, Any]
ArchivedKeys = dict[str | None, frozenset[str]]  # archived LangChain id → its fingerprints (None → every one)
MIN_FINGERPRINT_RUN = 2  # messages a stateless client's history must repeat to be aligned


@dataclass
class Alignment:
    """The outcome: positions are indexes into the candidate list given to `align`."""

    stored: dict[int, Stored] = field(default_factory=dict)  # position → the stored message it is
    new: list[int] = field(default_factory=list)  # positions to store, in order
    anchor: int = -1  # position of the last aligned message (-1: nothing aligned)
    first: int = 0  # position of the first id match
    by_ids: bool = True  # aligned by LangChain ids (the state is the agent's own: it may hide messages)

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
    """A message's fingerprint: the one recorded when it was stored, else computed from its parts; a state
    message that is the unedited synopsis of a stored result (no seq: not a stored record) has the result's."""
    meta = msg.get("meta") or {}
    if "seq" not in msg and isinstance(meta.get(SYNOPSIS_OF_META), str):
        return meta[SYNOPSIS_OF_META]
    recorded = meta.get(FINGERPRINT_META)
    return recorded if isinstance(recorded, str) else fingerprint(msg)


class _StoredPrints:
    """Fingerprints of stored messages, each computed at most once per alignment: a plain text message is
    stored without one (`prepare_messages`), and the matching loops compare the same stored message often."""

    def __init__(self) -> None:
        self._known: dict[int, str] = {}
        self._checkpointed: dict[int, str | None] = {}

    def __call__(self, stored: Stored) -> str:
        key = id(stored)  # the stored lists outlive the alignment, so an id is not reused while it runs
        if key not in self._known:
            self._known[key] = fingerprint_of(stored)
        return self._known[key]

    def matches(self, stored: Stored, candidate_print: str) -> bool:
        """The state message of `candidate_print` is the stored one: as stored, or as the checkpointer gave back
        a message whose lone surrogates workmem escaped (its id may have changed with them)."""
        if self(stored) == candidate_print:
            return True
        key = id(stored)
        if key not in self._checkpointed:
            self._checkpointed[key] = checkpointed_fingerprint(stored)
        return self._checkpointed[key] == candidate_print


def align(candidates: list[dict[str, Any]], live: list[Stored],
          newest_archive: Callable[[], list[Stored]], first_output: int | None = None,
          archived_keys: Callable[[], ArchivedKeys | None] | None = None) -> Alignment:
    """Align normalised state messages (`candidates`, in state order) with the stored session.

    `live` are the live stored messages, oldest first; `newest_archive()` returns the newest archive's
    last messages, oldest first, `[]` before the first commit (read only when the live messages give no
    id anchor). Candidates from `first_output` on are the run's own messages (default: none).
    `archived_keys()`: each archived message's LangChain id with its fingerprints. Without it (or when it
    returns None: an archive could not be read), no archive is searched: state messages before the first id
    match count as stored, and an archived one elsewhere in the state counts as new.
    """
    outputs = len(candidates) if first_output is None else first_output
    stored_print = _StoredPrints()
    keys = _Once(archived_keys)
    found = _by_ids(candidates, live, outputs, stored_print)
    if not found.anchored:
        archived = newest_archive()
        if archived:
            # read after `live`: a commit that completed in between archived the start of that snapshot
            live = [m for m in live if m["seq"] > archived[-1]["seq"]]
            found = _by_ids(candidates, [archived[-1], *live], outputs, stored_print)
        if not found.anchored:
            found = _by_fingerprints(candidates, live, archived, outputs, stored_print, keys)
    if found.anchored and found.by_ids:
        _before_first_match(candidates, live, found, keys, stored_print)
    return _not_archived(candidates, found, keys)


class _Once:
    """`archived_keys()`, called at most once per alignment."""

    def __init__(self, read: Callable[[], ArchivedKeys | None] | None) -> None:
        self._read, self._done, self._keys = read, read is None, None

    def __call__(self) -> ArchivedKeys | None:
        if not self._done:
            self._keys, self._done = self._read(), True  # type: ignore[misc]
        return self._keys


def archive_keys(messages: list[Stored]) -> ArchivedKeys:
    """Each LangChain id of archived `messages` with their fingerprints (recorded and checkpointed)."""
    out: dict[str | None, set[str]] = {None: set()}
    for m in messages:
        prints = {p for p in (fingerprint_of(m), checkpointed_fingerprint(m)) if p}
        out[None] |= prints
        if key := lc_id(m):
            out.setdefault(key, set()).update(prints)
    return {key: frozenset(prints) for key, prints in out.items()}


def _before_first_match(candidates: list[dict[str, Any]], live: list[Stored], found: Alignment,
                        keys: Callable[[], ArchivedKeys | None], stored_print: _StoredPrints) -> None:
    """State messages before the first id match: a live message older than that match with their fingerprint;
    else, when an archive holds their fingerprint (under any id: a client re-sends the archived history with
    fresh ids), archived; else new (put in front of the history: a summary another middleware wrote, a note
    `update_state` inserted). Without the archives' keys they count as stored, as an archive likely holds them."""
    loose = [pos for pos in range(found.first) if pos not in found.stored and pos not in found.new]
    archived = keys() if loose else None
    if archived is None:
        return
    first_seq = found.stored[found.first]["seq"] if found.first in found.stored else float("inf")
    taken = {m["seq"] for m in found.stored.values()}
    older = [m for m in live if m["seq"] < first_seq and m["seq"] not in taken]
    for pos in loose:
        candidate_print = fingerprint_of(candidates[pos])
        match = next((m for m in older if stored_print.matches(m, candidate_print)), None)
        if match is None and candidate_print not in archived.get(None, ()):
            found.new.append(pos)
        elif match is not None:
            found.stored[pos] = match
            older.remove(match)
    found.new.sort()


def _not_archived(candidates: list[dict[str, Any]], found: Alignment,
                  keys: Callable[[], ArchivedKeys | None]) -> Alignment:
    """`found` without the new positions an archive already holds: the same LangChain id with the same
    fingerprint (an archived message the state still holds, wherever it sits: a fork from a checkpoint an older
    archive covers, the kept messages after a note put in front). Another fingerprint under an archived id is
    an edit, and new."""
    if not any(lc_id(candidates[pos]) for pos in found.new):
        return found
    archived = keys()
    if not archived:
        return found
    found.new = [pos for pos in found.new if (key := lc_id(candidates[pos])) is None
                 or fingerprint_of(candidates[pos]) not in archived.get(key, ())]
    return found


def _edited(stored: Stored, candidate: dict[str, Any]) -> bool:
    """The state's message is another version of the stored one with its id (not the same message after a
    checkpoint round trip turned the lone surrogates workmem escaped into `?`)."""
    recorded = (stored.get("meta") or {}).get(FINGERPRINT_META)
    if not isinstance(recorded, str):
        return False
    found = fingerprint_of(candidate)
    if recorded == found or checkpointed_fingerprint(stored) == found:
        return not same_blocks(stored, candidate)  # the same words with another image is an edit too
    return True


def _by_ids(candidates: list[dict[str, Any]], stored: list[Stored], outputs: int,
            stored_print: _StoredPrints) -> Alignment:
    by_id = {key: m for m in stored if (key := lc_id(m))}  # a reused id: the newest stored message wins
    hits = {pos: by_id[key] for pos, c in enumerate(candidates) if (key := lc_id(c)) in by_id}
    if not hits:
        return Alignment()
    anchor = max(hits, key=lambda pos: hits[pos]["seq"])
    edited = {pos for pos, m in hits.items() if _edited(m, candidates[pos])}
    found = Alignment(stored={pos: m for pos, m in hits.items() if pos not in edited}, anchor=anchor,
                      first=min(hits))
    taken = {m["seq"] for m in hits.values()}
    _fill_gaps(candidates, stored, found, hits, taken, outputs, stored_print)
    _after_anchor(candidates, stored, found, hits, taken, outputs, stored_print, fresh=anchor in edited)
    found.new = sorted({*found.new, *edited})
    return found


def _fill_gaps(candidates: list[dict[str, Any]], stored: list[Stored], found: Alignment,
               hits: dict[int, Stored], taken: set[int], outputs: int, stored_print: _StoredPrints) -> None:
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
                if seqs[j] not in taken and stored_print.matches(stored[j], prints):
                    match = stored[j]
                    break
        if match is None:
            found.new.append(pos)
            continue
        found.stored[pos] = match
        taken.add(match["seq"])
        previous_seq = match["seq"]


def _after_anchor(candidates: list[dict[str, Any]], stored: list[Stored], found: Alignment,
                  hits: dict[int, Stored], taken: set[int], outputs: int, stored_print: _StoredPrints, *,
                  fresh: bool) -> None:
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
        if not fresh and pos < outputs and k < len(rest) and stored_print.matches(rest[k],
                                                                                  fingerprint_of(candidates[pos])):
            found.stored[pos] = rest[k]
            k += 1
            continue
        found.new.append(pos)
        fresh = True


def _by_fingerprints(candidates: list[dict[str, Any]], live: list[Stored], archived: list[Stored],
                     outputs: int, stored_print: _StoredPrints,
                     keys: Callable[[], ArchivedKeys | None] = lambda: None) -> Alignment:
    """A stateless client's history: the state's messages matched in order against the live messages, from
    the start of the state (no archive yet), right after the newest archived message, or right after the
    state's leading run of messages an archive holds (a client that keeps what the agent returned: the state
    trimmed the archived messages it knew by id, never all of them). Stored messages the client does not hold
    are skipped (a chat front end re-sends the texts without the agent's tool calls; a retried request never
    saw the first attempt's answer); the first state message that matches nothing ends the match, and it and
    everything after it are new. The match counts only when it holds at least two messages, counting those
    that repeat the newest archived ones: a client that sends only new turns and repeats an identical one
    stores it twice. Among several places, the best-agreeing wins, the earliest on a tie (storing too much
    beats losing a message)."""
    prints = [fingerprint_of(c) for c in candidates[:outputs]]  # the run's own messages are new
    history = [stored_print(m) for m in archived]
    starts = {0: 0} if not archived else {p: _agreement(prints[:p], history) for p in range(1, len(prints) + 1)
                                          if prints[p - 1] == history[-1]}
    held = _archived_run(prints, keys) if archived else 0
    if archived and held not in starts:
        starts[held] = held  # every message before it is archived: they agree with the archive, as a set
    # an archived system prompt a client re-sends is no new message (a repeated turn may be: it is stored again;
    # a live one is, too: taken for the stored copy, it would make the client's state look like a whole history)
    instructions = {pos for pos in range(held) if candidates[pos].get("role") == "system"}
    best: tuple[tuple[int, int], int, dict[int, Stored]] | None = None
    for p, agreement in sorted(starts.items()):
        matched = _in_order(candidates, prints, p, live, stored_print)
        classic = not archived or (p >= 1 and prints[p - 1] == history[-1])
        # after archived messages alone, the live run itself must repeat two messages: a client sending its
        # system prompt and one new turn that repeats a live one must store it again, never lose it
        if (agreement if classic else 0) + len(matched) < MIN_FINGERPRINT_RUN:
            continue
        key = (agreement + len(matched), -p)
        if best is None or key > best[0]:
            best = (key, p, matched)
    if best is None:
        return Alignment(new=[pos for pos in range(len(candidates)) if pos not in instructions])
    _, p, matched = best
    stored = dict(matched)
    if archived and p >= 1 and prints[p - 1] == history[-1]:
        stored[p - 1] = archived[-1]
    anchor = max(stored)
    return Alignment(stored=stored, new=[pos for pos in range(p, len(candidates))
                                         if pos not in stored and pos not in instructions], anchor=anchor, by_ids=False)


def _archived_run(prints: list[str], keys: Callable[[], ArchivedKeys | None]) -> int:
    """How many of the state's first messages an archive holds (by fingerprint, under any id); 0 when the
    archives cannot be read."""
    archived = (keys() or {}).get(None, frozenset())
    n = 0
    while n < len(prints) and prints[n] in archived:
        n += 1
    return n


def _in_order(candidates: list[dict[str, Any]], prints: list[str], start: int, live: list[Stored],
              stored_print: _StoredPrints) -> dict[int, Stored]:
    """State positions from `start` matched, in order, to live messages (skipping live ones), up to the first
    position that matches none. The results of one parallel call match in any order (a client may re-send them
    as they came back)."""
    matched: dict[int, Stored] = {}
    taken: set[int] = set()
    k = 0
    for pos in range(start, len(prints)):
        j = next((j for j in range(k, len(live)) if _same(live[j], candidates[pos], prints[pos], stored_print)), None)
        if j is None and candidates[pos].get("role") == "tool":
            j = next((j for j in _results_before(live, k) if j not in taken
                      and _same(live[j], candidates[pos], prints[pos], stored_print)), None)
        if j is None:
            break
        matched[pos] = live[j]
        taken.add(j)
        k = max(k, j + 1)
    return matched


def _results_before(live: list[Stored], k: int) -> range:
    """Indexes of the run of tool results that ends just before `k` (the results of one call, as stored)."""
    first = k
    while first > 0 and live[first - 1].get("role") == "tool":
        first -= 1
    return range(first, k)


def _same(stored: Stored, candidate: dict[str, Any], candidate_print: str, stored_print: _StoredPrints) -> bool:
    """The same message: equal fingerprints, or — for a plain text message a chat front end re-sends — the
    same role and text as a stored message that also carried tool calls."""
    if stored_print.matches(stored, candidate_print):
        return True
    parts = candidate.get("parts") or []
    if stored.get("role") != candidate.get("role") or not parts or any(p.get("type") != "text" for p in parts):
        return False
    return _texts(stored) == _texts(candidate)


def _texts(msg: dict[str, Any]) -> list[str]:
    return [p.get("text") for p in msg.get("parts") or [] if p.get("type") == "text"]


def _agreement(before: list[str], history: list[str]) -> int:
    """How many of the newest `history` fingerprints the end of `before` repeats, newest first."""
    n = 0
    while n < min(len(before), len(history)) and before[-1 - n] == history[-1 - n]:
        n += 1
    return n
