"""What `check()` compares between the search index and the archives: every backend alike.

The index can be rebuilt from the archives (`workmem reindex`), so it must never disagree with them silently —
an index rebuilt from the wrong messages (a resumed commit indexing another range) hides archived messages
from search and shows live ones as archive hits. The cheap check reads only the index's (archive, seq) pairs;
the deep one also reads every archive's messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workmem.state.errors import Anomaly
from workmem.state.messages import indexed_text


def index_anomalies(indexed: dict[str, list[int]], archives: list[dict[str, Any]], where: str, *,
                    archive_messages: Callable[[str], list[dict[str, Any]]] | None = None) -> list[Anomaly]:
    """Where the index disagrees with the archives: messages of an archive that does not exist, seqs outside
    their archive's range (or twice), and with `archive_messages` (deep) archived messages missing."""
    found: list[Anomaly] = []
    fix = " (`workmem reindex` rebuilds the index from the archives)"
    ranges = {a["archive_id"]: (a["start_seq"], a["end_seq"]) for a in archives}
    if ranges and not indexed and archive_messages is None:  # an index emptied or replaced: seen without reading
        found.append(Anomaly(where, 0, f"holds no message of the session's {len(ranges)} archive(s){fix}"))
    for archive_id, seqs in sorted(indexed.items()):
        if archive_id not in ranges:
            found.append(Anomaly(where, 0, f"holds {len(seqs)} message(s) of {archive_id}, which is no archive{fix}"))
            continue
        start, end = ranges[archive_id]
        outside = [s for s in seqs if not start <= s <= end]
        if outside:
            found.append(Anomaly(where, 0, f"{archive_id} covers seqs {start}..{end} but the index holds seqs "
                                           f"{outside[:10]} for it{fix}"))
        if len(set(seqs)) != len(seqs):
            found.append(Anomaly(where, 0, f"holds a message of {archive_id} more than once{fix}"))
    if archive_messages is not None:
        for archive_id in ranges:
            expected = {m["seq"] for m in archive_messages(archive_id) if indexed_text(m)}
            missing = sorted(expected - set(indexed.get(archive_id, ())))
            if missing:
                found.append(Anomaly(where, 0, f"{len(missing)} message(s) of {archive_id} are not in the index: "
                                               f"seqs {missing[:10]}{fix}"))
    return found
