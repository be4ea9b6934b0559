"""The ANN graph of a large catalog's vectors (search/ann.py), at small sizes with the
threshold lowered: it answers like the exact scan (recall of the top 10, the same scores for
what it finds), filters hold, it is stamped with the catalog revision and model and loaded by
the next process at that revision, and a stale, torn, truncated or foreign saved graph is
rebuilt, never served; until a graph of the current revision is ready, the exact scan
answers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import ann

pytest.importorskip(ann.LIBRARY)
pytest.importorskip("onnxruntime")

TOOLS = 300
THRESHOLD = 100  # ann.ANN_FROM in these tests
QUERIES = 40


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """300 real tools (bfcl) with vectors, built once for the module (copied per test)."""
    kits, queries = bench_toolkits(TOOLS)
    path = tmp_path_factory.mktemp("ann") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(kits)
        assert catalog.reindex(batch_size=64).embedded == TOOLS
    return path, queries[:QUERIES]


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)


@pytest.fixture
def db(indexed: tuple[Path, list[str]], tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    shutil.copy(indexed[0], path)
    return path


def counted_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    builds: list[int] = []
    original = ann.build

    def build(*args: Any, **kwargs: Any) -> ann.Graph:
        builds.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ann, "build", build)
    return builds


def answers(catalog: Catalog, queries: list[str], **filters: Any) -> list[list[tuple[str, float]]]:
    return [
        [(h.tool.id, h.score) for h in catalog.search(q, mode="embedding", k=10, **filters).hits]
        for q in queries
    ]


def served(path: Path, queries: list[str]) -> Iterator[Catalog]:
    """A fresh process's catalog whose graph is ready (the first query loads or builds it)."""
    catalog = Catalog(path)
    catalog.search(queries[0], mode="embedding")
    catalog._search.vectors.wait_graph()
    assert catalog._search.vectors.graph is not None, catalog._search.vectors.graph_error
    yield catalog
    catalog.close()


def exact(path: Path, queries: list[str], **filters: Any) -> list[list[tuple[str, float]]]:
    with Catalog(path) as catalog:
        found = answers(catalog, queries, **filters)
        assert catalog._search.vectors.graph is None  # under the threshold: no graph
        return found


def recall(found: list[list[tuple[str, float]]], truth: list[list[tuple[str, float]]]) -> float:
    hits = sum(
        len({t for t, _ in f} & {t for t, _ in e}) for f, e in zip(found, truth, strict=True)
    )
    return hits / sum(len(e) for e in truth)


def same_scores(found: list[list[tuple[str, float]]], truth: list[list[tuple[str, float]]]) -> None:
    """What the graph finds is scored exactly as the exact scan scores it."""
    for f, e in zip(found, truth, strict=True):
        known = dict(e)
        for tool, score in f:
            if tool in known:
                assert score == known[tool]


