"""A torch-free query encoder: the catalog's embedding model exported to ONNX.

``toolcat reindex`` already loads the sentence-transformers model; it also exports it (the
transformer, pooling and normalisation as one ONNX graph, and the tokenizer as
``tokenizer.json``) into the user cache, ``$XDG_CACHE_HOME/toolcat/onnx``, in a folder keyed
by the model id and a fingerprint of the model's files. A fresh process then encodes a query
with ``onnxruntime`` and ``tokenizers`` in milliseconds instead of importing torch for
seconds. An export whose fingerprint no longer matches the model's files is never used (the
key differs); a folder appears whole or not at all (written aside, then renamed), so a
process killed mid-export leaves nothing that could be served.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Bumped when the exported graph or the files beside it change shape.
FORMAT = 1
OUTPUT = "sentence_embedding"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/toolcat/onnx`` (default ``~/.cache/toolcat/onnx``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toolcat" / "onnx"


def fingerprint(location: str) -> str:
    """A digest of a model folder's file names, sizes and modification times (a stat per
    file, no reads), or of the name alone when the model is not a folder."""
    digest = hashlib.sha256(f"format {FORMAT}\n".encode())
    root = Path(location)
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                stat = path.stat()
                line = f"{path.relative_to(root).as_posix()} {stat.st_size} {stat.st_mtime_ns}\n"
                digest.update(line.encode())
    else:
        digest.update(location.encode())
    return digest.hexdigest()[:16]


def export_dir(model_id: str, location: str) -> Path:
    """Where the export of ``model_id`` (loaded from ``location``) lives."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_id)[-60:].strip("._") or "model"
    key = hashlib.sha256(f"{model_id}\n{fingerprint(location)}".encode()).hexdigest()[:16]
    return cache_root() / f"{slug}-{key}"


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
        }
        (staging / "meta.json").write_text(json.dumps(meta))
        try:
            staging.rename(target)
        except OSError:  # another process exported it first
            if not (target / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


class OnnxEncoder:
    """Encodes queries with an exported model: tokenizers, then one onnxruntime run."""

    def __init__(self, folder: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        meta = json.loads((folder / "meta.json").read_text())
        self.inputs: list[str] = list(meta["inputs"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=int(meta["max_tokens"]))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one query is too small to share; no spinning pool
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(
            str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text (padded to the longest)."""
        import numpy as np

        encodings = self.tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        arrays = {n: np.zeros((len(texts), width), dtype=np.int64) for n in self.inputs}
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
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: np.ndarray = vectors / np.maximum(norms, 1e-12)
        return unit


def load(model_id: str, location: str) -> tuple[OnnxEncoder | None, str]:
    """(the encoder, "") for a current export of ``model_id``, else (None, why not)."""
    if not onnx_installed():
        return None, "onnxruntime and tokenizers are not installed"
    folder = export_dir(model_id, location)
    if not (folder / "meta.json").exists():
        slug = folder.name.rsplit("-", 1)[0]
        older = folder.parent.is_dir() and any(
            p.name.rsplit("-", 1)[0] == slug for p in folder.parent.iterdir() if p != folder
        )
        return None, f"the ONNX export of {model_id} is {'stale' if older else 'missing'}"
    try:
        return OnnxEncoder(folder), ""
    except Exception as e:  # a damaged export: fall back, never fail the search
        return None, f"the ONNX export of {model_id} cannot load ({type(e).__name__})"
