"""`check` of the Postgres backend: every anomaly of one session's rows, named by table and key.

The rows are kept consistent by transactions, so an anomaly here means someone changed them by hand
(or a bug): counters that disagree with the messages, seqs missing, archives that do not chain, a
message whose archive does not exist. Reads the whole session: never on a hot path.
"""

from __future__ import annotations

from typing import Any

from workmem.state.errors import Anomaly
from workmem.state.ids import archive_name
from workmem.state.postgres.rows import MESSAGE_COLUMNS, message_of_row
from workmem.state.postgres.schema import Database
from workmem.state.retention import Keep, covered_tokens

_MESSAGES = """
SELECT count(*) AS total, COALESCE(max(seq), 0) AS top,
       count(*) FILTER (WHERE archive_id IS NULL) AS live,
       COALESCE(min(seq) FILTER (WHERE archive_id IS NULL), 0) AS first_live,
       count(*) FILTER (WHERE archive_id IS NULL AND seq <= %(end)s) AS live_but_archived,
       count(*) FILTER (WHERE archive_id IS NOT NULL AND seq > %(end)s) AS archived_but_live
FROM messages WHERE session_id = %(sid)s
"""
_PER_ARCHIVE = """
SELECT archive_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM messages
WHERE session_id = %s AND archive_id IS NOT NULL GROUP BY archive_id
"""
_LIVE = "SELECT tokens, role = 'user' AS starts FROM messages WHERE session_id = %s AND archive_id IS NULL ORDER BY seq"


def live_pending(conn: Any, session_id: str, keep: Keep) -> tuple[int, int]:
    """(pending_tokens, live_tokens) the live messages imply for `keep`: the tokens outside the keep
    window (`retention.covered_tokens`), and all of theirs."""
    rows = conn.execute(_LIVE, [session_id]).fetchall()
    tokens = [r["tokens"] for r in rows]
    return covered_tokens(tokens, [r["starts"] for r in rows], keep), sum(tokens)


def session_anomalies(db: Database, row: dict[str, Any]) -> list[Anomaly]:
    """What is wrong with the session whose `sessions` row is `row`."""
    sid = row["session_id"]
    session_key = db.where("sessions", f"session_id={sid!r}")
    found: list[Anomaly] = []
    counts = db.row(_MESSAGES, {"sid": sid, "end": row["last_archive_end"]}) or {}
    if counts["top"] != row["next_seq"] - 1:
        found.append(Anomaly(session_key, 0, f"next_seq is {row['next_seq']} but the newest message is seq "
                                             f"{counts['top']}"))
    if counts["total"] != counts["top"]:
        found.append(Anomaly(db.where("messages", f"session_id={sid!r}"), 0,
                             f"{counts['top'] - counts['total']} seq(s) of 1..{counts['top']} missing"))
    if counts["live"] != row["message_count"]:
        found.append(Anomaly(session_key, 0, f"message_count is {row['message_count']} but {counts['live']} "
                                             "messages are live"))
    if counts["live"] and counts["first_live"] != row["last_archive_end"] + 1:
        found.append(Anomaly(db.where("messages", f"session_id={sid!r}, seq={counts['first_live']}"), 0,
                             f"the live messages start at seq {counts['first_live']}, not "
                             f"{row['last_archive_end'] + 1}"))
    for key, what in (("live_but_archived", "live although the last archive ends after them"),
                      ("archived_but_live", "archived after the last archive's end")):
        if counts[key]:
            found.append(Anomaly(db.where("messages", f"session_id={sid!r}"), 0, f"{counts[key]} message(s) {what}"))
    found += _row_anomalies(db, sid)
    found += _archive_anomalies(db, row)
    found += _payload_anomalies(db, sid)
    with db.pool.connection() as conn:
        pending, live = live_pending(conn, sid, (row["keep_unit"], row["keep_n"]))
    for field, value in (("pending_tokens", pending), ("live_tokens", live)):
        if value != row[field]:
            found.append(Anomaly(session_key, 0, f"{field} is {row[field]}, the live messages imply {value}"))
    return found


_ROWS = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND seq > %s ORDER BY seq LIMIT %s"
ROWS_AT_ONCE = 1_000


