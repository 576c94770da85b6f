"""index.sqlite: commit tasks, session leases, literal full-text search, reindex (§2, §6, §7)."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from state.errors import InvalidInput
from state.index import Index, redact_secrets
from state.store import SessionStore
from state.turns import source_turn_range


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def index(root, clock):
    ix = Index(root, clock=clock)
    yield ix
    ix.close()


def stored(seq, text, role="user"):
    return {"id": f"m-{seq}", "seq": seq, "turn_id": f"t{seq}", "role": role, "tokens": 1,
            "created_at": "2026-01-01T00:00:00+00:00", "meta": {}, "parts": [{"type": "text", "text": text}]}


# -- tasks -------------------------------------------------------------------------------------------


def test_task_lifecycle(index):
    task = index.create_task("sess A", task_id="t1")
    assert task["status"] == "pending" and task["attempts"] == 0 and task["result"] is None
    assert task["thread_id"].endswith("/commit/t1") and task["thread_id"].startswith("~")
    index.update_task("t1", status="running", archive_id="archive_1", attempts=1)
    row = index.update_task("t1", status="completed", result={"archive_id": "archive_001", "route": ["persist"]})
    assert row["archive_id"] == "archive_001" and row["result"] == {"archive_id": "archive_001", "route": ["persist"]}
    assert index.get_task("t1")["status"] == "completed" and index.get_task("missing") is None
    with pytest.raises(InvalidInput):
        index.create_task("sess A", task_id="t1")


def test_task_errors_are_redacted_and_capped(index):
    index.create_task("s", task_id="t")
    secret = "OpenAI said no: sk-proj-abcdef1234567890XYZ with header Authorization: Bearer abc.def.ghijkl123 "
    row = index.update_task("t", status="failed", error=secret + "x" * 1000)
    assert "abcdef1234567890" not in row["error"] and "abc.def.ghijkl123" not in row["error"]
    assert len(row["error"]) <= 500 and "sk-***" in row["error"]


@pytest.mark.parametrize("fields", [{"status": "done"}, {"attempts": -1}, {"attempts": True}, {"colour": "red"},
                                    {"result": {"x": object()}}, {"archive_id": "../x"}])
def test_bad_task_updates(index, fields):
    index.create_task("s", task_id="t")
    with pytest.raises(InvalidInput):
        index.update_task("t", **fields)


def test_update_of_unknown_task(index):
    with pytest.raises(InvalidInput):
        index.update_task("nope", status="failed")


def test_listing_tasks(index):
    for i, status in enumerate(["pending", "running", "completed", "failed", "skipped", "abandoned"]):
        index.create_task("a" if i % 2 else "b", task_id=f"t{i}", status=status)
    assert [t["task_id"] for t in index.list_tasks()] == [f"t{i}" for i in range(6)]
    assert [t["task_id"] for t in index.list_tasks(session_id="a")] == ["t1", "t3", "t5"]
    assert [t["task_id"] for t in index.list_tasks(status="failed")] == ["t3"]
    assert [t["task_id"] for t in index.unfinished_tasks()] == ["t0", "t1"]
    assert [t["task_id"] for t in index.unfinished_tasks("a")] == ["t1"]


def test_tasks_survive_a_new_index(root, index):
    index.create_task("s", task_id="keep-me")
    index.close()
    assert Index(root).get_task("keep-me")["session_id"] == "s"


# -- leases ------------------------------------------------------------------------------------------


def test_lease_is_exclusive_until_it_expires(index, clock):
    assert index.acquire_lease("s", "t1", "me", ttl=60) is None
    assert index.acquire_lease("s", "t1", "me", ttl=60) is None  # re-entrant for the same task
    assert index.acquire_lease("s", "t2", "you", ttl=60) == "t1"
    holder = index.lease_holder("s")
    assert holder["task_id"] == "t1" and holder["owner"] == "me" and holder["pid"] > 0 and holder["host"]
    clock.now += 30
    assert index.renew_lease("s", "t1", ttl=60) is True
    clock.now += 59
    assert index.acquire_lease("s", "t2", "you") == "t1"
    clock.now += 2  # expired: taken over
    assert index.lease_holder("s") is None
    assert index.acquire_lease("s", "t2", "you") is None
    assert index.renew_lease("s", "t1") is False
    index.release_lease("s", "t1")  # not the holder: no effect
    assert index.lease_holder("s")["task_id"] == "t2"
    index.release_lease("s", "t2")
    assert index.lease_holder("s") is None
    assert index.acquire_lease("other", "t3", "me") is None


def test_same_task_from_another_owner_waits_for_expiry(index, clock):
    assert index.acquire_lease("s", "t1", "process-a") is None
    assert index.acquire_lease("s", "t1", "process-b") == "t1"  # two resumers of one task: only one runs
    assert index.lease_holder("s")["owner"] == "process-a"
    clock.now += 61
    assert index.acquire_lease("s", "t1", "process-b") is None
    assert index.lease_holder("s")["owner"] == "process-b"


def test_threads_opening_a_fresh_index_at_once_all_succeed(tmp_path):
    for attempt in range(5):
        index, errors = Index(tmp_path / f"fresh{attempt}"), []
        barrier = threading.Barrier(4)

        def first_use(index=index, errors=errors, barrier=barrier):
            barrier.wait()
            try:
                index.list_tasks()
            except sqlite3.Error as exc:  # e.g. "database is locked" while switching to WAL
                errors.append(exc)

        threads = [threading.Thread(target=first_use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        index.close()
        assert errors == []


@pytest.mark.parametrize("ttl", [0, -1, True, "60", 10**9])
def test_bad_ttl(index, ttl):
    with pytest.raises(InvalidInput):
        index.acquire_lease("s", "t", "me", ttl=ttl)


def test_only_one_thread_wins_the_lease(root):
    index = Index(root)
    index.acquire_lease("warmup", "w", "me")
    winners, barrier = [], threading.Barrier(8)

    def contend(k):
        barrier.wait()
        if index.acquire_lease("s", f"task{k}", f"thread{k}") is None:
            winners.append(k)

    threads = [threading.Thread(target=contend, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    index.close()


def test_connections_are_explicit_wal_and_per_thread(index):
    assert index.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = []
    t = threading.Thread(target=lambda: other.append(index.db))
    t.start()
    t.join()
    assert other[0] is not index.db and other[0].conn is not index.db.conn


# -- search ------------------------------------------------------------------------------------------

CORPUS = [
    "We decided to use PostgreSQL for the orders database",
    "The regex was .*+?^${}()|[]\\\" and it broke the parser",
    "Edit state/store.py and call os.path.join there",
    "数据库迁移已经完成了",
    "Running the tests took too long",
    "The AI team meets on Mondays",
    "database migration finished without errors",
    "database database database everywhere",
    "nothing to see here",
]


@pytest.fixture
def searchable(index):
    index.index_messages("s", "archive_001", [stored(i + 1, t) for i, t in enumerate(CORPUS[:5])])
    index.index_messages("s", "archive_002", [stored(i + 6, t) for i, t in enumerate(CORPUS[5:])])
    index.index_messages("other", "archive_001", [stored(1, "database migration in another session")])
    return index


def seqs(hits):
    return [h["seq"] for h in hits]


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ('.*+?^${}()|[]\\"', 2),
        ("${}", 2),
        ("()", 2),
        ("state/store.py", 3),
        ("os.path.join", 3),
        ("store.py", 3),
        ("数据库", 4),
        ("迁移", 4),
        ("run", 5),  # porter: Running → run
        ("AI", 6),
        ("PostgreSQL", 1),
        ('"unbalanced', None),
        ("NEAR NOT", None),  # FTS operators are plain words here
        ("col:umn*", None),
    ],
)
def test_literal_queries(searchable, query, expected_first):
    hits = searchable.search("s", query)
    if expected_first is None:
        assert hits == []
    else:
        assert hits and hits[0]["seq"] == expected_first


def test_operators_are_words(searchable):
    assert set(seqs(searchable.search("s", "AND"))) == {2, 3}
    assert seqs(searchable.search("s", "PostgreSQL OR"))[0] == 1


def test_no_hit_is_an_empty_list(searchable):
    assert searchable.search("s", "zeppelin") == []
    assert searchable.search("s", "   ") == []
    assert searchable.search("nobody", "database") == []


def test_all_query_words_rank_first(searchable):
    hits = searchable.search("s", "database migration")
    assert hits[0]["seq"] == 7
    assert set(seqs(hits)) == {1, 7, 8}


def test_newest_first_on_ties(index):
    index.index_messages("s", "archive_001", [stored(i, "same words here") for i in range(1, 6)])
    assert seqs(index.search("s", "words")) == [5, 4, 3, 2, 1]


def test_hit_shape_scope_and_limit(searchable, index):
    hit = searchable.search("s", "PostgreSQL")[0]
    assert hit == {"archive_id": "archive_001", "seq": 1, "turn_id": "t1", "role": "user", "content": CORPUS[0]}
    assert seqs(searchable.search("s", "database", archive_id="archive_001")) == [1]
    assert len(searchable.search("s", "the", limit=1)) == 1
    index.index_messages("s", "archive_003", [stored(20, "long " * 1000)])
    assert len(index.search("s", "long")[0]["content"]) <= 1500


@pytest.mark.parametrize(("kwargs", "field"), [({"query": 3}, "query"), ({"limit": 0}, "limit"),
                                               ({"limit": True}, "limit"), ({"archive_id": "x"}, "archive_id")])
def test_bad_search_input(searchable, kwargs, field):
    args = {"session_id": "s", "query": "database", **kwargs}
    with pytest.raises(InvalidInput) as err:
        searchable.search(**args)
    assert err.value.field == field


def test_index_messages_is_idempotent_per_archive(searchable):
    before = searchable.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0]
    searchable.index_messages("s", "archive_001", [stored(i + 1, t) for i, t in enumerate(CORPUS[:5])])
    assert searchable.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0] == before
    searchable.index_messages("s", "archive_001", [stored(1, "replaced text")])
    assert seqs(searchable.search("s", "PostgreSQL")) == []
    assert seqs(searchable.search("s", "replaced")) == [1]


def test_bulk_index_commits_in_batches(index):
    messages = [stored(i, f"message {i} about item{i % 7}") for i in range(1, 2502)]
    assert index.index_messages("s", "archive_001", messages) == 2501
    assert index.db.execute("SELECT COUNT(*) FROM fts_trigram").fetchone()[0] == 2501
    assert seqs(index.search("s", "item3", limit=3)) == [2495, 2488, 2481]


def test_tool_calls_and_results_are_searchable(index):
    msg = {**stored(1, ""), "role": "assistant", "parts": [
        {"type": "tool_call", "id": "c", "name": "read_file", "arguments": {"path": "src/app/main.go"}}]}
    index.index_messages("s", "archive_001", [msg])
    assert seqs(index.search("s", "src/app/main.go")) == [1]
    assert seqs(index.search("s", "read_file")) == [1]


FOLDING = ["ÉCOLE normale supérieure", "ΣΟΦΙΑ data set", "Ärger mit dem Parser", "see docs/RÉSUMÉ.md first",
           "plain ascii text"]


@pytest.fixture
def folding(index):
    index.index_messages("s", "archive_001", [stored(i + 1, t) for i, t in enumerate(FOLDING[:3])])
    index.index_messages("s", "archive_002", [stored(i + 4, t) for i, t in enumerate(FOLDING[3:])])
    index.index_messages("other", "archive_001", [stored(1, "ÉCOLE in another session")])
    return index


@pytest.mark.parametrize(("query", "expected"), [
    ("ÉC", [1]), ("éc", [1]), ("Éc", [1]), ("σο", [2]), ("ΣΟ", [2]), ("φ", [2]), ("är", [3]), ("ÄR", [3]),
    ("É", [4, 1]), ("é", [4, 1]), ("ÉCOLE é", [1, 4]),
])
def test_short_non_ascii_terms_ignore_case(folding, query, expected):
    """1–2-character terms are matched by a scan; SQLite's lower() folds ASCII only, the scan must not."""
    assert seqs(folding.search("s", query)) == expected


