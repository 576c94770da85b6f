"""`PgSessionStore`: sessions, messages and archives in Postgres, the `SessionStorage` of the
Postgres backend.

The live rule is a column: a message is live iff its `archive_id` is null. Persisting an archive is
one transaction (insert the archive, set `archive_id` on its seqs), so there is no crash window and
no garbage to collect. An append is one transaction whose seqs come from `UPDATE sessions SET next_seq
= next_seq + n … RETURNING`: the row lock serialises the appenders of one session only. Live seqs are
always the contiguous run `last_archive_end + 1 .. next_seq - 1`, which keeps the meta O(1).
"""

from __future__ import annotations

from typing import Any

from workmem.state.archive_checks import check_archive_write
from workmem.state.archive_object import with_working_summary
from workmem.state.errors import ArchiveNotFound, DamagedFile, InvalidInput, SessionNotFound
from workmem.state.forget import forgotten_copy
from workmem.state.ids import archive_name, archive_number, check_seq_range
from workmem.state.messages import DEFAULT_MAX_MESSAGE_BYTES, FORGOTTEN_META, indexed_text, message_text
from workmem.state.payloads import (
    DEFAULT_LIMITS,
    PayloadCache,
    PayloadLimits,
    payloads_of,
    refs_of,
    resolve,
    stored_parts,
    with_given_texts,
)
from workmem.state.postgres.checks import live_pending, session_anomalies
from workmem.state.postgres.rows import MESSAGE_COLUMNS, message_of_row, messages_of_rows, row_as_found
from workmem.state.postgres.schema import NUL_STANDIN, Database, index_documents, session_key, shown_url, without_nul
from workmem.state.retention import MESSAGES, Keep, as_keep
from workmem.state.search.search_hits import doc_fields, memory_seq
from workmem.state.session_meta import now_iso, public
from workmem.state.stored import batch_ids, merge_repeats, prepared_batch, repeats, stored_records, to_write
from workmem.state.turns import DEFAULT_KEEP_RECENT

# What an append may repeat: from the newest archive's first seq on, through the primary key, and the forgotten
# messages of older archives, through the partial index of forgotten rows; one round trip.
_REPEATS = (f"WITH newest AS (SELECT coalesce((SELECT start_seq FROM archives WHERE session_id = %(sid)s "
            f"ORDER BY number DESC LIMIT 1), 1) AS seq) "
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %(sid)s AND meta ? '{FORGOTTEN_META}' "
            f"AND seq < (SELECT seq FROM newest) AND meta->>'lc_id' = ANY(%(ids)s) "
            f"UNION ALL SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %(sid)s "
            f"AND seq >= (SELECT seq FROM newest) AND meta->>'lc_id' = ANY(%(ids)s) ORDER BY seq")
# The seqs come from the row's next_seq, or past the newest stored row when a hand edit or an older backup of the
# sessions table left next_seq behind (the files backend derives it from its lines the same way): a seq is never
# taken twice. The newest row is one step down the primary key.
_RESERVE = ("UPDATE sessions SET next_seq = greatest(next_seq, (SELECT coalesce(max(seq), 0) + 1 FROM messages "
            "WHERE session_id = %(sid)s)) + %(n)s, message_count = message_count + %(n)s, "
            "live_tokens = live_tokens + %(tokens)s, updated_at = greatest(updated_at, %(now)s) "
            "WHERE session_id = %(sid)s RETURNING next_seq, message_count, keep_unit, keep_n, last_archive_end, "
            "last_turn")
# A payload row: content-addressed, so an existing row is kept — unless its bytes no longer match their digest
# (altered by hand or damaged), when the caller's copy replaces it.
_PAYLOAD = ("INSERT INTO payloads (session_id, sha256, size, data) VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, "
            "sha256) DO UPDATE SET size = excluded.size, data = excluded.data "
            "WHERE encode(sha256(payloads.data), 'hex') <> payloads.sha256")
_INSERT = ("INSERT INTO messages (session_id, seq, id, turn_id, role, parts, meta, exact_body, tokens, created_at, "
           "content, length, asks, stamp) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")


