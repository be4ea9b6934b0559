"""A long-lived process brings the BM25 index it holds forward in memory at a new revision
(``LexicalIndex._forward_held``) instead of loading a save from disk or answering from FTS5
while one is brought forward: the same hits and scores as a fresh process, the save beside
the catalog brought to the revision in the background (a restart loads it), and a held
index of another history, past the log, or of other weights is not brought forward."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from toolcat import Catalog, Tool, Toolkit
from toolcat.files import checks as saved_files
from toolcat.search import bm25, engine, lexical_file
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex
from toolcat.store import writer

pytest.importorskip("tantivy")

QUERIES = ["read a file", "convert a time zone", "count the words in a text", "petal flowers"]


@pytest.fixture(autouse=True)
def saved_index_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample catalog served as a big one is: from a saved index, never built inline."""
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 0)


@pytest.fixture
def restores(monkeypatch: pytest.MonkeyPatch) -> list[LexicalIndex]:
    """The indexes that loaded a save from disk (fresh catalogs' background builds may go on
    after their test step: compare by index)."""
    counted: list[LexicalIndex] = []
    original = LexicalIndex._restore

    def restore(self: LexicalIndex, *args: object) -> bool:
        counted.append(self)
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LexicalIndex, "_restore", restore)
    return counted


@pytest.fixture
def path(sample_path: Path) -> Path:
    return sample_path


@pytest.fixture
def serving(path: Path) -> Iterator[Catalog]:
    with Catalog(path) as catalog:
        catalog.warm()  # nothing saved under 1,000 tools: built in the background
        catalog._search.postings.wait(60)
        assert isinstance(catalog._search.postings.at(catalog.revision, weights()), TantivyIndex)
        yield catalog


def weights() -> tuple[float, ...]:
    return tuple(bm25.DEFAULT_WEIGHTS)


def hits(catalog: Catalog) -> list[list[tuple[str, float]]]:
    return [
        [(h.tool.id, h.score) for h in catalog.search(q, k=10, mode="bm25").hits] for q in QUERIES
    ]


def unsaved(path: Path, *kits: Toolkit) -> None:
    """A write that saves no index (another process's, as a replica's copy arrives)."""
    with Catalog(path) as admin:
        writer.register(admin._conn, [(kit, None) for kit in kits], replace=False)


def flowers(version: str = "1", words: str = "") -> Toolkit:
    return Toolkit(
        name="flora",
        version=version,
        tools=[Tool(name="petal_lookup", description=f"Find flowers by petal count {words}")],
    )


def test_a_new_revision_is_brought_forward_in_memory_and_saved_behind(
    path: Path, serving: Catalog, restores: list[LexicalIndex]
) -> None:
    for step, kits in enumerate([[flowers()], [flowers("2", "and colour")], [flowers("3")]]):
        unsaved(path, *kits)
        serving.warm()
        postings = serving._search.postings
        index = postings.at(serving.revision, weights())
        assert isinstance(index, TantivyIndex) and index._delta_rows, step
        assert postings not in restores  # nothing loaded from disk
        with Catalog(path) as fresh:
            assert hits(serving) == hits(fresh)
        assert postings._saver is not None
        postings._saver.join(60)
        with Catalog(path) as fresh:  # the save beside the catalog is at the revision now
            with fresh._snapshot() as conn:
                valid_for = lexical_file.stamp(conn, fresh.revision, weights())
            assert lexical_file.stamped(str(path), valid_for)


