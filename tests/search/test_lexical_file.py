"""The BM25 index saved beside the catalog is taken up by the next process that opens it at
the same revision (no rebuild, the same answers), and never at another revision, nor when
its files are torn or belong to another catalog."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import lexical_file
from toolcat.search.lexical_index import TantivyIndex

pytest.importorskip("tantivy")

QUERIES = 20


def served(path: Path, queries: list[str]) -> tuple[list[Any], Catalog]:
    """A fresh process's view: BM25 answers from its in-memory index, once it is ready."""
    catalog = Catalog(path)
    catalog.search(queries[0], mode="bm25")
    catalog.search(queries[1], mode="bm25")  # the second query at a revision builds or loads
    catalog._search.postings.wait()
    assert isinstance(catalog._search.postings.index, TantivyIndex)
    answers = [
        [(h.tool.id, h.score) for h in catalog.search(q, mode="bm25").hits]
        for q in queries[:QUERIES]
    ]
    return answers, catalog


@pytest.fixture
def saved(db_path: Path) -> tuple[Path, list[str], list[Any]]:
    kits, queries = bench_toolkits(1200)  # past BACKGROUND_BUILD_FROM: built off the request path
    with Catalog(db_path) as catalog:
        catalog.register(kits)
    answers, catalog = served(db_path, queries)
    catalog.close()
    assert (lexical_file.folder(str(db_path)) / lexical_file.STAMP).exists()
    return db_path, queries, answers


def no_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    builds: list[int] = []
    original = TantivyIndex.build

    def counted(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        builds.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TantivyIndex, "build", counted)
    return builds


def test_the_next_process_loads_the_saved_index(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries, answers = saved
    builds = no_builds(monkeypatch)
    again, catalog = served(path, queries)
    catalog.close()
    assert builds == []
    assert again == answers


def test_a_change_makes_the_saved_index_stale(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries, _ = saved
    new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers")
    with Catalog(path) as catalog:
        catalog.register(Toolkit(name="flora", version="1", tools=[new]))
    builds = no_builds(monkeypatch)
    _, catalog = served(path, ["zygomorphic flowers", *queries])
    hits = catalog.search("zygomorphic flowers", mode="bm25").hits
    catalog.close()
    assert builds == [1]
    assert hits[0].tool.id == "flora.zygomorphic_lookup"


@pytest.mark.parametrize("damage", ["torn data", "no tantivy folder", "garbage stamp"])
def test_a_torn_save_is_rebuilt_never_served(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    if damage == "torn data":
        data = next(folder.glob("data-*.bin"))
        data.write_bytes(data.read_bytes()[:-7])
    elif damage == "no tantivy folder":
        shutil.rmtree(next(folder.glob("tantivy-*")))
    else:
        (folder / lexical_file.STAMP).write_text("{not json")
    builds = no_builds(monkeypatch)
    again, catalog = served(path, queries)
    catalog.close()
    assert builds == [1]
    assert again == answers


def test_another_catalogs_index_at_the_same_revision_is_not_taken(
    saved: tuple[Path, list[str], list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog restored or copied over this one, at the same revision number but with
    other tools: FTS5's totals differ from the stamp's, so the saved index is not used."""
    path, queries, _ = saved
    other = tmp_path / "other.db"
    kits, _ = bench_toolkits(1100)
    with Catalog(other) as catalog:
        catalog.register(kits)
        catalog._conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'revision'", (Catalog(path).revision,)
        )
    shutil.copytree(lexical_file.folder(str(path)), lexical_file.folder(str(other)))
    builds = no_builds(monkeypatch)
    _, catalog = served(other, queries)
    catalog.close()
    assert builds == [1]
