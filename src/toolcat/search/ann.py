"""Large catalogs' vectors: a compact store and an approximate index, saved beside the catalog.

From ``ANN_FROM`` tool vectors on, and when the library is installed (``LIBRARY``, the ``ann``
extra), a long-lived process keeps the vectors as float16 rows (``Store``: half float32's
memory, a faiss flat index whose codes numpy reads in place, so there is one copy) and serves
the embedding side from a *shortlist* index: product-quantised codes of 4 bits per pair of
dimensions (faiss's ``PQ192x4fs``, 96 bytes a tool) scanned in full with SIMD lookups, whose
best ``MIN_CANDIDATES`` rows are rescored exactly from the store, so a tool it finds has the
exact scan's score. Chosen by measurement at 1M tools over HNSW and IVF, which lose the top 10
of queries that sit far from every tool (docs/benchmarks.md, "Compact vectors and the ANN at
1M"). Until the shortlist is ready (built in seconds on a background thread, or loaded), the
store's exact scan answers.

Like the saved BM25 index (``lexical_file``), the folder ``<catalog>.ann`` is a derived cache,
trusted as ``saved_files`` says (a real folder of the catalog's owner; regular files, never
followed through a symlink; one build and save at a time, under its ``lock``): ``index.json``
(the stamp) names the index file (``shortlist-<hex>.faiss``, nothing else) and what it is
valid for: the catalog revision, the model, the number of rows and a fingerprint of their ids
and vectors, the library and its version, the index kind, and the file's size and SHA-256,
checked on the bytes read before the library parses them. Files are written under new names
and the stamp replaced last, so a ``kill -9`` mid-save leaves the previous stamp pointing at
complete files, or none; a save that fails removes what it wrote; a stale, torn, truncated or
foreign file is rebuilt, never served.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import checks as saved_files

if TYPE_CHECKING:
    import numpy as np

LIBRARY = "faiss"  # the module; its package on PyPI:
PACKAGE = "faiss-cpu"
FORMAT = 2  # 1 was an HNSW graph over 8-bit codes
STAMP = saved_files.STAMP
# From this many tool vectors on, a long-lived process keeps them in the compact store and
# serves from the shortlist once it is ready: the exact float32 scan costs 4.4 ms of CPU per
# query at 50k and 7.4 ms at 100k (84 ms at 1M), the shortlist 0.5 ms at 100k and 4.5 ms at
# 1M with recall@10 >= 0.997 against the exact float32 scan (docs/benchmarks.md).
ANN_FROM = 50_000
# The shortlist index (a faiss factory string): 192 sub-quantisers of 4 bits over 384
# dimensions, scanned in full. Recall@10 at 1M realistic vectors with 100 / 300 candidates
# rescored: 0.997 / 0.999 (half as many sub-quantisers: 0.924 / 0.980).
SHORTLIST = "PQ192x4fs"
# Rows the shortlist's codebooks are trained on (a seeded sample of the catalog's).
TRAIN_ROWS = 65_536
# Candidates asked of the shortlist per result wanted (rescored exactly), and at least this many.
OVERSAMPLE = 2
MIN_CANDIDATES = 300
# A filter letting through at most this share of the rows is answered by an exact scan of
# those rows; a wider one asks the shortlist deeper (wanted / share) and drops the others.
NARROW_SHARE = 0.02
# A shortlist is carried to the next revision's matrix (``Shortlist.carried``) while it
# answers for at most this many rows outside its index (gone, or added and scanned exactly
# at every query); past that, one is built again. Building takes 16 s at 100k rows and 34 s
# at 1M on 2 cores, during which the exact scan answers (7 and 84 ms a query).
CARRIED_MAX = 2000
# Threads a background build uses (a serving process's queries share the machine).
BUILD_THREADS = 2
_FILE = re.compile(r"shortlist-[0-9a-f]{32}\.faiss")


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


class Store:
    """``rows`` x ``width`` float16 vectors in a faiss flat index (``index``), read and
    written in place through ``matrix``, a numpy view of the index's codes that keeps the
    index alive. Filled a chunk at a time (``matrix[a:b] = chunk``), so a load never holds
    the float32 matrix whole."""

    def __init__(self, rows: int, width: int) -> None:
        import faiss
        import numpy as np

        index = faiss.IndexScalarQuantizer(
            width,
            faiss.ScalarQuantizer.QT_fp16,
            faiss.METRIC_INNER_PRODUCT,
        )
        size = rows * int(index.code_size)
        index.codes.resize(size)
        index.ntotal = rows
        # faiss's fp16 codes are IEEE half floats, row after row: numpy's float16.
        memory = (ctypes.c_uint8 * size).from_address(int(index.codes.data()))
        memory.index = index  # type: ignore[attr-defined]  # the view's base keeps it alive
        self.index = index
        matrix = np.frombuffer(memoryview(memory), dtype=np.float16)
        self.matrix: np.ndarray = matrix.reshape(rows, width)

    def nearest(self, vector: np.ndarray, count: int, up_to: int) -> np.ndarray:
        """The ``count`` rows under ``up_to`` with the largest dot product with ``vector``
        (an exact scan on the calling thread; the caller rescores them)."""
        import faiss
        import numpy as np

        count = min(count, up_to)
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        faiss.omp_set_num_threads(1)  # this thread's: a query is one thread's work
        params = faiss.SearchParameters()
        params.sel = faiss.IDSelectorRange(0, up_to)
        _, rows = self.index.search(
            np.asarray(vector, dtype=np.float32).reshape(1, -1), count, params=params
        )
        found: np.ndarray = rows[0]
        return found[found >= 0].astype(np.int64)


def valid_for(revision: int, model_id: str, ids: np.ndarray, matrix: np.ndarray) -> dict[str, Any]:
    """What a shortlist of ``matrix`` (one row per tool id in ``ids``) is valid for: a saved
    one is taken up only when all of it matches. The fingerprint covers every id and every
    vector (a few seconds at 1M rows, on the background thread), so another catalog at the
    same revision, or the same rows in another order, does not match."""
    import numpy as np

    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(ids, dtype="<i8").data)
    for at in range(0, len(matrix), 65536):  # the rows as stored (float16 in ``Store``)
        digest.update(np.ascontiguousarray(matrix[at : at + 65536]).data)
    return {
        "format": FORMAT,
        "vectors": str(matrix.dtype),
        "revision": revision,
        "model": model_id,
        "rows": len(ids),
        "dimensions": int(matrix.shape[1]) if matrix.ndim == 2 else 0,
        "fingerprint": digest.hexdigest(),
        "library": f"{LIBRARY} {_library_version()}",
        "index": SHORTLIST,
    }


class Shortlist:
    """An approximate index over matrix rows 0..n-1 (faiss numbers the rows it is given), or
    one carried to a later matrix (``carried``): its rows mapped to where they moved, and the
    rows added since, which it does not hold, always among the candidates."""

    def __init__(
        self, index: Any, moved: np.ndarray | None = None, added: np.ndarray | None = None
    ) -> None:
        self._index = index
        self._moved = moved  # the matrix row of each row it holds (-1: gone); None: the same
        self._added = added  # matrix rows it does not hold
        self._gone = 0 if moved is None else int((moved < 0).sum())

    def __len__(self) -> int:
        return int(self._index.ntotal)

    @property
    def off_index(self) -> int:
        """Rows it answers for outside its index: gone from the matrix, or added since."""
        return self._gone + (0 if self._added is None else len(self._added))

    def carried(self, moved: np.ndarray, added: np.ndarray) -> Shortlist:
        """This shortlist for the matrix whose row ``moved[r]`` is this one's row ``r`` (-1:
        gone), with rows ``added`` new."""
        import numpy as np

        def follow(rows: np.ndarray) -> np.ndarray:
            return np.where(rows >= 0, moved[np.maximum(rows, 0)], -1)

        held = moved if self._moved is None else follow(self._moved)
        before = np.zeros(0, dtype=np.int64) if self._added is None else follow(self._added)
        return Shortlist(self._index, held, np.concatenate([before[before >= 0], added]))

    def candidates(self, vector: np.ndarray, count: int) -> np.ndarray:
        """Up to ``count`` row numbers near ``vector`` (rescored by the caller), and every
        row added since it was built."""
        import faiss
        import numpy as np

        count = min(count + self._gone, len(self))
        faiss.omp_set_num_threads(1)  # this thread's: a query is one thread's work
        _, rows = self._index.search(np.asarray(vector, dtype=np.float32).reshape(1, -1), count)
        found: np.ndarray = rows[0]
        found = found[found >= 0].astype(np.int64)
        if self._moved is not None:
            found = self._moved[found]
            found = found[found >= 0]
        if self._added is not None and len(self._added):
            found = np.concatenate([found, self._added])
        return found


def build(matrix: np.ndarray, threads: int = BUILD_THREADS) -> Shortlist:
    """A shortlist of ``matrix``'s rows (float32 or float16), its codebooks trained on a
    seeded sample of ``TRAIN_ROWS`` rows, the rows encoded a chunk at a time (seconds at 1M
    rows on 2 cores)."""
    import faiss
    import numpy as np

    faiss.omp_set_num_threads(threads)
    try:
        index = faiss.index_factory(int(matrix.shape[1]), SHORTLIST, faiss.METRIC_INNER_PRODUCT)
        picked = np.random.default_rng(0).choice(
            len(matrix), size=min(len(matrix), TRAIN_ROWS), replace=False
        )
        index.train(np.ascontiguousarray(matrix[np.sort(picked)], dtype=np.float32))
        for at in range(0, len(matrix), 65536):
            index.add(np.ascontiguousarray(matrix[at : at + 65536], dtype=np.float32))
    finally:
        faiss.omp_set_num_threads(1)  # a query is one thread's work
    return Shortlist(index)


@contextlib.contextmanager
def saving(catalog_path: str) -> Iterator[Path | None]:
    """The folder to save a shortlist in, held under its build lock (another process that
    wants one waits, then loads it); None when the folder is not to be trusted or the lock
    cannot be had: build in memory, save nothing."""
    root = saved_files.trusted_folder(folder(catalog_path), catalog_path, create=True)
    if root is None:
        yield None
        return
    with saved_files.build_lock(root) as held:
        yield root if held else None


def save(root: Path, valid: dict[str, Any], shortlist: Shortlist) -> None:
    """Write the index under a new name, then the stamp; drop what older stamps named (only
    names of ours). Call inside ``saving``. A failure (a full disk) removes what this call
    wrote and raises ``OSError``; the previous stamp stands."""
    import faiss

    name = f"shortlist-{uuid.uuid4().hex}.faiss"
    data: np.ndarray = faiss.serialize_index(shortlist._index)
    with saved_files.removed_on_failure(root / name):
        with open(root / name, "xb") as f:
            f.write(data.data)
            f.flush()
            os.fsync(f.fileno())
        header = {
            **valid,
            "file": name,
            "size": int(data.nbytes),
            "sha256": hashlib.sha256(data.data).hexdigest(),
        }
        saved_files.replace_stamp(root, header)
    for entry in root.iterdir():  # what no stamp names any more
        ours = _FILE.fullmatch(entry.name) or saved_files.STAGING.fullmatch(entry.name)
        if ours and entry.name != name:
            entry.unlink(missing_ok=True)


def _stamp(catalog_path: str) -> tuple[Path, dict[str, Any]] | None:
    """The trusted folder beside the catalog and its stamp; None when there is none to
    trust."""
    root = saved_files.trusted_folder(folder(catalog_path), catalog_path)
    header = saved_files.read_stamp(root) if root is not None else None
    return (root, header) if root is not None and header is not None else None


def saved_for(catalog_path: str, revision: int, model_id: str, rows: int) -> bool:
    """Whether the stamp beside the catalog names this index kind and format, revision,
    model and number of rows: a look at one small file, for reindex to skip saving again
    (the process that loads the index checks everything else first)."""
    found = _stamp(catalog_path)
    wanted = {
        "format": FORMAT,
        "index": SHORTLIST,
        "revision": revision,
        "model": model_id,
        "rows": rows,
    }
    return found is not None and all(found[1].get(k) == v for k, v in wanted.items())


def load(catalog_path: str, valid: dict[str, Any]) -> Shortlist | None:
    """The saved shortlist when its stamp matches ``valid`` and its file its size and digest,
    else None (missing, stale, torn, foreign or hostile: rebuilt, never served)."""
    found = _stamp(catalog_path)
    if found is None or any(found[1].get(k) != v for k, v in valid.items()):
        return None
    root, header = found
    try:
        name, size = header["file"], header["size"]
        if type(name) is not str or not _FILE.fullmatch(name) or type(size) is not int:
            return None
        data = saved_files.read_regular(root / name, size=size)
        if hashlib.sha256(data).hexdigest() != header["sha256"]:
            return None
        import faiss
        import numpy as np

        index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        if index.ntotal != valid["rows"] or index.d != valid["dimensions"]:
            return None
        return Shortlist(index)
    except Exception:  # missing, torn, foreign or hostile: rebuilt, never served
        return None
