"""Attack on registration's batched FTS5 inserts (``writer.PendingFts``), its checkpoint
beside the index's save (``writer.checkpoint_beside``, ``register_stream(checkpoint=
False)``), the BM25 index read from FTS5's content table, and ``canonical_json``'s shared
encoder. Real SQLite files throughout."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.errors import ManifestError, ToolcatError, VersionConflictError
from toolcat.models import Toolkit
from toolcat.registry import parallel
from toolcat.store import writer

from ..helpers import table_snapshot, toolkit_data, write_manifest

# -- helpers ------------------------------------------------------------------------------


def tk(name: str, version: str, tools: int = 3, word: str = "ledger") -> Toolkit:
    return Toolkit.model_validate(
        toolkit_data(
            name,
            version,
            module=None,
            tags=["batch", name],
            tools=[
                {
                    "name": f"tool_{i}",
                    "description": f"Fetch {word} record {i} of {name} at {version}.",
                    "parameters": {
                        "type": "object",
                        "properties": {"key": {"type": "string", "description": f"key {i}"}},
                    },
                    "examples": [f"find {word} {i}"],
                }
                for i in range(tools)
            ],
        )
    )


def fts_state(db: Path) -> dict[str, Any]:
    """What FTS5 holds: its content, every token of its index (fts5vocab 'instance'), and
    whether its integrity-check (content against index) passes."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO tools_fts (tools_fts, rank) VALUES ('integrity-check', 1)")
        conn.execute(
            "CREATE VIRTUAL TABLE temp.fts_tokens USING fts5vocab(main, tools_fts, instance)"
        )
        return {
            "content": conn.execute(
                "SELECT rowid, name, hint, description, params, tags FROM tools_fts ORDER BY rowid"
            ).fetchall(),
            "tokens": conn.execute(
                "SELECT term, doc, col, offset FROM temp.fts_tokens ORDER BY doc, col, offset"
            ).fetchall(),
            "toolkits": conn.execute(
                "SELECT id, name, version, active, deprecated FROM toolkits ORDER BY id"
            ).fetchall(),
            "tools": conn.execute("SELECT id, toolkit_id, name FROM tools ORDER BY id").fetchall(),
        }
    finally:
        conn.close()


def autocheckpoint(catalog: Catalog) -> int:
    return int(catalog._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


BEFORE = [tk("alpha", "1.0"), tk("gamma", "1.0"), tk("delta", "1.0", 2)]
BATCH = [
    tk("beta", "1.0", 4),
    tk("alpha", "2.0", 2, "invoice"),  # the active version moves: alpha 1.0's rows go
    tk("alpha", "1.5", 5),  # older: not indexed
    tk("alpha", "3.0rc1", 3, "draft"),  # a pre-release: not indexed beside a final
    tk("gamma", "1.0", 6, "changed"),  # replaces the active version registered before
    tk("beta", "1.1", 1, "second"),  # beta 1.0's rows (still pending) go
    tk("eps", "0.1rc1", 2),
    tk("eps", "0.1rc2", 3, "later"),  # pre-release replaces pre-release
    tk("delta", "0.9", 2, "older"),  # delta 1.0 is deprecated: 0.9 becomes active
    tk("alpha", "2.1", 3, "final"),  # alpha moves again within the batch
    tk("zeta", "1.0", 7),
]


def prepared(db: Path) -> Catalog:
    catalog = Catalog(db, create=True)
    catalog.learning = True
    for toolkit in BEFORE:
        catalog.register(toolkit)
    catalog.deprecate("delta", "1.0")
    catalog.record_use("where is the ledger record", "alpha.tool_1")
    catalog.record_use("zebracorn for gamma", "gamma.tool_0")
    catalog.record_use("zeta before it exists", "alpha.tool_2")
    return catalog


# -- PendingFts ---------------------------------------------------------------------------


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 5, 13, 20_000])
def test_a_batch_indexes_what_one_toolkit_at_a_time_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int
) -> None:
    with prepared(tmp_path / "one.db") as catalog:
        for toolkit in BATCH:
            catalog.register(toolkit, replace=True)
    monkeypatch.setattr(writer, "FTS_BATCH_ROWS", batch_rows)
    with prepared(tmp_path / "batch.db") as catalog:
        before = autocheckpoint(catalog)
        results = catalog.register(BATCH, replace=True)
        assert autocheckpoint(catalog) == before
    assert [r.status for r in results] == ["added"] * 4 + ["replaced"] + ["added"] * 6
    one, batch = fts_state(tmp_path / "one.db"), fts_state(tmp_path / "batch.db")
    assert batch == one
    # what was learned joined the tags column of the versions indexed in the batch
    assert any("zebracorn" in row[5] for row in batch["content"])