def test_short_term_scan_keeps_its_scope_and_ascii_terms(folding):
    assert seqs(folding.search("s", "éc", archive_id="archive_002")) == []
    assert seqs(folding.search("s", "é", archive_id="archive_002")) == [4]
    assert seqs(folding.search("other", "éc")) == [1]
    assert seqs(folding.search("s", "CO")) == [1]  # ASCII terms: ASCII letters of mixed text still fold
    assert seqs(folding.search("s", "AS")) == [5]


@pytest.mark.parametrize("query", ["sumé.md", "SUMÉ.MD", "docs/résumé", "DOCS/RÉSUMÉ.MD"])
def test_trigram_substrings_ignore_non_ascii_case(folding, query):
    """Dotted/slashed terms go to the trigram index, whose tokenizer folds case beyond ASCII."""
    assert seqs(folding.search("s", query)) == [4]


def test_reindex_rebuilds_from_complete_archives_only(root, index):
    store = SessionStore(root, durable=False)
    store.append("s", [{"role": "user", "content": f"topic number {i} kiwi"} for i in range(10)])
    live = store.live_messages("s")
    archive = {"archive_id": "archive_001", "session_id": "s", "source_turn_range": source_turn_range(live[:6])}
    store.write_archive("s", archive, live[:6], "# WM", "abstract")
    store.record_commit("s", archive, 4)
    half = store.session_dir("s") / "history" / "archive_002"
    half.mkdir()
    (half / "messages.jsonl").write_text("{}\n")  # no .done: not an archive
    index.index_messages("s", "archive_009", [stored(1, "stale row kiwi")])
    assert index.reindex(store) == 6
    assert seqs(index.search("s", "kiwi", limit=20)) == [6, 5, 4, 3, 2, 1]
    assert index.reindex(store, session_id="s") == 6
    assert len(index.search("s", "kiwi", limit=20)) == 6


