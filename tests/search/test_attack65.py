"""attack65: outside attacks on the BM25 index a serving process brings forward in memory
(``LexicalIndex._forward_held``), the save it brings forward behind it on a thread
(``_save_soon``) and the index dropped when the file is replaced by another copy at the
same revision (``LexicalIndex.forget``): a long-lived catalog must answer as a fresh process
on the same revision, and the save on disk must follow the revision served."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, engine, lexical_file, lexical_index
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex
from toolcat.store import reader, writer

pytest.importorskip("tantivy")

QUERIES = [
    "read a file",
    "convert a time zone",
    "count the words in a text",
    "petal flowers",
    "legs of insects",
]
BUILDER = "toolcat-lexical-index"
SAVER = "toolcat-lexical-save"


@pytest.fixture(autouse=True)
def saved_index_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample catalog served as a big one is: from a saved index, never built inline."""
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 0)


def weights() -> tuple[float, ...]:
    return tuple(bm25.DEFAULT_WEIGHTS)


def kit(name: str, description: str, version: str = "1") -> Toolkit:
    return Toolkit(
        name=name,
        version=version,
        tools=[Tool(name=f"{name}_lookup", description=description)],
    )


def unsaved(path: Path, *kits: Toolkit) -> None:
    """A write that saves no index (another process's, as a replica's copy arrives)."""
    with Catalog(path) as admin:
        writer.register(admin._conn, [(k, None) for k in kits], replace=False)


def hits(catalog: Catalog, k: int = 10, **filters: Any) -> list[list[tuple[str, float]]]:
    return [
        [(h.tool.id, h.score) for h in catalog.search(q, k=k, mode="bm25", **filters).hits]
        for q in QUERIES
    ]


def fts5_hits(
    path: Path, monkeypatch: pytest.MonkeyPatch, k: int = 10, **filters: Any
) -> list[list[tuple[str, float]]]:
    """A fresh process's answers from FTS5 itself (no in-memory index made)."""
    with monkeypatch.context() as patch:
        patch.setattr(engine, "POSTINGS_AFTER", 10**9)
        with Catalog(path) as fresh:
            return hits(fresh, k, **filters)


def settle(postings: LexicalIndex) -> None:
    """Wait for the background build (and the builds it was asked again) and the save."""
    for _ in range(10):
        builder, saver = postings._builder, postings._saver
        if builder is not None:
            builder.join(60)
        if saver is not None:
            saver.join(60)
        if not postings.building and (postings._saver is None or not postings._saver.is_alive()):
            return


@pytest.fixture
def serving(sample_path: Path) -> Iterator[Catalog]:
    with Catalog(sample_path) as catalog:
        catalog.warm()  # nothing saved under 1,000 tools: built (and saved) in the background
        settle(catalog._search.postings)
        assert isinstance(catalog._search.postings.at(catalog.revision, weights()), TantivyIndex)
        yield catalog