def _row_anomalies(db: Database, sid: str) -> list[Anomaly]:
    """Rows that are not a stored message (the readers leave them out), read a thousand at a time."""
    found, after = [], 0
    while rows := db.rows(_ROWS, [sid, after, ROWS_AT_ONCE]):
        for r in rows:
            if why := message_of_row(r)[1]:
                found.append(Anomaly(db.where("messages", f"session_id={sid!r}, seq={r['seq']}"), 0,
                                     f"not a stored message ({why}): left out of every read"))
        after = rows[-1]["seq"]
    return found


# Each payload reference of the session's messages, with what its row holds (size and sha256 computed by the
# server, so the payloads never travel): a missing row, a size or a digest that differs is an anomaly.
_PAYLOAD_REFS = """
SELECT m.seq, r.part->>'sha256' AS sha,
       CASE WHEN jsonb_typeof(r.part->'size') = 'number' THEN (r.part->>'size')::numeric END AS size,
       p.size AS stored_size, octet_length(p.data) AS length, encode(sha256(p.data), 'hex') AS digest
FROM messages m CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(m.parts) = 'array' THEN m.parts ELSE '[]'::jsonb END) AS r(part)
LEFT JOIN payloads p ON p.session_id = m.session_id AND p.sha256 = r.part->>'sha256'
WHERE m.session_id = %s AND r.part ? 'content_ref' ORDER BY m.seq
"""


def _payload_anomalies(db: Database, sid: str) -> list[Anomaly]:
    """A payload a message refers to that is missing or whose bytes differ from the reference."""
    found = []
    for r in db.rows(_PAYLOAD_REFS, [sid]):
        key = db.where("payloads", f"session_id={sid!r}, sha256={r['sha']!r}")
        if r["length"] is None:
            found.append(Anomaly(key, 0, f"seq {r['seq']}: payload {r['sha']} is missing"))
        elif (r["length"], r["digest"]) != (r["size"], r["sha"]):
            found.append(Anomaly(key, 0, f"seq {r['seq']}: payload {r['sha']} does not match its reference "
                                         f"(size {r['length']}, expected {r['size']})"))
    return found


def _archive_anomalies(db: Database, row: dict[str, Any]) -> list[Anomaly]:
    """Archives that do not chain, disagree with their messages, or that the session row does not name."""
    sid = row["session_id"]
    found: list[Anomaly] = []
    stored = db.rows("SELECT number, archive_id, start_seq, end_seq, object->>'archive_id' AS named FROM archives "
                     "WHERE session_id = %s ORDER BY number", [sid])
    tagged = {r["archive_id"]: r for r in db.rows(_PER_ARCHIVE, [sid])}
    previous_end = 0
    for number, archive in enumerate(stored, start=1):
        key = db.where("archives", f"session_id={sid!r}, archive_id={archive['archive_id']!r}")
        if archive["number"] != number or archive["archive_id"] != archive_name(archive["number"]):
            found.append(Anomaly(key, 0, f"is number {archive['number']}; expected {archive_name(number)}"))
        if archive["named"] != archive["archive_id"]:
            found.append(Anomaly(key, 0, f"its object names archive_id {archive['named']!r}"))
        if archive["start_seq"] != previous_end + 1:
            found.append(Anomaly(key, 0, f"starts at seq {archive['start_seq']}; the archive before ends at "
                                         f"{previous_end}"))
        messages = tagged.pop(archive["archive_id"], None)
        size = archive["end_seq"] - archive["start_seq"] + 1
        if messages is None or (messages["n"], messages["lo"], messages["hi"]) != (
                size, archive["start_seq"], archive["end_seq"]):
            have = f"{messages['n']} in {messages['lo']}..{messages['hi']}" if messages else "none"
            found.append(Anomaly(key, 0, f"covers seqs {archive['start_seq']}..{archive['end_seq']} but its messages "
                                         f"are {have}"))
        previous_end = archive["end_seq"]
    for archive_id, messages in tagged.items():
        found.append(Anomaly(db.where("messages", f"session_id={sid!r}, archive_id={archive_id!r}"), 0,
                             f"{messages['n']} message(s) name an archive that does not exist"))
    last = stored[-1] if stored else None
    if (row["commit_count"], row["last_archive_id"], row["last_archive_end"]) != (
            len(stored), last["archive_id"] if last else None, last["end_seq"] if last else 0):
        found.append(Anomaly(db.where("sessions", f"session_id={sid!r}"), 0,
                             f"last_archive is {row['last_archive_id']} (seq {row['last_archive_end']}) but the "
                             f"archives end at {last['archive_id'] if last else 'none'}"))
    return found