def test_another_history_is_not_brought_forward(
    path: Path, tmp_path: Path, serving: Catalog, restores: list[LexicalIndex]
) -> None:
    """The held index is at revision R of this file; the file is replaced by a copy that
    reached R and more by other writes (a backup restored and changed): read from disk or
    built, never brought forward."""
    import shutil

    twin = tmp_path / "twin.db"
    with Catalog(path) as admin:
        admin._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, twin)
    unsaved(path, flowers())
    serving.warm()  # brought forward along this file's history
    assert serving._search.postings not in restores
    unsaved(twin, Toolkit(name="other", version="1", tools=[Tool(name="x", description="y")]))
    unsaved(twin, flowers("5"))
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    serving.close()
    shutil.copy(twin, path)  # the twin's history, one revision further
    with Catalog(path) as reopened:
        reopened.share_indexes(serving)
        reopened.warm()
        reopened._search.postings.wait(60)
        with Catalog(path) as fresh:
            assert hits(reopened) == hits(fresh)
        index = reopened._search.postings.index
        assert isinstance(index, TantivyIndex) and index.revision == reopened.revision
        assert not index._delta_rows  # built whole from the twin's rows


def test_past_the_log_or_other_weights_is_not_brought_forward(
    path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = serving._search.postings.index
    assert isinstance(held, TantivyIndex)
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 1)
    unsaved(path, flowers())
    unsaved(path, flowers("2"))  # the log no longer reaches the held revision
    monkeypatch.setattr(writer, "FTS_CHANGES_KEPT", 100_000)
    with serving._snapshot() as conn:
        valid_for = lexical_file.stamp(conn, serving.revision, weights())
        assert serving._search.postings._forward_held(conn, valid_for) is False
        other = {**valid_for, "weights": [w * 2 for w in weights()]}
        assert serving._search.postings._forward_held(conn, other) is False
    assert serving._search.postings.index is held


def test_a_copy_restored_again_at_the_same_revision_is_not_brought_forward(
    path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``forget_kept(revision)`` (a replica's copy that replaced one found damaged): the
    BM25 index held is dropped at any revision (it may be the damaged copy's), so the next
    one is loaded or built from the new copy."""
    serving.forget_kept()  # kept answers only
    assert serving._search.postings.at(serving.revision, weights()) is not None
    serving.forget_kept(serving.revision + 1)
    assert serving._search.postings.index is None
    forwarded: list[bool] = []
    original = LexicalIndex._forward_held

    def forward_held(self: LexicalIndex, *args: object) -> bool:
        forwarded.append(original(self, *args))  # type: ignore[arg-type]
        return forwarded[-1]

    monkeypatch.setattr(LexicalIndex, "_forward_held", forward_held)
    unsaved(path, flowers())
    serving.warm()
    serving._search.postings.wait(60)
    assert forwarded == [False]  # nothing held to bring forward: loaded or built from disk
    assert serving._search.postings.at(serving.revision, weights()) is not None


def test_a_renewal_at_a_new_revision_keeps_what_it_brings_forward(
    path: Path, serving: Catalog
) -> None:
    """A replica's readers renewed at a new revision, or at the same one (a write that
    changed no tool: recorded uses), share the index and matrix the server holds (brought
    forward, a build under way going on to it); renewed over a copy found damaged, they
    get their own, and the index saved beside the file is unstamped."""
    from toolcat.server.mcp import Readers

    readers = Readers(serving, 1)
    try:
        readers.renew(serving.revision)
        postings, vectors = serving._search.postings, serving._search.vectors
        unsaved(path, flowers())
        readers.renew(serving.revision)  # a new revision
        assert serving._search.postings is postings and serving._search.vectors is vectors
        readers.renew(serving.revision)  # the same one again
        assert serving._search.postings is postings and serving._search.vectors is vectors
        root = lexical_file.trusted_folder(str(path))
        assert root is not None
        before = saved_files.read_stamp(root)
        assert before is not None
        readers.renew(serving.revision, replaced_damaged=True)
        assert serving._search.postings is not postings
        assert serving._search.vectors is not vectors
        serving._search.postings.wait(60)  # built again from the new copy, and saved
        assert saved_files.read_stamp(root) != before
        with readers.borrowed() as reader:
            assert reader._search.postings is serving._search.postings
    finally:
        readers.close()
