"""Document encoding on a GPU: the catalog's ONNX graph rebuilt as a small torch module.

The packaged retriever (and any ONNX export ``onnx`` made of a BERT-family
sentence-transformers model) is a BERT encoder with mean pooling and normalisation. Here its
weights are read from the graph itself (``onnx``), the int8 ones dequantised (``MatMulNBits``
blocks with their scales, the int8 word embeddings with their row scales), into a torch
module that computes the same function. The vectors are the same model's: they agree with
onnxruntime's on the CPU at cosine ≥ 0.999 (tests/search/test_torch_encoder.py), so the catalog
records the same producer (the graph's digest) whichever of the two made them.

``reindex`` uses it when torch sees a GPU (``embeddings.Embedder.document_encoder``); this
module imports torch, so nothing imports it on a machine without one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .export import GPU_BATCH_TOKENS, PAD_RATIO, Export, checked_export

if TYPE_CHECKING:
    import numpy as np

_LINEAR = re.compile(
    r"encoder\.layer\.(\d+)\.(attention\.self\.(?:query|key|value)|attention\.output\.dense"
    r"|intermediate\.dense|output\.dense)\.bias$"
)
_NORM = re.compile(r"(?:encoder\.layer\.(\d+)\.(attention\.output|output)|embeddings)\.LayerNorm\.")


class UnsupportedGraph(Exception):
    """The graph is not a BERT encoder this module can rebuild."""


def weights(graph_path: Path) -> tuple[dict[str, Any], int, float]:
    """The float32 weights of a BERT-family ONNX graph under BERT's names (as numpy arrays),
    its number of attention heads and its LayerNorm epsilon. Weight-only int8 blocks
    (``MatMulNBits``, 8 bits, no zero points: 128) and int8 Gather tables with row scales
    are dequantised; plain ``MatMul`` weights are transposed into ``Linear`` layout."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(graph_path))
    graph = model.graph
    tensors = {i.name: i for i in graph.initializer}
    constants = {
        n.output[0]: numpy_helper.to_array(n.attribute[0].t)
        for n in graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"
    }
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def array(name: str) -> Any:
        return numpy_helper.to_array(tensors[name])

    out: dict[str, Any] = {}
    for name in tensors:
        short = _bert_name(name)
        if short is not None and (
            (short.startswith("embeddings.") and "word_embeddings" not in short)
            or _NORM.search(short)
            or (short.endswith(".bias") and _LINEAR.search(short))
        ):
            out[short] = array(name).astype(np.float32)
    head_dim = 0
    epsilon = 1e-12
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "LayerNormalization":
            epsilon = float(attrs.get("epsilon", epsilon))
        elif node.op_type == "Mul" and "attention/self" in node.name and not head_dim:
            # q and k are each scaled by head_dim ** -0.25 before their product
            scale = next((constants[i] for i in node.input if i in constants), None)
            if scale is not None and np.size(scale) == 1 and 0 < float(scale) < 1:
                head_dim = round(float(scale) ** -4)
        elif node.op_type == "Gather" and node.input[0] in tensors:
            short = _bert_name(node.input[0])
            if short is None or not short.startswith("embeddings.word_embeddings"):
                continue
            if short.endswith("_scales"):  # the int8 table's scales, read with it
                continue
            table = array(node.input[0]).astype(np.float32)
            if short.endswith("_int8"):
                scales = array(f"{node.input[0]}_scales").astype(np.float32)
                table = table * scales
            out["embeddings.word_embeddings.weight"] = table
        elif node.op_type in ("MatMulNBits", "MatMul") and node.input[1] in tensors:
            add = next((c for c in consumers.get(node.output[0], []) if c.op_type == "Add"), None)
            bias = next((i for i in add.input if i in tensors), None) if add else None
            short = _bert_name(bias) if bias else None
            if short is None or not _LINEAR.search(short):
                raise UnsupportedGraph(f"a weight product without a known bias ({node.name})")
            if node.op_type == "MatMul":
                weight = array(node.input[1]).astype(np.float32).T
            else:
                if attrs.get("bits") != 8 or (len(node.input) > 3 and node.input[3]):
                    raise UnsupportedGraph(f"{node.name}: only 8-bit blocks without zero points")
                rows, cols = int(attrs["K"]), int(attrs["N"])
                packed = array(node.input[1]).astype(np.float32) - 128.0
                scales = array(node.input[2]).astype(np.float32).reshape(cols, -1)
                weight = (packed * scales[:, :, None]).reshape(cols, -1)[:, :rows]
            out[short[: -len("bias")] + "weight"] = np.ascontiguousarray(weight)
    if "embeddings.word_embeddings.weight" not in out or not head_dim:
        raise UnsupportedGraph("no word embeddings or attention scale found")
    hidden = out["embeddings.word_embeddings.weight"].shape[1]
    if hidden % head_dim:
        raise UnsupportedGraph(f"head size {head_dim} does not divide {hidden}")
    return out, hidden // head_dim, epsilon