class PgSessionStore:
    """Sessions of one Postgres schema; safe for many threads, processes and machines at once."""

    def __init__(self, db: Database, *, durable: bool = True,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 payload_limits: PayloadLimits = DEFAULT_LIMITS) -> None:
        if not isinstance(durable, bool):
            raise InvalidInput("durable", durable, "must be a bool")
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1:
            raise InvalidInput("max_message_bytes", max_message_bytes, "must be a positive integer")
        if not isinstance(payload_limits, PayloadLimits):
            raise InvalidInput("payload_limits", payload_limits, "must be a PayloadLimits")
        self.db, self.durable, self.max_message_bytes = db, durable, max_message_bytes
        self.payload_limits = payload_limits
        self._payload_texts = PayloadCache()

    # -- sessions -----------------------------------------------------------------------------------

    def location(self, session_id: str) -> str:
        """The session's row, for people: `schema.sessions (session_id=…)` on the database."""
        key = f"session_id={session_key(session_id)!r}"
        return f"{self.db.where('sessions', key)} on {shown_url(self.db.url)}"

    def session_exists(self, session_id: str) -> bool:
        """True once the session has been written to."""
        session_key(session_id)
        return self.db.row("SELECT 1 FROM sessions WHERE session_id = %s", [session_id]) is not None

    def list_sessions(self) -> list[str]:
        """Every session id, sorted."""
        return [r["session_id"] for r in self.db.rows("SELECT session_id FROM sessions ORDER BY session_id")]

    def meta(self, session_id: str) -> dict[str, Any]:
        """Session meta, one row read."""
        return _meta(self._existing(session_id))

    def set_keep(self, session_id: str, keep: Keep) -> dict[str, Any]:
        """Set the keep window pending_tokens is computed with (`(unit, n)`, see `keep_value`); returns the meta."""
        keep = as_keep(keep)
        with self.db.transaction(durable=self.durable) as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone() is None:
                raise SessionNotFound(session_key(session_id))
            row = _recount(conn, session_id, keep)
        return _meta(row)

    def hidden(self, session_id: str) -> set[int]:
        """Seqs of live messages the agent's state no longer holds: left out of assemble and of commit
        transcripts, still in the log and searchable once archived. A column beside the log's."""
        self._existing(session_id)
        return {r["seq"] for r in self.db.rows("SELECT seq FROM messages WHERE session_id = %s AND archive_id IS NULL "
                                               "AND hidden", [session_id])}

    def set_hidden(self, session_id: str, hide: set[int], unhide: set[int]) -> set[int]:
        """Mark live seqs hidden / shown again (shown wins); archived seqs are left alone. → the hidden set."""
        shown = sorted(_seqs(unhide))
        with self.db.transaction(durable=self.durable) as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone() is None:
                raise SessionNotFound(session_key(session_id))
            conn.execute("UPDATE messages SET hidden = seq <> ALL(%s) WHERE session_id = %s AND archive_id IS NULL "
                         "AND seq = ANY(%s)", [shown, session_id, sorted(_seqs(hide) | set(shown))])
            rows = conn.execute("SELECT seq FROM messages WHERE session_id = %s AND archive_id IS NULL AND hidden",
                                [session_id]).fetchall()
        return {r["seq"] for r in rows}

    def problems(self, session_id: str) -> list[Any]:
        """What the latest reads found wrong: rows cannot be torn, so nothing (see `check`)."""
        self._existing(session_id)
        return []

    def check(self, session_id: str) -> list[Any]:
        """Every anomaly of the session's rows, with table and key (O(messages): never on a hot path)."""
        return session_anomalies(self.db, self._existing(session_id))

    def close(self) -> None:
        """Nothing is cached; the storage closes the pool."""

    # -- appending ----------------------------------------------------------------------------------

    def append(self, session_id: str, messages: list[Any], *, durable: bool | None = None) -> list[dict[str, Any]]:
        """Validate every message, then append the batch in one transaction; returns the stored messages."""
        session_key(session_id)
        prepared, counts = prepared_batch(messages, durable, self.max_message_bytes, self.payload_limits)
        if not prepared:
            return []
        now = now_iso()
        given = [msg for msg, _body in prepared]
        with self.db.transaction(durable=self.durable if durable is None else durable) as conn:
            found = self._repeats(conn, session_id, prepared, now) if batch_ids(prepared) else None
            payloads = payloads_of(to_write(given, found))  # a repeat's too: it heals a damaged stored copy
            if payloads:
                with conn.cursor() as cur:
                    cur.executemany(_PAYLOAD, [(session_id, sha, len(data), data) for sha, data in payloads.items()])
            if found is not None and any(copy is not None for copy in found):
                fresh = [i for i, copy in enumerate(found) if copy is None]
                prepared, counts = [prepared[i] for i in fresh], [counts[i] for i in fresh]
                if not prepared:
                    return with_given_texts(merge_repeats(found, []), given)
            row = self._reserve(conn, session_id, len(prepared), sum(counts), now)
            first = row["next_seq"] - len(prepared)
            stored, turn = stored_records(prepared, counts, first, row["last_turn"], now)
            with conn.cursor() as cur:
                cur.executemany(_INSERT, [_message_row(session_id, m, body) for m, (_msg, body)
                                          in zip(stored, prepared, strict=True)])
            if row["keep_unit"] == MESSAGES:
                conn.execute("UPDATE sessions SET pending_tokens = pending_tokens + %s, last_turn = %s "
                             "WHERE session_id = %s", [_pushed_out(conn, session_id, row, counts), turn, session_id])
            else:  # turns and tokens: the window's edge moves by whole turns, recounted over the live messages
                conn.execute("UPDATE sessions SET last_turn = %s WHERE session_id = %s", [turn, session_id])
                _recount(conn, session_id, (row["keep_unit"], row["keep_n"]))
        return with_given_texts(merge_repeats(found, stored), given) if found is not None else stored

    def _resolved(self, session_id: str, messages: list[dict[str, Any]], *, texts: bool = True) -> list[dict[str, Any]]:
        """Stored messages with their payloads' texts (a missing or altered payload row reads as its placeholder,
        `resolve`); as stored when not `texts`."""
        if not texts:
            return messages
        return resolve(messages, lambda shas: self._payloads(session_id, shas), session_id, self._payload_texts)

    def _payloads(self, session_id: str, shas: list[str]) -> dict[str, bytes]:
        rows = self.db.rows("SELECT sha256, data FROM payloads WHERE session_id = %s AND sha256 = ANY(%s)",
                            [session_id, shas])
        return {r["sha256"]: bytes(r["data"]) for r in rows}

    @staticmethod
    def _repeats(conn: Any, session_id: str, prepared: list[tuple[dict[str, Any], bytes | None]],
                 now: str) -> list[Any]:
        """`stored.repeats` of a batch among the live messages and the newest archive's, read through the
        primary key from the newest archive's first seq on, and the forgotten messages of older archives; the
        session row is locked first — created first when new, so two appends of one batch to a new (or just
        deleted) session wait for each other too."""
        while True:  # a delete holding the row when we wait for it leaves none: create it again, and lock that
            _create_row(conn, session_id, now)
            if conn.execute("SELECT 1 FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone():
                break
        rows = conn.execute(_REPEATS, {"sid": session_id, "ids": batch_ids(prepared)}).fetchall()
        return repeats(prepared, messages_of_rows(rows))

    @staticmethod
    def _reserve(conn: Any, session_id: str, n: int, tokens: int, now: str) -> dict[str, Any]:
        """Take n seqs (and the session row's lock); a new session's row is created first."""
        args = {"n": n, "tokens": tokens, "now": now, "sid": session_id}
        row = conn.execute(_RESERVE, args).fetchone()
        if row is None:
            _create_row(conn, session_id, now)
            row = conn.execute(_RESERVE, args).fetchone()
        return row

    # -- reading ------------------------------------------------------------------------------------

    def live_messages(self, session_id: str, *, texts: bool = True) -> list[dict[str, Any]]:
        """Messages not yet archived (archive_id is null), oldest first (`texts=False`: payload parts as stored)."""
        self._existing(session_id)
        return self._resolved(session_id, texts=texts, messages=messages_of_rows(self.db.rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND archive_id IS NULL ORDER BY seq",
            [session_id])))

    def messages_in_range(self, session_id: str, start_seq: int, end_seq: int, *,
                          texts: bool = True) -> list[dict[str, Any]]:
        """Messages with start_seq ≤ seq ≤ end_seq, archived or live (`texts=False`: payload parts as stored)."""
        check_seq_range(start_seq, end_seq)
        self._existing(session_id)
        return self._resolved(session_id, texts=texts, messages=messages_of_rows(self.db.rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq",
            [session_id, start_seq, end_seq])))

    # -- archives -----------------------------------------------------------------------------------

    def last_complete_archive(self, session_id: str) -> dict[str, Any] | None:
        """The newest archive object (with the WM filled in), or None before the first commit."""
        self._existing(session_id)
        row = self.db.row("SELECT archive_id, object, overview FROM archives WHERE session_id = %s "
                          "ORDER BY number DESC LIMIT 1", [session_id])
        return self._object(session_id, row) if row else None

    def latest_overview(self, session_id: str) -> str | None:
        """The working-memory document of the newest archive, or None."""
        self._existing(session_id)
        row = self.db.row("SELECT overview FROM archives WHERE session_id = %s ORDER BY number DESC LIMIT 1",
                          [session_id])
        return row["overview"] if row else None

    def next_archive_id(self, session_id: str) -> str:
        """Id the next commit writes: last archive + 1."""
        return archive_name(self._existing(session_id)["commit_count"] + 1)

    def list_archives(self, session_id: str) -> list[dict[str, Any]]:
        """`{archive_id, abstract, start_seq, end_seq}` of every archive, oldest first."""
        self._existing(session_id)
        return self.db.rows("SELECT archive_id, abstract, start_seq, end_seq FROM archives WHERE session_id = %s "
                            "ORDER BY number", [session_id])

    def read_archive(self, session_id: str, archive_id: str) -> dict[str, Any]:
        """The archive object plus `overview` (the WM) and `abstract`; unknown id → ArchiveNotFound."""
        row = self._archive(session_id, archive_id, "archive_id, object, overview, abstract")
        return {**self._object(session_id, row), "overview": row["overview"], "abstract": row["abstract"]}

    def _object(self, session_id: str, row: dict[str, Any]) -> dict[str, Any]:
        """An archive row's object with the WM filled in; `DamagedFile` naming the row when it holds no object."""
        if not isinstance(row["object"], dict) or not isinstance(row["overview"], str):
            raise DamagedFile(self.db.where("archives", f"session_id={session_id!r}, archive_id={row['archive_id']!r}"),
                              "its object or overview was changed by hand: not an archive")
        return with_working_summary(row["object"], row["overview"])

    def spilled_items(self, session_id: str, archive_id: str) -> list[dict[str, str]]:
        """The WM items an archive's commit moved out of the working memory."""
        row = self._archive(session_id, archive_id, "archive_id")
        return self.db.rows("SELECT section, item FROM spilled_items WHERE session_id = %s AND archive_id = %s "
                            "ORDER BY ord", [session_id, row["archive_id"]])

    def archive_messages(self, session_id: str, archive_id: str, *, texts: bool = True) -> list[dict[str, Any]]:
        """The messages one archive covers (a damaged payload reads as its placeholder; `texts=False`: payload
        parts as stored)."""
        row = self._archive(session_id, archive_id, "archive_id, start_seq, end_seq")
        return self._resolved(session_id, texts=texts, messages=messages_of_rows(self.db.rows(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND seq BETWEEN %s AND %s "
            "AND archive_id = %s ORDER BY seq", [session_id, row["start_seq"], row["end_seq"], row["archive_id"]])))

    def write_archive(self, session_id: str, archive: dict[str, Any], messages: list[dict[str, Any]],
                      overview: str, abstract: str, spilled: list[dict[str, str]] | None = None) -> str:
        """Insert the archive and mark its messages archived, in one transaction; a no-op when it exists.

        `messages` must be exactly the oldest live messages up to end_seq that can be read: a row missing from
        the run, or one the readers leave out as damaged, is passed over (and archived with the range), as the
        files backend passes a lost or damaged line — one bad row never blocks every later commit."""
        n, seqs, abstract = check_archive_write(session_id, archive, messages, overview, abstract)
        start, end = seqs[0], seqs[-1]
        archive_id = archive_name(n)
        with self.db.transaction(durable=self.durable) as conn:
            row = conn.execute("SELECT * FROM sessions WHERE session_id = %s FOR UPDATE", [session_id]).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            if conn.execute("SELECT 1 FROM archives WHERE session_id = %s AND number = %s", [session_id, n]).fetchone():
                return self.db.where("archives", f"session_id={session_id!r}, archive_id={archive_id!r}")
            if n != row["commit_count"] + 1:
                raise InvalidInput("archive.archive_id", archive["archive_id"],
                                   f"the next archive of this session is {archive_name(row['commit_count'] + 1)}")
            marked = {r["seq"] for r in conn.execute(
                "UPDATE messages SET archive_id = %s WHERE session_id = %s AND seq BETWEEN %s AND %s "
                "AND archive_id IS NULL RETURNING seq", [archive_id, session_id, row["last_archive_end"] + 1, end])}
            if start <= row["last_archive_end"] or not _only_unreadable_left_out(conn, session_id, seqs, marked):
                raise InvalidInput("messages", f"seqs {seqs[0]}..{seqs[-1]}",
                                   f"must be exactly the oldest live messages up to end_seq {end}")
            if min(marked) < start:  # the oldest live rows were unreadable: the archive's range starts with them
                archive = {**archive, "source_turn_range": {**archive["source_turn_range"], "start_seq": min(marked)}}
            self._insert_archive(conn, session_id, archive, archive_id, n, overview, abstract, spilled or [])
            index_documents(conn, session_id, archive_id)
            conn.execute("UPDATE sessions SET commit_count = %s, last_archive_id = %s, last_archive_end = %s, "
                         "message_count = message_count - %s, archived_count = archived_count + %s, "
                         "last_commit_at = %s WHERE session_id = %s",
                         [n, archive_id, end, len(marked), len(marked), archive.get("created_at") or now_iso(),
                          session_id])
            _recount(conn, session_id, (row["keep_unit"], row["keep_n"]))
        return self.db.where("archives", f"session_id={session_id!r}, archive_id={archive_id!r}")

    @staticmethod
    def _insert_archive(conn: Any, session_id: str, archive: dict[str, Any], archive_id: str, n: int, overview: str,
                        abstract: str, spilled: list[dict[str, str]]) -> None:
        from psycopg.types.json import Jsonb

        rng = archive["source_turn_range"]
        conn.execute("INSERT INTO archives (session_id, number, archive_id, task_id, start_seq, end_seq, "
                     "start_turn_id, end_turn_id, overview, abstract, object) "
                     "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     [session_id, n, archive_id, archive.get("task_id"), rng["start_seq"], rng["end_seq"],
                      rng.get("start_turn_id"), rng.get("end_turn_id"), without_nul(overview), without_nul(abstract),
                      Jsonb(without_nul(archive))])
        if spilled:
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO spilled_items (session_id, archive_id, ord, seq, section, item, length) "
                                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                [(session_id, archive_id, i, memory_seq(archive_id, i), without_nul(s["section"]),
                                  without_nul(s["item"]), doc_fields(s["item"])[0]) for i, s in enumerate(spilled)])

    def drop_covered(self, session_id: str, end_seq: int) -> int:
        """Nothing to collect: archiving already set the column. Checks `end_seq` like the file backend."""
        if isinstance(end_seq, bool) or not isinstance(end_seq, int) or end_seq < 0:
            raise InvalidInput("end_seq", end_seq, "must be an integer >= 0")
        archived = self._existing(session_id)["last_archive_end"]
        if end_seq > archived:
            raise InvalidInput("end_seq", end_seq, f"not archived: the last complete archive ends at seq {archived}")
        return 0

    def record_commit(self, session_id: str, archive: dict[str, Any], keep: Keep) -> dict[str, Any]:
        """After a commit: the keep, commit time and pending tokens of the newest archive."""
        keep = as_keep(keep)
        if not isinstance(archive, dict):
            raise InvalidInput("archive", archive, "must be the archive object (a dict)")
        stored = self._archive(session_id, archive.get("archive_id"), "number, object")
        with self.db.transaction(durable=self.durable) as conn:
            newest = conn.execute("UPDATE sessions SET last_commit_at = %s WHERE session_id = %s AND commit_count = %s "
                                  "RETURNING 1", [stored["object"].get("created_at") or now_iso(), session_id,
                                                  stored["number"]]).fetchone()
            if newest is not None:  # the row is locked now
                return _meta(_recount(conn, session_id, keep))
        return self.meta(session_id)

    # -- forgetting (privacy) -----------------------------------------------------------------------

    def forget(self, conn: Any, session_id: str, seqs: list[int], at: str) -> dict[str, Any]:
        """Inside the caller's transaction (the session row locked): each message of `seqs` becomes its
        placeholder (`state.forget`; its search text emptied), the payload rows no message refers to any more
        go, and the tokens are recounted. → {forgotten: seqs changed, payloads_removed}."""
        from psycopg.types.json import Jsonb

        rows = conn.execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND seq = ANY(%s) "
                            "ORDER BY seq", [session_id, seqs]).fetchall()
        refs: set[str] = set()
        changed = []
        for row in rows:  # a row the readers leave out as damaged too: rewritten whatever it holds, so its text goes
            msg, damaged = row_as_found(row)
            copy = forgotten_copy(msg, at)
            if copy == msg and not damaged:
                continue
            refs.update(refs_of(msg))
            changed.append((Jsonb(copy["parts"]), Jsonb(copy["meta"]), copy["tokens"], *doc_fields(""),
                            session_id, msg["seq"]))
        if changed:
            with conn.cursor() as cur:
                cur.executemany("UPDATE messages SET parts = %s, meta = %s, exact_body = NULL, tokens = %s, "
                                "content = '', length = %s, asks = %s, stamp = %s WHERE session_id = %s AND seq = %s",
                                changed)
            keep = conn.execute("SELECT keep_unit, keep_n FROM sessions WHERE session_id = %s", [session_id]).fetchone()
            _recount(conn, session_id, (keep["keep_unit"], keep["keep_n"]))
        removed = conn.execute(
            "DELETE FROM payloads p WHERE session_id = %s AND sha256 = ANY(%s) AND NOT EXISTS (SELECT 1 FROM "
            "messages m, jsonb_array_elements(m.parts) e WHERE m.session_id = p.session_id AND e->>'sha256' = "
            "p.sha256)", [session_id, sorted(refs)]).rowcount if refs else 0
        self._payload_texts.forget(session_id)
        return {"forgotten": [seq for *_, seq in changed], "payloads_removed": removed}

    # -- internals ----------------------------------------------------------------------------------

    def _existing(self, session_id: str) -> dict[str, Any]:
        """The session's row; SessionNotFound when it was never written to."""
        session_key(session_id)
        row = self.db.row("SELECT * FROM sessions WHERE session_id = %s", [session_id])
        if row is None:
            raise SessionNotFound(session_id)
        return row

    def _archive(self, session_id: str, archive_id: Any, columns: str) -> dict[str, Any]:
        """`columns` of an archive row; InvalidInput for a non-string id, ArchiveNotFound for an unknown one."""
        if not isinstance(archive_id, str):
            raise InvalidInput("archive_id", archive_id, "must be a string like 'archive_001'")
        session_key(session_id)
        try:
            n = archive_number(archive_id)
        except InvalidInput:
            raise ArchiveNotFound(session_id, archive_id) from None
        row = self.db.row(f"SELECT {columns} FROM archives WHERE session_id = %s AND number = %s", [session_id, n])
        if row is None:
            self._existing(session_id)
            raise ArchiveNotFound(session_id, archive_id)
        return row


