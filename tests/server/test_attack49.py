"""Hostile (attack49): ``settle_heap`` (``gc.collect`` + ``gc.freeze``), which ``toolcat
serve`` runs in its own process once warm and a replica's ``prepare`` runs again at each
revision after ``gc.unfreeze``. What is frozen and later dropped in a reference cycle is
never collected until the next unfreeze: on a primary (no ``prepare``) that is never. So
what a primary built to serve its first revision (its BM25 index, its vector matrix, its
``tools/list`` pages, its kept answers) must be freed by reference counting alone when a
new revision replaces it; a replica's old revisions go with the collection ``prepare`` makes.
And the default mode a server's readers keep per revision is never another copy's."""

from __future__ import annotations

import gc
import shutil
import sqlite3
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.helpers import SAMPLE_TOOLKITS
from tests.server.clients import MODERN, http_session, run
from tests.server.test_listcache import extra_toolkit, served
from toolcat import Catalog
from toolcat.search import engine
from toolcat.server.mcp import CatalogServer, ServeOptions, settle_heap

QUERY = {"query": "convert a time between zones", "k": 4}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        if engine.embeddings_installed():
            catalog.reindex()
    return path


def refs(server: CatalogServer) -> dict[str, weakref.ref[Any]]:
    """Weak references to what the server built for its current revision."""
    search = server.catalog._search
    found: dict[str, Any] = {
        "bm25 index": search.postings.index,
        "tools/list pages": server._lists.get(server.scope),
    }
    if search.vectors.matrix is not None:
        found["vector matrix"] = search.vectors.matrix
    with server.readers.borrowed() as reader:
        found["reader's bm25 index"] = reader._search.postings.index
    assert all(v is not None for v in found.values()), found
    return {name: weakref.ref(value) for name, value in found.items()}


def test_a_primarys_first_revision_is_freed_though_frozen(db: Path) -> None:
    """A primary settled once warm (``toolcat serve``), then written by an admin: another
    toolkit, a reindex (new vectors), a full reindex (a rebuilt BM25 index). What it had
    built for the frozen revision is dropped by reference counting, not left to a
    collection that will never see it."""
    assert gc.get_freeze_count() == 0
    try:
        with served(db, settle_heap=True) as (url, server):

            async def use() -> None:
                async with http_session(url, None, mode=MODERN) as session:
                    for _ in range(engine.POSTINGS_AFTER + 2):
                        found = await session.call("search_tools", QUERY)
                        assert not found.is_error
                    assert await session.names()

            run(use)
            built = refs(server)
            settle_heap()  # what serve does once warm, in its own process
            assert gc.get_freeze_count() > 0
            with Catalog(db) as admin:
                admin.register(extra_toolkit())
                if engine.embeddings_installed():
                    admin.reindex()
                admin.reindex(full=True)
            run(use)
            gc.collect()  # the frozen generation is not looked at: only refcounts free it
            alive = [name for name, ref in built.items() if ref() is not None]
            assert alive == []
    finally:
        gc.unfreeze()


def test_a_replicas_old_revisions_are_collected_at_each_prepare(db: Path) -> None:
    """A replica (``settle_heap``) prepared again and again: the frozen heap does not grow
    with the revisions, and each retired generation of readers is gone after the next
    ``prepare``'s collection, whether or not anything holds it in a cycle."""
    assert gc.get_freeze_count() == 0
    server = CatalogServer(Catalog(db), ServeOptions(watch_interval=3600, settle_heap=True))
    try:
        revision = server.watcher.current()
        assert revision is not None
        server.prepare(revision)
        counts = []
        for version in ("1.0.1", "1.0.2", "1.0.3", "1.0.4"):
            old = [weakref.ref(reader) for reader in server.readers._opened]
            with Catalog(db) as admin:
                admin.register(extra_toolkit(version))
            revision = server.watcher.current()
            assert revision is not None
            server.prepare(revision)
            counts.append(gc.get_freeze_count())
            assert old and all(ref() is None for ref in old), version
        assert max(counts) - min(counts) < min(counts) // 10, counts
    finally:
        server.close()
        gc.unfreeze()


def test_a_copy_swapped_in_at_the_same_revision_is_searched_in_its_own_mode(
    db: Path, tmp_path: Path
) -> None:
    """A replica's copy restored again at the same revision, this one without vectors: the
    next ``search_tools`` over the SDK's client runs in BM25, not in the mode the readers
    kept for the old copy (hybrid)."""
    if not engine.embeddings_installed():
        pytest.skip("needs the embeddings extra")
    bare = tmp_path / "bare.db"
    with Catalog(db) as catalog:
        revision = catalog.revision
    shutil.copy(db, bare)
    conn = sqlite3.connect(bare)
    with conn:
        conn.execute("DELETE FROM embeddings")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'revision'", (revision,))
    conn.close()
    with served(db) as (url, server):

        async def mode() -> str:
            async with http_session(url, None, mode=MODERN) as session:
                found = await session.call("search_tools", QUERY)
                assert not found.is_error
                return str(found.structured_content["mode"])

        modes: list[str] = []
        run(lambda: _append(modes, mode))
        assert modes == ["hybrid"]
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copy(bare, db)
        server.prepare(revision)  # the same revision, a new copy
        for _ in range(3):
            run(lambda: _append(modes, mode))
        assert modes[1:] == ["bm25"] * 3


async def _append(into: list[str], ask: Any) -> None:
    into.append(await ask())