@pytest.mark.parametrize("batch_rows", [1, 4, 20_000])
def test_replacing_in_a_batch_the_rows_just_flushed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int
) -> None:
    """Versions whose rows are still pending when a later entry deletes them: a replace of
    a version registered in an earlier call after toolkits of this batch took the highest
    row ids, and a toolkit whose new version comes last."""
    batch = [tk("m", "1.0", 3), tk("n", "1.0", 2, "replaced"), tk("m", "1.1", 2), tk("o", "1")]
    monkeypatch.setattr(writer, "FTS_BATCH_ROWS", batch_rows)
    for name, calls in [("one", [[t] for t in batch]), ("batch", [batch])]:
        with Catalog(tmp_path / f"{name}.db", create=True) as catalog:
            catalog.register([tk("n", "1.0", 4), tk("p", "2.0", 1)])
            for call in calls:
                catalog.register(call, replace=True)
    assert fts_state(tmp_path / "batch.db") == fts_state(tmp_path / "one.db")


def _refused_batch_leaves_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sources: list[Any], error: type
) -> None:
    monkeypatch.setattr(writer, "FTS_BATCH_ROWS", 2)
    db = tmp_path / "c.db"
    with prepared(db) as catalog:
        before = table_snapshot(db)
        fts_before = fts_state(db)
        setting = autocheckpoint(catalog)
        with pytest.raises(error):
            catalog.register(sources)
        assert autocheckpoint(catalog) == setting
        assert table_snapshot(db) == before
        assert fts_state(db) == fts_before
        # and the catalog still takes the good part of the batch
        catalog.register(BATCH[:4])
    fts_state(db)  # integrity-check


def test_a_conflict_late_in_a_batch_leaves_every_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = [*BATCH[:4], BATCH[5], tk("gamma", "1.0", 6, "conflicting")]  # no replace
    _refused_batch_leaves_everything(tmp_path, monkeypatch, sources, VersionConflictError)


def test_a_bad_manifest_late_in_a_batch_leaves_every_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    bad = toolkit_data("broken", module=None)
    bad["tools"][1]["name"] = "bad name"
    sources = [*BATCH[:6], write_manifest(folder, bad, ".json")]
    _refused_batch_leaves_everything(tmp_path, monkeypatch, sources, ManifestError)


def test_ctrl_c_half_way_through_a_batch_leaves_every_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    paths = [
        write_manifest(folder, {**toolkit_data(f"kit-{i}", module=None)}, ".json") for i in range(5)
    ]
    original = parallel._load_here

    def interrupted(path: Path) -> Any:
        if path.name == "kit-3.json":
            raise KeyboardInterrupt
        return original(path)

    monkeypatch.setattr(parallel, "_load_here", interrupted)
    _refused_batch_leaves_everything(tmp_path, monkeypatch, [*BATCH[:5], *paths], KeyboardInterrupt)


# -- checkpoint_beside --------------------------------------------------------------------


def main_file_alone(db: Path, tmp_path: Path) -> int:
    """Toolkits the catalog file holds without its log (what a checkpoint copied there)."""
    copy = tmp_path / "copy-of-main.db"
    copy.unlink(missing_ok=True)
    shutil.copyfile(db, copy)
    conn = sqlite3.connect(copy)
    try:
        return int(conn.execute("SELECT count(*) FROM toolkits").fetchone()[0])
    finally:
        conn.close()


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "toolcat-checkpoint"]


@pytest.mark.parametrize(
    "folder", ["with space", "q?x=1", "h#frag", "p%41x%", "ü日本-ﬁ", "a%3Fb&c;d", "semi;colon"]
)
def test_the_log_is_copied_into_catalogs_with_odd_names(tmp_path: Path, folder: str) -> None:
    where = tmp_path / folder
    where.mkdir()
    db = where / "cat?alog#1%.db"
    with Catalog(db, create=True) as catalog:
        setting = autocheckpoint(catalog)
        catalog.register(BATCH[:3])
        assert autocheckpoint(catalog) == setting
        assert not checkpoint_threads()
        assert main_file_alone(db, tmp_path) == 3
    assert sorted(p.name for p in where.iterdir()) == sorted(
        p.name for p in where.iterdir() if p.name.startswith("cat?alog#1%.db")
    )  # no stray file made by a URI read wrong


def test_the_log_is_copied_into_a_catalog_opened_through_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "catalog.db"
    with Catalog(real / "catalog.db", create=True):
        pass
    link.symlink_to(real / "catalog.db")
    with Catalog(link) as catalog:
        catalog.register(BATCH[:2])
        assert main_file_alone(real / "catalog.db", tmp_path) == 2
    assert not (tmp_path / "links" / "catalog.db-wal").exists()


