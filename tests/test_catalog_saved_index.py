"""Every write leaves the catalog ready to serve: the BM25 index saved beside it at the new
revision before the write returns, so the next process loads it instead of building it (and
answers from FTS5 meanwhile). ``bulk()`` saves once for many writes; a save that fails
leaves the catalog as written and says so on stderr."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import openapi_app
from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog, Tool, Toolkit
from toolcat.search import engine, lexical_file, lexical_index
from toolcat.search.lexical_index import TantivyIndex

pytest.importorskip("tantivy")

MCP_SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
QUERIES = ["read a file", "add two numbers", "convert a time zone", "count the words in a text"]


@pytest.fixture(autouse=True)
def small_catalogs_use_saved_indexes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample catalog is far below ``BACKGROUND_BUILD_FROM``: treat it as large."""
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 0)
    monkeypatch.setattr(lexical_file, "SAVED_FROM", 0)


AS_SHIPPED = (lexical_file.SAVED_FROM, engine.BACKGROUND_BUILD_FROM)  # before any patch


def test_writes_save_from_the_size_processes_load_saved_indexes_from() -> None:
    assert AS_SHIPPED[0] == AS_SHIPPED[1]


def stamp_of(path: Path) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(
        (lexical_file.folder(str(path)) / lexical_file.STAMP).read_text()
    )
    return header


def saved_revision(path: Path) -> int | None:
    """The revision the saved index's stamp names, once its files check out."""
    header = stamp_of(path)
    with Catalog(path) as catalog, catalog._snapshot() as conn:
        valid_for = lexical_file.stamp(conn, catalog.revision, header["weights"])
    return header["revision"] if lexical_file.load(str(path), valid_for) else None


def revision_of(path: Path) -> int:
    with Catalog(path) as catalog:
        return catalog.revision


def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counted: list[int] = []
    original = TantivyIndex.build

    def counting(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        counted.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TantivyIndex, "build", counting)
    return counted


def served(path: Path) -> list[list[tuple[str, float]]]:
    """A fresh process's warm answers: its index loaded (or built) off the request path."""
    with Catalog(path) as catalog:
        for _ in range(engine.POSTINGS_AFTER):
            catalog.search("warm up", mode="bm25")
        catalog._search.postings.wait(60)
        assert catalog._search.postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS)
        return [[(h.tool.id, h.score) for h in catalog.search(q).hits] for q in QUERIES]


