"""A process's vector matrix brought forward to a new revision by the rows that changed
(``VectorIndex._bring_forward``) holds exactly what reading it whole holds, after every kind
of write that moves it: a toolkit registered, its vectors stored, a new version, a version
deprecated, taken back or removed, a vector stored again, learned queries; and it is read
whole instead, changing nothing first, wherever the logs cannot say what changed: vectors
reset or pruned, a log trimmed, too many rows changed, another history of the catalog at
the same revision, a vector written by hand, the compact store's threshold crossed."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from toolcat import Catalog, Toolkit
from toolcat.errors import EmbeddingError
from toolcat.search import ann, embeddings
from toolcat.search.embeddings import VectorIndex
from toolcat.store import reader, writer

WIDTH = 384
MODEL = "test-model"


def kit(name: str, tools: int, version: str = "1.0", words: str = "") -> Toolkit:
    return Toolkit.model_validate(
        {
            "name": name,
            "version": version,
            "tools": [
                {"name": f"t{i}", "description": f"{name} {version} tool {i} {words}"}
                for i in range(tools)
            ],
        }
    )


def store_random(conn: sqlite3.Connection, seed: int, everything: bool = False) -> int:
    """Store a random unit vector for every active definition without one (as reindex
    stores them); returns how many."""
    hashes = [h for h, _ in reader.stale_vectors(conn, MODEL, everything=everything)]
    if hashes:
        matrix = np.random.default_rng(seed).standard_normal((len(hashes), WIDTH))
        matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype("<f4")
        writer.store_vectors(
            conn, MODEL, [(h, v.tobytes()) for h, v in zip(hashes, matrix, strict=True)]
        )
    return len(hashes)


def whole(conn: sqlite3.Connection) -> VectorIndex:
    index = VectorIndex()
    index.refresh(conn, reader.revision(conn), MODEL)
    return index


def contents(index: VectorIndex) -> tuple[dict[int, bytes], list[tuple[int, bytes]], int]:
    """(tool id -> its row, sorted (owner tool id, row) of learned rows, active tools): what
    a matrix holds, whatever order its rows are in."""
    assert index.matrix is not None and index.ids is not None and index.owner is not None
    rows = np.asarray(index.matrix, dtype=np.float32)
    tools = {int(i): rows[n].tobytes() for n, i in enumerate(index.ids)}
    assert len(tools) == index.tool_rows == len(index.ids)
    learned = sorted(
        (int(index.ids[owner]), rows[index.tool_rows + n].tobytes())
        for n, owner in enumerate(index.owner)
    )
    return tools, learned, index.active_tools


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return counted_loads(monkeypatch)


def counted_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each whole read of a matrix (``VectorIndex._load``), counted."""
    counted: list[int] = []
    original = VectorIndex._load

    def load(self: VectorIndex, *args: object) -> None:
        counted.append(1)
        original(self, *args)

    monkeypatch.setattr(VectorIndex, "_load", load)
    return counted


@contextlib.contextmanager
def vector_catalog(path: Path, toolkits: int, tools: int) -> Iterator[Catalog]:
    """A catalog of ``toolkits`` toolkits of ``tools`` tools each, a random vector stored for
    each (as reindex stores them)."""
    with Catalog(path) as catalog:
        catalog.register([kit(f"kit{n}", tools) for n in range(toolkits)])
        writer.set_meta(catalog._conn, {"embedding_model": MODEL, "embedding_dim": WIDTH})
        store_random(catalog._conn, 0)
        yield catalog


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    with vector_catalog(tmp_path / "catalog.db", 10, 20) as catalog:
        yield catalog._conn


def forward(index: VectorIndex, conn: sqlite3.Connection, loads: list[int], read: bool) -> None:
    """Refresh ``index`` to the catalog's revision and check it against a whole read;
    ``read``: whether it had to read whole itself."""
    before = len(loads)
    index.refresh(conn, reader.revision(conn), MODEL)
    assert len(loads) - before == (1 if read else 0)
    assert contents(index) == contents(whole(conn))


def registered(conn: sqlite3.Connection, *kits: Toolkit) -> None:
    writer.register(conn, [(k, None) for k in kits], replace=False)


