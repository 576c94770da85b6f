"""The Postgres backend's schema and connections.

Everything lives in one schema (default `workmem`, env `WORKMEM_DATABASE_SCHEMA`): workmem's tables,
`pg_trgm` when the database does not have it yet, and `PostgresSaver`'s checkpoint tables. Every
pooled connection starts with `search_path` set to that schema alone (a startup option, so no `RESET`
can undo it), which is how the unqualified names of `PostgresSaver` land there and never touch the
`checkpoints` tables LangGraph keeps in `public` for an agent on the same database.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from workmem.state.errors import DatabaseUnavailable, InvalidInput, UnsupportedFormat
from workmem.state.ids import check_session_id
from workmem.state.search import fts_query
from workmem.state.search.search_hits import MEMORY_ROLE

log = logging.getLogger("workmem.postgres")
ENV_SCHEMA = "WORKMEM_DATABASE_SCHEMA"
DEFAULT_SCHEMA = "workmem"
SCHEMA_VERSION = 2  # 2: payloads; a build that knows an older version refuses the schema
POOL_MAX = 8
CONNECT_TIMEOUT = 10
NUL_STANDIN = "\ufffd"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_URL_SECRET = re.compile(r"(://[^:/@]*:)[^@]*@")
_PARAM_SECRET = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")  # ?password=… and key=value

# {schema}: our schema. `docs` is what a search sees, like the file backend's `fts_docs`: one row per archived
# message with indexed text (`indexed_text`: workmem's own tool traffic left out) and per spilled WM item
# (a negative seq, role `memory`, the section as turn id), written in the transaction that persists the
# archive — a narrow table, so the candidates of a word cost no reads of the messages. `stems` counts a
# session's documents per indexed stem (a long word's relatives are found through it, and a relative too
# common to help is known without reading its documents). Words are indexed as FTS5's `unicode61` sees them
# (every run of characters that are not letters or digits separates words) with the English Snowball
# stemmer and no stop words, so `feed_1.py` is the words feed, 1, py and `the` is a word like any other.
WORDS = "to_tsvector('\"{schema}\".wm_english'::regconfig, regexp_replace({column}, '[^[:alnum:]]+', ' ', 'g'))"
TEXT_SEARCH = """
CREATE TEXT SEARCH DICTIONARY wm_english_stem (TEMPLATE = snowball, Language = english);
CREATE TEXT SEARCH CONFIGURATION wm_english (COPY = english);
ALTER TEXT SEARCH CONFIGURATION wm_english ALTER MAPPING FOR asciiword, word, numword, asciihword, hword,
    numhword, hword_asciipart, hword_part, hword_numpart WITH wm_english_stem;
"""
TABLES = """
CREATE TABLE IF NOT EXISTS workmem_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    session_id text PRIMARY KEY,
    next_seq bigint NOT NULL DEFAULT 1,
    message_count bigint NOT NULL DEFAULT 0,
    archived_count bigint NOT NULL DEFAULT 0,
    commit_count integer NOT NULL DEFAULT 0,
    keep_unit text NOT NULL,
    keep_n integer NOT NULL,
    pending_tokens bigint NOT NULL DEFAULT 0,
    live_tokens bigint NOT NULL DEFAULT 0,
    last_turn integer NOT NULL DEFAULT 0,
    last_archive_id text,
    last_archive_end bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    last_commit_at timestamptz);
CREATE TABLE IF NOT EXISTS messages (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    turn_id text NOT NULL,
    role text NOT NULL,
    parts jsonb NOT NULL,
    meta jsonb NOT NULL,
    exact_body json,
    tokens integer NOT NULL,
    created_at timestamptz NOT NULL,
    archive_id text,
    hidden boolean NOT NULL DEFAULT false,
    content text NOT NULL,
    length integer NOT NULL,
    asks boolean NOT NULL,
    stamp boolean NOT NULL,
    PRIMARY KEY (session_id, seq));
CREATE INDEX IF NOT EXISTS messages_live ON messages (session_id, seq) WHERE archive_id IS NULL;
CREATE INDEX IF NOT EXISTS messages_forgotten ON messages (session_id, seq) WHERE meta ? 'workmem_forgotten';
CREATE TABLE IF NOT EXISTS archives (
    session_id text NOT NULL,
    number integer NOT NULL,
    archive_id text NOT NULL,
    task_id text,
    start_seq bigint NOT NULL,
    end_seq bigint NOT NULL,
    start_turn_id text,
    end_turn_id text,
    overview text NOT NULL,
    abstract text NOT NULL,
    object jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, number));
