"""Attacks on a vector matrix brought forward by the change logs (``VectorIndex.refresh``):
values of the wrong type in the catalog file where the logs' check reads them, and a
refresh that fails half-way, must leave a matrix that holds what a whole read holds, or a
clear refusal, never a crash or tools given each other's vectors; and a reindex saves the
shortlist a later process loads, whatever the process that reindexes held."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.search.test_vector_forward import (
    MODEL,
    WIDTH,
    contents,
    counted_loads,
    forward,
    kit,
    registered,
    store_random,
    vector_catalog,
    whole,
)
from tests.search.test_vector_forward_hostile import by_hand
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.store import reader, writer


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return counted_loads(monkeypatch)


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with vector_catalog(tmp_path / "catalog.db", 3, 10) as opened:
        yield opened


def learned_use(catalog: Catalog, tool: str, vector: object) -> None:
    """A use of ``tool`` recorded, its query's vector ``vector`` (whatever the file holds)."""
    catalog.record_uses([("a request", tool)])
    (row,) = catalog._conn.execute("SELECT max(id) FROM usage").fetchone()
    by_hand(
        catalog._conn, ("UPDATE usage SET model = ?, vector = ? WHERE id = ?", (MODEL, vector, row))
    )


def test_a_refresh_failing_half_way_leaves_the_held_matrix_whole(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory running out while a brought-forward matrix is taken up (a learned row copied
    in): ``_settle`` had already taken up the new ids and row order beside the old matrix,
    and the next refresh brought that pair forward, giving 20 of 23 tools another tool's
    vector. Now nothing is taken up until everything is made."""
    conn = catalog._conn
    index = whole(conn)
    writer.remove(conn, "kit0", None)  # the first rows leave: every other row moves
    registered(conn, kit("new", 3))
    store_random(conn, 1)
    learned_use(catalog, "kit1.t0", np.ones(WIDTH, "<f4").tobytes())

    def no_memory(*args: object, **kwargs: object) -> np.ndarray:
        raise MemoryError

    with monkeypatch.context() as patched:
        patched.setattr(np, "frombuffer", no_memory)
        with pytest.raises(MemoryError):
            index.refresh(conn, reader.revision(conn), MODEL)
    registered(conn, kit("later", 1))
    index.refresh(conn, reader.revision(conn), MODEL)
    assert contents(index) == contents(whole(conn))


def test_a_learned_vector_of_another_type_is_left_out(catalog: Catalog, loads: list[int]) -> None:
    """A recorded query's vector that is TEXT of the right length (a file edited by hand,
    a replica's copy) crashed every refresh, whole or brought forward, with numpy's
    TypeError; it is left out, as one of another length is."""
    index = whole(catalog._conn)
    learned_use(catalog, "kit1.t0", "x" * (4 * WIDTH))
    learned_use(catalog, "kit1.t1", 4 * WIDTH)
    forward(index, catalog._conn, loads, read=False)
    assert index.owner is not None and len(index.owner) == 0


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("vectors:" + MODEL, "'many'"),
        ("vectors:" + MODEL, "x'00'"),
        ("vectors:" + MODEL, "1e999"),  # infinity: no whole number
        ("active_tools", "'many'"),
    ],
)
def test_kept_counts_of_the_wrong_type_are_read_whole(
    catalog: Catalog, loads: list[int], key: str, value: str
) -> None:
    """The kept counts a matrix brought forward is checked against, edited into text, a
    blob or infinity under a running process (or in a replica's next copy: only
    ``active_tools`` is checked when a file is opened): the refresh raised ValueError or
    OverflowError where a whole read serves; now it reads whole."""
    index = whole(catalog._conn)
    registered(catalog._conn, kit("new", 2))
    store_random(catalog._conn, 1)
    by_hand(catalog._conn, (f"UPDATE meta SET value = {value} WHERE key = ?", (key,)))
    forward(index, catalog._conn, loads, read=True)


def test_a_tool_vector_of_another_type_is_refused_as_damaged(catalog: Catalog) -> None:
    """A tool's stored vector that is TEXT of the right length: numpy's TypeError came out
    of the refresh; it is the catalog's damaged-vectors error (``reindex --full``), read
    whole to say so, and the matrix held stays as it was."""
    conn = catalog._conn
    index = whole(conn)
    held = contents(index)
    registered(conn, kit("bad", 1))
    (digest,) = conn.execute("SELECT content_hash FROM tools WHERE toolkit = 'bad'").fetchone()
    writer.store_vectors(conn, MODEL, [(digest, b"\0" * 4 * WIDTH)])
    by_hand(
        conn, ("UPDATE embeddings SET vector = ? WHERE content_hash = ?", ("x" * 4 * WIDTH, digest))
    )
    for make in (lambda: index.refresh(conn, reader.revision(conn), MODEL), lambda: whole(conn)):
        with pytest.raises(EmbeddingError, match="differ in length"):
            make()
    assert contents(index) == held


def test_a_second_reindex_in_one_process_saves_the_shortlist_the_next_process_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog object that reindexes again (the console's writer, an application's own):
    reindex refreshes its engine's matrix to save the shortlist beside the catalog, but
    the matrix was brought forward with the shortlist carried, so nothing was saved (the
    stamp stayed at the first reindex's revision) and the next process built its own
    (16 s at 100k tools). Reindex now reads the matrix whole, as every process does."""
    pytest.importorskip("faiss")
    pytest.importorskip("onnxruntime")
    from tests.search.test_ann import THRESHOLD, counted_builds, served
    from tests.search.test_postings import bench_toolkits
    from toolcat import Tool, Toolkit
    from toolcat.search import ann

    monkeypatch.setattr(ann, "ANN_FROM", THRESHOLD)
    kits, queries = bench_toolkits(300)
    path = tmp_path / "catalog.db"
    with Catalog(path) as admin:
        admin.register(kits)
        admin.reindex(batch_size=64)
        new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers by petal")
        admin.register(Toolkit(name="flora", version="1", tools=[new]))
        admin.reindex()
        revision = admin.revision
    stamp = json.loads((ann.folder(str(path)) / ann.STAMP).read_text())
    assert stamp["revision"] == revision and stamp["rows"] == 301
    builds = counted_builds(monkeypatch)
    for catalog in served(path, queries):
        assert catalog.search("zygomorphic flowers", mode="embedding").hits[0].tool.id == (
            "flora.zygomorphic_lookup"
        )
    assert builds == []
