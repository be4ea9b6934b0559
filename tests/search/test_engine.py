"""The engine's per-revision shortcuts change nothing: fusion's signals read from the
in-memory index give the rankings, scores and ``match`` labels that the tools' ``tools_fts``
rows give, and the index built in the background is served only at its own revision."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, engine
from toolcat.search.lexical_index import TantivyIndex

pytest.importorskip("sentence_transformers")

NAMED = ["convert_units", "get_weather", "send email", "delete a file", "zzzz qqq", "the of a"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The sample catalog plus 300 benchmark tools, with vectors (built once)."""
    kits, queries = bench_toolkits(300)
    path = tmp_path_factory.mktemp("engine") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.register(kits)
        catalog.reindex(batch_size=32)
    return path, queries[:40] + NAMED


def answers(catalog: Catalog, query: str, mode: str) -> list[tuple[str, float, str]]:
    return [(h.tool.id, h.score, h.match) for h in catalog.search(query, mode=mode, k=10).hits]


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_signals_from_the_index_equal_those_from_fts_rows(
    indexed: tuple[Path, list[str]], mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries = indexed
    from_rows = []
    with monkeypatch.context() as never_built:  # FTS5 and tools_fts rows only
        never_built.setattr(engine, "POSTINGS_AFTER", 10**9)
        with Catalog(path) as fresh:
            for query in queries:
                from_rows.append(answers(fresh, query, mode))
            assert fresh._search.postings.index is None
    with Catalog(path) as warm:
        for query in queries[:2]:
            warm.search(query, mode="bm25")
        assert warm._search.postings.current(warm.revision, bm25.DEFAULT_WEIGHTS)
        from_index = [answers(warm, query, mode) for query in queries]
        from_index_again = [answers(warm, query, mode) for query in queries]  # names cached
    assert from_index == from_rows
    assert from_index_again == from_rows
    assert any(hits for hits in from_rows) and {m for h in from_rows for _, _, m in h} >= {
        "strong",
        "weak",
    }


def test_the_background_build_is_served_only_at_its_own_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kits, queries = bench_toolkits(300)
    path = tmp_path / "catalog.db"
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 1)  # background at any size
    release = threading.Event()
    real_build = TantivyIndex.build

    def held_build(self: TantivyIndex, *args: Any) -> None:
        assert release.wait(60)
        real_build(self, *args)

    monkeypatch.setattr(TantivyIndex, "build", held_build)
    query = "wipe a file for good"
    with Catalog(path) as server, Catalog(path) as admin:
        server.register(kits)
        lexical = server._search.postings
        first = [answers(server, query, "bm25") for _ in range(engine.POSTINGS_AFTER)]
        # The query that asked for the index did not wait for it: FTS5 answered.
        assert lexical.building and lexical.index is None
        assert first[0] == first[1]
        # A change lands while the build (which read the catalog before it) runs.
        admin.register(
            Toolkit(
                name="shredder",
                version="1",
                tools=[Tool(name="shred_file", description="Wipe a file for good")],
            )
        )
        release.set()
        lexical.wait(60)
        assert lexical.index is not None and lexical.revision < server.revision
        after = server.search(query, mode="bm25", k=3)  # the old index is not asked
        assert after.revision == admin.revision
        assert after.hits[0].tool.id == "shredder.shred_file"
        server.search(query, mode="bm25", k=3)  # asks for an index of this revision
        lexical.wait(60)
        assert lexical.current(server.revision, bm25.DEFAULT_WEIGHTS)
        again = server.search(query, mode="bm25", k=3)
        assert [(h.tool.id, h.score) for h in again.hits] == [
            (h.tool.id, h.score) for h in after.hits
        ]
        assert all(answers(server, q, "bm25") for q in queries[:5])