CREATE TABLE IF NOT EXISTS spilled_items (
    session_id text NOT NULL,
    archive_id text NOT NULL,
    ord integer NOT NULL,
    seq bigint NOT NULL,
    section text NOT NULL,
    item text NOT NULL,
    length integer NOT NULL,
    PRIMARY KEY (session_id, archive_id, ord));
CREATE TABLE IF NOT EXISTS docs (
    session_id text NOT NULL,
    seq bigint NOT NULL,
    archive_id text NOT NULL,
    turn_id text NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    length integer NOT NULL,
    asks boolean NOT NULL,
    stamp boolean NOT NULL,
    tsv tsvector GENERATED ALWAYS AS ({content_words}) STORED,
    PRIMARY KEY (session_id, seq));
CREATE INDEX IF NOT EXISTS docs_by_archive ON docs (session_id, archive_id, seq);
CREATE INDEX IF NOT EXISTS docs_stamps ON docs (session_id, seq) WHERE stamp;
CREATE INDEX IF NOT EXISTS docs_words ON docs USING gin (tsv) WITH (fastupdate = off);
CREATE TABLE IF NOT EXISTS stems (
    session_id text NOT NULL,
    stem text COLLATE "C" NOT NULL,
    docs integer NOT NULL,
    PRIMARY KEY (session_id, stem));
CREATE TABLE IF NOT EXISTS tasks (
    ord bigserial UNIQUE,
    task_id text PRIMARY KEY,
    session_id text NOT NULL,
    archive_id text,
    thread_id text,
    status text NOT NULL,
    error text,
    attempts integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    result jsonb);
CREATE INDEX IF NOT EXISTS tasks_by_session ON tasks (session_id, status);
CREATE INDEX IF NOT EXISTS tasks_keeping_a_thread ON tasks (updated_at) WHERE status = 'completed'
    AND thread_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS payloads (
    session_id text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (session_id, sha256));
CREATE TABLE IF NOT EXISTS leases (
    session_id text PRIMARY KEY,
    task_id text NOT NULL,
    owner text,
    pid integer,
    host text,
    expires_at double precision NOT NULL);
"""
# {trgm}: the schema-qualified operator class of pg_trgm, wherever the extension lives. The full-text
# indexes hold archived documents only (an append does not pay for them; archiving indexes them once)
# and skip GIN's pending list, which every search would otherwise scan linearly.
TRIGRAM_INDEXES = """
CREATE INDEX IF NOT EXISTS docs_trigrams ON docs USING gin (content {trgm}) WITH (fastupdate = off);
"""


def schema_name(value: str | None = None, field: str = "schema") -> str:
    """The schema workmem uses: `value`, else `WORKMEM_DATABASE_SCHEMA`, else `workmem` (a plain lowercase name)."""
    name = value if value is not None else (os.environ.get(ENV_SCHEMA) or DEFAULT_SCHEMA)
    if not isinstance(name, str) or not _SCHEMA_NAME.fullmatch(name) or name.startswith("pg_") or name == "public":
        raise InvalidInput(field, name, "must match [a-z_][a-z0-9_]{0,62}, not public and not pg_*")
    return name


def check_url(url: object) -> str:
    """A `postgresql://` / `postgres://` URL (or a libpq `key=value` string)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("database_url", url, "must be a non-empty postgresql:// URL")
    if "://" in url and not url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("database_url", shown_url(url), "must start with postgresql:// or postgres://")
    return url


def shown_url(url: str) -> str:
    """The URL without its password, for messages and `location()`."""
    return _PARAM_SECRET.sub(r"\1***", _URL_SECRET.sub(r"\1***@", url))


def connection_kwargs(url: str, schema: str) -> dict[str, Any]:
    """psycopg connect arguments: what PostgresSaver needs (autocommit, dict rows, prepare_threshold=0),
    UTC timestamps and our schema as the whole search_path, appended to any `options` of the URL."""
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import dict_row

    given = conninfo_to_dict(url).get("options") or ""
    options = f"{given} -c search_path={schema} -c TimeZone=UTC".strip()
    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "options": options}


def open_pool(url: str, schema: str, *, max_size: int = POOL_MAX) -> Any:
    """A `psycopg_pool.ConnectionPool` whose every connection works inside `schema`."""
    import psycopg
    from psycopg_pool import ConnectionPool

    try:  # one direct attempt first: a wrong URL is one clear error, not a pool retrying for 30 s
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, **connection_kwargs(url, schema)).close()
    except psycopg.Error as exc:
        raise DatabaseUnavailable(shown_url(url), " ".join(str(exc).split())) from None
    opened: list[Any] = []

    def check(conn: Any) -> None:
        """Each connection is checked as it is handed out: one the server dropped (a restart, a failover, an idle
        timeout) is replaced, never given to a statement. The first broken one also checks every idle one at
        once: the pool waits 1 s, 2 s, 4 s … between broken connections, so finding a restart's dead
        connections one by one stalled a caller for the whole 30 s timeout."""
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if opened:
                _check_idle(opened[0])
            raise

    pool = ConnectionPool(url, min_size=1, max_size=max_size, kwargs=connection_kwargs(url, schema),
                          open=False, name=f"workmem-{schema}", check=check)
    opened.append(pool)
    pool.open(wait=True, timeout=30)
    return pool


