"""What an index makes of a filter's allowed set is kept per set (search/per_filter.py):
found by the set's identity, an equal set of another reader's compared whole once, bounded
under threads; the vector index's masks and rows kept the same way as the native stage's."""

from __future__ import annotations

import gc
import random
import threading

import pytest

from toolcat.search.embeddings import VectorIndex
from toolcat.search.per_filter import PerFilter


class Compared(frozenset):  # type: ignore[type-arg]
    """A frozenset that counts how often it is compared whole with another."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Compared.compared += 1
        return frozenset.__eq__(self, other)

    __hash__ = frozenset.__hash__


def test_an_equal_set_is_compared_whole_once_then_found_by_identity() -> None:
    kept: PerFilter[str] = PerFilter(4)
    made: list[frozenset[int]] = []

    def make(allowed: frozenset[int]) -> str:
        made.append(allowed)
        return f"made of {len(allowed)}"

    first = frozenset(range(1000))
    assert kept.get(first, make) == "made of 1000"
    second = Compared(range(1000))  # another reader's set of the same filter
    Compared.compared = 0
    for _ in range(20):
        assert kept.get(second, make) == "made of 1000"
    assert Compared.compared <= 1 and made == [first] and len(kept) == 1


def test_a_set_gone_does_not_lend_its_id_to_the_next() -> None:
    """A set freed and another made at the same address: found by its own content."""
    kept: PerFilter[int] = PerFilter(4)
    seen_ids = set()
    for first in range(200):
        allowed = frozenset(range(first, first + 50))  # one size: its memory is reused
        seen_ids.add(id(allowed))
        assert kept.get(allowed, min) == first
        del allowed
        gc.collect(0)  # young objects only: a full collection late in a run took 0.3 s
    assert len(seen_ids) < 200  # ids were reused: the case this is about


def test_threads_sharing_it_leave_it_within_its_bounds() -> None:
    kept: PerFilter[int] = PerFilter(8)
    rng = random.Random(3)
    sets = [frozenset(rng.sample(range(10_000), 50)) for _ in range(200)]

    def run(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(3_000):
            allowed = local.choice(sets)
            assert kept.get(allowed, len) == len(allowed)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    kept.get(frozenset({1, 2, 3}), len)  # the next insert trims whatever races left
    assert len(kept) <= 8 and len(kept._by_id) <= 32


def test_the_vector_index_finds_another_readers_filter_by_identity() -> None:
    """Readers share one vector index, each with its own allowed set of a filter: its
    masks and narrow rows were kept by set, compared whole at every query (attack44 saw it
    there too, ~15 ms at 500k rows)."""
    np = pytest.importorskip("numpy")
    index = VectorIndex()
    index.ids = np.arange(10, 20_010, dtype=np.int64)
    index.tool_rows = 20_000
    first = frozenset(range(10, 20_010, 2))
    second = Compared(range(10, 20_010, 2))
    mask = index._mask(index.ids, first)
    rows = index._allowed_rows(first)
    Compared.compared = 0
    for _ in range(20):
        assert index._mask(index.ids, second) is mask
        assert index._allowed_rows(second) is rows
    assert Compared.compared <= 2  # once for the masks, once for the rows
    assert int(mask.sum()) == len(rows) == 10_000
