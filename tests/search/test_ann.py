"""Large catalogs' vectors (search/ann.py), at small sizes with the threshold lowered: the
compact float16 store answers like the float32 scan, the shortlist answers like the store's
exact scan (recall of the top 10, the same scores for what it finds), filters hold, it is
stamped with the catalog revision and model, built by reindex and loaded by the next process
at that revision, and a stale, torn, truncated or foreign saved index is rebuilt, never
served; until a shortlist of the current revision is ready, the exact scan answers."""

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

    def build(*args: Any, **kwargs: Any) -> ann.Shortlist:
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
    """A fresh process's catalog whose shortlist is ready (the first query loads or builds
    it)."""
    catalog = Catalog(path)
    catalog.search(queries[0], mode="embedding")
    catalog._search.vectors.wait_shortlist()
    assert catalog._search.vectors.shortlist is not None, catalog._search.vectors.shortlist_error
    yield catalog
    catalog.close()


def exact(path: Path, queries: list[str], **filters: Any) -> list[list[tuple[str, float]]]:
    with Catalog(path) as catalog:
        found = answers(catalog, queries, **filters)
        vectors = catalog._search.vectors
        assert vectors.shortlist is None and vectors.store is None  # under the threshold
        assert vectors.matrix is not None and vectors.matrix.dtype == "float32"
        return found


def recall(found: list[list[tuple[str, float]]], truth: list[list[tuple[str, float]]]) -> float:
    hits = sum(
        len({t for t, _ in f} & {t for t, _ in e}) for f, e in zip(found, truth, strict=True)
    )
    return hits / sum(len(e) for e in truth)


# How far a cosine from float16 rows may be from the float32 one (unit vectors of 384 dims).
FLOAT16_TOLERANCE = 1e-3


def same_scores(
    found: list[list[tuple[str, float]]],
    truth: list[list[tuple[str, float]]],
    tolerance: float = 0.0,
) -> None:
    """What the shortlist finds is scored as the exact scan scores it (exactly, or within
    ``tolerance`` of the float32 scan's cosine)."""
    compared = 0
    for f, e in zip(found, truth, strict=True):
        known = dict(e)
        for tool, score in f:
            if tool in known:
                assert score == pytest.approx(known[tool], abs=tolerance, rel=0)
                compared += 1
    assert compared >= 0.9 * sum(len(e) for e in truth)


