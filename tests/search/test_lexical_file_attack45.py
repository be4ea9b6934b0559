"""A saved BM25 index's tantivy folder and rows are input (attack45): a folder of other
documents, or a row saved twice, is rebuilt or passed over, never a raise from a search nor
an answer unlike a fresh build's."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from array import array
from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog, Tool, Toolkit
from toolcat.search import bm25, lexical_file, native
from toolcat.search.lexical_index import LexicalIndex, TantivyIndex, save_current
from toolcat.store import reader

tantivy = pytest.importorskip("tantivy")

WORDS = [f"w{i}" for i in range(400)]


@pytest.fixture(autouse=True)
def tantivy_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """tantivy's first stage answers (the native one never reads tantivy's folder)."""
    monkeypatch.setattr(native, "ENABLED", False)


@pytest.fixture
def saved(catalog: Catalog) -> Catalog:
    rng = random.Random(45)
    tools = [
        Tool(name=f"tool_{i}", description=" ".join(rng.choices(WORDS, k=rng.randint(3, 12))))
        for i in range(300)
    ]
    catalog.register(Toolkit(name="kit", version="1", tools=tools))
    save_current(str(catalog.path), bm25.DEFAULT_WEIGHTS)
    return catalog


def _sections(path: str) -> tuple[Path, dict[str, Any], dict[str, bytes]]:
    root = lexical_file.folder(path)
    header = json.loads((root / "index.json").read_text())
    data, blobs, at = (root / header["data"]).read_bytes(), {}, 0
    for name, size in header["sections"]:
        blobs[name] = data[at : at + size]
        at += size
    return root, header, blobs


def _reseal(path: str, header: dict[str, Any], blobs: dict[str, bytes]) -> None:
    """Write the forged save as toolcat would have: sizes, digests and all."""
    root = lexical_file.folder(path)
    data = b"".join(blobs[name] for name in lexical_file.SECTIONS)
    (root / header["data"]).write_bytes(data)
    header["data_sha256"] = hashlib.sha256(data).hexdigest()
    header["sections"] = [[name, len(blobs[name])] for name in lexical_file.SECTIONS]
    folder = root / header["tantivy"]
    header["tantivy_files"] = {
        entry.name: [entry.stat().st_size, hashlib.sha256(entry.read_bytes()).hexdigest()]
        for entry in folder.iterdir()
        if entry.name not in (".tantivy-meta.lock", ".tantivy-writer.lock", ".managed.json")
    }
    (root / "index.json").write_text(json.dumps(header))


def _forge_tantivy(folder: Path, documents: list[tuple[int, str]]) -> None:
    """tantivy's folder replaced by one index of these (id, body) documents."""
    shutil.rmtree(folder)
    folder.mkdir()
    schema = tantivy.SchemaBuilder()
    schema.add_integer_field("id", stored=False, indexed=False, fast=True)
    schema.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
    index = tantivy.Index(schema.build(), path=str(folder))
    writer = index.writer(heap_size=50_000_000, num_threads=1)
    for doc_id, body in documents:
        writer.add_document(tantivy.Document(id=doc_id, body=body))
    writer.commit()
    writer.wait_merging_threads()


def _loaded(catalog: Catalog) -> TantivyIndex | None:
    lexical = LexicalIndex()
    with catalog._snapshot() as conn:
        ok = lexical.load_saved(conn, catalog.revision, bm25.DEFAULT_WEIGHTS, str(catalog.path))
    assert lexical.index is None or isinstance(lexical.index, TantivyIndex)
    return lexical.index if ok else None


def _fresh(catalog: Catalog) -> TantivyIndex:
    index = TantivyIndex()
    with catalog._snapshot() as conn:
        index.build(conn, catalog.revision, bm25.DEFAULT_WEIGHTS)
    return index


def _queries() -> list[list[str]]:
    rng = random.Random(7)
    return [rng.sample(WORDS, rng.randint(1, 4)) for _ in range(40)] + [WORDS[-3:]]


def test_a_tantivy_folder_of_more_documents_than_rows_is_rebuilt(saved: Catalog) -> None:
    """Documents past the saved rows that hold every term: ``rank`` read the row of a
    document past the positions (IndexError from every search)."""
    path = str(saved.path)
    body = " ".join(_fresh(saved).doc_freq)  # every term of the index
    root, header, blobs = _sections(path)
    _forge_tantivy(root / header["tantivy"], [(i, body if i >= 300 else "x") for i in range(600)])
    _reseal(path, header, blobs)
    assert _loaded(saved) is None


def test_a_tantivy_folder_of_other_ids_is_rebuilt(saved: Catalog) -> None:
    """No positions saved (documents found by their id): ids of no row held were a
    KeyError from every search."""
    path = str(saved.path)
    body = " ".join(_fresh(saved).doc_freq)
    root, header, blobs = _sections(path)
    _forge_tantivy(root / header["tantivy"], [(10**9 + i, body) for i in range(50)])
    blobs["positions"] = b""
    _reseal(path, header, blobs)
    assert _loaded(saved) is None


@pytest.mark.parametrize("mapped", [True, False])
def test_documents_past_the_rows_that_the_check_misses_are_passed_over(
    saved: Catalog, mapped: bool
) -> None:
    """A forged document past the rows holding only a term the restore's sample does not
    ask (the last one): passed over by ``rank``, never an IndexError (or, found by its id
    where no positions are saved, a KeyError); the answers are a fresh build's."""
    path = str(saved.path)
    fresh = _fresh(saved)
    late = list(fresh.doc_freq)[-1]
    root, header, blobs = _sections(path)
    positions = array("q")
    positions.frombytes(blobs["positions"])
    # tantivy's own documents, as the build made them (bodies of the rows), then a forged one
    with saved._snapshot() as conn:
        rows = {
            row[0]: " ".join(
                (text + " ") * times
                for text, times in zip([t or "" for t in row[1:]], [16, 8, 6, 2, 2], strict=True)
                if text
            )
            for row in conn.execute(
                "SELECT rowid, name, hint, description, params, tags FROM tools_fts"
            )
        }
    documents = [(row, rows[row]) for row in positions] + [(10**9, (late + " ") * 50)]
    _forge_tantivy(root / header["tantivy"], documents)
    if not mapped:
        blobs["positions"] = b""
    _reseal(path, header, blobs)
    index = _loaded(saved)
    if index is None:
        pytest.skip("the forged folder's bounds were refused as a whole")
    for terms in [[late], [late, list(fresh.doc_freq)[5]]]:
        for k in (1, 5, 50):
            assert index.rank(terms, k) == fresh.rank(terms, k)


def test_a_row_saved_twice_is_rebuilt(saved: Catalog) -> None:
    """Rows and positions that name one row twice (and so lose another): its two tantivy
    documents, and the tool it lost, answered unlike a fresh build."""
    path = str(saved.path)
    _, header, blobs = _sections(path)
    rows, positions = array("q"), array("q")
    rows.frombytes(blobs["rows"])
    positions.frombytes(blobs["positions"])
    rows[1], positions[1] = rows[0], positions[0]
    blobs["rows"], blobs["positions"] = rows.tobytes(), positions.tobytes()
    _reseal(path, header, blobs)
    assert _loaded(saved) is None
    with saved._snapshot() as conn:
        assert lexical_file.load(
            path, lexical_file.stamp(conn, reader.revision(conn), bm25.DEFAULT_WEIGHTS)
        )  # the files themselves check out: it is restore that refuses them