def test_the_graph_answers_like_the_exact_scan(
    db: Path, indexed: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    truth = exact(db, queries)
    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
    for catalog in served(db, queries):
        found = answers(catalog, queries)
        hybrid = catalog.search(queries[1], mode="hybrid").hits
    assert recall(found, truth) >= 0.98
    same_scores(found, truth)
    assert hybrid and hybrid[0].tool.id in {t for t, _ in truth[1][:3]} | {hybrid[0].tool.id}
    assert (ann.folder(str(db)) / ann.STAMP).exists()


def test_until_the_graph_is_ready_the_exact_scan_answers(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    release = __import__("threading").Event()
    original = ann.build

    def slow_build(*args: Any, **kwargs: Any) -> ann.Graph:
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(ann, "build", slow_build)
    with Catalog(db) as catalog:
        before = answers(catalog, queries[:5])
        assert catalog._search.vectors.graph is None  # still building: the exact scan answered
        release.set()
        catalog._search.vectors.wait_graph()
        assert catalog._search.vectors.graph is not None
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    assert before == exact(db, queries[:5])


def test_the_next_process_loads_the_saved_graph(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    for catalog in served(db, queries):
        first = answers(catalog, queries)
    builds = counted_builds(monkeypatch)
    for catalog in served(db, queries):
        again = answers(catalog, queries)
    assert builds == []
    assert again == first
    stamp = json.loads((ann.folder(str(db)) / ann.STAMP).read_text())
    with Catalog(db) as catalog:
        assert stamp["revision"] == catalog.revision
        assert stamp["model"] == catalog._search.model_id(catalog._conn)
        assert stamp["rows"] == TOOLS


def test_a_change_makes_the_graph_stale(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    for catalog in served(db, queries):
        old = catalog.revision
        vectors = catalog._search.vectors
        new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal")
        catalog.register(Toolkit(name="flora", version="1", tools=[new]))
        catalog.reindex()
        builds = counted_builds(monkeypatch)
        hits = catalog.search("zygomorphic flowers", mode="embedding").hits
        # the new revision's first query: the old graph is gone, the exact scan found the tool
        assert vectors.key is not None and vectors.key[0] == catalog.revision != old
        assert hits[0].tool.id == "flora.zygomorphic_lookup"
        vectors.wait_graph()
        assert builds == [1] and vectors.graph is not None and len(vectors.graph) == TOOLS + 1
        stamp = json.loads((ann.folder(str(db)) / ann.STAMP).read_text())
        assert stamp["revision"] == catalog.revision
        assert catalog.search("zygomorphic flowers", mode="embedding").hits[0].tool.id == (
            "flora.zygomorphic_lookup"
        )


def damage_file(db: Path, how: str, other: Path) -> None:
    folder = ann.folder(str(db))
    stamp_path = folder / ann.STAMP
    stamp = json.loads(stamp_path.read_text())
    graph = folder / stamp["file"]
    if how == "truncated":
        graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    elif how == "torn (same size, bytes changed)":
        data = bytearray(graph.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
        graph.write_bytes(bytes(data))
    elif how == "garbage stamp":
        stamp_path.write_text("{not json")
    elif how == "stamp of another revision":
        stamp_path.write_text(json.dumps({**stamp, "revision": stamp["revision"] - 1}))
    elif how == "file outside the folder":
        stamp_path.write_text(json.dumps({**stamp, "file": "../catalog.db"}))
    elif how == "missing graph":
        graph.unlink()
    elif how == "another catalog's graph at the same revision":
        shutil.rmtree(folder)
        shutil.copytree(ann.folder(str(other)), folder)
        theirs = json.loads(stamp_path.read_text())
        with Catalog(db) as catalog:
            assert theirs["revision"] == catalog.revision  # only the fingerprint differs


DAMAGE = [
    "truncated",
    "torn (same size, bytes changed)",
    "garbage stamp",
    "stamp of another revision",
    "file outside the folder",
    "missing graph",
    "another catalog's graph at the same revision",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_stale_torn_or_foreign_graph_is_rebuilt_never_served(
    db: Path,
    indexed: tuple[Path, list[str]],
    large: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    how: str,
) -> None:
    queries = indexed[1]
    for catalog in served(db, queries):
        first = answers(catalog, queries)
    other = tmp_path / "other.db"
    if how.startswith("another catalog"):
        # a copy of this catalog at the same revision, two tools' vectors swapped
        shutil.copy(db, other)
        with Catalog(other) as theirs:
            conn = theirs._conn
            (a, va), (b, vb) = conn.execute(
                "SELECT rowid, vector FROM embeddings ORDER BY rowid LIMIT 2"
            ).fetchall()
            conn.execute("UPDATE embeddings SET vector = ? WHERE rowid = ?", (vb, a))
            conn.execute("UPDATE embeddings SET vector = ? WHERE rowid = ?", (va, b))
        for _ in served(other, queries):
            pass
    damage_file(db, how, other)
    builds = counted_builds(monkeypatch)
    loaded: list[Any] = []
    original = ann.load

    def load(*args: Any, **kwargs: Any) -> ann.Graph | None:
        loaded.append(original(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(ann, "load", load)
    for catalog in served(db, queries):
        again = answers(catalog, queries)
    assert loaded == [None]  # refused before the library read it
    assert builds == [1]
    assert again == first
    assert json.loads((ann.folder(str(db)) / ann.STAMP).read_text())["file"] != "../catalog.db"


@pytest.mark.parametrize("narrow_share", [0.0, 0.5], ids=["graph, deeper", "exact, narrow"])
def test_filters_hold_through_the_graph(
    db: Path,
    indexed: tuple[Path, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    narrow_share: float,
) -> None:
    queries = indexed[1]
    truth = exact(db, queries, toolkit="kit100")
    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
    monkeypatch.setattr(ann, "NARROW_SHARE", narrow_share)
    for catalog in served(db, queries):
        found = answers(catalog, queries, toolkit="kit100")
        tagged = answers(catalog, queries[:5], tags=["nothing-has-this"])
    assert all(tool.startswith("kit100.") for hits in found for tool, _ in hits)
    assert all(len(hits) == 10 for hits in found)
    assert recall(found, truth) >= 0.98
    same_scores(found, truth)
    assert tagged == [[]] * 5


def test_without_the_library_the_exact_scan_serves(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    monkeypatch.setattr(ann, "installed", lambda: False)
    with Catalog(db) as catalog:
        found = answers(catalog, queries[:5])
        catalog._search.vectors.wait_graph()
        assert catalog._search.vectors.graph is None
    assert not ann.folder(str(db)).exists()
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    assert found == exact(db, queries[:5])


def test_above_the_measured_size_the_exact_scan_serves(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ann.ANN_UP_TO: past the largest size where recall@10 >= 0.98 was measured, no graph."""
    queries = indexed[1]
    monkeypatch.setattr(ann, "ANN_UP_TO", TOOLS - 1)
    with Catalog(db) as catalog:
        found = answers(catalog, queries[:5])
        catalog._search.vectors.wait_graph()
        assert catalog._search.vectors.graph is None
    assert not ann.folder(str(db)).exists()
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    assert found == exact(db, queries[:5])
