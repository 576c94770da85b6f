"""Workload and checks of the power-loss test (`test_power_loss.py`, `benchmarks/bench_power_loss.py`).

    python power_child.py <data_root> <durable 0|1> <mark_file> <rounds>

runs under `power_shim.c`: two sessions get turns (one carries a tool result large enough to be a
payload), commit every few turns, and a third session is created and deleted. After each step it
appends to `<mark_file>` what it may now count on:

    M <session> <token>…   appended and returned (durable=True: confirmed)
    P <session> <token>…   appended and returned (durable=False: confirmed only by a later S)
    S                      os.sync() returned: everything before it is on disk
    A <session> <archive_id> <end_seq>   a commit completed (its archive is always durable)
    D <session>            a delete returned

`verify(root, marks, durable)` opens an image of the disk after a cut and counts what broke.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

SESSIONS = ("alpha", "beta")
DELETED = "gamma"
COMMIT_EVERY = 4  # turns
KEEP = 4
PAYLOAD_TURN = 2  # alpha's turn carrying a large tool result
PAYLOAD_BYTES = 96 * 1024
TOKEN = re.compile(r"\b((?:alpha|beta|gamma)\d+[uat])\b")


def token(session: str, turn: int, role: str) -> str:
    """The unique word of one message: session, turn number, u/a/t for user, assistant, tool."""
    return f"{session}{turn}{role}"


def turn_messages(session: str, turn: int) -> list[Any]:
    """One turn: a user message and the answer; one turn of alpha also runs a tool with a large result."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    user = HumanMessage(f"{token(session, turn, 'u')} please move src/{session}/mod_{turn}.py and keep the tests",
                        id=f"{session}-{turn}-u")
    answer = AIMessage(f"{token(session, turn, 'a')} moved it; error E{turn:03d} is gone", id=f"{session}-{turn}-a")
    if session != "alpha" or turn != PAYLOAD_TURN:
        return [user, answer]
    call = AIMessage("", id=f"{session}-{turn}-c", tool_calls=[{"id": f"call{turn}", "name": "read_log",
                                                                 "args": {"path": "build.log"}}])
    body = "".join(f"line {i:05d} compiled module_{i % 97}.o in {i % 13} ms\n" for i in range(PAYLOAD_BYTES // 40))
    result = ToolMessage(f"{token(session, turn, 't')}\n{body}", tool_call_id=f"call{turn}", id=f"{session}-{turn}-t")
    return [user, call, result, answer]


def workload(root: Path, durable: bool, mark_path: Path, rounds: int) -> None:
    """The steps the shim logs; see the module doc for the marks."""
    from workmem.graphs.engine import WorkingMemoryEngine

    mark = open(mark_path, "a", buffering=1)  # noqa: SIM115 - one write() per line, logged by the shim
    with WorkingMemoryEngine(root, durable=durable, keep_recent_count=KEEP) as engine:
        for turn in range(rounds):
            for session in SESSIONS:
                stored = engine.add_messages(session, turn_messages(session, turn))
                words = " ".join(w for m in stored for w in TOKEN.findall(text_of(m)))
                mark.write(f"{'M' if durable else 'P'} {session} {words}\n")
                if (turn + 1) % COMMIT_EVERY == 0:
                    result = engine.commit(session, keep_recent_count=KEEP)
                    if result["status"] == "completed" and result["archive_id"]:
                        end = engine.list_archives(session)[-1]["end_seq"]
                        mark.write(f"A {session} {result['archive_id']} {end}\n")
            if turn == 1:
                engine.add_messages(DELETED, turn_messages(DELETED, 0))
                engine.delete_session(DELETED)
                mark.write(f"D {DELETED}\n")
            if not durable and turn % 2 == 1:
                os.sync()
                mark.write("S\n")


def text_of(message: dict[str, Any]) -> str:
    """A stored message's text (its text parts joined)."""
    return " ".join(part.get("text") or "" for part in message.get("parts") or [] if isinstance(part, dict))


def confirmed(marks: list[str]) -> tuple[dict[str, set[str]], dict[str, dict[str, int]], set[str]]:
    """What the marks before a cut promise: tokens per session, archives per session, deleted sessions."""
    tokens: dict[str, set[str]] = {s: set() for s in SESSIONS}
    pending: dict[str, set[str]] = {s: set() for s in SESSIONS}
    archives: dict[str, dict[str, int]] = {s: {} for s in SESSIONS}
    deleted: set[str] = set()
    for line in marks:
        kind, *rest = line.split()
        if kind == "M":
            tokens[rest[0]].update(rest[1:])
        elif kind == "P":
            pending[rest[0]].update(rest[1:])
        elif kind == "S":
            for session, words in pending.items():
                tokens[session] |= words
                words.clear()
        elif kind == "A":
            archives[rest[0]][rest[1]] = int(rest[2])
        elif kind == "D":
            deleted.add(rest[0])
    return tokens, archives, deleted


def order_key(word: str) -> tuple[int, int]:
    """Where a token belongs in its session: (turn, position in the turn)."""
    match = re.fullmatch(r"[a-z]+?(\d+)([uat])", word)
    assert match, word
    return int(match.group(1)), "uta".index(match.group(2))


def verify(root: Path, marks: list[str], durable: bool, misses: list[str] | None = None) -> dict[str, int]:
    """Open an image, resume what was running, and count: confirmed messages lost or duplicated, messages
    out of order, confirmed archives lost, archived messages search misses (or live ones it finds), a deleted
    session back, and whether one more turn commits."""
    from workmem.graphs.engine import WorkingMemoryEngine

    tokens, archives, deleted = confirmed(marks)
    misses = [] if misses is None else misses
    counts = dict.fromkeys(("confirmed", "lost", "duplicated", "disorder", "archives", "archives_lost",
                            "search_missed", "search_live", "deleted_back", "commit_failed"), 0)
    with WorkingMemoryEngine(root, durable=durable, keep_recent_count=KEEP) as engine:
        engine.resume_all()
        for session in SESSIONS:
            counts["confirmed"] += len(tokens[session])
            counts["archives"] += len(archives[session])
            if not engine.session_exists(session):
                counts["lost"] += len(tokens[session])
                counts["archives_lost"] += len(archives[session])
                continue
            listed = {a["archive_id"]: a["end_seq"] for a in engine.list_archives(session)}
            counts["archives_lost"] += sum(listed.get(a) != end for a, end in archives[session].items())
            archived = [(m, True) for a in listed for m in engine.archive_messages(session, a)]
            stored = archived + [(m, False) for m in engine.live_messages(session)]
            words = [(w, m["seq"], is_archived) for m, is_archived in stored for w in TOKEN.findall(text_of(m)[:200])]
            seen = [w for w, _, _ in words]
            counts["duplicated"] += len(seen) - len(set(seen))
            counts["lost"] += len(tokens[session] - set(seen))
            keys = [order_key(w) for w in seen]
            counts["disorder"] += sum(a >= b for a, b in zip(keys, keys[1:], strict=False))
            for word, seq, is_archived in words:
                hits = engine.archive_search(session, word)
                if any(h.get("seq") == seq for h in hits) != is_archived:
                    counts["search_missed" if is_archived else "search_live"] += 1
                    misses.append(f"{session} {word} seq {seq}: {[(h.get('seq'), h['content'][:30]) for h in hits]}")
            for turn in range(1000, 1003):  # more than KEEP messages: the commit has something to archive
                engine.add_messages(session, turn_messages(session, turn))
            result = engine.commit(session, keep_recent_count=KEEP)
            counts["commit_failed"] += result["status"] != "completed"
        counts["deleted_back"] += sum(engine.session_exists(s) for s in deleted)
    return counts


if __name__ == "__main__":
    workload(Path(sys.argv[1]), sys.argv[2] == "1", Path(sys.argv[3]), int(sys.argv[4]))