def test_every_kind_of_write_is_brought_forward(conn: sqlite3.Connection, loads: list[int]) -> None:
    index = whole(conn)
    assert index.tool_rows == 200
    registered(conn, kit("new", 5))
    forward(index, conn, loads, read=False)
    assert index.tool_rows == 200 and index.missing == 5  # no vectors for them yet
    assert store_random(conn, 1) == 5
    forward(index, conn, loads, read=False)
    assert index.tool_rows == 205
    registered(conn, kit("kit3", 20, version="2.0", words="changed"))  # the old one leaves
    store_random(conn, 2)
    forward(index, conn, loads, read=False)
    writer.deprecate(conn, "kit3", "2.0")  # back to 1.0
    forward(index, conn, loads, read=False)
    writer.activate(conn, "kit3", "2.0")
    forward(index, conn, loads, read=False)
    writer.remove(conn, "kit5", None)
    forward(index, conn, loads, read=False)
    assert index.tool_rows == 185
    # Vectors stored again for definitions that had one (reindex of another build): re-read.
    store_random(conn, 3, everything=True)
    forward(index, conn, loads, read=False)
    # Several revisions at once, and none.
    registered(conn, kit("a", 3))
    registered(conn, kit("b", 4))
    store_random(conn, 4)
    writer.remove(conn, "a", None)
    forward(index, conn, loads, read=False)
    writer.set_meta(conn, {"unrelated": 1})
    forward(index, conn, loads, read=False)


def test_learned_queries_are_read_again(tmp_path: Path, loads: list[int]) -> None:
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register([kit(f"kit{n}", 10) for n in range(3)])
        conn = catalog._conn
        writer.set_meta(conn, {"embedding_model": MODEL, "embedding_dim": WIDTH})
        store_random(conn, 0)
        index = whole(conn)
        catalog.record_uses([("first request", "kit1.t2"), ("second request", "kit2.t0")])
        rows = conn.execute("SELECT id FROM usage").fetchall()
        vectors = np.random.default_rng(5).standard_normal((len(rows), WIDTH)).astype("<f4")
        writer.store_usage_vectors(
            conn, MODEL, [(r[0], v.tobytes()) for r, v in zip(rows, vectors, strict=True)]
        )
        forward(index, conn, loads, read=False)
        assert len(index.owner) == 2
        registered(conn, kit("kit1", 10, version="2.0"))  # the learned rows' tool moves
        store_random(conn, 1)
        forward(index, conn, loads, read=False)
        catalog.learning = False
        forward(index, conn, loads, read=False)
        assert index.owner is not None and len(index.owner) == 0


def test_the_compact_store_is_brought_forward(
    conn: sqlite3.Connection, loads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(ann.LIBRARY)
    monkeypatch.setattr(ann, "ANN_FROM", 150)
    monkeypatch.setattr(VectorIndex, "_shortlist_soon", lambda self, path: None)
    index = whole(conn)
    assert index.store is not None and index.matrix is not None
    assert index.matrix.dtype == np.float16
    registered(conn, kit("new", 5))
    store_random(conn, 1)
    writer.remove(conn, "kit0", None)
    forward(index, conn, loads, read=False)
    assert index.store is not None and index.tool_rows == 185
    # Below the threshold now: the float32 matrix, read whole.
    for name in ("kit1", "kit2", "kit4"):
        writer.remove(conn, name, None)
    forward(index, conn, loads, read=True)
    assert index.store is None and index.tool_rows == 125


def test_what_the_logs_cannot_say_is_read_whole(
    conn: sqlite3.Connection, loads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    index = whole(conn)
    # reindex --full: every vector of the model deleted, then stored again
    writer.reset_vectors(conn, MODEL, "test")
    store_random(conn, 1)
    forward(index, conn, loads, read=True)
    # another model's vectors pruned (a process may hold them)
    writer.store_vectors(conn, "other", [("x" * 64, np.ones(WIDTH, "<f4").tobytes())])
    forward(index, conn, loads, read=False)
    assert writer.prune_vectors(conn, MODEL) == 1
    forward(index, conn, loads, read=True)
    # more vectors stored at once than the log keeps
    monkeypatch.setattr(writer, "VECTOR_CHANGES_KEPT", 3)
    registered(conn, kit("many", 4))
    store_random(conn, 2)
    forward(index, conn, loads, read=True)
    # the stored-vectors log trimmed past the matrix's revision
    before = reader.revision(conn)
    registered(conn, kit("x1", 2), kit("x2", 2))
    store_random(conn, 3)
    registered(conn, kit("x3", 2))
    store_random(conn, 4)
    assert reader.vector_changes(conn, before, MODEL, 100) is None
    monkeypatch.setattr(writer, "VECTOR_CHANGES_KEPT", 100_000)
    forward(index, conn, loads, read=True)
    # the tools' log trimmed past it
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 1)
    registered(conn, kit("y1", 2), kit("y2", 2))
    registered(conn, kit("y3", 2))
    forward(index, conn, loads, read=True)
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 100_000)
    # more rows changed than a matrix is brought forward by
    monkeypatch.setattr(embeddings, "FORWARD_MIN", 10)
    registered(conn, kit("big", 30))
    store_random(conn, 5)
    forward(index, conn, loads, read=True)
    registered(conn, kit("small", 3))
    forward(index, conn, loads, read=False)