def _check_idle(pool: Any) -> None:
    """Check every idle connection of `pool` now: broken ones are replaced (a restart drops them all)."""
    try:
        pool.check()
    except Exception as exc:  # noqa: BLE001 - a server still down: the next call reports it, typed
        log.debug("pool check after a lost connection failed: %s", exc)


def schema_exists(pool: Any, schema: str) -> bool:
    """Whether the schema holds workmem's tables (read only: nothing is created)."""
    with pool.connection() as conn:
        return conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'workmem_schema'",
                            [schema]).fetchone() is not None


def ensure_schema(pool: Any, schema: str) -> None:
    """Create the schema and its tables if missing (serialised between processes by an advisory lock)."""
    with pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"workmem-schema:{schema}"])
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        exists = conn.execute("SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'workmem_schema'",
                              [schema]).fetchone()
        if exists:
            _upgrade(conn, schema)
            return
        trgm_schema = _trigram_schema(conn, schema)
        words = {"content_words": WORDS.format(schema=schema, column="content")}
        trigrams = TRIGRAM_INDEXES.format(trgm=f'"{trgm_schema}".gin_trgm_ops')
        for script in (TEXT_SEARCH, TABLES.format(**words), trigrams):
            for statement in script.split(";\n"):
                if statement.strip():
                    conn.execute(statement)
        conn.execute("INSERT INTO workmem_schema (version) VALUES (%s)", [SCHEMA_VERSION])


def _upgrade(conn: Any, schema: str) -> None:
    """Bring an existing schema to `SCHEMA_VERSION` (1 → 2 adds `payloads`) and its indexes (an index is no new
    version: a build without it reads the same rows); a newer one is refused."""
    row = conn.execute(f'SELECT max(version) AS v FROM "{schema}".workmem_schema').fetchone()
    version = row["v"] if row else None
    if version is not None and version > SCHEMA_VERSION:
        raise UnsupportedFormat(f"schema {schema}", version, SCHEMA_VERSION)
    if conn.execute("SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = 'messages_forgotten'",
                    [schema]).fetchone() is None:
        conn.execute(f'CREATE INDEX IF NOT EXISTS messages_forgotten ON "{schema}".messages (session_id, seq) '
                     "WHERE meta ? 'workmem_forgotten'")
    if version == SCHEMA_VERSION:
        return
    conn.execute(f'CREATE TABLE IF NOT EXISTS "{schema}".payloads (session_id text NOT NULL, sha256 text NOT NULL, '
                 'size bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (session_id, sha256))')
    conn.execute(f'UPDATE "{schema}".workmem_schema SET version = %s', [SCHEMA_VERSION])


def _trigram_schema(conn: Any, schema: str) -> str:
    """Where pg_trgm lives: created in our schema unless the database already has it elsewhere."""
    row = conn.execute("SELECT extnamespace::regnamespace::text AS nsp FROM pg_extension WHERE extname = 'pg_trgm'"
                       ).fetchone()
    if row is None:
        conn.execute(f'CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA "{schema}"')
        return schema
    return row["nsp"].strip('"')


