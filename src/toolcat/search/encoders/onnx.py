"""A torch-free encoder: the catalog's embedding model as an ONNX graph.

The packaged retriever is such a graph already (``src/toolcat/retriever/``, described by
``retriever.json``). For any other model, the first ``toolcat reindex`` loads the
sentence-transformers model and exports it (the transformer, pooling and normalisation as
one ONNX graph, and the tokenizer as ``tokenizer.json``) into the user cache,
``$XDG_CACHE_HOME/toolcat/onnx``, in a folder keyed by the model id and the content of the
model's files (``fingerprint``: one export per model, whatever venv holds it). A fresh
process then encodes a query with ``onnxruntime`` and ``tokenizers`` in milliseconds instead
of importing torch for seconds, and later reindexes encode documents with it too (3.5x the
tools/s of sentence-transformers on the benchmark texts, README "Embedding and hybrid
speed"). A folder appears whole or not at all (written aside, then renamed), so a process
killed mid-export leaves nothing that could be served.

Nothing in the cache is trusted blindly: the sha256 of every file written is recorded
(``meta.json``, ``sha256.json`` beside a saved graph; ``retriever.json`` for the packaged
model) and checked before a session is made from it (``Export.check``; a digest is computed
again only when the file's size, inode or times changed, ``file_digest``). A saved graph that
does not match is skipped; an export that does not match raises ``ExportMismatch`` (reindex
makes it again, a query falls back).

Beside the exported graph, reindex saves the graph as onnxruntime optimises it (fusions that
hold on any CPU, ``ORT_ENABLE_EXTENDED``) with its weights in a separate file, in a folder
named for the onnxruntime version (``fast-ort<version>``). A process then creates its session
from that graph with optimisation off and the weights memory-mapped: 70 ms instead of 180 ms
(parsing 90 MB of protobuf and re-running the optimiser), and 10 ms for a one-shot process
that also skips prepacking the weights (README "Speed: one-shot search").

Queries can run a third graph (``TOOLCAT_ONNX_INT8=1``; off by default, see
``embeddings.INT8_QUERIES``), saved by reindex while it is on (``int8-b32-ort<version>``):
every weight MatMul as ``MatMulNBits``, weights in 8-bit blocks of 32 along the input
dimension, one scale per block, multiplied in int8 with the activations quantised per block
at run time. Its query vectors agree with the fp32 graph's at cosine ≥ 0.9993 (300 benchmark
queries) and it runs in 0.64-0.78x the time; ``toolcat eval`` R@1 and R@5 stay within 0.5
points on every source (README "Embedding and hybrid speed", where the per-tensor and
per-channel int8 variants that lost too much are measured too). Documents (reindex) stay
fp32.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .export import (
    BATCH_TOKENS,
    DIGEST_STAMPS,
    FAST_GRAPH,
    FAST_WEIGHTS,
    FORMAT,
    GPU_BATCH_TOKENS,
    INT8_BLOCK,
    OUTPUT,
    PAD_RATIO,
    SAVED_DIGESTS,
    Export,
    ExportMismatch,
    as_export,
    cache_root,
    check_digests,
    checked_export,
    export_dir,
    fast_dir,
    fingerprint,
    forget_digests,
    int8_dir,
    int8_queries,
    ort_version,
    read_export,
    record_digests,
)

if TYPE_CHECKING:
    import numpy as np

EMBEDDINGS_EXTRA = (
    "install the embeddings extra: pip install 'toolcat[embeddings]', or from a clone of "
    "toolcat pip install '.[embeddings]'"
)
"""What to do when onnxruntime and tokenizers are missing: every message that says so ends
with it."""

PACKAGED_DAMAGED = (
    "the installed toolcat is damaged: install it again with pip install --force-reinstall "
    "'toolcat[embeddings]', or from a clone '.[embeddings]'"
)
"""What to do when the packaged retriever's files are not the ones shipped."""