def test_a_vector_written_by_hand_is_caught_by_the_kept_counts(
    conn: sqlite3.Connection, loads: list[int]
) -> None:
    index = whole(conn)
    registered(conn, kit("new", 2))
    index.refresh(conn, reader.revision(conn), MODEL)
    (digest,) = conn.execute(
        "SELECT content_hash FROM tools WHERE toolkit = 'new' AND name = 't0'"
    ).fetchone()
    with writer.write_transaction(conn):  # unlogged: only the kept count moves
        conn.execute(
            "INSERT INTO embeddings (content_hash, model, vector) VALUES (?, ?, ?)",
            (digest, MODEL, np.ones(WIDTH, "<f4").tobytes()),
        )
        writer.bump_revision(conn)
    forward(index, conn, loads, read=True)


def test_another_history_at_the_same_revision_is_read_whole(
    tmp_path: Path, conn: sqlite3.Connection, loads: list[int]
) -> None:
    """A replica's file replaced by a copy from elsewhere that reached the matrix's revision
    by other writes (restored from a backup, then changed): read whole. Along the same
    history, through another connection (a replica's next file), it is brought forward."""
    path = Path(reader_path(conn))
    twin = tmp_path / "twin.db"
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, twin)  # the same history so far
    registered(conn, kit("here", 2))
    store_random(conn, 1)
    index = whole(conn)
    with Catalog(twin) as other:  # the same revision numbers, reached by other writes
        registered(other._conn, kit("there", 2))
        store_random(other._conn, 2)
        assert reader.revision(other._conn) == reader.revision(conn)
        registered(other._conn, kit("then", 2))
        forward(index, other._conn, loads, read=True)
    index = whole(conn)
    registered(conn, kit("later", 2))
    store_random(conn, 3)
    with Catalog(path) as same:
        forward(index, same._conn, loads, read=False)


def reader_path(conn: sqlite3.Connection) -> str:
    return str(conn.execute("PRAGMA database_list").fetchone()[2])


def test_an_older_revision_or_another_model_is_read_whole(
    conn: sqlite3.Connection, loads: list[int]
) -> None:
    index = whole(conn)
    revision = reader.revision(conn)
    registered(conn, kit("new", 2))
    store_random(conn, 1)
    index.refresh(conn, reader.revision(conn), MODEL)
    before = len(loads)
    index.refresh(conn, revision, MODEL)  # a revision behind the one held
    assert len(loads) == before + 1
    index.refresh(conn, reader.revision(conn), "another-model")
    assert len(loads) == before + 2 and index.tool_rows == 0


