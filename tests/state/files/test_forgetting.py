"""`files/forgetting.py`: a forget's rewrite of one session folder — every copy of a forgotten line, temp
leftovers, payloads no line refers to; what it cannot read stays."""

from __future__ import annotations

from engine_helpers import assistant, tool, user

from workmem.state.files import forgetting
from workmem.state.files.store import SessionStore
from workmem.state.forget import FORGOTTEN_TEXT

AT = "2026-12-01T10:00:00+00:00"
SECRET = "quorvex blimpwaddle 7731"

def test_the_folder_rewrite_replaces_every_copy_removes_leftovers_and_keeps_what_it_cannot_read(tmp_path):
    store = SessionStore(tmp_path, durable=False)
    store.append("s", [user(f"say {SECRET}"), assistant("ok"), user("other"),
                       assistant("", [("c1", "look", "{}")]), tool("c1", "x" * 70_000 + SECRET, "look")])
    folder = store.session_dir("s")
    live = folder / "messages.jsonl"
    with open(live, "ab") as f:  # a corrupt line (its seq unknown) and a torn tail
        f.write(b'{"seq": "bad", "text": "unreadable"}\n{"id": "m-x", "seq": 9, "parts": ["' + SECRET.encode())
    leftover = folder / ".messages.jsonl.tmp-1-abcd"
    leftover.write_text(SECRET)
    (folder / "history" / ".archive_001.tmp").mkdir(parents=True)
    (folder / "history" / ".archive_001.tmp" / "messages.jsonl").write_text(SECRET)

    done = forgetting.forget_in_folder(folder, live, {1, 5}, AT)

    assert done == {"forgotten": [1, 5], "archives": [], "payloads_removed": 1}
    data = live.read_bytes()
    assert SECRET.encode() not in data and b'"text": "unreadable"' in data, "a line it cannot read stays"
    assert not leftover.exists() and not (folder / "history" / ".archive_001.tmp").exists()
    assert list((folder / "payloads").iterdir()) == []
    assert forgetting.forget_in_folder(folder, live, {1, 5}, AT)["forgotten"] == [], "idempotent"
    reread = SessionStore(tmp_path).live_messages("s")
    assert [m["seq"] for m in reread] == [1, 2, 3, 4, 5] and reread[4]["parts"][0]["content"] == FORGOTTEN_TEXT