def test_the_shortlist_answers_like_the_float32_scan(
    db: Path, indexed: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    truth = exact(db, queries)
    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
    for catalog in served(db, queries):
        found = answers(catalog, queries)
        hybrid = catalog.search(queries[1], mode="hybrid").hits
    assert recall(found, truth) >= 0.98
    same_scores(found, truth, FLOAT16_TOLERANCE)
    assert hybrid and hybrid[0].tool.id in {t for t, _ in truth[1][:3]} | {hybrid[0].tool.id}
    assert (ann.folder(str(db)) / ann.STAMP).exists()


def test_until_the_shortlist_is_ready_the_exact_scan_answers(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's exact scan (float16 rows through faiss, rescored) answers meanwhile; the
    shortlist then gives what it found the very same scores."""
    queries = indexed[1]
    release = __import__("threading").Event()
    original = ann.build

    def slow_build(*args: Any, **kwargs: Any) -> ann.Shortlist:
        release.wait(30)
        return original(*args, **kwargs)

    monkeypatch.setattr(ann, "build", slow_build)
    with Catalog(db) as catalog:
        before = answers(catalog, queries)
        vectors = catalog._search.vectors
        assert vectors.shortlist is None  # still building: the exact scan answered
        release.set()
        vectors.wait_shortlist()
        assert vectors.shortlist is not None
        after = answers(catalog, queries)
    assert recall(after, before) >= 0.98
    same_scores(after, before)
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    truth = exact(db, queries)
    assert recall(before, truth) >= 0.98
    same_scores(before, truth, FLOAT16_TOLERANCE)


def test_the_next_process_loads_the_saved_shortlist(
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


def test_a_change_carries_the_shortlist_to_the_new_rows(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process registers and reindexes: the serving one brings its matrix forward at
    its next query and carries its shortlist to it, the new tool scanned exactly beside it
    (no build); once more rows than ``ann.CARRIED_MAX`` are outside its index, it loads the
    new revision's saved shortlist (reindex saved it), or builds one."""
    queries = indexed[1]
    for catalog in served(db, queries):
        old = catalog.revision
        vectors = catalog._search.vectors
        with Catalog(db) as admin:
            new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal")
            admin.register(Toolkit(name="flora", version="1", tools=[new]))
            admin.reindex()
        builds = counted_builds(monkeypatch)
        hits = catalog.search("zygomorphic flowers", mode="embedding").hits
        assert vectors.key is not None and vectors.key[0] == catalog.revision != old
        assert hits[0].tool.id == "flora.zygomorphic_lookup"
        assert vectors.shortlist is not None  # carried: served at once
        assert len(vectors.shortlist) == TOOLS and vectors.shortlist.off_index == 1
        with Catalog(db) as fresh:  # read whole, the shortlist reindex saved
            assert answers(catalog, queries) == answers(fresh, queries)
        vectors.wait_shortlist()
        assert builds == []
        monkeypatch.setattr(ann, "CARRIED_MAX", 1)
        with Catalog(db) as admin:
            more = Tool(name="actinomorphic_lookup", description="Find radial flowers")
            admin.register(Toolkit(name="flora2", version="1", tools=[more]))
            admin.reindex()
        builds = counted_builds(monkeypatch)  # not the admin's own
        catalog.search("radial flowers", mode="embedding")
        vectors.wait_shortlist()
        assert builds == [] and vectors.shortlist is not None
        assert len(vectors.shortlist) == TOOLS + 2 and vectors.shortlist.off_index == 0
        stamp = json.loads((ann.folder(str(db)) / ann.STAMP).read_text())
        assert stamp["revision"] == catalog.revision
        assert catalog.search("zygomorphic flowers", mode="embedding").hits[0].tool.id == (
            "flora.zygomorphic_lookup"
        )


def damage_file(db: Path, how: str, other: Path) -> None:
    folder = ann.folder(str(db))
    stamp_path = folder / ann.STAMP
    stamp = json.loads(stamp_path.read_text())
    saved = folder / stamp["file"]
    if how == "truncated":
        saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    elif how == "torn (same size, bytes changed)":
        data = bytearray(saved.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64
        saved.write_bytes(bytes(data))
    elif how == "garbage stamp":
        stamp_path.write_text("{not json")
    elif how == "stamp of another revision":
        stamp_path.write_text(json.dumps({**stamp, "revision": stamp["revision"] - 1}))
    elif how == "stamp of the older HNSW format":
        stamp_path.write_text(json.dumps({**stamp, "format": 1, "index": None, "graph": [16, 128]}))
    elif how == "file outside the folder":
        stamp_path.write_text(json.dumps({**stamp, "file": "../catalog.db"}))
    elif how == "missing index file":
        saved.unlink()
    elif how == "another catalog's index at the same revision":
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
    "stamp of the older HNSW format",
    "file outside the folder",
    "missing index file",
    "another catalog's index at the same revision",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_stale_torn_or_foreign_index_is_rebuilt_never_served(
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

    def load(*args: Any, **kwargs: Any) -> ann.Shortlist | None:
        loaded.append(original(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(ann, "load", load)
    for catalog in served(db, queries):
        again = answers(catalog, queries)
    # refused before the library read it (asked again under the folder's lock: still no)
    assert loaded and all(found is None for found in loaded)
    assert builds == [1]
    assert again == first
    assert json.loads((ann.folder(str(db)) / ann.STAMP).read_text())["file"] != "../catalog.db"


@pytest.mark.parametrize("narrow_share", [0.0, 0.5], ids=["shortlist, deeper", "exact, narrow"])
def test_filters_hold_through_the_shortlist(
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
    same_scores(found, truth, FLOAT16_TOLERANCE)
    assert tagged == [[]] * 5


def test_without_the_library_the_exact_scan_serves(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    monkeypatch.setattr(ann, "installed", lambda: False)
    with Catalog(db) as catalog:
        found = answers(catalog, queries[:5])
        catalog._search.vectors.wait_shortlist()
        assert catalog._search.vectors.shortlist is None
    assert not ann.folder(str(db)).exists()
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    assert found == exact(db, queries[:5])


def test_a_large_catalog_keeps_float16_rows_loaded_a_chunk_at_a_time(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the threshold on the vectors live in the compact store: half float32's bytes,
    the float32 rows never held whole while loading (numpy's and SQLite's allocations are
    traced; the store's are faiss's)."""
    import tracemalloc

    from toolcat.search import embeddings

    monkeypatch.setattr(embeddings, "VECTOR_CHUNK", 16)
    monkeypatch.setattr(embeddings.VectorIndex, "_shortlist_soon", lambda self, path: None)
    with Catalog(db) as catalog:
        model = catalog._search.model_id(catalog._conn)
        peaks = {}
        for kind, threshold in (("float16", THRESHOLD), ("float32", 10**9)):
            monkeypatch.setattr(ann, "ANN_FROM", threshold)
            vectors = embeddings.VectorIndex()
            tracemalloc.start()
            vectors.refresh(catalog._conn, catalog.revision, model, str(db))
            peaks[kind] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert vectors.matrix is not None and vectors.matrix.dtype == kind
            assert (vectors.store is not None) == (kind == "float16")
        monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
        found = answers(catalog, indexed[1][:5])
        vectors = catalog._search.vectors
        assert vectors.store is not None and vectors.matrix is not None
        assert vectors.shortlist is None  # the store's exact scan answered
        assert vectors.matrix.shape[0] == TOOLS
        assert vectors.matrix.nbytes == TOOLS * vectors.matrix.shape[1] * 2
    float32_bytes = TOOLS * vectors.matrix.shape[1] * 4
    assert peaks["float16"] < float32_bytes / 2 < float32_bytes < peaks["float32"], peaks
    monkeypatch.setattr(ann, "ANN_FROM", 10**9)
    truth = exact(db, indexed[1][:5])
    assert [[t for t, _ in f] for f in found] == [[t for t, _ in e] for e in truth]
    same_scores(found, truth, FLOAT16_TOLERANCE)


def test_reindex_builds_the_shortlist_the_next_process_loads(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    with Catalog(db) as catalog:
        new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal")
        catalog.register(Toolkit(name="flora", version="1", tools=[new]))
        report = catalog.reindex()
        revision = catalog.revision
    stamp = json.loads((ann.folder(str(db)) / ann.STAMP).read_text())
    assert stamp["revision"] == revision and stamp["rows"] == TOOLS + 1
    assert report.shortlist_seconds > 0  # reported apart from the embedding's tools/s
    builds = counted_builds(monkeypatch)
    for catalog in served(db, queries):
        hits = catalog.search("zygomorphic flowers", mode="embedding").hits
    assert builds == []
    assert hits[0].tool.id == "flora.zygomorphic_lookup"
    # a reindex with nothing to do finds the stamp current and loads no vectors
    from toolcat.search import embeddings

    refreshed: list[int] = []
    monkeypatch.setattr(embeddings.VectorIndex, "refresh", lambda *a, **k: refreshed.append(1))
    with Catalog(db) as catalog:
        assert catalog.reindex().embedded == 0
    assert refreshed == [] and builds == []


def test_queries_learned_from_use_count_in_the_compact_store(
    db: Path, indexed: tuple[Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded query's vector (a row after the tools') lifts its tool through the store's
    exact scan and through the shortlist as through the float32 scan."""
    from toolcat.search import embeddings

    request = "zorbify the quux before the flumph"
    with Catalog(db) as catalog:
        catalog.learning = True
        target = answers(catalog, [request])[0][-1][0]  # the 10th: not first without learning
        assert catalog.record_use(request, target)
        catalog.reindex()
    truth = exact(db, [request])
    assert truth[0][0][0] == target
    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
    with monkeypatch.context() as held:
        held.setattr(embeddings.VectorIndex, "_shortlist_soon", lambda self, path: None)
        with Catalog(db) as catalog:
            scanned = answers(catalog, [request])
            assert catalog._search.vectors.store is not None
            assert catalog._search.vectors.shortlist is None
    for catalog in served(db, [request]):
        shortlisted = answers(catalog, [request])
    for found in (scanned, shortlisted):
        assert found[0][0][0] == target
        assert recall(found, truth) >= 0.9
        same_scores(found, truth, FLOAT16_TOLERANCE)


def float32_truth(db: Path, queries: list[str]) -> list[list[tuple[str, float]]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ann, "ANN_FROM", 10**9)
        return exact(db, queries)


# The folder beside the catalog, as hostile as a shared directory lets it be (the same
# rules as the saved BM25 index's: files/checks.py).


def test_a_folder_that_is_a_symlink_is_neither_written_nor_emptied(
    db: Path, indexed: tuple[Path, list[str]], large: None, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "home"
    (elsewhere / "projects").mkdir(parents=True)
    (elsewhere / "notes.txt").write_text("mine")
    (elsewhere / ("shortlist-" + "0" * 32 + ".faiss")).write_text("mine too")
    ann.folder(str(db)).symlink_to(elsewhere)
    queries = indexed[1]
    for catalog in served(db, queries):  # served from memory
        found = answers(catalog, queries)
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        "notes.txt",
        "projects",
        "shortlist-" + "0" * 32 + ".faiss",
    ]
    assert (elsewhere / "notes.txt").read_text() == "mine"
    assert recall(found, float32_truth(db, queries)) >= 0.98


@pytest.mark.parametrize("kind", ["fifo", "dev zero", "deeply nested"])
def test_a_stamp_that_is_no_small_regular_json_file_is_refused_at_once(
    db: Path, indexed: tuple[Path, list[str]], large: None, kind: str
) -> None:
    import os
    import threading

    folder = ann.folder(str(db))
    folder.mkdir()
    stamp = folder / ann.STAMP
    if kind == "fifo":
        os.mkfifo(stamp)  # reading it would block for ever
    elif kind == "dev zero":
        stamp.symlink_to("/dev/zero")  # reading it would fill the memory
    else:
        stamp.write_text("[" * 100_000)  # parsing it raises RecursionError
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.extend(
            [ann.saved_for(str(db), 1, "m", TOOLS), ann.load(str(db), {"format": ann.FORMAT})]
        ),
        daemon=True,
    )
    worker.start()
    worker.join(10)
    assert results == [False, None]
    queries = indexed[1]
    for catalog in served(db, queries):  # rebuilt and saved in its place
        assert catalog._search.vectors.shortlist is not None


def test_a_stamp_naming_a_symlink_in_the_folder_is_not_followed(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    queries = indexed[1]
    for catalog in served(db, queries):
        first = answers(catalog, queries)
    folder = ann.folder(str(db))
    stamp = json.loads((folder / ann.STAMP).read_text())
    moved = folder.parent / "elsewhere.faiss"
    (folder / stamp["file"]).rename(moved)
    (folder / stamp["file"]).symlink_to(moved)  # same bytes, behind a link
    builds = counted_builds(monkeypatch)
    for catalog in served(db, queries):
        assert answers(catalog, queries) == first
    assert builds == [1]


def test_two_processes_wanting_the_shortlist_at_once_build_it_once(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    builds = counted_builds(monkeypatch)
    catalogs = [Catalog(db), Catalog(db)]
    try:
        for catalog in catalogs:  # loads the vectors; the shortlist waits for the gate
            catalog._search.vectors  # noqa: B018
        gate = threading.Barrier(2)
        original = ann.saving

        def saving(path: str) -> Any:
            gate.wait(10)  # both have found no saved shortlist
            return original(path)

        monkeypatch.setattr(ann, "saving", saving)
        for catalog in catalogs:
            catalog.search(indexed[1][0], mode="embedding")
        for catalog in catalogs:
            catalog._search.vectors.wait_shortlist(30)
            assert catalog._search.vectors.shortlist is not None
    finally:
        for catalog in catalogs:
            catalog.close()
    assert builds == [1]  # the second waited on the lock, then loaded the first one's


def test_a_save_that_fails_leaves_nothing_and_serves_from_memory(
    db: Path, indexed: tuple[Path, list[str]], large: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    def full_disk(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    queries = indexed[1]
    for catalog in served(db, queries):
        found = answers(catalog, queries)
    assert [p.name for p in ann.folder(str(db)).iterdir()] == ["lock"]
    monkeypatch.undo()
    assert recall(found, exact(db, queries)) >= 0.98
