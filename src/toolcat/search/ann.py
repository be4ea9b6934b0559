"""An approximate nearest-neighbour index of a large catalog's vectors, saved beside it.

Above ``ANN_FROM`` tool vectors the exact scan of ``VectorIndex`` stops being cheap (one
float32 product over every row per query: docs/benchmarks.md, "Hybrid at 1M"). There a
long-lived process builds an HNSW graph of the tool vectors (``LIBRARY``, the ``ann`` extra)
on a background thread, or loads the one saved beside the catalog, while the exact scan
answers; once ready, a query asks the graph for candidates and rescores them exactly with the
matrix, so a tool it finds has the same score as in the exact scan.

Like the saved BM25 index (``lexical_file``), the folder ``<catalog>.ann`` is a derived cache:
``index.json`` (the stamp) names the graph file and what it is valid for: the catalog
revision, the model, the number of rows and a fingerprint of their ids and vectors, the
library and its version, and the graph file's size and SHA-256, checked before the library
reads a byte of it. Files are written under new names and the stamp replaced last, so a
``kill -9`` mid-save leaves the previous stamp pointing at complete files, or none; a stale,
torn, truncated or foreign file is rebuilt, never served.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

LIBRARY = "faiss"  # the module; its package on PyPI:
PACKAGE = "faiss-cpu"
FORMAT = 1
STAMP = "index.json"
# From this many tool vectors on, a long-lived process serves the embedding side from the
# graph once it is ready: the exact scan costs 4.4 ms of CPU per query at 50k and 7.4 ms at
# 100k, the graph ~1 ms; at 50k the graph kept recall@10 0.984 already at efSearch 256
# (scripts/research/ann_candidates.py; docs/benchmarks.md, "Hybrid at 1M").
ANN_FROM = 50_000
# ... and up to this many: the largest size at which the graph below was measured to keep
# recall@10 >= 0.98 against the exact scan (the condition for serving from it at all:
# 0.992 at 100k). At 1M rows it found 0.900 at efSearch 1024 (docs/benchmarks.md, "Hybrid at
# 1M"), so larger catalogs keep the exact scan until a denser graph is measured there; raise
# this with that measurement.
ANN_UP_TO = 100_000
# The graph's degree and its search widths at build and at query time (efSearch): with the
# candidates rescored exactly, recall@10 against the exact scan at 100k realistic vectors was
# 0.974 at 256, 0.987 at 512 and 0.992 at 1024 (docs/benchmarks.md, "Hybrid at 1M").
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 1024
# Candidates asked of the graph per result wanted (rescored exactly), and at least this many.
OVERSAMPLE = 2
MIN_CANDIDATES = 100
# A filter letting through at most this share of the rows is answered by an exact scan of
# those rows; a wider one asks the graph deeper (wanted / share) and drops the others.
NARROW_SHARE = 0.02
# Threads a background build uses (a serving process's queries share the machine).
BUILD_THREADS = 2
HASH_CHUNK = 1 << 22


def installed() -> bool:
    """Whether the ANN library can be imported here (found, not imported)."""
    return importlib.util.find_spec(LIBRARY) is not None


def folder(catalog_path: str) -> Path:
    return Path(catalog_path + ".ann")


def _library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def valid_for(revision: int, model_id: str, ids: np.ndarray, matrix: np.ndarray) -> dict[str, Any]:
    """What a graph of ``matrix`` (one row per tool id in ``ids``) is valid for: a saved
    graph is taken up only when all of it matches. The fingerprint covers every id and every
    vector (a few seconds at 1M rows, on the background thread), so another catalog at the
    same revision, or the same rows in another order, does not match."""
    import numpy as np

    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(ids, dtype="<i8").data)
    for at in range(0, len(matrix), 65536):
        digest.update(np.ascontiguousarray(matrix[at : at + 65536], dtype="<f4").data)
    return {
        "format": FORMAT,
        "revision": revision,
        "model": model_id,
        "rows": len(ids),
        "dimensions": int(matrix.shape[1]) if matrix.ndim == 2 else 0,
        "fingerprint": digest.hexdigest(),
        "library": f"{LIBRARY} {_library_version()}",
        "graph": [CONNECTIVITY, EXPANSION_ADD],
    }


class Graph:
    """An HNSW graph over matrix rows 0..n-1 (faiss numbers the rows it is given)."""

    def __init__(self, index: Any) -> None:
        self._index = index

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def candidates(self, vector: np.ndarray, count: int) -> np.ndarray:
        """Up to ``count`` row numbers near ``vector`` (rescored by the caller)."""
        import faiss
        import numpy as np

        count = min(count, len(self))
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        params.efSearch = max(EXPANSION_SEARCH, count)  # per query: callers may overlap
        _, rows = self._index.search(
            np.asarray(vector, dtype=np.float32).reshape(1, -1), count, params=params
        )
        found: np.ndarray = rows[0]
        return found[found >= 0].astype(np.int64)


def build(matrix: np.ndarray, threads: int = BUILD_THREADS) -> Graph:
    """A graph of ``matrix``'s rows, its vectors stored as 8-bit codes (a quarter of float32's
    memory; ranges trained per dimension; the candidates are rescored with the float32
    matrix). Minutes at 1M rows on 2 cores."""
    import faiss
    import numpy as np

    vectors = np.ascontiguousarray(matrix, dtype=np.float32)
    faiss.omp_set_num_threads(threads)
    try:
        index = faiss.IndexHNSWSQ(
            int(vectors.shape[1]),
            faiss.ScalarQuantizer.QT_8bit,  # type: ignore[arg-type]
            CONNECTIVITY,
            faiss.METRIC_INNER_PRODUCT,
        )
        index.hnsw.efConstruction = EXPANSION_ADD
        index.train(vectors)
        index.add(vectors)
    finally:
        faiss.omp_set_num_threads(1)  # a query is one thread's work
    return Graph(index)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def save(catalog_path: str, valid: dict[str, Any], graph: Graph) -> None:
    """Write the graph under a new name, then the stamp; drop what older stamps named."""
    root = folder(catalog_path)
    root.mkdir(exist_ok=True)
    name = f"graph-{uuid.uuid4().hex}.faiss"
    import faiss

    faiss.write_index(graph._index, str(root / name))
    with open(root / name, "rb+") as f:
        os.fsync(f.fileno())
    header = {
        **valid,
        "file": name,
        "size": (root / name).stat().st_size,
        "sha256": _file_digest(root / name),
    }
    staging = root / f"{STAMP}.{uuid.uuid4().hex}"
    staging.write_text(json.dumps(header))
    os.replace(staging, root / STAMP)
    for entry in root.iterdir():  # what no stamp names any more
        if entry.name not in (STAMP, name) and not entry.name.startswith(f"{STAMP}."):
            entry.unlink(missing_ok=True)


def load(catalog_path: str, valid: dict[str, Any]) -> Graph | None:
    """The saved graph when its stamp matches ``valid`` and its file its size and digest,
    else None (missing, stale, torn or foreign: rebuilt, never served)."""
    root = folder(catalog_path)
    try:
        header = json.loads((root / STAMP).read_text())
        if not isinstance(header, dict) or any(header.get(k) != v for k, v in valid.items()):
            return None
        path = root / str(header["file"])
        if path.parent != root or path.stat().st_size != header["size"]:
            return None
        if _file_digest(path) != header["sha256"]:
            return None
        import faiss

        index = faiss.read_index(str(path))
        if index.ntotal != valid["rows"] or index.d != valid["dimensions"]:
            return None
        return Graph(index)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