def test_the_catalog_deleted_before_the_checkpoint_makes_no_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file unlinked while the index is saved: the thread's ``mode=rw`` opens nothing."""
    db = tmp_path / "c.db"
    catalog = Catalog(db, create=True)
    from toolcat.search import lexical_index

    saved = lexical_index.save_current
    seen: list[bool] = []

    def unlink_then_save(*args: Any, **kwargs: Any) -> Any:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        seen.append(True)
        return saved(*args, **kwargs)

    monkeypatch.setattr(lexical_index, "save_current", unlink_then_save)
    monkeypatch.setattr("toolcat.search.lexical_file.SAVED_FROM", 0)
    try:
        catalog.register(BATCH[:2])
    except OSError:
        pass
    finally:
        catalog.close()
    assert not checkpoint_threads()
    assert not db.exists() or db.stat().st_size > 0


def test_ctrl_c_while_the_index_is_saved_leaves_no_thread_and_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolcat.search import lexical_index

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(lexical_index, "save_current", interrupted)
    monkeypatch.setattr("toolcat.search.lexical_file.SAVED_FROM", 0)
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as catalog:
        setting = autocheckpoint(catalog)
        with pytest.raises(KeyboardInterrupt):
            catalog.register(BATCH[:2])
        assert not checkpoint_threads()
        assert autocheckpoint(catalog) == setting
        assert [t.name for t in catalog.list().tools][:1]  # committed, readable
        assert main_file_alone(db, tmp_path) == 2


def test_every_failed_registration_leaves_the_autocheckpoint_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(tk("gamma", "1.0"))
        setting = autocheckpoint(catalog)
        assert setting > 0
        for sources in (
            [tk("beta", "1.0"), tk("gamma", "1.0", 5)],  # conflict
            [tk("beta", "1.0"), tk("beta", "1", 5)],  # defined twice
            [tmp_path / "missing.json"],
        ):
            with pytest.raises(ToolcatError):
                catalog.register(sources)
            assert autocheckpoint(catalog) == setting
        with pytest.raises(ManifestError):
            catalog.register([])
        assert autocheckpoint(catalog) == setting

        def full(*args: Any, **kwargs: Any) -> Any:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(writer, "merge_segments", full)
        with pytest.raises(Exception, match="full"):
            catalog.register(tk("beta", "2.0"))
        assert autocheckpoint(catalog) == setting


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX")
def test_a_committed_registration_does_not_raise_when_the_working_folder_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(work)
    catalog = Catalog(Path("../data/catalog.db"), create=True)
    try:
        work.rmdir()  # the working folder goes; the catalog file stays where it was
        catalog.register(tk("beta", "1.0"))
    finally:
        catalog.close()
        os.chdir(tmp_path)
    conn = sqlite3.connect(tmp_path / "data" / "catalog.db")
    assert conn.execute("SELECT count(*) FROM toolkits").fetchone()[0] == 1
    conn.close()


def test_a_reader_in_another_process_does_not_block_nor_break_the_checkpoint(
    tmp_path: Path,
) -> None:
    import subprocess

    db = tmp_path / "c.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(BATCH[:1])
        reader = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sqlite3,sys;c=sqlite3.connect(sys.argv[1],isolation_level=None);"
                "c.execute('BEGIN');c.execute('SELECT count(*) FROM tools').fetchall();"
                "print('ready',flush=True);sys.stdin.readline()",
                str(db),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
            catalog.register(BATCH[1:4])
            assert not checkpoint_threads()
        finally:
            assert reader.stdin is not None
            reader.stdin.close()
            reader.wait(10)
            assert reader.stdout is not None
            reader.stdout.close()
        catalog.register(BATCH[4:5])  # the next commit copies what was left
        assert main_file_alone(db, tmp_path) == 5


def test_a_replica_refuses_and_keeps_its_setting(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(BATCH[:1])
    conn = sqlite3.connect(db)
    from toolcat.store.connection import MARKER

    with conn:
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (MARKER, "s3://x/y"))
    conn.close()
    with Catalog(db) as catalog:
        setting = autocheckpoint(catalog)
        with pytest.raises(ToolcatError, match="replica"):
            catalog.register(BATCH[1:2])
        assert autocheckpoint(catalog) == setting
        assert not checkpoint_threads()


def test_checkpoint_beside_with_no_file_is_a_no_op(tmp_path: Path) -> None:
    for path in ("", ":memory:", str(tmp_path / "never-made.db")):
        with writer.checkpoint_beside(path):
            pass
        assert not checkpoint_threads()
    assert not (tmp_path / "never-made.db").exists()


# -- the BM25 index read from tools_fts_content --------------------------------------------


def big_catalog(db: Path) -> None:
    with Catalog(db, create=True) as catalog:
        catalog.register([tk(f"k{i:02d}", "1.0", 50, f"word{i}") for i in range(21)])


