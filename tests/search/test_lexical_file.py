"""The BM25 index saved beside the catalog is taken up by the next process that opens it at
the same revision (no rebuild, the same answers), and never at another revision, nor when
its files are torn or belong to another catalog. Read from disk, where anyone who could
write there might have left anything: a hostile file is rebuilt, never served, never
followed outside its folder, and never costs more than a rebuild."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.search.test_postings import bench_toolkits
from toolcat import Catalog, Tool, Toolkit
from toolcat.files import checks as saved_files
from toolcat.search import bm25, lexical_file, lexical_index
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex
from toolcat.store import reader

pytest.importorskip("tantivy")

QUERIES = 20


def served(path: Path, queries: list[str]) -> tuple[list[Any], Catalog]:
    """A fresh process's view: BM25 answers from its in-memory index, once it is ready."""
    catalog = Catalog(path)
    catalog.search(queries[0], mode="bm25")
    catalog.search(queries[1], mode="bm25")  # the second query at a revision builds or loads
    catalog._search.postings.wait()
    assert isinstance(catalog._search.postings.index, TantivyIndex)
    answers = [
        [(h.tool.id, h.score) for h in catalog.search(q, mode="bm25").hits]
        for q in queries[:QUERIES]
    ]
    return answers, catalog


@pytest.fixture
def saved(db_path: Path) -> tuple[Path, list[str], list[Any]]:
    kits, queries = bench_toolkits(1200)  # past BACKGROUND_BUILD_FROM: built off the request path
    with Catalog(db_path) as catalog:
        catalog.register(kits)
    answers, catalog = served(db_path, queries)
    catalog.close()
    assert (lexical_file.folder(str(db_path)) / lexical_file.STAMP).exists()
    return db_path, queries, answers


def no_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    builds: list[int] = []
    original = TantivyIndex.build

    def counted(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        builds.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TantivyIndex, "build", counted)
    return builds


