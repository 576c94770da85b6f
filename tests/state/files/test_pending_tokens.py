"""pending_tokens, kept in O(1) per message, always equals the brute-force definition.

Random sequences of adds (from this store and from a second store, standing in for another
process), keep-count changes, archives (with and without GC) and reloads, checked after every step.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from oracles import compute_pending_tokens, source_turn_range

from workmem.state.files.store import SessionStore
from workmem.state.turns import choose_covered_range

SID = "pending"
WORDS = st.lists(st.sampled_from(["alpha", "beta", "γάμμα", "代码", "x", "1234", "<|endoftext|>"]),
                 min_size=1, max_size=12).map(" ".join)


class PendingTokens(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="wm-pending-")
        self.store = SessionStore(self.dir, durable=False, meta_refresh_seconds=0.0)
        self.other = SessionStore(self.dir, durable=False, meta_refresh_seconds=3600.0)
        self.expected_total = 0

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(texts=st.lists(WORDS, min_size=1, max_size=4), from_other=st.booleans())
    def add(self, texts, from_other):
        target = self.other if from_other else self.store
        roles = ["user", "assistant"]
        target.append(SID, [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)])
        self.expected_total += len(texts)

    @rule(keep=st.one_of(st.integers(-3, 25), st.tuples(st.sampled_from(["messages", "turns"]), st.integers(0, 12)),
                         st.tuples(st.just("tokens"), st.integers(0, 60))))
    def change_keep(self, keep):
        if self.store.session_exists(SID):
            self.store.set_keep(SID, keep)

    @rule(keep=st.integers(0, 12), gc=st.booleans(), record=st.booleans())
    def archive(self, keep, gc, record):
        if not self.store.session_exists(SID):
            return
        live = self.store.live_messages(SID)
        covered_range = choose_covered_range(live, keep)
        if covered_range is None:
            return
        covered = [m for m in live if m["seq"] <= covered_range[1]]
        archive = {"archive_id": self.store.next_archive_id(SID), "session_id": SID,
                   "source_turn_range": source_turn_range(covered)}
        self.store.write_archive(SID, archive, covered, "# Working Memory\n", "abstract")
        if gc:
            self.store.drop_covered(SID, covered_range[1])
        if record:
            self.store.record_commit(SID, archive, keep)

    @rule()
    def reload(self):
        self.store = SessionStore(self.dir, durable=False, meta_refresh_seconds=0.0)

    @invariant()
    def pending_matches_brute_force(self):
        if not self.store.session_exists(SID):
            return
        for store in (self.store, self.other):
            meta = store.meta(SID)
            live = store.live_messages(SID)
            assert meta["pending_tokens"] == compute_pending_tokens(live, meta["keep"])
            assert meta["live_tokens"] == sum(m["tokens"] for m in live)
            assert meta["pending_tokens"] >= 0
            unit, n = meta["keep"]
            assert 0 <= n <= 10_000 and meta["keep_recent_count"] == (n if unit == "messages" else None)
            assert meta["message_count"] == len(live)
            assert meta["total_message_count"] == self.expected_total


PendingTokens.TestCase.settings = settings(max_examples=75, stateful_step_count=30, deadline=None)
TestPendingTokens = PendingTokens.TestCase