def _search_ids(db: Path, query: str) -> list[str]:
    with Catalog(db) as catalog:
        found = []
        for _ in range(4):  # past POSTINGS_AFTER: the in-memory index answers
            found = [h.tool.id for h in catalog.search(query, k=5, mode="bm25").hits]
        return found


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE tools_fts_content SET c2 = 42 WHERE id = (SELECT min(id) FROM tools_fts_content)",
        "UPDATE tools_fts_content SET c2 = x'00ff' WHERE id = (SELECT min(id) FROM tools)",
        "UPDATE tools_fts_content SET c2 = NULL WHERE id = (SELECT min(id) FROM tools)",
        "INSERT INTO tools_fts_content (id, c0, c1, c2, c3, c4) "
        "VALUES (99999999, 'ghost', '', 'ghost ledger', '', '')",
    ],
    ids=["integer", "blob", "null", "ghost-row"],
)
@pytest.mark.parametrize("saved", [True, False], ids=["brought-forward", "built-whole"])
def test_a_hand_edited_content_table_fails_in_one_line_and_search_answers(
    tmp_path: Path, damage: str, saved: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "c.db"
    big_catalog(db)
    before = _search_ids(db, "ledger record 3 word4")
    if not saved:  # the next save builds the index whole from the content table
        shutil.rmtree(f"{db}.bm25")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(damage)
    conn.close()
    with Catalog(db) as catalog:
        catalog.register(tk("late", "1.0", 2, "unrelated"))
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 1
    after = _search_ids(db, "ledger record 3 word4")
    assert "ghost" not in " ".join(after)
    assert after[:3] == before[:3]


# -- canonical_json ------------------------------------------------------------------------


def test_canonical_json_is_the_same_text_from_many_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from toolcat.models import canonical_json

    values: list[Any] = [
        {"b": [1, 2, {"z": "é", "a": None}], "a": "x" * (i % 50), "n": i, "f": i / 7}
        for i in range(400)
    ]

    def dump(value: Any) -> tuple[str, str]:
        return canonical_json(value), json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    with ThreadPoolExecutor(8) as pool:
        for got, want in pool.map(dump, values * 5):
            assert got == want


def test_canonical_json_refuses_what_json_dumps_refuses() -> None:
    from toolcat.models import canonical_json

    circular: list[Any] = []
    circular.append(circular)
    for bad in (circular, {"k": object()}, {(1, 2): 1}):
        with pytest.raises((TypeError, ValueError)):
            canonical_json(bad)
    # and the shared encoder is still good after each refusal
    assert canonical_json({"b": 1, "a": float("nan")}) == '{"a":NaN,"b":1}'


def test_a_fifo_put_in_the_catalogs_place_does_not_hang_registration(tmp_path: Path) -> None:
    """The file renamed away and a FIFO made at its path after the catalog was opened:
    the checkpoint thread opens the path again, and ``register`` joins it."""
    from ..helpers import run_script

    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from toolcat import Catalog\n"
        "from toolcat.models import Toolkit\n"
        "from tests.helpers import toolkit_data\n"
        "d = Path(sys.argv[1]); db = d / 'c.db'\n"
        "kit = lambda n: Toolkit.model_validate(toolkit_data(n, module=None, tools=[\n"
        "    {'name': 't', 'description': 'd', 'parameters': {'type': 'object'}}]))\n"
        "cat = Catalog(db, create=True)\n"
        "cat.register(kit('a'))\n"
        "db.rename(d / 'moved.db')\n"
        "os.mkfifo(db)\n"
        "cat.register(kit('b'))\n"
        "cat.close()\n"
        "print('returned')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = run_script(script, str(tmp_path), env=env, timeout=60)
    assert done.stdout.strip() == "returned"


def test_weighted_counts_are_those_of_the_joined_columns() -> None:
    """``_weighted`` now splits each column once: the same length and counts as splitting
    the joined text, whatever whitespace the columns hold."""
    import random
    from collections import Counter

    from toolcat.search.lexical_index import _body, _weighted

    rng = random.Random(54)
    spaces = [" ", "  ", "\t", "\n", "\x1c", "\u00a0", "\u2028", "\u3000", ""]
    words = ["a", "b", "ab", "é", "日本", "x_y", "1"]
    for _ in range(2000):
        texts = [
            "".join(rng.choice(words) + rng.choice(spaces) for _ in range(rng.randrange(6)))
            for _ in range(5)
        ]
        times = [rng.randrange(4) for _ in range(5)]
        length, found, tokens = _weighted(texts, [1.0] * 5, times, 1.0, True)
        assert length == len(" ".join(texts).split())
        want = Counter(_body(times, texts).split())
        assert found == want and tokens == sum(want.values())
