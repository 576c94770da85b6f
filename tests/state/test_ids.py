"""Safe session directory names and archive ids."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from workmem.state.errors import InvalidInput
from workmem.state.files.store import SessionStore
from workmem.state.ids import archive_name, archive_number, canonical_archive_id, safe_session_id

HOSTILE_IDS = ["../x", "a/b", "..", ".", "x" * 300, "a\x00b", "line\nbreak", "Ünïcödé-会话", "ABC", "a\\b",
               "/abs/path", "~home", " spaced ", "-lead", "CON", "a" * 129]


@pytest.mark.parametrize("plain", ["a", "0", "abc", "a.b-c_d", "session-42", "x" * 128, "a..b", "a-"])
def test_plain_ids_are_used_as_is(plain):
    assert safe_session_id(plain) == plain


@pytest.mark.parametrize("session_id", HOSTILE_IDS)
def test_other_ids_map_to_tilde_sha256(session_id):
    expected = "~" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()
    assert safe_session_id(session_id) == expected
    assert safe_session_id(session_id) == safe_session_id(session_id)  # stable


def test_case_variants_never_share_a_directory():
    names = {safe_session_id(s) for s in ("abc", "ABC", "Abc")}
    assert len(names) == 3
    assert len({n.lower() for n in names}) == 3  # distinct on case-insensitive file systems too


@pytest.mark.parametrize("bad", [None, 12, b"bytes", "", "\ud800", ["a"], "x" * 5000])
def test_invalid_ids_raise(bad):
    with pytest.raises(InvalidInput) as err:
        safe_session_id(bad)
    assert err.value.field == "session_id"


@pytest.mark.parametrize("session_id", HOSTILE_IDS)
def test_hostile_ids_stay_inside_the_root(root, session_id):
    store = SessionStore(root, durable=False)
    store.append(session_id, [{"role": "user", "content": "hi"}])
    folder = store.session_dir(session_id).resolve()
    sessions = (root / "sessions").resolve()
    assert folder.parent == sessions
    assert os.listdir(sessions) == [folder.name]
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            assert Path(os.path.realpath(os.path.join(dirpath, name))).is_relative_to(root.resolve())
    again = SessionStore(root, durable=False)
    assert again.session_dir(session_id) == store.session_dir(session_id)
    assert again.meta(session_id)["session_id"] == session_id
    assert again.list_sessions() == [session_id]


def test_archive_names_round_trip():
    assert archive_name(1) == "archive_001"
    assert archive_name(12) == "archive_012"
    assert archive_name(1234) == "archive_1234"
    for n in (1, 9, 10, 999, 1000, 123456):
        assert archive_number(archive_name(n)) == n
    assert canonical_archive_id("archive_7") == "archive_007"


@pytest.mark.parametrize("junk", ["archive_000", "archive_", "archive_-1", "../archive_001", "archive_001/..",
                                  "ARCHIVE_001", "archive_001\n", "archive_1.5", "", "archive_٣"])
def test_archive_number_rejects_junk(junk):
    with pytest.raises(InvalidInput):
        archive_number(junk)


@pytest.mark.parametrize("junk", [None, 1, True])
def test_archive_number_rejects_non_strings(junk):
    with pytest.raises(InvalidInput):
        archive_number(junk)


@pytest.mark.parametrize("n", [0, -1, True, 1.0, "1"])
def test_archive_name_rejects_bad_numbers(n):
    with pytest.raises(InvalidInput):
        archive_name(n)