def test_schema(index):
    sql = {name: text for name, text in index.db.execute("SELECT name, sql FROM sqlite_master")}
    assert "tokenize='porter unicode61'" in sql["fts_words"]
    assert "tokenize='trigram'" in sql["fts_trigram"]
    assert "session_id UNINDEXED" in sql["fts_words"]
    cols = {r[1] for r in index.db.execute("PRAGMA table_info(tasks)")}
    assert cols == {"task_id", "session_id", "archive_id", "thread_id", "status", "error", "attempts",
                    "created_at", "updated_at", "result"}
    cols = {r[1] for r in index.db.execute("PRAGMA table_info(leases)")}
    assert cols == {"session_id", "task_id", "owner", "pid", "host", "expires_at"}


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("key sk-abc123def456ghi789", "abc123def456"),
        ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOi.SflKxwRJSM", "SflKxwRJSM"),
        ("api_key=supersecretvalue", "supersecretvalue"),
        ('"password": "hunter2hunter2"', "hunter2"),
        ("AKIAIOSFODNN7EXAMPLE", "IOSFODNN7"),
        ("ghp_0123456789abcdefghijABCDEFGHIJ", "0123456789abcdef"),
        ("https://user:pa55word@host/x", "pa55word"),
    ],
)
def test_redact_secrets(text, leak):
    assert leak not in redact_secrets(text)


