"""The in-memory BM25 index saved beside the catalog, so that a process opening a large
catalog loads it instead of rebuilding it (a build is ~6 s of CPU at 100k tools, ten times
that at 1M, while FTS5 answers at 10-30 ms a query).

A derived cache like the index itself: the folder ``<catalog>.bm25`` holds ``index.json``
(the stamp: format, catalog revision, column weights, FTS5's row and token totals at that
revision, the names of the two files below), a tantivy index folder and a binary file of the
packed tools, terms and names. It is used only when its stamp matches what the loading read
transaction sees: a change from any process moves the revision, and a file restored from
elsewhere would have to match FTS5's totals too. Files are written under new names and the
stamp is replaced last (``os.replace``), so a ``kill -9`` mid-save leaves the previous stamp
pointing at complete files, or none; anything unreadable or inconsistent is ignored (the
index is rebuilt) and never served. Parsing is JSON and ``array`` only: no pickle, nothing a
file could make run; whoever can write beside the catalog can write the catalog anyway.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import uuid
from array import array
from pathlib import Path
from typing import Any

from .bm25 import index_totals

FORMAT = 1
STAMP = "index.json"


def folder(catalog_path: str) -> Path:
    return Path(catalog_path + ".bm25")


def stamp(conn: sqlite3.Connection, revision: int, weights: tuple[float, ...]) -> dict[str, Any]:
    """What an index built in ``conn``'s read transaction at ``revision`` is valid for."""
    rows, tokens = index_totals(conn)
    return {
        "format": FORMAT,
        "revision": revision,
        "weights": list(weights),
        "rows": rows,
        "tokens": tokens,
        "byteorder": sys.byteorder,
    }


def new_tantivy_folder(catalog_path: str) -> Path:
    """A fresh folder for a tantivy index about to be built and saved."""
    path = folder(catalog_path) / f"tantivy-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


def save(
    catalog_path: str, valid_for: dict[str, Any], tantivy_dir: Path, state: dict[str, Any]
) -> None:
    """Write the index's Python side, then the stamp; drop what older stamps named."""
    root = folder(catalog_path)
    data_name = f"data-{uuid.uuid4().hex}.bin"
    sections: list[tuple[str, bytes]] = [
        ("terms", json.dumps(state["terms"]).encode()),
        ("doc_freq", array("I", state["doc_freq"]).tobytes()),
        ("names", json.dumps(state["names"]).encode()),
        ("rows", array("q", state["rows"]).tobytes()),
        ("sizes", array("I", state["sizes"]).tobytes()),
        ("tools", state["tools"]),
        ("positions", array("q", state["positions"]).tobytes()),
    ]
    with open(root / data_name, "wb") as f:
        for _, blob in sections:
            f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    header = {
        **valid_for,
        "tantivy": tantivy_dir.name,
        "data": data_name,
        "sections": [[name, len(blob)] for name, blob in sections],
        "meta": state["meta"],
    }
    staging = root / f"{STAMP}.{uuid.uuid4().hex}"
    staging.write_text(json.dumps(header))
    os.replace(staging, root / STAMP)
    for entry in root.iterdir():  # what no stamp names any more
        if entry.name not in (STAMP, data_name, tantivy_dir.name) and not entry.name.startswith(
            f"{STAMP}."
        ):
            if entry.is_dir():
                import shutil  # not on the one-shot search path

                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def load(catalog_path: str, valid_for: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """(tantivy folder, saved state) when a saved index matches ``valid_for``, else None."""
    root = folder(catalog_path)
    try:
        header = json.loads((root / STAMP).read_text())
        if any(header.get(key) != value for key, value in valid_for.items()):
            return None
        tantivy_dir = root / str(header["tantivy"])
        data = (root / str(header["data"])).read_bytes()
        if not tantivy_dir.is_dir() or len(data) != sum(n for _, n in header["sections"]):
            return None
        blobs: dict[str, bytes] = {}
        at = 0
        for name, size in header["sections"]:
            blobs[str(name)] = data[at : at + int(size)]
            at += int(size)
        doc_freq, rows, sizes, positions = array("I"), array("q"), array("I"), array("q")
        doc_freq.frombytes(blobs["doc_freq"])
        rows.frombytes(blobs["rows"])
        sizes.frombytes(blobs["sizes"])
        positions.frombytes(blobs["positions"])
        return tantivy_dir, {
            "terms": json.loads(blobs["terms"]),
            "doc_freq": doc_freq,
            "names": json.loads(blobs["names"]),
            "rows": rows,
            "sizes": sizes,
            "tools": blobs["tools"],
            "positions": positions,
            "meta": header["meta"],
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None  # missing, torn or foreign: rebuilt, never served