def _only_unreadable_left_out(conn: Any, session_id: str, seqs: list[int], marked: set[int]) -> bool:
    """Whether the live rows an archive marked are the covered messages `seqs`, and any other one among them is a
    row the readers leave out as damaged (never a readable live message a caller forgot)."""
    if not marked.issuperset(seqs):
        return False
    other = sorted(marked.difference(seqs))
    return not other or all(message_of_row(r)[1] for r in conn.execute(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = %s AND seq = ANY(%s)", [session_id, other]))


def _create_row(conn: Any, session_id: str, now: str) -> None:
    """A new session's row (nothing when it exists; a concurrent creator's insert is waited for)."""
    conn.execute("INSERT INTO sessions (session_id, keep_unit, keep_n, created_at, updated_at) "
                 "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                 [session_id, MESSAGES, DEFAULT_KEEP_RECENT, now, now])


def _recount(conn: Any, session_id: str, keep: Keep) -> dict[str, Any]:
    """Set the keep and recount pending and live tokens from the live messages (the session row is locked)."""
    pending, live = live_pending(conn, session_id, keep)
    return conn.execute("UPDATE sessions SET keep_unit = %s, keep_n = %s, pending_tokens = %s, live_tokens = %s "
                        "WHERE session_id = %s RETURNING *", [keep[0], keep[1], pending, live, session_id]).fetchone()


def _seqs(values: Any) -> set[int]:
    """The integers among `values` (anything else names no message)."""
    return {v for v in values if isinstance(v, int) and not isinstance(v, bool)}


def _pushed_out(conn: Any, session_id: str, row: dict[str, Any], counts: list[int]) -> int:
    """Tokens of the live messages this batch pushes out of a keep window of k messages:
    positions [L - k, L + n - k) of the live list, where L live messages were there before the batch."""
    n, k = len(counts), row["keep_n"]
    before = row["message_count"] - n
    lo, hi = max(0, before - k), max(0, before + n - k)
    total = sum(counts[max(lo, before) - before:hi - before]) if hi > before else 0
    if lo < min(hi, before):
        base = row["last_archive_end"]
        total += conn.execute("SELECT COALESCE(SUM(tokens), 0) AS t FROM messages WHERE session_id = %s "
                              "AND seq BETWEEN %s AND %s", [session_id, base + 1 + lo, base + min(hi, before)]
                              ).fetchone()["t"]
    return int(total)


def _message_row(session_id: str, msg: dict[str, Any], body: bytes | None) -> tuple[Any, ...]:
    """The row of a stored message, with what the index holds of it (`indexed_text`: workmem's own tool
    traffic left out) and its ranking fields. jsonb cannot hold NUL: such a message also keeps its exact
    JSON body."""
    from psycopg.types.json import Json, Jsonb

    text = indexed_text(msg)
    has_nul = b"\\u0000" in body if body is not None else "\x00" in message_text(msg)
    stored = stored_parts(msg["parts"])
    exact = Json({"meta": msg["meta"], "parts": stored}) if has_nul else None
    meta, parts = (without_nul(msg["meta"]), without_nul(stored)) if has_nul else (msg["meta"], stored)
    return (session_id, msg["seq"], msg["id"], msg["turn_id"], msg["role"], Jsonb(parts), Jsonb(meta), exact,
            msg["tokens"], msg["created_at"], text.replace("\x00", NUL_STANDIN) if "\x00" in text else text,
            *doc_fields(text))


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    """The public meta of a sessions row."""
    last = {"id": row["last_archive_id"], "end_seq": row["last_archive_end"]} if row["last_archive_id"] else None
    return public({
        "session_id": row["session_id"], "created_at": row["created_at"].isoformat(),
        "updated_at": row["updated_at"].isoformat(), "next_seq": row["next_seq"],
        "message_count": row["message_count"], "total_message_count": row["next_seq"] - 1,
        "commit_count": row["commit_count"],
        "last_commit_at": row["last_commit_at"].isoformat() if row["last_commit_at"] else None,
        "keep": [row["keep_unit"], row["keep_n"]],
        "keep_recent_count": row["keep_n"] if row["keep_unit"] == MESSAGES else None,
        "pending_tokens": row["pending_tokens"], "live_tokens": row["live_tokens"], "last_archive": last})