def test_redact_keeps_ordinary_text():
    assert redact_secrets("tokens: 12, the task-runner failed") == "tokens: 12, the task-runner failed"


def test_database_file_is_sqlite(root, index):
    index.create_task("s", task_id="x")
    conn = sqlite3.connect(root / "index.sqlite")
    assert conn.execute("SELECT task_id FROM tasks").fetchall() == [("x",)]
    conn.close()


def test_a_word_found_almost_everywhere_takes_its_newest_matches(index, monkeypatch):
    """Past COMMON_TERM_DOCS matches a word only contributes its newest PER_TERM_HITS candidates, so a
    query of common words stays cheap; a rare word next to it still ranks its message first."""
    import state.index as index_module

    monkeypatch.setattr(index_module, "COMMON_TERM_DOCS", 5)
    monkeypatch.setattr(index_module, "PER_TERM_HITS", 3)
    messages = [stored(i, f"deploy log line {i}") for i in range(1, 21)]
    messages[1] = stored(2, "deploy log line 2 mentions zebrafish")
    index.index_messages("s", "archive_001", messages)

    assert seqs(index.search("s", "deploy")) == [20, 19, 18]  # common: its newest three only
    assert seqs(index.search("s", "zebrafish deploy"))[0] == 2  # the rare word still finds its message
    assert seqs(index.search("s", "line 7"))[:2] == [7, 17]  # both words first; "7" keeps its substring scan


def _index_in_child(root, barrier) -> None:
    messages = [stored(seq, f"entry {seq} of a long archive") for seq in range(1, 12_001)]
    index = Index(root)
    barrier.wait()
    index.index_messages("s", "archive_001", messages)
    index.close()


def test_two_indexers_of_one_archive_at_once_leave_each_message_once(root):
    """Indexing commits every ≤ 1 000 rows, so two processes indexing one archive (a commit and
    `workmem reindex`, or two reindexes) interleave their batches; each seq must still be in once."""
    import multiprocessing

    Index(root).index_messages("s", "archive_001", [stored(1, "warm up")])  # schema ready before the race
    context = multiprocessing.get_context("spawn")
    for _ in range(3):
        barrier = context.Barrier(2)
        children = [context.Process(target=_index_in_child, args=(root, barrier)) for _ in range(2)]
        for child in children:
            child.start()
        for child in children:
            child.join(60)
        assert [child.exitcode for child in children] == [0, 0]
        index = Index(root)
        rows = index.db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT seq) FROM fts_docs WHERE archive_id = 'archive_001'").fetchone()
        words = index.db.execute("SELECT COUNT(*) FROM fts_words").fetchone()[0]
        index.close()
        assert rows == (12_000, 12_000) and words == 12_000