def _bert_name(name: str) -> str | None:
    """BERT's own name for an initializer (``embeddings.…``, ``encoder.layer.…``)."""
    match = re.search(r"(embeddings\.|encoder\.layer\.)", name)
    return name[match.start() :] if match else None


def build(graph_path: Path) -> Any:
    """The torch module (``SentenceBert``) computing the graph's sentence embeddings."""
    import torch

    arrays, heads, epsilon = weights(graph_path)
    layers = 1 + max(int(m.group(1)) for k in arrays if (m := _LINEAR.search(k)))
    module = SentenceBert(
        vocab=arrays["embeddings.word_embeddings.weight"].shape[0],
        hidden=arrays["embeddings.word_embeddings.weight"].shape[1],
        intermediate=arrays["encoder.layer.0.intermediate.dense.weight"].shape[0],
        layers=layers,
        heads=heads,
        positions=arrays["embeddings.position_embeddings.weight"].shape[0],
        types=arrays["embeddings.token_type_embeddings.weight"].shape[0],
        epsilon=epsilon,
    )
    state = {k: torch.from_numpy(v) for k, v in arrays.items()}
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise UnsupportedGraph(f"weights missing {missing[:3]}, unexpected {unexpected[:3]}")
    return module.eval()


def _torch_modules() -> Any:
    """``SentenceBert`` and its layer, defined on first use (torch imported then)."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Layer(nn.Module):
        def __init__(self, hidden: int, intermediate: int, heads: int, epsilon: float) -> None:
            super().__init__()
            self.heads = heads
            self.attention = nn.Module()
            self.attention.self = nn.Module()
            for part in ("query", "key", "value"):
                setattr(self.attention.self, part, nn.Linear(hidden, hidden))
            self.attention.output = nn.Module()
            self.attention.output.dense = nn.Linear(hidden, hidden)
            self.attention.output.LayerNorm = nn.LayerNorm(hidden, eps=epsilon)
            self.intermediate = nn.Module()
            self.intermediate.dense = nn.Linear(hidden, intermediate)
            self.output = nn.Module()
            self.output.dense = nn.Linear(intermediate, hidden)
            self.output.LayerNorm = nn.LayerNorm(hidden, eps=epsilon)

        def forward(self, x: Any, keys: Any) -> Any:
            rows, width, hidden = x.shape
            me: Any = self  # submodules by BERT's names (mypy sees Tensor | Module)
            attend = me.attention.self

            def split(t: Any) -> Any:
                return t.view(rows, width, self.heads, hidden // self.heads).transpose(1, 2)

            context = functional.scaled_dot_product_attention(
                split(attend.query(x)), split(attend.key(x)), split(attend.value(x)), keys
            )
            context = context.transpose(1, 2).reshape(rows, width, hidden)
            out = me.attention.output
            x = out.LayerNorm(x + out.dense(context))
            inner = functional.gelu(me.intermediate.dense(x))
            return me.output.LayerNorm(x + me.output.dense(inner))

    class Bert(nn.Module):
        def __init__(
            self,
            vocab: int,
            hidden: int,
            intermediate: int,
            layers: int,
            heads: int,
            positions: int,
            types: int,
            epsilon: float,
        ) -> None:
            super().__init__()
            self.embeddings = nn.Module()
            self.embeddings.word_embeddings = nn.Embedding(vocab, hidden)
            self.embeddings.position_embeddings = nn.Embedding(positions, hidden)
            self.embeddings.token_type_embeddings = nn.Embedding(types, hidden)
            self.embeddings.LayerNorm = nn.LayerNorm(hidden, eps=epsilon)
            self.encoder = nn.Module()
            self.encoder.layer = nn.ModuleList(
                Layer(hidden, intermediate, heads, epsilon) for _ in range(layers)
            )

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            """Unit-length mean-pooled vectors (float32) of a padded batch."""
            me: Any = self
            e = me.embeddings
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = e.word_embeddings(ids) + e.token_type_embeddings(types)
            x = e.LayerNorm(x + e.position_embeddings(positions)[None])
            keys = mask.bool()[:, None, None, :]  # padding is never attended to
            for layer in me.encoder.layer:
                x = layer(x, keys)
            weight = mask.unsqueeze(-1).to(torch.float32)
            pooled = (x.float() * weight).sum(1) / weight.sum(1).clamp(min=1e-9)
            return functional.normalize(pooled, dim=-1, eps=1e-12)

    return Bert


def SentenceBert(**config: Any) -> Any:
    return _torch_modules()(**config)


# Passes are halved down to this many token slots when the GPU runs out of memory.
MIN_BATCH_TOKENS = 1024
# Half-precision products are kept only when they give the float32 module's vectors at this
# cosine or more (checked when the encoder loads, on the device it runs on).
HALF_PRECISION_COSINE = 0.9995
SELF_CHECK_TEXTS = [
    "get weather: Get the current weather for a city. Parameters: city The city name",
    "convert units",
    "search flights: Find flights between two airports on a date. Parameters: origin IATA "
    "code of the departure airport destination IATA code of the arrival airport date "
    "departure date, YYYY-MM-DD passengers number of adult passengers",
]


class TorchEncoder:
    """Encodes texts like ``onnx_encoder.OnnxEncoder`` (same tokenizer, same graph's weights)
    with torch, on ``device``: texts sorted by token count, run in passes of like length of
    up to ``batch_tokens`` token slots, each padded to its own longest text.

    Args:
        source: The export (or its folder) whose ``model.onnx`` is rebuilt.
        device: A torch device ("cuda", "cpu").
        dtype: "float32", "float16" or "bfloat16": the matrix products' precision
            (autocast; LayerNorm, softmax and pooling stay float32).
        batch_tokens: Token slots per pass.
    """

    def __init__(
        self,
        source: Export | Path,
        device: str = "cuda",
        dtype: str = "float16",
        batch_tokens: int = GPU_BATCH_TOKENS,
    ) -> None:
        import torch

        self.export, self.tokenizer = checked_export(source)
        export = self.export
        self.device = torch.device(device).type  # "cuda" or "cpu", as OnnxEncoder's
        self._on = torch.device(device)
        self.dtype = torch.float32
        self.batch_tokens = batch_tokens
        self.module = build(export.folder / "model.onnx").to(self._on)
        self.dimension = int(self.module.embeddings.word_embeddings.weight.shape[1])
        self.graph = "torch"
        if dtype != "float32" and not self._keeps_vectors(getattr(torch, dtype)):
            dtype = "float32"  # this device's half-precision products drift: stay exact
        if dtype != "float32":
            # Autocast would cast every weight again on every pass (~5% of a CPU pass in
            # bfloat16); cast once, the products are the same.
            for part in self.module.modules():
                if isinstance(part, torch.nn.Linear):
                    part.to(self.dtype)
        self.engine = f"torch {dtype}" + (
            f", {torch.cuda.get_device_name(self._on)}" if self.device == "cuda" else ""
        )

    def _keeps_vectors(self, dtype: Any) -> bool:
        """Whether products at ``dtype`` give this device's float32 vectors of a few
        real texts (short, long, truncated) at cosine ≥ ``HALF_PRECISION_COSINE``; the
        encoder then runs at ``dtype``."""
        import torch

        texts = [*SELF_CHECK_TEXTS, " ".join(SELF_CHECK_TEXTS * 20)]
        exact = self.encode(texts)
        self.dtype = dtype
        half = self.encode(texts)
        agree = float(unit_cosines(exact, half).min()) >= HALF_PRECISION_COSINE
        if not agree:
            self.dtype = torch.float32
        return agree

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, in the order given. A GPU that
        runs out of memory (one shared with other work) gets passes half as long."""
        import torch

        while True:
            try:
                return self._encode(texts)
            except torch.cuda.OutOfMemoryError:
                if self.batch_tokens <= MIN_BATCH_TOKENS:
                    raise
                torch.cuda.empty_cache()
                self.batch_tokens //= 2

    def _encode(self, texts: list[str]) -> np.ndarray:
        import numpy as np
        import torch

        encodings = self.tokenizer.encode_batch(texts)
        sizes = [len(e.ids) for e in encodings]
        batches: list[list[int]] = []
        for i in sorted(range(len(texts)), key=sizes.__getitem__):
            if (
                not batches
                or sizes[i] > PAD_RATIO * sizes[batches[-1][0]]
                or (len(batches[-1]) + 1) * sizes[i] > self.batch_tokens
            ):
                batches.append([i])
            else:
                batches[-1].append(i)
        out = torch.empty((len(texts), self.dimension), dtype=torch.float32, device=self._on)
        autocast = self.dtype != torch.float32
        with (
            torch.inference_mode(),
            torch.autocast(self.device, dtype=self.dtype, enabled=autocast),
        ):
            for rows in batches:
                width = max(sizes[i] for i in rows)
                ids = np.zeros((len(rows), width), dtype=np.int64)
                mask = np.zeros((len(rows), width), dtype=np.int64)
                types = np.zeros((len(rows), width), dtype=np.int64)
                for row, i in enumerate(rows):
                    e = encodings[i]
                    ids[row, : sizes[i]] = e.ids
                    mask[row, : sizes[i]] = e.attention_mask
                    types[row, : sizes[i]] = e.type_ids
                tensors = [
                    torch.from_numpy(a).to(self._on, non_blocking=True) for a in (ids, mask, types)
                ]
                index = torch.tensor(rows, device=self._on)
                out[index] = self.module(*tensors)
        vectors: np.ndarray = out.cpu().numpy()
        return vectors


def unit_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two matrices of unit vectors (what the agreement checks report)."""
    import numpy as np

    product: np.ndarray = np.einsum("ij,ij->i", a, b) / np.maximum(
        np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12
    )
    return product
