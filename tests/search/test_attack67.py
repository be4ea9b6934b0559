"""attack67: what a replica's server made from a copy found damaged is never served after
the swap that replaced it, in this process or the next."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, Tool, Toolkit
from toolcat.search import lexical_file
from toolcat.search.lexical_index import TantivyIndex
from toolcat.server.mcp import Readers

pytest.importorskip("tantivy")

WORD = b"quokkafrog"
DAMAGED = b"quokkafrzg"


def _kits(start: int, count: int) -> list[Toolkit]:
    tools = [
        Tool(
            name=f"t{i}",
            description=(
                f"Tool number {i} fetches records about topic{i % 97} and item{i}"
                + (" and the quokkafrog habitat" if i == 7 else "")
            ),
            tags=["bench"],
        )
        for i in range(start, start + count)
    ]
    return [
        Toolkit(name=f"kit{start + j}", version="1", tools=tools[j : j + 100])
        for j in range(0, len(tools), 100)
    ]


def _snapshot(path: Path, into: Path) -> None:
    src = sqlite3.connect(path)
    dst = sqlite3.connect(into)
    src.backup(dst)
    dst.execute("PRAGMA journal_mode=DELETE")
    dst.close()
    src.close()


def _put(data: bytes, path: Path) -> None:
    """A swap as the follower makes one: a whole new file renamed over the served one."""
    tmp = Path(f"{path}.incoming")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _ids(catalog: Catalog, query: str) -> list[str]:
    return [h.tool.name for h in catalog.search(query, mode="bm25", k=5).hits]


def _first_copy(tmp_path: Path) -> tuple[Path, bytes, int]:
    """(the primary, its copy at revision R, R): 1,100 tools, past the background build's
    threshold."""
    primary = tmp_path / "primary.db"
    with Catalog(primary) as cat:
        cat.register(_kits(0, 1100))
        revision = cat.revision
    r1 = tmp_path / "r1.db"
    _snapshot(primary, r1)
    good = r1.read_bytes()
    assert good.count(WORD) >= 1
    return primary, good, revision


@pytest.fixture
def copies(tmp_path: Path) -> tuple[bytes, bytes, int]:
    """(the damaged copy at revision R, the good copy at R + 1, R + 1)."""
    primary, good, _ = _first_copy(tmp_path)
    with Catalog(primary) as cat:
        cat.register(_kits(5000, 1))
        revision = cat.revision
    r2 = tmp_path / "r2.db"
    _snapshot(primary, r2)
    return good.replace(WORD, DAMAGED), r2.read_bytes(), revision


@pytest.fixture
def same_revision(tmp_path: Path) -> tuple[bytes, bytes, int]:
    """(the damaged copy at R, the good copy at R, R)."""
    _, good, revision = _first_copy(tmp_path)
    return good.replace(WORD, DAMAGED), good, revision


def _reader(base: Catalog) -> Catalog:
    """A reader as ``Readers`` opens one: on the file, sharing the server's indexes."""
    reader = Catalog(base.path)
    reader.share_indexes(base)
    return reader


@contextlib.contextmanager
def _swapped_while_it_builds(
    served: Path,
    damaged: bytes,
    replacement: bytes,
    revisions: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Catalog]:
    """``damaged`` served at ``revisions[0]``, its readers' BM25 index still building (held
    back) when ``replacement`` is swapped in over it at ``revisions[1]`` and
    ``Readers.renew(replaced_damaged=True)`` runs; then the old build finishes and saves.
    Yields the server's catalog, both builds done."""
    served.parent.mkdir()
    _put(damaged, served)  # served, its damage not yet seen
    started, release = threading.Event(), threading.Event()
    original = TantivyIndex.build
    calls: list[int] = []

    def slow(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # the old copy's background build, still under way
            started.set()
            release.wait(30)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TantivyIndex, "build", slow)
    base = Catalog(served)
    readers = Readers(base, 1, search_mode="bm25")
    try:
        readers.renew(revisions[0])
        assert started.wait(30)
        old = base._search.postings
        _put(replacement, served)  # the damage seen, the copy restored
        readers.renew(revisions[1], replaced_damaged=True)
        release.set()
        old.wait(30)
        base._search.postings.wait(30)
        yield base
    finally:
        release.set()
        readers.close()
        base.close()
        monkeypatch.setattr(TantivyIndex, "build", original)