def test_a_failed_bring_forward_changes_nothing(
    conn: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vector of the wrong length among the rows read again: read whole, which says so,
    and the matrix held is the one it was."""
    index = whole(conn)
    held = contents(index)
    registered(conn, kit("bad", 1))
    (digest,) = conn.execute("SELECT content_hash FROM tools WHERE toolkit = 'bad'").fetchone()
    writer.store_vectors(conn, MODEL, [(digest, b"\0" * 12)])
    with pytest.raises(EmbeddingError, match="differ in length"):
        index.refresh(conn, reader.revision(conn), MODEL)
    assert contents(index) == held


def test_a_carried_shortlist_maps_its_rows_and_scans_the_added_ones() -> None:
    pytest.importorskip(ann.LIBRARY)
    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((400, WIDTH)).astype("<f4")
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    shortlist = ann.build(matrix)
    # rows 0..99 gone, the rest moved down by 100, then 5 rows added at 300..304
    moved = np.where(np.arange(400) < 100, -1, np.arange(400) - 100)
    carried = shortlist.carried(moved, np.arange(300, 305))
    assert carried.off_index == 105 and len(carried) == 400
    again = carried.carried(  # and carried again: row 0 (was 100) gone, one more added
        np.concatenate([[-1], np.arange(304)]), np.arange(304, 305)
    )
    assert again.off_index == 100 + 1 + 5 + 1
    for query in range(150, 400, 50):
        found = carried.candidates(matrix[query], 10)
        assert found.min() >= 0 and found.max() < 305
        assert query - 100 in found.tolist()  # its own row, where it moved
        assert {300, 301, 302, 303, 304} <= set(found.tolist())
        found = again.candidates(matrix[query], 10)
        assert found.min() >= 0 and found.max() < 305
        assert query - 101 in found.tolist()
        assert {299, 300, 301, 302, 303, 304} <= set(found.tolist())
    # a query at a gone row: asked 10 + 100 deep, as many as the gone ones could take
    found = carried.candidates(matrix[5], 10)
    assert found.max() < 305 and len(found) == len(set(found.tolist())) >= 10 + 5


def test_a_serving_catalog_ranks_as_a_fresh_one_after_changes(
    tmp_path: Path, loads: list[int]
) -> None:
    """The real model and engine: a long-lived catalog, its matrix brought forward across
    registrations, reindexes, a new version and a removal made by another connection (an
    admin), gives the same hybrid and embedding hits with the same scores as a fresh one."""
    pytest.importorskip("onnxruntime")
    from tests.helpers import SAMPLE_TOOLKITS
    from toolcat import Tool

    path = tmp_path / "catalog.db"
    queries = ["read a file", "convert a time zone", "count the words in a text", "zygomorphic"]
    with Catalog(path) as admin:
        admin.register(SAMPLE_TOOLKITS)
        admin.reindex()
    with Catalog(path) as serving:
        for query in queries:
            serving.search(query, mode="embedding")
        first = len(loads)
        flowers = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal")
        radial = Tool(name="actinomorphic_lookup", description="Find radially symmetric flowers")
        changes = [
            lambda a: a.register(Toolkit(name="flora", version="1", tools=[flowers])),
            lambda a: a.reindex(),
            lambda a: a.register(Toolkit(name="flora", version="2", tools=[flowers, radial])),
            lambda a: a.reindex(),
            lambda a: a.remove("flora", "2"),  # back to version 1
            lambda a: a.remove(a.list(limit=1).tools[0].toolkit),
        ]
        for change in changes:
            with Catalog(path) as admin:
                change(admin)
            with Catalog(path) as fresh:
                for mode in ("embedding", "hybrid"):
                    for query in queries:
                        mine = serving.search(query, k=8, mode=mode).hits
                        theirs = fresh.search(query, k=8, mode=mode).hits
                        assert [(h.tool.id, round(h.score, 6)) for h in mine] == [
                            (h.tool.id, round(h.score, 6)) for h in theirs
                        ], (mode, query)
        assert serving.search("zygomorphic", mode="embedding").hits[0].tool.id == (
            "flora.zygomorphic_lookup"
        )
    # one whole read per fresh catalog (and the first), none in the serving one
    assert len(loads) - first == len(changes) * 1


def test_a_copy_restored_again_at_the_same_revision_is_read_whole(
    tmp_path: Path, loads: list[int]
) -> None:
    """A replica's copy found damaged and restored again at the same revision
    (``Catalog.forget_kept(revision)``): the matrix held at it is read again from the new
    copy at the next refresh, not kept and brought forward from."""
    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register([kit("a", 5)])
        conn = catalog._conn
        writer.set_meta(conn, {"embedding_model": MODEL, "embedding_dim": WIDTH})
        store_random(conn, 0)
        vectors = catalog._search.vectors
        vectors.refresh(conn, reader.revision(conn), MODEL)
        registered(conn, kit("b", 2))
        forward(vectors, conn, loads, read=False)
        catalog.forget_kept(reader.revision(conn))
        # a reader of the old copy keeps its own, as it was (nothing read again for it)
        forward(vectors, conn, loads, read=False)
        fresh = catalog._search.vectors
        assert fresh is not vectors
        forward(fresh, conn, loads, read=True)  # the new copy's readers: read whole
        registered(conn, kit("c", 2))
        forward(fresh, conn, loads, read=False)
        # held at an earlier revision than the copy restored again: read whole all the same
        # (a reader of the old copy could bring the shared one forward from it)
        registered(conn, kit("d", 2))
        catalog.forget_kept(reader.revision(conn))
        assert catalog._search.vectors is not fresh and catalog._search.vectors.key is None