def onnx_installed() -> bool:
    """Whether onnxruntime and tokenizers can be imported (looked up, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))


def export(model: Any, model_id: str, location: str) -> Path:
    """Export a loaded ``SentenceTransformer`` for ``model_id``; returns its folder.

    Does nothing when a current export exists. Needs torch's ONNX exporter (``onnx``).
    """
    target = export_dir(model_id, location)
    if (target / "meta.json").exists():
        return target
    import shutil
    import tempfile
    import warnings

    import torch

    # sentence-transformers 6 renamed tokenize to preprocess
    prepare = getattr(model, "preprocess", None) or model.tokenize
    features = prepare(["an example query to trace the graph"])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]

    class Graph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return self.model(dict(zip(names, inputs, strict=True)))[OUTPUT]

    axes: dict[str, dict[int, str]] = {n: {0: "batch", 1: "tokens"} for n in names}
    axes[OUTPUT] = {0: "batch"}
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes it fixed
            torch.onnx.export(
                Graph().eval(),
                tuple(features[n] for n in names),
                str(staging / "model.onnx"),
                input_names=names,
                output_names=[OUTPUT],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        model.tokenizer.backend_tokenizer.save(str(staging / "tokenizer.json"))
        meta = {
            "format": FORMAT,
            "model": model_id,
            "fingerprint": fingerprint(location),
            "inputs": names,
            "max_tokens": int(model.max_seq_length),
            "sha256": record_digests(staging, ["model.onnx", "tokenizer.json"]),
        }
        (staging / "meta.json").write_text(json.dumps(meta))
        try:
            staging.rename(target)
        except OSError:  # another process exported it first
            if not (target / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    optimise(read_export(target))
    return target


def _save_optimised(source: Path, staging: Path) -> None:
    """Save ``source`` as onnxruntime optimises it (``ORT_ENABLE_EXTENDED``) into
    ``staging``, its weights in their own file (memory-mapped on load)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(staging / FAST_GRAPH)
    options.log_severity_level = 3
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", FAST_WEIGHTS
    )
    options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    digests = record_digests(staging, [FAST_GRAPH, FAST_WEIGHTS])
    (staging / SAVED_DIGESTS).write_text(json.dumps(digests))


def _publish(staging: Path, target: Path) -> None:
    """Rename a finished folder into place; another process may have made it first."""
    try:
        staging.rename(target)
    except OSError:
        if not (target / FAST_GRAPH).exists():
            raise