@pytest.fixture
def registered(db_path: Path) -> Path:
    with Catalog(db_path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        assert saved_revision(db_path) == catalog.revision
    return db_path


def test_register_saves_the_index_and_the_next_process_loads_it(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = builds(monkeypatch)
    first = served(registered)
    assert counted == []
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)  # built in memory instead
    assert served(registered) == first


NEW = Toolkit(
    name="flora",
    version="1.0.0",
    tools=[Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers")],
)


def _register(catalog: Catalog) -> None:
    catalog.register(NEW)


def _register_again_unchanged(catalog: Catalog) -> None:
    catalog.register(SAMPLE_TOOLKITS)  # nothing changes: the revision stays, nothing built


def _replace_with_new_tags(catalog: Catalog) -> None:
    catalog.register(NEW)
    tagged = NEW.model_copy(update={"tools": [NEW.tools[0].model_copy(update={"tags": ["x"]})]})
    catalog.register(tagged, replace=True)


def _defer(catalog: Catalog) -> None:
    catalog.register(NEW)
    catalog.register(NEW.model_copy(update={"defer_loading": True}), replace=True)


def _deprecate(catalog: Catalog) -> None:
    catalog.register(NEW)
    catalog.deprecate("flora@1.0.0")


def _activate(catalog: Catalog) -> None:
    catalog.register(NEW)
    catalog.deprecate("flora@1.0.0")
    catalog.activate("flora@1.0.0")


def _remove_version(catalog: Catalog) -> None:
    catalog.register([NEW, NEW.model_copy(update={"version": "2.0.0"})])
    catalog.remove("flora@2.0.0")


def _remove(catalog: Catalog) -> None:
    catalog.register(NEW)
    catalog.remove("flora")


def _learning_off(catalog: Catalog) -> None:
    catalog.learning = False


def _reindex_full(catalog: Catalog) -> None:
    pytest.importorskip("onnxruntime")
    catalog.reindex(full=True)


def _register_openapi(catalog: Catalog) -> None:
    catalog.register_openapi(
        copy.deepcopy(openapi_app.DOCUMENT), toolkit="notes", base_url="http://127.0.0.1:9"
    )


def _register_mcp(catalog: Catalog) -> None:
    pytest.importorskip("mcp")
    from toolcat.remote.mcp import close_all

    try:
        catalog.register_mcp(MCP_SERVER, toolkit="weather")
    finally:
        close_all()


WRITES = [
    _register,
    _register_again_unchanged,
    _replace_with_new_tags,
    _defer,
    _deprecate,
    _activate,
    _remove_version,
    _remove,
    _learning_off,
    _reindex_full,
    _register_openapi,
    _register_mcp,
]


@pytest.mark.parametrize("write", WRITES, ids=[w.__name__.strip("_") for w in WRITES])
def test_every_write_returns_with_the_index_saved_at_its_revision(
    registered: Path, monkeypatch: pytest.MonkeyPatch, write: Any
) -> None:
    with Catalog(registered) as catalog:
        write(catalog)
        revision = catalog.revision
        assert catalog.index_error == ""
    assert saved_revision(registered) == revision
    counted = builds(monkeypatch)
    warm = served(registered)
    assert counted == []  # loaded, not built
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm  # what an index built from scratch answers


def test_the_cli_register_returns_with_the_index_saved(tmp_path: Path) -> None:
    """A real ``toolcat register`` process, past ``BACKGROUND_BUILD_FROM`` (1,000 tools)."""
    from tests.search.test_postings import bench_toolkits

    kits, _ = bench_toolkits(1100)
    folder = tmp_path / "manifests"
    folder.mkdir()
    for kit in kits:
        (folder / f"{kit.name}.json").write_text(kit.model_dump_json(exclude_none=True))
    db = tmp_path / "cli.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "register", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert saved_revision(db) == revision_of(db)


def test_writes_in_a_bulk_block_save_once_at_its_end(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = builds(monkeypatch)
    with Catalog(db_path) as catalog:
        with catalog.bulk():
            for manifest in sorted(SAMPLE_TOOLKITS.glob("*.yaml")):
                catalog.register(manifest)
            with catalog.bulk():  # nested: the outer block saves
                catalog.register(NEW)
            assert counted == []
            assert not (lexical_file.folder(str(db_path)) / lexical_file.STAMP).exists()
        assert counted == [1]
        assert saved_revision(db_path) == catalog.revision


def test_a_bulk_block_that_raises_still_saves_what_was_committed(db_path: Path) -> None:
    with Catalog(db_path) as catalog:
        with pytest.raises(RuntimeError), catalog.bulk():
            catalog.register(SAMPLE_TOOLKITS)
            raise RuntimeError("the caller's own failure")
        assert saved_revision(db_path) == catalog.revision


def test_a_catalog_that_searched_serves_the_index_it_saved(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(registered) as catalog:
        for _ in range(engine.POSTINGS_AFTER):
            catalog.search("warm up", mode="bm25")
        catalog._search.postings.wait(60)
        catalog.register(NEW)
        counted = builds(monkeypatch)
        index = catalog._search.postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS)
        assert index is not None
        hits = catalog.search("zygomorphic flowers", mode="bm25").hits
        assert counted == []
    assert hits[0].tool.id == "flora.zygomorphic_lookup"


def test_a_small_catalog_saves_nothing(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``BACKGROUND_BUILD_FROM`` tools a process builds in memory, never loading."""
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 1000)
    monkeypatch.setattr(lexical_file, "SAVED_FROM", 1000)
    counted = builds(monkeypatch)
    with Catalog(db_path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    assert counted == []
    assert not lexical_file.folder(str(db_path)).exists()


def test_a_save_that_fails_keeps_the_registration_and_says_so(
    db_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder is a symlink (planted, or a mistake): never written through, the
    registration stands, stderr says why, the next server builds the index itself."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, lexical_file.folder(str(db_path)))
    with Catalog(db_path) as catalog:
        results = catalog.register(SAMPLE_TOOLKITS)
        assert "is not a folder toolcat could make or may trust" in catalog.index_error
    assert {r.status for r in results} == {"added"}
    assert list(elsewhere.iterdir()) == []
    err = capsys.readouterr().err
    assert "warning: the catalog is written, but its search index was not saved" in err
    with Catalog(db_path) as catalog:
        assert len(catalog.search("read a file", mode="bm25").hits) > 0


def test_a_full_disk_fails_the_save_not_the_registration(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    original = lexical_file.save

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lexical_file, "save", full)
    with Catalog(db_path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        revision = catalog.revision
    assert "No space left on device" in capsys.readouterr().err
    folder = lexical_file.folder(str(db_path))
    assert [p.name for p in folder.iterdir() if p.name != "lock"] == []  # nothing half-written
    monkeypatch.setattr(lexical_file, "save", original)
    assert lexical_index.save_current(str(db_path), engine.bm25.DEFAULT_WEIGHTS) is not None
    assert saved_revision(db_path) == revision


def test_register_no_index_leaves_the_save_to_the_last_call(db_path: Path) -> None:
    """A script registering one toolkit a call: ``--no-index`` on all but the last."""
    from click.testing import CliRunner

    from toolcat.cli import cli

    manifests = sorted(SAMPLE_TOOLKITS.glob("*.yaml"))
    runner = CliRunner()
    for manifest in manifests[:-1]:
        done = runner.invoke(cli, ["--db", str(db_path), "register", "--no-index", str(manifest)])
        assert done.exit_code == 0, done.output
    assert not (lexical_file.folder(str(db_path)) / lexical_file.STAMP).exists()
    done = runner.invoke(cli, ["--db", str(db_path), "register", str(manifests[-1])])
    assert done.exit_code == 0, done.output
    assert saved_revision(db_path) == revision_of(db_path)


def test_the_warning_prints_no_control_character_of_the_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A catalog path with an escape sequence and a newline (a shared folder's name) reaches
    the terminal escaped: one warning line, no raw control character."""
    path = tmp_path / "odd\x1b]0;title\x07\nname.db"
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", lexical_file.folder(str(path)))
    with Catalog(path) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    err = capsys.readouterr().err
    assert "search index was not saved" in err
    assert not any(c in err.rstrip("\n") for c in "\x1b\x07\n")


def test_a_fresh_process_asks_fts5_once_then_loads_the_saved_index_on_the_spot(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window of FTS5 answers while a background thread builds: the query that takes up
    the index (the ``POSTINGS_AFTER``-th) loads what the last write saved, on its thread."""
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        for _ in range(engine.POSTINGS_AFTER):
            catalog.search("warm up", mode="bm25")
        postings = catalog._search.postings
        assert not postings.building
        assert postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS) is not None
    assert counted == []


def test_warm_takes_up_the_saved_index_before_the_first_query(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = builds(monkeypatch)
    asked: list[str] = []
    original = engine.bm25.search

    def fts5(*args: Any, **kwargs: Any) -> Any:
        asked.append("fts5")
        return original(*args, **kwargs)

    monkeypatch.setattr(engine.bm25, "search", fts5)
    with Catalog(registered) as catalog:
        catalog.warm()
        assert catalog._search.postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS)
        first = [(h.tool.id, h.score) for h in catalog.search(QUERIES[0], mode="bm25").hits]
    assert counted == [] and asked == []  # loaded, not built; the first query not FTS5's
    assert first
    with Catalog(registered) as catalog:  # ranked as a process that built its own index
        monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
        for _ in range(engine.POSTINGS_AFTER):
            catalog.search("warm up", mode="bm25")
        built = [(h.tool.id, h.score) for h in catalog.search(QUERIES[0], mode="bm25").hits]
    assert counted == [1] and built == first


def test_warm_without_a_saved_index_builds_in_the_background(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(db_path) as catalog, catalog.bulk(save_index=False):
        catalog.register(SAMPLE_TOOLKITS)
    counted = builds(monkeypatch)
    with Catalog(db_path) as catalog:
        catalog.warm()
        catalog._search.postings.wait(60)
        assert catalog._search.postings.at(catalog.revision, engine.bm25.DEFAULT_WEIGHTS)
    assert counted == [1]


def test_a_revision_with_the_same_rows_keeps_the_saved_index(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that leaves tools_fts as it was (vectors, a switch) stamps the saved index
    for its revision instead of building it again (80 s at 1M tools after a reindex)."""
    before = stamp_of(registered)
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        catalog.learning = False  # a new revision; no recorded use, so the same rows
        revision = catalog.revision
        assert catalog.index_error == ""
    after = stamp_of(registered)
    assert counted == []
    assert after["revision"] == revision != before["revision"]
    assert (after["tantivy"], after["data"], after["content"]) == (
        before["tantivy"],
        before["data"],
        before["content"],
    )
    assert saved_revision(registered) == revision  # its files check out at the new revision
    warm = served(registered)
    assert counted == []
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm  # what an index built from scratch answers


def forget_the_log(path: Path) -> None:
    """The change log no longer reaches back to the saved index (trimmed, or a catalog
    written by a toolcat from before it)."""
    import sqlite3

    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = 1000000000 WHERE key = 'fts_changes_from'")
    conn.close()


def test_changed_rows_bring_the_saved_index_forward(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that changes a few rows keeps tantivy's part and saves what changed (seconds
    at 1M tools where a build takes minutes); the answers are a new build's."""
    before = stamp_of(registered)
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        catalog.register(NEW)
        revision = catalog.revision
    after = stamp_of(registered)
    assert counted == [] and after["tantivy"] == before["tantivy"]
    assert after["data"] != before["data"] and after["meta"]["delta"] == len(NEW.tools)
    assert saved_revision(registered) == revision
    warm = served(registered)
    assert counted == []
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm


@pytest.mark.parametrize("why", ["log", "too many"])
def test_changed_rows_build_the_index_again_when_the_log_cannot_say(
    registered: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    before = stamp_of(registered)
    if why == "log":
        forget_the_log(registered)
    else:
        monkeypatch.setattr(lexical_index, "FORWARD_MIN", 0)
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        catalog.register(NEW)
        revision = catalog.revision
    after = stamp_of(registered)
    assert counted == [1] and after["tantivy"] != before["tantivy"]
    assert after["content"] != before["content"] and after["meta"]["delta"] == 0
    assert saved_revision(registered) == revision


@pytest.mark.parametrize("content", [None, "", 7, ["x"], "0" * 64])
def test_a_stamp_without_the_rows_digest_is_built_again(
    registered: Path, monkeypatch: pytest.MonkeyPatch, content: Any
) -> None:
    """A stamp from before the digest, or one whose digest is not a string of these rows
    (edited, foreign), is never stamped forward: the index is built."""
    root = lexical_file.folder(str(registered))
    header = stamp_of(registered)
    header["content"] = content
    (root / lexical_file.STAMP).write_text(json.dumps(header))
    forget_the_log(registered)
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        catalog.learning = False
        revision = catalog.revision
    assert counted == [1]
    assert stamp_of(registered)["tantivy"] != header["tantivy"]
    assert saved_revision(registered) == revision


def test_other_weights_are_never_stamped_forward(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = lexical_file.folder(str(registered))
    header = stamp_of(registered)
    header["weights"] = [1.0] * len(header["weights"])
    (root / lexical_file.STAMP).write_text(json.dumps(header))
    counted = builds(monkeypatch)
    with Catalog(registered) as catalog:
        catalog.learning = False
    assert counted == [1]


@pytest.mark.parametrize("edit", ["words added", "row deleted"])
def test_a_row_changed_by_hand_without_the_log_builds_again(
    registered: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    """Plain SQL that changes tools_fts and moves the revision but logs nothing: FTS5's own
    totals no longer match what the log says, so the index is built, not brought forward
    (or stamped) into answers of the rows before."""
    import sqlite3

    conn = sqlite3.connect(registered)
    with conn:
        if edit == "words added":
            conn.execute(
                "UPDATE tools_fts SET description = description || ' zygomorphic' "
                "WHERE rowid = (SELECT min(rowid) FROM tools_fts)"
            )
        else:
            conn.execute("DELETE FROM tools_fts WHERE rowid = (SELECT min(rowid) FROM tools_fts)")
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
    conn.close()
    counted = builds(monkeypatch)
    warm = served(registered)
    assert counted == [1]
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm


def _same_rows(catalog: Catalog) -> None:
    catalog.learning = False  # a new revision; no recorded use, so the same rows


def _rows_changed(catalog: Catalog) -> None:
    catalog.register(NEW)
    catalog.remove("text")


@pytest.mark.parametrize("write", [_same_rows, _rows_changed], ids=["same rows", "changed"])
def test_a_server_brings_forward_what_a_write_left_unsaved(
    registered: Path, monkeypatch: pytest.MonkeyPatch, write: Any
) -> None:
    """A revision no write saved an index for (``bulk(save_index=False)``; a replica's
    copy, whose writes come from its primary): the serving process stamps the saved index
    forward (the same rows) or brings it forward by the rows changed, saves it and serves
    it, the answers a new build's."""
    before = stamp_of(registered)
    with Catalog(registered) as catalog:
        with catalog.bulk(save_index=False):
            write(catalog)
        revision = catalog.revision
    assert stamp_of(registered)["revision"] == before["revision"] != revision
    counted = builds(monkeypatch)
    warm = served(registered)
    assert counted == []
    after = stamp_of(registered)
    assert after["revision"] == revision and after["tantivy"] == before["tantivy"]
    moved = after["meta"]["delta"], after["data"] != before["data"]
    assert moved == ((len(NEW.tools), True) if write is _rows_changed else (0, False))
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm


def test_a_revision_asked_while_a_build_runs_is_built_after_it(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica's next copy arrives while the index of its first is still being built (a
    fresh 100k replica): the background build goes on to the newer revision when done,
    instead of leaving it to FTS5 until enough queries ask again."""
    import threading

    from toolcat.search.lexical_index import LexicalIndex

    go = threading.Event()
    original = LexicalIndex._load_or_build_saved
    calls: list[int] = []

    def held(self: LexicalIndex, conn: Any, revision: int, *args: Any) -> bool:
        calls.append(revision)
        if len(calls) == 1:
            assert go.wait(30)
        return original(self, conn, revision, *args)

    monkeypatch.setattr(LexicalIndex, "_load_or_build_saved", held)
    with Catalog(registered) as writer, writer.bulk(save_index=False):
        writer.learning = False  # a revision nothing was saved at: its index is built
    with Catalog(registered) as serving:
        first = serving.revision
        serving.warm()  # the build of ``first`` starts, and waits
        with Catalog(registered) as writer, writer.bulk(save_index=False):
            writer.register(NEW)
        serving.warm()  # asked at the new revision while that build runs
        later = serving.revision
        go.set()
        postings = serving._search.postings
        for _ in range(100):
            postings.wait(30)
            if postings.at(later, engine.bm25.DEFAULT_WEIGHTS) is not None:
                break
        assert calls == [first, later] != [first, first]
        assert postings.at(later, engine.bm25.DEFAULT_WEIGHTS) is not None
    assert stamp_of(registered)["revision"] == later


def test_a_stamp_that_cannot_be_written_forward_still_serves_an_index(
    registered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile (a full disk): stamping the saved index forward fails with ``OSError``; the
    serving process builds the index in memory as it does when a save fails, instead of
    losing the background build (FTS5 only, every query)."""
    import errno

    from toolcat.files import checks as saved_files

    before = stamp_of(registered)
    with Catalog(registered) as catalog:
        with catalog.bulk(save_index=False):
            catalog.learning = False  # a new revision, the same rows
        revision = catalog.revision

    def full_disk(root: Path, header: dict[str, Any]) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(saved_files, "replace_stamp", full_disk)
    monkeypatch.setattr(lexical_file, "new_tantivy_folder", lambda root: full_disk(root, {}))
    counted = builds(monkeypatch)
    warm = served(registered)  # asserts an index is served at the catalog's revision
    assert counted == [1]  # built in memory
    assert stamp_of(registered) == before  # nothing written forward
    monkeypatch.setattr(engine, "BACKGROUND_BUILD_FROM", 10**9)
    assert served(registered) == warm
    assert revision_of(registered) == revision
