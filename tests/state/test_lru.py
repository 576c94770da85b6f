"""The shared LRU map: a hit becomes the newest, a put past the size drops the oldest."""

from workmem.state.lru import LRU


def test_a_put_past_the_size_drops_the_least_recently_used():
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" is now the newest
    lru.put("c", 3)
    assert (lru.get("b"), lru.get("a"), lru.get("c"), len(lru)) == (None, 1, 3, 2)
    lru.pop("a")
    lru.pop("missing")
    assert (lru.get("a"), len(lru)) == (None, 1)


def test_size_zero_keeps_nothing():
    lru: LRU[str, int] = LRU(0)
    lru.put("a", 1)
    assert lru.get("a") is None and len(lru) == 0