def optimise(source: Export | Path) -> Path:
    """Save the export's graph as this onnxruntime optimises it, weights in their own file
    (memory-mapped on load), unless done; returns its folder. Written aside, then renamed.

    ``ORT_ENABLE_EXTENDED`` is the highest level whose result is not tied to this machine's
    CPU (``ALL`` may add layout changes for its instruction set); loading it with optimisation
    off runs as fast as optimising the plain graph at load time (3.0-3.4 ms per query both).
    """
    import shutil
    import tempfile

    import onnxruntime

    export = as_export(source)
    export.check()
    target = fast_dir(export.saved, onnxruntime.__version__)
    if (target / FAST_GRAPH).exists():
        return target
    export.saved.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".fast-", dir=export.saved))
    try:
        _save_optimised(export.folder / "model.onnx", staging)
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def quantise(source: Export | Path) -> Path:
    """Save the int8 query graph (see the module's notes) unless done; returns its folder.
    Written aside, then renamed, like the optimised graph."""
    import shutil
    import tempfile

    import onnx
    import onnxruntime

    export = as_export(source)
    export.check()
    target = int8_dir(export.saved, onnxruntime.__version__)
    if (target / FAST_GRAPH).exists():
        return target
    model = int8_model(export.folder / "model.onnx", INT8_BLOCK)
    export.saved.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".int8-", dir=export.saved))
    try:
        source = staging / "quantised.onnx"
        onnx.save(model, str(source))
        _save_optimised(source, staging)
        source.unlink()
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def int8_model(path: Path, block: int) -> Any:
    """The graph at ``path`` with each MatMul on a 2-D weight as ``MatMulNBits`` (bits 8,
    ``block`` rows per block, symmetric, ``accuracy_level`` 4: int8 products); the rest is
    unchanged. Weights are quantised by onnxruntime's own routine (what
    ``onnxruntime.quantization``'s ``MatMulNBitsQuantizer`` calls, without that module's
    extra dependencies)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    from onnxruntime.capi._pybind_state import quantize_matmul_8bits

    model = onnx.load(str(path))
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    replaced: set[str] = set()
    nodes = []
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2 or weight.dims[0] % block:
            nodes.append(node)
            continue
        matrix = np.ascontiguousarray(numpy_helper.to_array(weight), dtype=np.float32)
        rows, cols = matrix.shape
        packed = np.zeros((cols, rows // block, block), dtype=np.uint8)
        scales = np.zeros((cols, rows // block), dtype=np.float32)
        zero_points = np.zeros((cols, rows // block), dtype=np.uint8)  # unused: symmetric
        quantize_matmul_8bits(packed, matrix, scales, zero_points, block, cols, rows, True)
        stem = f"{weight.name}_int8"
        graph.initializer.extend(
            [
                numpy_helper.from_array(packed, stem),
                numpy_helper.from_array(scales, f"{stem}_scales"),
            ]
        )
        replaced.add(weight.name)
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], stem, f"{stem}_scales"],
                list(node.output),
                name=f"{node.name}_int8",
                domain="com.microsoft",
                K=rows,
                N=cols,
                bits=8,
                block_size=block,
                accuracy_level=4,
            )
        )
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in replaced]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


class OnnxEncoder:
    """Encodes texts with an exported model: tokenizers, then onnxruntime runs.

    The export's graph and tokenizer, and each saved graph, are checked against their
    recorded sha256 before use: a saved graph that does not match is skipped, an export
    that does not match raises ``ExportMismatch``.

    Args:
        source: The export (or its folder).
        threads: onnxruntime's intra-op threads: ``query_threads()`` for queries, 0 for
            onnxruntime's default (every physical core) for reindex batches.
        spinning: Whether idle pool threads spin waiting for work (onnxruntime's default).
            Off for queries: a spinning pool burns the cores that the rest of the search
            and other callers need (README "Embedding and hybrid speed").
        concurrent: Let several threads run the session at once (onnxruntime's ``run`` is
            thread-safe): a server's concurrent queries then use every core instead of
            queueing (2 callers: 86-89 against 52-58 queries/s on 2 cores). Batches, on a
            pool of every core, run one at a time.
        prepack: Let onnxruntime repack the weights of an fp32 graph for its matrix kernels
            when the session starts. Packing costs ~55 ms at start and halves each run (3.5
            against 7.7 ms per query): a one-shot process that encodes one query is faster
            without it. An int8 graph (the int8 query graph, or a packaged model that is
            int8 itself) is always prepacked (``prepacked`` says whether this session is):
            unpacked, its weight blocks are expanded at every run (the packaged retriever's
            session and first query took 58 ms of CPU unpacked against 50 prepacked, the
            query alone 25 against 3; docs/benchmarks.md "Cold one-shot search").
        int8: Run the int8 query graph when it is there and loads (``graph`` says which
            graph runs: "int8", "optimised" or "exported").
    """

    def __init__(
        self,
        source: Export | Path,
        threads: int = 1,
        prepack: bool = True,
        int8: bool = False,
        spinning: bool = True,
        concurrent: bool = False,
        cuda: bool = False,
    ) -> None:
        self.export, self.tokenizer = checked_export(source)
        export = self.export
        self._threads, self._spinning = threads, spinning
        self.graph = "exported"
        # On a GPU (onnxruntime's CUDA provider): the graph as shipped or exported (the saved
        # ones are optimised for the CPU), passes of many more tokens, and reindex hands it
        # many more texts per call (``device.GPU_TEXTS_PER_CALL``).
        self.device = "cuda" if cuda else "cpu"
        self.engine = "onnxruntime"
        self.batch_tokens = GPU_BATCH_TOKENS if cuda else BATCH_TOKENS
        self.prepacked = prepack
        self.session: Any = self._cuda_session(export) if cuda else None
        if self.session is None:
            self.session = self._session(export, prepack or export.int8, int8)
        self.inputs: list[str] = list(export.inputs) or [i.name for i in self.session.get_inputs()]
        width = self.session.get_outputs()[0].shape[-1]
        self._dimension = width if isinstance(width, int) else None
        self._lock: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if concurrent else threading.Lock()
        )

    def _cuda_session(self, export: Export) -> Any:
        """A session on onnxruntime's CUDA provider; raises when the graph's products do
        not run there (onnxruntime would otherwise place them on the CPU quietly)."""
        import onnxruntime

        session = onnxruntime.InferenceSession(
            str(export.folder / "model.onnx"),
            self._options(True, optimised=False),
            providers=["CUDAExecutionProvider", "CPUExecutionProvider"],
        )
        if session.get_providers()[0] != "CUDAExecutionProvider":
            raise RuntimeError("onnxruntime did not start its CUDA provider")
        self.graph = "cuda"
        return session

    def _options(self, prepack: bool, optimised: bool) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if not self._spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        if not prepack:
            options.add_session_config_entry("session.disable_prepacking", "1")
        if optimised:
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        return options

    def _session(self, export: Export, prepack: bool, int8: bool) -> Any:
        """A session on the int8 graph (when asked) or the optimised graph for this
        onnxruntime, the first that matches its digests and loads, else on the exported
        graph (a damaged saved graph only costs time, or int8's speed)."""
        import onnxruntime

        version = onnxruntime.__version__
        saved = [("int8", int8_dir(export.saved, version))] if int8 else []
        saved.append(("optimised", fast_dir(export.saved, version)))
        for name, where in saved:
            if not (where / FAST_GRAPH).exists():
                continue
            try:
                check_digests(where, json.loads((where / SAVED_DIGESTS).read_text()))
            except (OSError, ValueError, TypeError, AttributeError, ExportMismatch):
                continue
            packed = prepack or name == "int8"
            try:
                session = onnxruntime.InferenceSession(
                    str(where / FAST_GRAPH),
                    self._options(packed, optimised=True),
                    providers=["CPUExecutionProvider"],
                )
            except Exception:
                continue
            self.graph, self.prepacked = name, packed
            return session
        self.prepacked = prepack
        return onnxruntime.InferenceSession(
            str(export.folder / "model.onnx"),
            self._options(prepack, optimised=False),
            providers=["CPUExecutionProvider"],
        )

    @property
    def dimension(self) -> int:
        """The length of the vectors (from the graph, else from encoding one word)."""
        if self._dimension is None:
            self._dimension = int(self.encode(["dimension"]).shape[1])
        return self._dimension

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in the order given.

        Texts are sorted by token count and run in batches of like length (``PAD_RATIO``,
        ``BATCH_TOKENS``), each padded to its own longest text.
        """
        import numpy as np

        encodings = self.tokenizer.encode_batch(texts)
        batches: list[list[int]] = []
        for i in sorted(range(len(texts)), key=lambda i: len(encodings[i].ids)):
            size = len(encodings[i].ids)
            if (
                not batches
                or size > PAD_RATIO * len(encodings[batches[-1][0]].ids)
                or (len(batches[-1]) + 1) * size > self.batch_tokens
            ):
                batches.append([i])
            else:
                batches[-1].append(i)
        out = np.zeros((len(texts), self._dimension or 0), dtype=np.float32)
        for rows in batches:
            vectors = self._run([encodings[i] for i in rows])
            if out.shape[1] != vectors.shape[1]:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: np.ndarray = out / np.maximum(norms, 1e-12)
        return unit

    def _run(self, encodings: list[Any]) -> np.ndarray:
        """One onnxruntime run over encodings padded to the longest."""
        import numpy as np

        width = max(len(e.ids) for e in encodings)
        arrays = {n: np.zeros((len(encodings), width), dtype=np.int64) for n in self.inputs}
        for row, e in enumerate(encodings):
            size = len(e.ids)
            arrays["input_ids"][row, :size] = e.ids
            if "attention_mask" in arrays:
                arrays["attention_mask"][row, :size] = e.attention_mask
            if "token_type_ids" in arrays:
                arrays["token_type_ids"][row, :size] = e.type_ids
        with self._lock:
            (raw,) = self.session.run([OUTPUT], arrays)
        vectors: np.ndarray = np.asarray(raw, dtype=np.float32)
        return vectors


def packaged(location: str) -> bool:
    """Whether ``location`` is a model shipped as an ONNX graph (``retriever.json`` beside
    it), served without an export."""
    return (Path(location) / "retriever.json").is_file()


def load(
    model_id: str,
    location: str,
    threads: int = 1,
    prepack: bool = True,
    int8: bool = False,
    spinning: bool = True,
    concurrent: bool = False,
) -> tuple[OnnxEncoder | None, str]:
    """(the encoder, "") for a current export of ``model_id`` (or the packaged model at
    ``location``), else (None, why not, in a few words)."""
    if not onnx_installed():
        return None, "onnxruntime and tokenizers are not installed"
    if packaged(location):
        folder = Path(location)
        what = f"the packaged model {model_id}"
    else:
        what = f"the ONNX export of {model_id}"
        try:
            folder = export_dir(model_id, location)
        except (ExportMismatch, OSError, ValueError, KeyError) as e:  # damaged: fall back
            return None, f"{what} cannot be found ({e})"
        if not (folder / "meta.json").exists():
            slug = folder.name.rsplit("-", 1)[0]
            older = folder.parent.is_dir() and any(
                p.name.rsplit("-", 1)[0] == slug for p in folder.parent.iterdir() if p != folder
            )
            return None, f"{what} is {'stale' if older else 'missing'}"
    try:
        return OnnxEncoder(folder, threads, prepack, int8, spinning, concurrent), ""
    except ExportMismatch as e:
        return None, f"{what} does not match its digests ({e})"
    except Exception as e:  # a damaged export: fall back, never fail the search
        return None, f"{what} cannot load ({type(e).__name__})"


def size(path: Path) -> int:
    """Bytes held by a file or a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# What prune may delete: names this package gives (``export_dir``, ``fast_dir``, ``int8_dir``,
# ``DIGEST_STAMPS``) and those of its staging folders and files (``mkdtemp``, ``write_json``).
EXPORT_NAME = re.compile(r"(?![._])[A-Za-z0-9_.-]{1,60}-[0-9a-f]{16}")
SAVED_NAME = re.compile(r"fast-ort[A-Za-z0-9_.+-]+|int8-b[0-9]+-ort[A-Za-z0-9_.+-]+")
LEFTOVER = re.compile(
    r"\.(?:export|fast|int8)-[a-z0-9_]{8}"  # mkdtemp's staging folders
    r"|\.[A-Za-z0-9_.-]+\.json\.[0-9]+\.[0-9]+"  # write_json's files written aside
)


def prune_cache(keep: list[Path], everything: bool = False) -> tuple[list[str], int]:
    """Delete from ``cache_root()`` what no current export uses: folders other than
    ``keep`` (the exports of the models this install names), in kept folders the graphs
    saved for other onnxruntime versions and the int8 graph when queries do not run it,
    and leftovers of interrupted exports; with ``everything``, the whole cache. Returns
    (what was deleted, relative to the cache, and how many bytes). A deleted export is
    made again by the next reindex that needs it.

    Only names this package gives are deleted, only when they are this user's real folders
    or files: a symlink is never followed (nor removed), and other files are left alone.

    Raises:
        EmbeddingError: The cache is not a real folder of this user (a symlink, someone
            else's, or writable by everyone): nothing is deleted.
    """
    from ...files.checks import checked_folder, entry_bytes, own_entries, remove_entry

    root = cache_root()
    if not os.path.lexists(root):
        return [], 0
    if checked_folder(root, {os.geteuid()}) is None:
        from ...errors import EmbeddingError

        raise EmbeddingError(
            f"the export cache {root} is not a real folder of yours (a symlink, someone "
            "else's, or writable by everyone): nothing pruned"
        )
    ours = re.compile(f"{EXPORT_NAME.pattern}|{LEFTOVER.pattern}|{re.escape(DIGEST_STAMPS)}")
    found = own_entries(root, ours)
    removed: list[tuple[Path, os.stat_result]] = []
    if everything:
        removed = found
    else:
        kept = {p.name for p in keep if p.parent == root}
        version = ort_version()
        wanted = {fast_dir(Path(), version).name}
        if int8_queries():
            wanted.add(int8_dir(Path(), version).name)
        inner = re.compile(f"{SAVED_NAME.pattern}|{LEFTOVER.pattern}")
        for path, info in sorted(found):
            if path.name == DIGEST_STAMPS:
                continue
            if path.name not in kept or not stat.S_ISDIR(info.st_mode):
                removed.append((path, info))
                continue
            for saved, saved_info in sorted(own_entries(path, inner)):
                if saved.name not in wanted:
                    removed.append((saved, saved_info))
    freed = 0
    for path, info in removed:
        freed += entry_bytes(path, info)
        remove_entry(path, info)
    forget_digests(root)
    return sorted(p.relative_to(root).as_posix() for p, _ in removed), freed