def test_the_next_process_loads_the_saved_index(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries, answers = saved
    builds = no_builds(monkeypatch)
    again, catalog = served(path, queries)
    catalog.close()
    assert builds == []
    assert again == answers


@pytest.mark.parametrize("log", ["kept", "trimmed"])
def test_a_change_makes_the_saved_index_stale(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch, log: str
) -> None:
    """The saved index is never served at a later revision as it is: brought forward by
    the change log, or built again when the log does not reach back to it."""
    path, queries, _ = saved
    new = Tool(name="zygomorphic_lookup", description="Find zygomorphic flowers")
    # A write that did not save (another toolcat's, or one whose save failed): the stamp
    # names the revision before it.
    monkeypatch.setattr(lexical_index, "save_current", lambda *args: None)
    with Catalog(path) as catalog:
        catalog.register(Toolkit(name="flora", version="1", tools=[new]))
    monkeypatch.undo()
    if log == "trimmed":
        from toolcat.store import writer

        with Catalog(path) as catalog, catalog._lock:
            writer._fts_changes_from(catalog._conn, catalog.revision)
            catalog._conn.commit()
    builds = no_builds(monkeypatch)
    _, catalog = served(path, ["zygomorphic flowers", *queries])
    hits = catalog.search("zygomorphic flowers", mode="bm25").hits
    catalog.close()
    assert builds == ([] if log == "kept" else [1])
    assert hits[0].tool.id == "flora.zygomorphic_lookup"


@pytest.mark.parametrize("damage", ["torn data", "no tantivy folder", "garbage stamp"])
def test_a_torn_save_is_rebuilt_never_served(
    saved: tuple[Path, list[str], list[Any]], monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    if damage == "torn data":
        data = next(folder.glob("data-*.bin"))
        data.write_bytes(data.read_bytes()[:-7])
    elif damage == "no tantivy folder":
        shutil.rmtree(next(folder.glob("tantivy-*")))
    else:
        (folder / lexical_file.STAMP).write_text("{not json")
    builds = no_builds(monkeypatch)
    again, catalog = served(path, queries)
    catalog.close()
    assert builds == [1]
    assert again == answers


def test_another_catalogs_index_at_the_same_revision_is_not_taken(
    saved: tuple[Path, list[str], list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog restored or copied over this one, at the same revision number but with
    other tools: FTS5's totals differ from the stamp's, so the saved index is not used."""
    path, queries, _ = saved
    other = tmp_path / "other.db"
    kits, _ = bench_toolkits(1100)
    monkeypatch.setattr(lexical_index, "save_current", lambda *args: None)  # copied instead
    with Catalog(other) as catalog:
        catalog.register(kits)
        catalog._conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'revision'", (Catalog(path).revision,)
        )
    shutil.copytree(lexical_file.folder(str(path)), lexical_file.folder(str(other)))
    builds = no_builds(monkeypatch)
    _, catalog = served(other, queries)
    catalog.close()
    assert builds == [1]


Saved = tuple[Path, list[str], list[Any]]


def stamp_of(path: Path) -> dict[str, Any]:
    return json.loads((lexical_file.folder(str(path)) / lexical_file.STAMP).read_text())


def write_stamp(path: Path, header: Any) -> None:
    (lexical_file.folder(str(path)) / lexical_file.STAMP).write_text(json.dumps(header))


def served_soon(path: Path, queries: list[str], seconds: float = 60) -> list[Any]:
    """``served``, but a load that hangs fails the test instead of hanging it."""
    catalog = Catalog(path)
    try:
        catalog.search(queries[0], mode="bm25")
        catalog.search(queries[1], mode="bm25")
        catalog._search.postings.wait(seconds)
        assert not catalog._search.postings.building, "the index load hangs"
        assert isinstance(catalog._search.postings.index, TantivyIndex)
        return [
            [(h.tool.id, h.score) for h in catalog.search(q, mode="bm25").hits]
            for q in queries[:20]
        ]
    finally:
        catalog.close()


def test_a_folder_that_is_a_symlink_is_not_followed(
    saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone who can create names beside the catalog (a shared, sticky folder) points
    ``<catalog>.bm25`` at a folder of yours: nothing there is read, written or deleted."""
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    shutil.rmtree(folder)
    elsewhere = tmp_path / "home"
    (elsewhere / "projects").mkdir(parents=True)
    (elsewhere / "notes.txt").write_text("precious")
    folder.symlink_to(elsewhere)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]
    assert sorted(p.name for p in elsewhere.iterdir()) == ["notes.txt", "projects"]
    assert folder.is_symlink()


def test_a_copied_save_pointed_at_by_a_symlink_is_not_served(
    saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The saved index's own folder is the only place its files are read from."""
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    shutil.move(folder, tmp_path / "moved")
    folder.symlink_to(tmp_path / "moved")
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlinked files"])
def test_a_stamp_never_names_files_outside_its_folder(
    saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A stamp naming ``../x`` or ``/x`` (or files that are symlinks) is refused, even when
    what it names is a complete copy of the right index."""
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    header = stamp_of(path)
    outside = tmp_path / "outside"
    outside.mkdir()
    data, tantivy = folder / header["data"], folder / header["tantivy"]
    shutil.move(data, outside / data.name)
    shutil.move(tantivy, outside / tantivy.name)
    if how == "dotdot":
        header["data"] = f"../outside/{data.name}"
        header["tantivy"] = f"../outside/{tantivy.name}"
        write_stamp(path, header)
    elif how == "absolute":
        header["data"] = str(outside / data.name)
        header["tantivy"] = str(outside / tantivy.name)
        write_stamp(path, header)
    else:
        data.symlink_to(outside / data.name)
        tantivy.symlink_to(outside / tantivy.name)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]
    assert list(outside.iterdir())  # what lies outside was left alone


@pytest.mark.parametrize("what", ["fifo", "dev zero", "huge sparse"])
def test_a_stamp_that_is_not_a_small_regular_file_is_refused_at_once(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    path, queries, answers = saved
    stamp = lexical_file.folder(str(path)) / lexical_file.STAMP
    stamp.unlink()
    if what == "fifo":
        os.mkfifo(stamp)
    elif what == "dev zero":
        stamp.symlink_to("/dev/zero")
    else:
        with open(stamp, "wb") as f:
            f.truncate(64 << 30)  # 64 GiB of nothing: read whole, it would exhaust memory
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries, seconds=60) == answers
    assert builds == [1]


@pytest.mark.parametrize(
    "header",
    [
        [],
        "a string",
        None,
        "deep",
        {"format": 1},
    ],
    ids=["list", "string", "null", "deeply nested", "fields missing"],
)
def test_a_stamp_of_any_shape_is_rebuilt(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, header: Any
) -> None:
    path, queries, answers = saved
    stamp = lexical_file.folder(str(path)) / lexical_file.STAMP
    if header == "deep":
        stamp.write_text("[" * 100_000 + "]" * 100_000)
    else:
        stamp.write_text(json.dumps(header))
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("counts", "Z"),
        ("counts", "q"),
        ("scale", "2"),
        ("scale", 5e-324),  # positive, but a length normalisation rounds to 0: 0 / 0
        ("scale", 1.0),  # another column weight's: every tool scored wrong
        ("avgdl", float("nan")),
        ("n_docs", 5),
        ("bounded", "yes"),
        ("base_avgdl", 0),
        ("base_avgdl", "1"),
        ("length_total", -1),
        ("length_total", 2.5),
        ("length_total", 0),
        ("length_total", 1),
        ("delta", 3),
        ("delta", 10**9),
        ("delta", True),
    ],
)
def test_a_stamp_with_forged_figures_is_rebuilt(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, field: str, value: Any
) -> None:
    """Figures the queries compute with are checked on load: served, they would fail every
    query or score wrong."""
    path, queries, answers = saved
    header = stamp_of(path)
    header["meta"][field] = value
    write_stamp(path, header)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


def test_a_resealed_save_of_tools_of_no_length_is_rebuilt(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every packed tool's length made 0 and the token total with it, the digest resealed:
    the lengths add up, but the average length every score divides by is 0
    (ZeroDivisionError from every search that reaches a tool). No tool of a catalog is of
    no length (a name is a token)."""

    def no_lengths(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
        sizes = array("I")
        sizes.frombytes(blobs["sizes"])
        tools, at = bytearray(blobs["tools"]), 0
        for size in sizes:
            tools[at : at + 4] = bytes(4)
            at += size
        return {"tools": bytes(tools)}

    path, queries, answers = saved
    _resealed(path, no_lengths)
    header = stamp_of(path)
    header["meta"]["length_total"] = 0
    write_stamp(path, header)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


@pytest.mark.parametrize("where", ["data", "tantivy"])
def test_a_flipped_bit_is_rebuilt_never_served(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Same size, one bit changed: caught by the digests the stamp records."""
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    header = stamp_of(path)
    if where == "data":
        target = folder / header["data"]
        at = sum(n for name, n in header["sections"][:5]) + 4  # inside the packed tools
    else:
        target = next((folder / header["tantivy"]).glob("*.term"))
        at = target.stat().st_size // 2
    blob = bytearray(target.read_bytes())
    blob[at] ^= 0x01
    target.write_bytes(bytes(blob))
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


def _resealed(path: Path, change: Any) -> None:
    """Rewrite the saved data's sections with ``change`` (name -> bytes) applied and the
    stamp's sizes and digest made to match: damage a digest cannot catch (a forged save,
    or a bug in a save)."""
    import hashlib
    from array import array

    folder = lexical_file.folder(str(path))
    header = stamp_of(path)
    data, at, blobs = (folder / header["data"]).read_bytes(), 0, {}
    for name, size in header["sections"]:
        blobs[name], at = data[at : at + size], at + size
    blobs.update(change(blobs, array))
    out = b"".join(blobs[name] for name, _ in header["sections"])
    (folder / header["data"]).write_bytes(out)
    header["data_sha256"] = hashlib.sha256(out).hexdigest()
    header["sections"] = [[name, len(blobs[name])] for name, _ in header["sections"]]
    write_stamp(path, header)


def _cut_tools(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    sizes = array("I")
    sizes.frombytes(blobs["sizes"])
    total = sum(sizes)  # the same bytes, cut at other places: every tool but one 2 bytes
    return {"sizes": array("I", [2] * (len(sizes) - 1) + [total - 2 * (len(sizes) - 1)]).tobytes()}


def _foreign_rows(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    positions = array("q")
    positions.frombytes(blobs["positions"])
    return {"positions": array("q", [p + 10**9 for p in positions]).tobytes()}


@pytest.mark.parametrize("change", [_cut_tools, _foreign_rows])
def test_a_save_of_consistent_digests_but_another_shape_is_rebuilt(
    saved: Saved, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    """Packed tools cut short (struct.error from every search once served) and positions
    naming rows the save does not hold: "another shape", rebuilt, never served."""
    path, queries, answers = saved
    _resealed(path, change)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


def test_a_folder_of_another_owner_is_not_trusted(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder someone else made beside your catalog (in a shared folder) is neither read
    nor written: its stamp could say anything."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder away")
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    for entry in [folder, *folder.rglob("*")]:
        os.lchown(entry, 4242, 4242)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]
    assert folder.stat().st_uid == 4242


def test_a_world_writable_folder_is_not_trusted(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, queries, answers = saved
    lexical_file.folder(str(path)).chmod(0o777)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


def test_two_processes_saving_at_once_build_once(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second process waits for the first one's save and loads it, instead of building
    too (twice the CPU at 1M tools) and deleting the folder the first is writing."""
    path, _, _ = saved
    shutil.rmtree(lexical_file.folder(str(path)))
    inside, release = threading.Event(), threading.Event()
    builds: list[int] = []
    original = TantivyIndex.build

    def slow(self: TantivyIndex, *args: Any, **kwargs: Any) -> None:
        builds.append(1)
        if len(builds) == 1:
            inside.set()
            release.wait(30)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TantivyIndex, "build", slow)
    first, second = LexicalIndex(), LexicalIndex()
    with Catalog(path) as catalog:
        weights, revision = bm25.DEFAULT_WEIGHTS, catalog.revision
        first.build_soon(catalog._conn, revision, weights, str(path))
        assert inside.wait(30)
        second.build_soon(catalog._conn, revision, weights, str(path))
        time.sleep(1.0)  # long enough for the second to build and save, unlocked
        release.set()
        first.wait(60)
        second.wait(60)
    assert isinstance(first.index, TantivyIndex)
    assert isinstance(second.index, TantivyIndex)
    assert builds == [1]
    folder = lexical_file.folder(str(path))
    header = stamp_of(path)
    assert sorted(p.name for p in folder.iterdir() if p.name != saved_files.LOCK) == sorted(
        [lexical_file.STAMP, header["data"], header["tantivy"]]
    )


def test_a_save_that_fails_leaves_nothing_and_builds_once(
    saved: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (simulated: writing the stamp fails with ENOSPC) keeps the index just
    built in memory, leaves no half-written file, and the previous stamp stands."""
    path, queries, answers = saved
    folder = lexical_file.folder(str(path))
    before = sorted(p.name for p in folder.iterdir())
    old = stamp_of(path)
    write_stamp(path, {**old, "revision": old["revision"] - 1})  # stale: a build is due
    original_write = Path.write_text

    def full(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(lexical_file.STAMP + "."):
            raise OSError(28, "No space left on device")
        return original_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]
    after = sorted(p.name for p in folder.iterdir() if p.name != saved_files.LOCK)
    assert [n for n in after if n not in before] == []


@pytest.mark.parametrize(
    "name", ["a b?c#d%20e.db", "new\nline.db", "ünï ☃.db", "-dash.db"], ids=repr
)
def test_a_catalog_path_with_odd_characters_saves_and_loads_beside_it(
    saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The background build opens the catalog by URI: ``?``, ``#`` and ``%`` in its name
    are the file's, not a query string's."""
    path, queries, answers = saved
    odd = tmp_path / "odd dir?#" / name
    odd.parent.mkdir()
    shutil.copy(path, odd)
    first = served_soon(odd, queries)
    assert (lexical_file.folder(str(odd)) / lexical_file.STAMP).exists()
    builds = no_builds(monkeypatch)
    assert served_soon(odd, queries) == first == answers
    assert builds == []


def test_a_load_racing_saves_gets_a_whole_save_or_none(saved: Saved, tmp_path: Path) -> None:
    """Loading takes no lock: while another process saves again and again (each save
    replaces the stamp, then deletes the files the previous one named), a load returns one
    complete save or None, never a mix of two."""
    path, _, _ = saved
    root = lexical_file.folder(str(path))
    header = stamp_of(path)
    valid_for = {key: header[key] for key in ("format", "revision", "weights", "rows", "tokens")}
    valid_for["byteorder"] = header["byteorder"]
    first = lexical_file.load(str(path), valid_for)
    assert first is not None
    pristine = tmp_path / "pristine"
    shutil.copytree(first[0], pristine)
    state = first[1]
    done = threading.Event()
    failures: list[BaseException] = []

    def save_again_and_again() -> None:
        try:
            for _ in range(25):
                with saved_files.build_lock(root) as held:
                    assert held
                    directory = lexical_file.new_tantivy_folder(root)
                    for entry in pristine.iterdir():
                        shutil.copy(entry, directory / entry.name)
                    lexical_file.save(root, valid_for, directory, state)
        except BaseException as e:  # reported by the test below
            failures.append(e)
        finally:
            done.set()

    saver = threading.Thread(target=save_again_and_again)
    saver.start()
    loads = whole = 0
    while not done.is_set() or loads == 0:
        got = lexical_file.load(str(path), valid_for)
        loads += 1
        if got is not None:
            whole += 1
            assert got[1]["terms"] == state["terms"] and got[1]["tools"] == state["tools"]
            assert got[1]["rows"] == state["rows"] and got[1]["names"] == state["names"]
    saver.join(30)
    assert failures == []
    assert whole > 0


@pytest.fixture
def forward(saved: Saved) -> Saved:
    """``saved`` brought forward by a write: a new toolkit (rows tantivy does not hold) and
    one replaced (rows whose tantivy documents are passed over)."""
    path, queries, _ = saved
    kits, _ = bench_toolkits(1200)
    with Catalog(path) as catalog:
        catalog.register(Toolkit(name="extra", version="1", tools=kits[0].tools[:5]))
        edited = [t.model_copy(update={"description": t.description + " x"}) for t in kits[1].tools]
        catalog.register(kits[1].model_copy(update={"tools": edited}), replace=True)
    header = stamp_of(path)
    assert header["meta"]["delta"] == 5 + len(edited)
    answers, catalog = served(path, queries)
    catalog.close()
    return path, queries, answers


def _no_stale(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    return {"stale": b""}


def _cut_tantivy_df(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    return {"tantivy_df": blobs["tantivy_df"][:-4]}


def _term_past_the_terms(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    sizes = array("I")
    sizes.frombytes(blobs["sizes"])
    tools = bytearray(blobs["tools"])
    last = len(tools) - sizes[-1]  # a row tantivy does not hold: its first term id
    tools[last + 4 : last + 8] = (2**31).to_bytes(4, "little")
    return {"tools": bytes(tools)}


def _held_twice(blobs: dict[str, bytes], array: Any) -> dict[str, bytes]:
    rows = array("q")
    rows.frombytes(blobs["rows"])
    rows[-1] = rows[0]  # a row tantivy does not hold named as one it holds
    return {"rows": rows.tobytes()}


@pytest.mark.parametrize("change", [_no_stale, _cut_tantivy_df, _term_past_the_terms, _held_twice])
def test_a_brought_forward_save_of_another_shape_is_rebuilt(
    forward: Saved, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    """Stale documents not passed over (the replaced tools' old texts would rank), term
    counts of another length, a term id past the terms (an IndexError from every query that
    reaches that tool), a row held twice: rebuilt, never served."""
    path, queries, answers = forward
    _resealed(path, change)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]


@pytest.mark.parametrize(
    "revision", ["earlier", "earlier, its own mark", "later", "negative", "text"]
)
def test_a_stamp_naming_another_revision_is_brought_forward_or_rebuilt(
    forward: Saved, monkeypatch: pytest.MonkeyPatch, revision: str
) -> None:
    """A save that says it is older than it is, with that revision's mark in the change log
    (``reader.fts_history``), is brought forward again from there (reading rows again gives
    the same rows): the same answers. One that keeps its own revision's mark (another
    history of the catalog, as far as the log can tell), one from the future, or one that
    is not a revision at all, is rebuilt."""
    path, queries, answers = forward
    with Catalog(path) as catalog:
        catalog.learning = False  # a new revision, nothing saved for it yet below
        now = catalog.revision
        with catalog._snapshot() as conn:
            earlier_mark = reader.fts_history(conn, now - 3)
    header = stamp_of(path)
    header["revision"] = {"later": now + 5, "negative": -1, "text": "3"}.get(revision, now - 3)
    if revision == "earlier":
        header["history"] = earlier_mark
    write_stamp(path, header)
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == ([] if revision == "earlier" else [1])


def test_a_change_log_row_that_is_not_a_row_id_rebuilds(
    forward: Saved, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    path, queries, answers = forward
    conn = sqlite3.connect(path)
    with conn:  # a revision no write saved an index for, its log naming no row
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'revision'")
        conn.execute(
            "INSERT INTO fts_changes (revision, row) "
            "SELECT value, 'x' FROM meta WHERE key = 'revision'"
        )
    conn.close()
    builds = no_builds(monkeypatch)
    assert served_soon(path, queries) == answers
    assert builds == [1]