def _answers_as_the_new_copy(catalog: Catalog) -> None:
    assert "t7" not in _ids(catalog, DAMAGED.decode()), "served the damaged copy's rows"
    assert "t7" in _ids(catalog, WORD.decode())


def _the_next_process_answers_as_the_new_copy(served: Path) -> None:
    with Catalog(served) as again:  # the next process: it loads what is saved
        again.warm("bm25")
        again._search.postings.wait(30)
        _answers_as_the_new_copy(again)


def test_a_damaged_copys_build_saved_after_the_swap_is_not_brought_forward(
    tmp_path: Path, copies: tuple[bytes, bytes, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica serves a copy at R whose damage is not yet seen; its readers' BM25 index is
    built from it in the background (80 s at 1M tools). The damage is seen, R + 1 is
    swapped in over it and ``Readers.renew(R + 1, replaced_damaged=True)`` unstamps the
    save beside the file. The old build then saved its index (from the damaged rows) at R,
    and the new copy's build brought that save forward to R + 1 (``bring_forward``: no
    content check), served it, and saved it for the next process."""
    damaged, newer, revision = copies
    served = tmp_path / "replica" / "catalog.db"
    with _swapped_while_it_builds(
        served, damaged, newer, (revision - 1, revision), monkeypatch
    ) as base:
        reader = _reader(base)
        try:
            assert reader.revision == revision
            _answers_as_the_new_copy(reader)
        finally:
            reader.close()


def test_a_damaged_copys_build_saved_after_the_swap_is_not_taken_up_by_the_next_process(
    tmp_path: Path, copies: tuple[bytes, bytes, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, then the server restarts: the next process loads what is saved."""
    damaged, newer, revision = copies
    served = tmp_path / "replica" / "catalog.db"
    with _swapped_while_it_builds(served, damaged, newer, (revision - 1, revision), monkeypatch):
        pass
    _the_next_process_answers_as_the_new_copy(served)


def test_held_a_damaged_copys_build_saved_after_a_restore_at_the_same_revision(
    tmp_path: Path, same_revision: tuple[bytes, bytes, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: restored again at the same revision, the new build checks the late save's rows
    (``_distrusted``) and saves its own over it."""
    damaged, good, revision = same_revision
    served = tmp_path / "replica" / "catalog.db"
    with _swapped_while_it_builds(served, damaged, good, (revision, revision), monkeypatch) as base:
        reader = _reader(base)
        try:
            _answers_as_the_new_copy(reader)
        finally:
            reader.close()
    _the_next_process_answers_as_the_new_copy(served)


def test_held_forget_saved_follows_no_symlinked_folder(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.db"
    catalog.write_bytes(b"")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / lexical_file.STAMP).write_text("{}")
    lexical_file.folder(str(catalog)).symlink_to(elsewhere, target_is_directory=True)
    lexical_file.forget_saved(str(catalog))
    assert (elsewhere / lexical_file.STAMP).exists()


def test_held_forget_saved_removes_a_stamp_link_not_its_target(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.db"
    catalog.write_bytes(b"")
    root = lexical_file.trusted_folder(str(catalog), create=True)
    assert root is not None
    target = tmp_path / "precious.json"
    target.write_text("keep")
    (root / lexical_file.STAMP).symlink_to(target)
    lexical_file.forget_saved(str(catalog))
    assert target.read_text() == "keep"
    shutil.rmtree(root)