class Database:
    """The pool of one schema, with the two ways workmem uses it: a transaction, or one statement. A lost
    connection, a timeout or a server that cannot take the work (psycopg's `OperationalError`, the pool's
    timeouts) leaves here as `DatabaseUnavailable`, the URL shown without its password."""

    def __init__(self, pool: Any, schema: str, url: str) -> None:
        self.pool, self.schema, self.url = pool, schema, url

    @contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[Any]:
        """A connection inside one transaction (`durable=False`: commit without waiting for the WAL flush)."""
        with self.unavailable_as_typed(), self.pool.connection() as conn, conn.transaction():
            if not durable:
                conn.execute("SET LOCAL synchronous_commit = off")
            yield conn

    def rows(self, sql: str, args: Any = None, *, prepare: bool | None = None) -> list[dict[str, Any]]:
        """Every row of one statement, as dicts (`prepare=False`: planned for these values, never generic)."""
        with self.unavailable_as_typed(), self.pool.connection() as conn:
            return conn.execute(sql, args, prepare=prepare).fetchall()

    def batch(self, statements: Sequence[tuple[str, Any]]) -> list[list[dict[str, Any]]]:
        """Every row of each statement, all sent in one round trip (a pipeline), each planned for its values."""
        with self.unavailable_as_typed(), self.pool.connection() as conn:
            with conn.pipeline():
                cursors = [conn.cursor().execute(sql, args, prepare=False) for sql, args in statements]
            return [cur.fetchall() for cur in cursors]

    def row(self, sql: str, args: Any = None) -> dict[str, Any] | None:
        """The first row of one statement, or None."""
        with self.unavailable_as_typed(), self.pool.connection() as conn:
            return conn.execute(sql, args).fetchone()

    @contextmanager
    def unavailable_as_typed(self) -> Iterator[None]:
        """Driver errors of an unreachable or failing server → `DatabaseUnavailable` (password-free)."""
        import psycopg

        try:
            yield
        except psycopg.errors.ProgramLimitExceeded:
            raise  # a statement the server refuses for its size: no retry helps, it is not an outage
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            _check_idle(self.pool)  # a connection lost mid-statement: the idle ones likely went with it
            raise DatabaseUnavailable(shown_url(self.url), shown_url(" ".join(str(exc).split()))
                                      or type(exc).__name__) from None


    def where(self, table: str, key: str) -> str:
        """`schema.table (key)`: where a row lives, for anomalies and messages."""
        return f"{self.schema}.{table} ({key})"


_DOCS_OF_MESSAGES = ("INSERT INTO docs (session_id, seq, archive_id, turn_id, role, content, length, asks, stamp) "
                     "SELECT session_id, seq, archive_id, turn_id, role, content, length, asks, stamp FROM messages "
                     "WHERE session_id = %s AND {rows} AND archive_id IS NOT NULL AND content <> ''")
_DOCS_OF_ITEMS = ("INSERT INTO docs (session_id, seq, archive_id, turn_id, role, content, length, asks, stamp) "
                  f"SELECT session_id, seq, archive_id, section, '{MEMORY_ROLE}', item, length, false, false "
                  "FROM spilled_items WHERE session_id = %s AND {rows}")
_STEM_COUNTS = ("INSERT INTO stems (session_id, stem, docs) SELECT %s, word, count(*) FROM docs, "
                "unnest(tsv) AS u(word, positions, weights) WHERE session_id = %s AND {rows} AND length(word) >= %s "
                "GROUP BY word ON CONFLICT (session_id, stem) DO UPDATE SET docs = stems.docs + excluded.docs")


def index_documents(conn: Any, session_id: str, archive_id: str | None = None) -> None:
    """Make the archived messages and spilled items of one archive (or of the whole session) search documents,
    and add their stems to the session's counts: how many documents hold each stem long enough to be a
    relative (`fts_query.PREFIX_KEEP`). Inside the caller's transaction."""
    rows, args = ("archive_id = %s", [archive_id]) if archive_id is not None else ("true", [])
    conn.execute(_DOCS_OF_MESSAGES.format(rows=rows), [session_id, *args])
    conn.execute(_DOCS_OF_ITEMS.format(rows=rows), [session_id, *args])
    conn.execute(_STEM_COUNTS.format(rows=rows), [session_id, session_id, *args, fts_query.PREFIX_KEEP])


_STEMS_OF_DOCS = ("UPDATE stems SET docs = stems.docs - gone.n FROM (SELECT word, count(*) AS n FROM docs, "
                  "unnest(tsv) AS u(word, positions, weights) WHERE session_id = %s AND seq = ANY(%s) "
                  "GROUP BY word) gone WHERE stems.session_id = %s AND stems.stem = gone.word")


def unindex_documents(conn: Any, session_id: str, seqs: list[int]) -> int:
    """Remove the search documents of these messages (a forget) and their stems from the session's counts (a
    stem no document holds any more goes); inside the caller's transaction. Returns the documents removed."""
    conn.execute(_STEMS_OF_DOCS, [session_id, seqs, session_id])
    conn.execute("DELETE FROM stems WHERE session_id = %s AND docs <= 0", [session_id])
    return conn.execute("DELETE FROM docs WHERE session_id = %s AND seq = ANY(%s)", [session_id, seqs]).rowcount


def session_key(session_id: Any) -> str:
    """A session id as a key of the tables: `check_session_id`'s rules, and no NUL (text cannot hold it)."""
    check_session_id(session_id)
    if "\x00" in session_id:
        raise InvalidInput("session_id", session_id, "must not contain NUL on the Postgres backend")
    return session_id


def without_nul(value: Any) -> Any:
    """`value` with every NUL character (which Postgres text and jsonb cannot hold) replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STANDIN) if "\x00" in value else value
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value
