"""Attacks on the BM25 index brought forward by changed rows (attack38): a brought-forward
index must answer every ``rank`` as a new build at the same revision."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.search.test_lexical_forward import forward
from tests.search.test_lexical_index import built
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex

pytest.importorskip("tantivy")


def changed_catalog(db_path: Path) -> tuple[Catalog, TantivyIndex, list[str]]:
    """A real catalog, its index built, then changed: a toolkit added, one removed, and
    tools whose words no earlier tool has."""
    kits, queries = bench_toolkits(600)
    catalog = Catalog(db_path)
    catalog.register(kits[:4])
    earlier = built(catalog)
    catalog.register([kits[4]])
    catalog.remove("kit100")
    words = "zyzzyva unique words ghost "
    fresh = [
        Tool(name=f"zz{i}", description=words * (i % 3 + 1), tags=["bench"]) for i in range(30)
    ]
    catalog.register([Toolkit(name="zz", version="1", tools=fresh)])
    return catalog, earlier, [*queries[:40], "zyzzyva", "ghost words", "unique"]


def test_a_query_term_asked_twice_counts_twice_in_the_rows_held_apart(db_path: Path) -> None:
    # ``rank`` sums a repeated term's contribution as often as it is asked (tantivy's
    # boolean query and ``_score`` alike); the MaxScore prune of the changed rows counted
    # it once and passed over changed rows that belonged in the top k.
    catalog, earlier, queries = changed_catalog(db_path)
    with catalog:
        brought, new = forward(catalog, earlier), built(catalog)
        differ = []
        for query in queries:
            terms = new.terms(query, 8)
            if not terms:
                continue
            asked = terms + terms[:1]
            for k in (1, 2, 3, 5, 10, 37, 200):
                if brought.rank(asked, k) != new.rank(asked, k):
                    differ.append((query, k))
        assert differ == []


def test_a_revision_asked_for_as_the_background_build_ends_is_built(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The build thread decides to stop (nothing asked again) and is still alive a moment
    # after: a revision asked for in that moment was taken as asked of the running build
    # (``_again``), which had already stopped; it was left to FTS5 until queries asked again.
    kits, _ = bench_toolkits(300)
    weights = bm25.DEFAULT_WEIGHTS
    decided, release = threading.Event(), threading.Event()
    build_from_file = LexicalIndex._build_from_file

    def ends_slowly(self: LexicalIndex, path: str, weights: tuple[float, ...]) -> None:
        build_from_file(self, path, weights)
        decided.set()  # the loop is done; the thread is not gone yet
        release.wait(30)

    monkeypatch.setattr(LexicalIndex, "_build_from_file", ends_slowly)
    with Catalog(db_path) as catalog:
        catalog.register(kits[:2])
        lexical = LexicalIndex("tantivy")
        with catalog._snapshot() as conn:
            lexical.build_soon(conn, catalog.revision, weights, str(db_path))
        assert decided.wait(60)
        catalog.register([kits[2]])
        with catalog._snapshot() as conn:
            lexical.build_soon(conn, catalog.revision, weights, str(db_path))
        release.set()
        lexical.wait(60)
        assert lexical.current(catalog.revision, weights)


@pytest.fixture
def two_kits(db_path: Path) -> Iterator[Catalog]:
    kits, _ = bench_toolkits(300)
    with Catalog(db_path) as catalog:
        catalog.register(kits[:2])
        yield catalog


def test_asking_for_the_revision_a_background_build_just_made_keeps_it(
    two_kits: Catalog, db_path: Path
) -> None:
    # A reader that found no index, then asked for a build as the background one ended
    # with its revision, threw that index away and built it again (minutes at 1M tools).
    catalog, weights = two_kits, bm25.DEFAULT_WEIGHTS
    lexical = LexicalIndex("tantivy")
    with catalog._snapshot() as conn:
        lexical.build_soon(conn, catalog.revision, weights, str(db_path))
    lexical.wait(60)
    made = lexical.index
    assert made is not None and lexical.current(catalog.revision, weights)
    with catalog._snapshot() as conn:
        lexical.build_soon(conn, catalog.revision, weights, str(db_path))
    lexical.wait(60)
    assert lexical.index is made


def test_a_catalog_path_that_cannot_be_opened_ends_the_background_build_quietly(
    two_kits: Catalog, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only sqlite3.Error was caught: a path sqlite3 refuses otherwise (a NUL byte:
    # ValueError) escaped the build thread (threading.excepthook) with ``_again`` left set.
    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    catalog, weights = two_kits, bm25.DEFAULT_WEIGHTS
    lexical = LexicalIndex("tantivy")
    with catalog._snapshot() as conn:
        lexical.build_soon(conn, catalog.revision, weights, f"{db_path}\x00")
        lexical.build_soon(conn, catalog.revision, weights, f"{db_path}\x00")
    lexical.wait(60)
    assert escaped == []
    assert lexical.index is None and lexical.error.startswith("background build")
    assert not lexical._again
