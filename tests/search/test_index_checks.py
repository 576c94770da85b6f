"""`check()` compares the search index with the archives, and a finished commit indexes what its archive holds:
an index built from the wrong messages is found, never silently trusted."""

from __future__ import annotations

from workmem.nodes.persist import finish_archived_commit


def committed(engine) -> None:
    for i in range(6):
        engine.add_messages("s", [{"role": "user", "content": f"Question {i} about the heron survey?"},
                                  {"role": "assistant", "content": f"Answer {i}: the heron count was {i * 7}."}])
    assert engine.commit("s", keep_recent_count=4)["status"] == "completed"


def damage(backend, engine) -> None:
    """The index of archive_001 made to hold other messages: on files what a confused resumed run indexed (the
    live ones), on Postgres (which indexes the archive's own rows by construction) rows changed by hand."""
    if backend.url is None:
        engine.storage.search.index_messages("s", "archive_001", engine.storage.sessions.live_messages("s"))
        return
    import psycopg

    with psycopg.connect(backend.url, autocommit=True) as conn:
        conn.execute("UPDATE workmem.docs SET seq = seq + 8 WHERE session_id = 's' AND seq BETWEEN 5 AND 8")


def test_check_finds_an_index_that_disagrees_with_the_archives_and_reindex_repairs_it(backend):
    with backend.engine(durable=False) as engine:
        committed(engine)
        assert engine.check("s") == [] and engine.check("s", deep=True) == []
        damage(backend, engine)
        problems = [f["problem"] for f in engine.check("s")]
        assert any("archive_001 covers seqs 1..8 but the index holds seqs [" in p for p in problems), problems
        deep = [f["problem"] for f in engine.check("s", deep=True)]
        assert any("message(s) of archive_001 are not in the index" in p for p in deep), deep
        engine.reindex("s")
        assert engine.check("s", deep=True) == []
        assert {h["seq"] for h in engine.archive_search("s", "heron")} <= set(range(1, 9))


def test_finishing_an_archived_commit_indexes_what_the_archive_holds(backend):
    with backend.engine(durable=False) as engine:
        committed(engine)
        storage = engine.storage
        archive = storage.sessions.read_archive("s", "archive_001")
        storage.search.index_messages("s", "archive_001", storage.sessions.live_messages("s"))
        finish_archived_commit(storage.sessions, storage.tasks, storage.search, archive, ("messages", 4))
        assert storage.search.indexed_seqs("s") == {"archive_001": list(range(1, 9))}
        assert engine.check("s", deep=True) == []


def test_the_cheap_check_finds_an_index_emptied_under_a_session_with_archives(tmp_path):
    """A zero-length index.sqlite is a new, empty index to SQLite: search finds nothing, and check says so."""
    from workmem.graphs.engine import WorkingMemoryEngine

    with WorkingMemoryEngine(tmp_path, durable=False) as engine:
        committed(engine)
    (tmp_path / "index.sqlite").write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"index.sqlite{suffix}").unlink(missing_ok=True)
    with WorkingMemoryEngine(tmp_path, durable=False) as engine:
        problems = [f["problem"] for f in engine.check("s")]
        assert any("holds no message of the session's 1 archive(s)" in p for p in problems), problems
        engine.reindex()
        assert engine.check("s") == [] and engine.archive_search("s", "heron")