def test_a_build_under_way_when_the_copy_is_restored_again_is_not_served_for_the_new_copy(
    sample_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica's background build reads the copy it opened (the one found damaged); the
    copy is restored again at the same revision with other rows (``Readers.renew`` calls
    ``forget_kept(revision)``) and the new readers warm while the build runs. Before, the
    build finished into ``self.index`` at that revision and the build asked again saw an
    index current at it: the old copy's rows were served for the new copy's for the whole
    revision (tools answered by another tool's row ids)."""
    path, old = two_copies_at_one_revision(sample_path, tmp_path)
    with Catalog(old) as a, Catalog(path) as b:
        assert a.revision == b.revision  # the same revision, other rows

    built, release = build_of_the_old_copy(monkeypatch, old)
    with Catalog(path) as serving:
        serving.warm()  # a background build of the old copy starts
        assert built.wait(60)
        serving.forget_kept(serving.revision)  # the copy restored again at its revision
        serving.warm()  # the new copy's readers warm while the build runs
        release.set()
        settle(serving._search.postings)
        assert hits(serving) == fts5_hits(path, monkeypatch)


def test_a_revision_brought_forward_while_the_save_runs_is_saved_after_it(
    sample_path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save behind revision R+1 is under way (reading R+1) when R+2 arrives and is
    brought forward in memory: ``_save_soon`` saw a save running and did nothing, so the
    save on disk stayed at R+1 for good (a restart built or brought it forward again
    instead of loading it). It is brought to R+2 after the one under way."""
    path = sample_path
    original = lexical_index.bring_forward
    entered, release = threading.Event(), threading.Event()

    def bring_forward(*args: Any) -> Any:
        if threading.current_thread().name == SAVER and not entered.is_set():
            entered.set()
            assert release.wait(60)
        return original(*args)

    monkeypatch.setattr(lexical_index, "bring_forward", bring_forward)
    postings = serving._search.postings
    unsaved(path, kit("flora", "Find flowers by petal count"))
    serving.warm()  # R+1 brought forward in memory; its save starts and waits
    assert entered.wait(60)
    unsaved(path, kit("fauna", "Count the legs of insects and spiders"))
    serving.warm()  # R+2 brought forward in memory while R+1's save runs
    assert isinstance(postings.at(serving.revision, weights()), TantivyIndex)
    release.set()
    settle(postings)
    with serving._snapshot() as conn:
        valid_for = lexical_file.stamp(conn, serving.revision, weights())
    assert lexical_file.stamped(str(path), valid_for)


def test_a_chain_of_writes_brought_forward_answers_as_fts5_with_filters(
    sample_path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registrations, a new version, deprecation, activation and removal by another
    process, each brought forward in memory in turn: every answer (k 1..50, a toolkit, tags)
    is FTS5's on that revision, bit for bit."""
    path = sample_path
    postings = serving._search.postings
    with Catalog(path) as admin:
        toolkits = sorted({h.tool.toolkit for h in admin.search("file", k=50, mode="bm25").hits})
    steps: list[Any] = [
        lambda a: writer.register(
            a._conn, [(kit("flora", "Find flowers by petal count"), None)], replace=False
        ),
        lambda a: writer.register(
            a._conn,
            [(kit("flora", "Find flowers by petal colour and count", "2"), None)],
            replace=False,
        ),
        lambda a: a.deprecate("flora", "2"),
        lambda a: a.activate("flora", "2"),
        lambda a: a.remove(toolkits[0]),
        lambda a: writer.register(
            a._conn, [(kit("fauna", "Count the legs of insects, read a file"), None)], replace=False
        ),
    ]
    for step, write in enumerate(steps):
        with Catalog(path) as admin:
            write(admin)
        serving.warm()
        index = postings.at(serving.revision, weights())
        assert isinstance(index, TantivyIndex), step
        for k in (1, 7, 50):
            assert hits(serving, k) == fts5_hits(path, monkeypatch, k), (step, k)
        for toolkit in toolkits[1:3]:
            assert hits(serving, 5, toolkit=toolkit) == fts5_hits(
                path, monkeypatch, 5, toolkit=toolkit
            ), (step, toolkit)
        settle(postings)


def test_a_save_behind_that_cannot_be_written_is_silent_and_leaves_nothing(
    sample_path: Path, serving: Catalog
) -> None:
    """The folder beside the catalog replaced by a symlink to another folder: the save
    behind the index brought forward fails without a word, writes nothing there, and the
    answers are FTS5's."""
    path = sample_path
    folder = lexical_file.folder(str(path))
    elsewhere = path.parent / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(folder)
    folder.symlink_to(elsewhere, target_is_directory=True)
    unsaved(path, kit("flora", "Find flowers by petal count"))
    serving.warm()
    settle(serving._search.postings)
    assert list(elsewhere.iterdir()) == []
    with Catalog(path) as fresh:
        assert hits(serving) == hits(fresh)


def test_an_old_reader_asking_after_the_copy_is_restored_again_does_not_serve_the_new_one(
    sample_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica's readers of copy D at revision R share the BM25 index (brought forward to
    R, saved behind beside the file); copy G is renamed over D at the same revision and
    ``Readers.renew`` forgets what was held at R. A request still under way on an old
    reader of D asks for R's index: it loaded D's save (stamped for what that reader
    reads) into the index the new readers of G share, which served D's rows for G."""
    path, other = sample_path, tmp_path / "g.db"
    with Catalog(path) as admin:
        admin._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, other)
    unsaved(other, kit("fauna", "Count the legs of insects and spiders"))  # G at R+1
    with Catalog(path) as owner:
        owner.warm()
        settle(owner._search.postings)
        unsaved(path, kit("flora", "Find flowers by petal count"))  # D at R+1
        old = Catalog(path)
        old.share_indexes(owner)
        old.warm()  # brought forward in memory to D's R+1, saved behind
        settle(owner._search.postings)
        assert old.revision == owner.revision
        revision = old.revision
        owner._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(other, path)  # G renamed over D: ``old`` reads D still
        owner.forget_kept(revision)
        for _ in range(engine.POSTINGS_AFTER):  # a request under way on an old reader
            old.search("petal flowers", k=10, mode="bm25")
        with Catalog(path) as new:
            assert new.revision == revision
            new.share_indexes(owner)
            new.warm()
            settle(owner._search.postings)
            assert hits(new) == fts5_hits(path, monkeypatch)
        old.close()


def _built_now(path: Path) -> TantivyIndex:
    conn = lexical_index._read_only(str(path))
    try:
        conn.execute("BEGIN")
        built = TantivyIndex()
        built.build(conn, reader.revision(conn), weights())
    finally:
        conn.close()
    return built


def test_the_native_stage_of_an_index_brought_forward_in_memory_ranks_as_a_new_build(
    sample_path: Path, serving: Catalog
) -> None:
    """After removals, new versions and registrations brought forward in memory, the first
    stage in C (built from the packed tools held: stale rows out, changed ones in) and the
    tantivy stage answer every query, k 1..50 and filtered, as a new build does."""
    path = sample_path
    with Catalog(path) as admin:
        kits = sorted({h.tool.toolkit for h in admin.search("file", k=50, mode="bm25").hits})
        admin.remove(kits[0])
    unsaved(path, kit("flora", "Find flowers by petal count, read a file"))
    unsaved(path, kit("flora", "Find flowers by petal colour", "2"))
    serving.warm()
    index = serving._search.postings.at(serving.revision, weights())
    assert isinstance(index, TantivyIndex) and index._delta_rows and index._stale
    built = _built_now(path)
    rows = sorted(built._tools)
    filters = [None, frozenset(rows[::3]), frozenset(rows[:5])]
    for native_first in (False, True):
        if native_first:
            assert index.wait_native(60) is not None
            assert built.wait_native(60) is not None
        for query in QUERIES:
            terms = built.terms(query, 8)
            assert index.terms(query, 8) == terms
            for k in (1, 3, 10, 50):
                for allowed in filters:
                    assert index.rank(terms, k, allowed) == built.rank(terms, k, allowed), (
                        query,
                        k,
                        native_first,
                    )


def test_a_log_naming_rows_that_do_not_exist_or_did_not_change_answers_as_fts5(
    sample_path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog whose change log names rows no tool has, negative rows past the marks,
    and rows that did not change: brought forward (or not) it answers as FTS5 does."""
    path = sample_path
    unsaved(path, kit("flora", "Find flowers by petal count"))
    with Catalog(path) as admin:
        conn = admin._conn
        revision = reader.revision(conn)
        conn.executemany(
            "INSERT INTO fts_changes (revision, row) VALUES (?, ?)",
            [(revision, 10**12), (revision, 2**62), (revision, 1), (revision, 2), (revision, -5)],
        )
    serving.warm()
    assert isinstance(serving._search.postings.at(serving.revision, weights()), TantivyIndex)
    for k in (1, 10, 50):
        assert hits(serving, k) == fts5_hits(path, monkeypatch, k)


def test_an_old_reader_refreshing_after_the_copy_is_restored_again_keeps_its_matrix_apart(
    tmp_path: Path,
) -> None:
    """The vector matrix's side of ``forget_kept(revision)``: a request still under way on
    a reader of the old copy D refreshes the matrix at the revision after the new copy G
    was renamed over it (``read_whole_next`` had dropped the one held); the new readers of
    G, sharing the matrix, took up D's vectors as G's."""
    pytest.importorskip("numpy")
    from tests.search.test_vector_forward import MODEL, WIDTH, contents, store_random, whole
    from tests.search.test_vector_forward import kit as vector_kit

    path, other = tmp_path / "c.db", tmp_path / "g.db"

    def changed(at: Path, name: str, seed: int) -> None:
        with Catalog(at) as admin:
            writer.register(admin._conn, [(vector_kit(name, 3), None)], replace=False)
            store_random(admin._conn, seed)

    with Catalog(path) as admin:
        writer.register(admin._conn, [(vector_kit("a", 5), None)], replace=False)
        writer.set_meta(admin._conn, {"embedding_model": MODEL, "embedding_dim": WIDTH})
        store_random(admin._conn, 0)
        admin._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, other)
    changed(other, "g", 2)  # G
    with Catalog(path) as owner:
        changed(path, "d", 1)  # D, at G's revision
        old = Catalog(path)
        old.share_indexes(owner)
        with old._snapshot() as conn:
            revision = reader.revision(conn)
            old._search.vectors.refresh(conn, revision, MODEL)
        owner._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(other, path)  # G renamed over D: ``old`` reads D still
        owner.forget_kept(revision)
        with old._snapshot() as conn:  # a request under way on an old reader
            old._search.vectors.refresh(conn, revision, MODEL)
        with Catalog(path) as new:
            new.share_indexes(owner)
            with new._snapshot() as conn:
                assert reader.revision(conn) == revision
                new._search.vectors.refresh(conn, revision, MODEL)
                assert contents(new._search.vectors) == contents(whole(conn))
        old.close()


def test_the_python_postings_backend_answers_as_fts5_through_a_chain_of_writes(
    sample_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without tantivy (the pure-Python index), nothing is brought forward in memory or
    saved behind: each revision is built, and answers as FTS5 does."""
    monkeypatch.setattr(lexical_index, "tantivy_module", lambda: None)
    path = sample_path
    with Catalog(path) as serving:
        for step in range(3):
            serving.warm()
            settle(serving._search.postings)
            assert serving._search.postings.backend == "postings"
            assert serving._search.postings._saver is None
            for k in (1, 10, 50):
                assert hits(serving, k) == fts5_hits(path, monkeypatch, k), step
            unsaved(path, kit("flora", f"Find flowers by petal count {step}", str(step + 1)))


def test_readers_warming_at_once_bring_the_shared_index_forward_once(
    sample_path: Path, serving: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four readers sharing one index warm at once at a new revision: one brings it
    forward, the others take it up; all answer as FTS5 does."""
    path = sample_path
    readers = [Catalog(path) for _ in range(4)]
    try:
        for r in readers:
            r.share_indexes(serving)
        unsaved(path, kit("flora", "Find flowers by petal count"))
        applied: list[int] = []
        original = TantivyIndex.apply

        def apply(self: TantivyIndex, *args: Any) -> TantivyIndex:
            if threading.current_thread().name != SAVER:  # (the save behind applies too)
                applied.append(1)
            return original(self, *args)

        monkeypatch.setattr(TantivyIndex, "apply", apply)
        threads = [threading.Thread(target=r.warm) for r in readers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert applied == [1]
        settle(serving._search.postings)
        expected = fts5_hits(path, monkeypatch)
        for r in readers:
            assert hits(r) == expected
    finally:
        for r in readers:
            r.close()


def test_forgotten_while_a_build_runs_does_not_serve_what_that_build_read(
    sample_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LexicalIndex.forgotten(revision)`` itself (whoever holds the index): a background
    build under way had opened the old copy; it finished into the index after the copy was
    replaced and was served at that revision for the new copy. It is served to no one, and
    the new copy's index is built from the new one."""
    path, old = two_copies_at_one_revision(sample_path, tmp_path)
    built, release = build_of_the_old_copy(monkeypatch, old)
    lexical = LexicalIndex("tantivy")
    with Catalog(path) as new, new._snapshot() as conn:
        revision = reader.revision(conn)
        lexical.build_soon(conn, revision, weights(), str(path))
    assert built.wait(60)
    renewed = lexical.forgotten(revision)
    release.set()
    settle(lexical)
    assert lexical.at(revision, weights()) is None  # the old copy's build: served to no one
    with Catalog(path) as new, new._snapshot() as conn:
        renewed.build_soon(conn, revision, weights(), str(path))
    settle(renewed)
    index = renewed.at(revision, weights())
    assert isinstance(index, TantivyIndex)
    fresh = _built_now(path)
    for query in QUERIES:
        terms = fresh.terms(query, 8)
        assert index.terms(query, 8) == terms, query
        assert index.rank(terms, 10) == fresh.rank(terms, 10), query


def two_copies_at_one_revision(sample_path: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(the catalog, an old copy of it): one write each since the copy, so both are at the
    same revision with other rows."""
    path, old = sample_path, tmp_path / "old.db"
    with Catalog(path) as admin:
        admin._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, old)
    unsaved(old, kit("flora", "Find flowers by petal count"))
    unsaved(path, kit("fauna", "Count the legs of insects and spiders"))
    return path, old


def build_of_the_old_copy(
    monkeypatch: pytest.MonkeyPatch, old: Path
) -> tuple[threading.Event, threading.Event]:
    """The first background build opens ``old`` (the file before the copy was renamed over
    it; asked again, it opens the new copy), and waits after building until ``release`` is
    set, ``built`` set then. Returns (built, release)."""
    real_read_only = lexical_index._read_only
    first: list[threading.Thread] = []
    built, release = threading.Event(), threading.Event()

    def read_only(p: str) -> Any:
        here = threading.current_thread()
        if here.name == BUILDER and not first:
            first.append(here)
            return real_read_only(str(old))
        return real_read_only(p)

    original_build = TantivyIndex.build

    def build(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        original_build(self, *args, **kwargs)
        if threading.current_thread().name == BUILDER and not built.is_set():
            built.set()
            assert release.wait(60)

    monkeypatch.setattr(lexical_index, "_read_only", read_only)
    monkeypatch.setattr(TantivyIndex, "build", build)
    return built, release


def test_a_copy_restored_again_with_the_same_totals_does_not_take_up_the_old_copys_save(
    sample_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attack65's open case: the copy found damaged had its index saved beside the file at
    its revision; the copy restored again over it at that revision has the same history and
    the same FTS5 totals (rows and tokens) but other text. The stamp matched, so the new
    readers took up the old copy's save: one tool found by words it does not hold, another
    not found by its own. At a revision restored again, the save is taken up only if the
    digest of the rows it was built from is the new copy's."""
    path, damaged = sample_path, tmp_path / "damaged.db"
    unsaved(path, kit("zoo", "Find insects by wing count"))
    with Catalog(path) as admin:
        admin._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(path, damaged)
    # Bytes of one row that differ, as damage that passes ``quick_check`` leaves them: the
    # same revision and history, as many rows and tokens.
    conn = sqlite3.connect(damaged)
    with conn:
        conn.execute(
            "UPDATE tools_fts SET description = 'find flower petal count' "
            "WHERE description = 'find insect wing count'"  # as the row holds it: stems
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with Catalog(damaged) as a, Catalog(path) as b:
        assert a.revision == b.revision
        with a._snapshot() as ca, b._snapshot() as cb:
            stamps = [lexical_file.stamp(c, a.revision, weights()) for c in (ca, cb)]
        assert stamps[0] == stamps[1]  # nothing the stamp holds tells them apart
    served = tmp_path / "served" / "catalog.db"
    served.parent.mkdir()
    shutil.copy(damaged, served)
    with Catalog(served) as serving:
        serving.warm()  # built and saved from the damaged copy, in the background
        settle(serving._search.postings)
        assert [h.tool.id for h in serving.search("petal flowers", mode="bm25").hits][:1] == [
            "zoo.zoo_lookup"
        ]
        shutil.copy(path, served.with_name("incoming.db"))
        os.replace(served.with_name("incoming.db"), served)  # restored again, same revision
        serving.forget_kept(serving.revision)
        serving.warm()
        settle(serving._search.postings)
        assert hits(serving) == fts5_hits(served, monkeypatch)
        assert not serving.search("petal flowers", mode="bm25").hits
        found = serving.search("insects wing", mode="bm25").hits
        assert [h.tool.id for h in found][:1] == ["zoo.zoo_lookup"]
    with Catalog(served) as restarted:  # the save now follows the new copy
        restarted.warm()
        assert isinstance(
            restarted._search.postings.at(restarted.revision, weights()), TantivyIndex
        )
        assert hits(restarted) == fts5_hits(served, monkeypatch)
