"""Reindex on a GPU: the shipped retriever's int8 ONNX graph rebuilt as a torch module gives
onnxruntime's vectors (checked here with torch on the CPU, the same code that runs on a GPU),
reindex picks its encoder by what the machine has, and TOOLCAT_REINDEX_DEVICE overrides it
with clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import embeddings
from toolcat.search.embeddings import RETRIEVER, RETRIEVER_FOLDER
from toolcat.search.encoders import device
from toolcat.search.encoders import export as exports
from toolcat.search.encoders import onnx as onnx_encoder

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from toolcat.search.encoders.torch import (  # noqa: E402 (needs torch)
    TorchEncoder,
    UnsupportedGraph,
    unit_cosines,
    weights,
)


@pytest.fixture(scope="module")
def all_texts() -> list[str]:
    """Real tool texts as reindex embeds them (benchmark tools when ../shared/bench is
    there, the longest past the model's 256 tokens, and short ones)."""
    from tests.search.test_onnx import document_texts

    return document_texts(300)


def _agree(texts: list[str], dtype: str) -> None:
    onnx_vectors = onnx_encoder.OnnxEncoder(RETRIEVER_FOLDER, threads=0).encode(texts)
    encoder = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype=dtype)
    assert encoder.dimension == 384 and encoder.device == "cpu"
    lengths = [len(e.ids) for e in encoder.tokenizer.encode_batch(texts)]
    assert max(lengths) == 256 and min(lengths) < 16  # truncated ones and short ones
    # Small passes and texts in catalog order: each vector must come back to its own text.
    encoder.batch_tokens = 2048
    got = encoder.encode(texts)
    cosines = unit_cosines(onnx_vectors, got)
    assert cosines.min() >= 0.999, texts[int(cosines.argmin())]
    # an unrelated text's vector is far: the check can fail
    assert unit_cosines(onnx_vectors[:1], got[-1:]).min() < 0.9


@pytest.mark.slow
def test_torch_vectors_agree_with_onnxruntime_int8(all_texts: list[str]) -> None:
    """A sample of the texts (every sixth, the long and the short ones): ~3 CPU-seconds."""
    texts = all_texts[::6] + all_texts[-5:]
    assert len(texts) >= 40
    _agree(texts, "float32")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_vectors_agree_with_onnxruntime_int8_on_every_text(
    all_texts: list[str], dtype: str
) -> None:
    _agree(all_texts, dtype)


def test_half_precision_is_kept_only_when_it_keeps_the_vectors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolcat.search.encoders import torch as torch_encoder

    encoder = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype="bfloat16")
    assert encoder.engine == "torch bfloat16" and encoder.dtype == torch.bfloat16
    # the products' weights are cast once, at the kept precision; LayerNorm stays float32
    linears = [m for m in encoder.module.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and {m.weight.dtype for m in linears} == {torch.bfloat16}
    norms = [m for m in encoder.module.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert {m.weight.dtype for m in norms} == {torch.float32}
    monkeypatch.setattr(torch_encoder, "HALF_PRECISION_COSINE", 1.0001)  # cannot be met
    encoder = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype="bfloat16")
    assert encoder.engine == "torch float32" and encoder.dtype == torch.float32
    linears = [m for m in encoder.module.modules() if isinstance(m, torch.nn.Linear)]
    assert {m.weight.dtype for m in linears} == {torch.float32}


def test_a_gpu_out_of_memory_runs_shorter_passes() -> None:
    encoder = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype="float32")
    texts = ["get weather for a city", "convert units", "book a table"] * 4
    expected = encoder.encode(texts)
    real, seen = encoder.module, []

    def module(*tensors: object) -> object:
        rows, width = tensors[0].shape  # type: ignore[attr-defined]
        seen.append(rows * width)
        if rows * width > 16:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*tensors)

    encoder.module = module
    encoder.batch_tokens = 4096
    with pytest.raises(torch.cuda.OutOfMemoryError):  # below the floor: raised
        encoder.encode(texts)
    assert encoder.batch_tokens == 1024
    encoder.batch_tokens = 4096
    seen.clear()
    from toolcat.search.encoders import torch as torch_encoder

    torch_encoder.MIN_BATCH_TOKENS, floor = 8, torch_encoder.MIN_BATCH_TOKENS
    try:
        got = encoder.encode(texts)
    finally:
        torch_encoder.MIN_BATCH_TOKENS = floor
    assert encoder.batch_tokens <= 16 and max(seen[-3:]) <= 16
    assert unit_cosines(expected, got).min() > 0.99999


def test_dequantised_weights_are_the_int8_blocks_times_their_scales() -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    arrays, heads, epsilon = weights(RETRIEVER_FOLDER / "model.onnx")
    assert heads == 12 and epsilon == pytest.approx(1e-12)
    linear = [k for k in arrays if k.endswith(".weight") and "encoder" in k and "Norm" not in k]
    assert len(linear) == 6 * 6
    graph = onnx.load(str(RETRIEVER_FOLDER / "model.onnx")).graph
    first = next(n for n in graph.node if n.op_type == "MatMulNBits")
    assert "query" in first.name
    tensors = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    packed, scales = tensors[first.input[1]], tensors[first.input[2]]
    # row n of the Linear weight, block b, position j: (packed - 128) * scale
    expected = (float(packed[5, 2, 7]) - 128.0) * float(scales[5, 2])
    assert arrays["encoder.layer.0.attention.self.query.weight"][5, 2 * 32 + 7] == pytest.approx(
        expected
    )
    table = arrays["embeddings.word_embeddings.weight"]
    assert table.shape == (30522, 384) and table.dtype == np.float32


def test_a_graph_that_is_not_a_bert_encoder_is_refused(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(UnsupportedGraph):
        weights(path)


def test_a_damaged_graph_is_never_rebuilt(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "retriever"
    shutil.copytree(RETRIEVER_FOLDER, folder)
    with (folder / "model.onnx").open("r+b") as f:
        f.seek(4096)
        f.write(b"\x00" * 64)
    with pytest.raises(exports.ExportMismatch):
        TorchEncoder(folder, device="cpu")


def _stored(path: Path) -> dict[str, bytes]:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT content_hash, vector FROM embeddings").fetchall())


def test_reindex_with_the_torch_path_stores_the_same_models_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    paths = {}
    engines = {
        "cpu": {"cpu (onnxruntime)"},
        "torch": {"cpu (torch float32)"},
        # bfloat16 unless this CPU's bfloat16 products drift from float32 (then float32)
        "bf16": {"cpu (torch bfloat16)", "cpu (torch float32)"},
    }
    for choice in ("cpu", "torch", "bf16"):
        monkeypatch.setenv(device.ENV, choice)
        embeddings._embedders.clear()
        paths[choice] = tmp_path / f"{choice}.db"
        with Catalog(paths[choice]) as catalog:
            catalog.register(SAMPLE_TOOLKITS)
            report = catalog.reindex()
        assert report.model == RETRIEVER and report.embedded > 30
        assert report.device in engines[choice]
    cpu = _stored(paths["cpu"])
    a = np.vstack([np.frombuffer(cpu[h], dtype="<f4") for h in sorted(cpu)])
    for choice in ("torch", "bf16"):
        other = _stored(paths[choice])
        assert cpu.keys() == other.keys()
        b = np.vstack([np.frombuffer(other[h], dtype="<f4") for h in sorted(cpu)])
        assert unit_cosines(a, b).min() >= 0.999
    # The same model and producer: switching back to the CPU re-embeds nothing.
    monkeypatch.setenv(device.ENV, "cpu")
    embeddings._embedders.clear()
    for choice in ("torch", "bf16"):
        with Catalog(paths[choice]) as catalog:
            assert catalog.reindex().embedded == 0
            hits = catalog.search("turn fahrenheit into celsius", mode="embedding").hits
            assert hits and hits[0].tool.name == "convert_units"


def test_reindex_device_override_errors_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from toolcat.cli import cli

    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    monkeypatch.setenv(device.ENV, "tpu")
    embeddings._embedders.clear()
    result = CliRunner().invoke(cli, ["--db", str(db), "reindex"])
    assert result.exit_code != 0
    assert (
        "TOOLCAT_REINDEX_DEVICE='tpu': expected one of auto, cpu, gpu, torch, bf16" in result.output
    )
    assert "Traceback" not in result.output
    with Catalog(db) as catalog:  # nothing changed
        assert catalog.status()["coverage"]["embedding"]["indexed"] == 0
    if device.ort_cuda() or device.torch_gpu():
        return  # the rest is about a machine without a GPU
    monkeypatch.setenv(device.ENV, "gpu")
    embeddings._embedders.clear()
    with Catalog(db) as catalog, pytest.raises(EmbeddingError, match="=gpu: no GPU to encode"):
        catalog.reindex()


REINDEX = """
import json, sys
from toolcat import Catalog
from tests.helpers import SAMPLE_TOOLKITS
with Catalog(sys.argv[1]) as catalog:
    catalog.register(SAMPLE_TOOLKITS)
    report = catalog.reindex()
print(json.dumps([report.device, sorted(sys.modules)]))
"""


def test_auto_reindex_imports_torch_only_for_a_gpu_build(tmp_path: Path) -> None:
    env_torch_gpu = device.torch_gpu()
    out = subprocess.run(
        [sys.executable, "-c", REINDEX, str(tmp_path / "c.db")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    where, modules = json.loads(out.stdout)
    if env_torch_gpu or device.ort_cuda():
        assert where.startswith("cuda")
    else:  # this machine: torch is a CPU build, never imported by reindex
        assert where == "cpu (onnxruntime)"
        assert "torch" not in modules and "onnx" not in modules


@pytest.mark.parametrize("choice", ["torch", "bf16"])
def test_torch_on_the_cpu_encodes_in_process_never_in_onnxruntime_workers(
    choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers run onnxruntime: a reindex large enough for them, with the torch module asked
    for on the CPU, encodes with that module here (the report names it), not in workers
    that would store onnxruntime's vectors under its name."""
    from toolcat.search import batch_encoding

    monkeypatch.setenv(device.ENV, choice)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    embeddings._embedders.clear()
    embedder = embeddings.embedder(RETRIEVER)
    encoder = batch_encoding.encoder_for(embedder, 100_000, 64)
    try:
        assert isinstance(encoder, batch_encoding.InProcess)
        assert embedder.document_device().startswith("cpu (torch ")
    finally:
        encoder.close()
    monkeypatch.setenv(device.ENV, "cpu")
    embeddings._embedders.clear()
    encoder = batch_encoding.encoder_for(embeddings.embedder(RETRIEVER), 100_000, 64)
    try:
        assert isinstance(encoder, batch_encoding.WorkerPool)  # onnxruntime: workers
    finally:
        encoder.close()
        embeddings._embedders.clear()  # none made under this test's settings is kept


# --- auto: bfloat16 for a large job on a CPU with AMX ---------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ("fpu vme avx512_bf16 amx_bf16 amx_tile amx_int8", True),
        ("fpu vme avx512_bf16 amx_tile amx_int8", False),  # tiles, but not bfloat16 ones
        ("fpu amx_bf16x", False),  # a longer word is not the flag
        ("", False),
    ],
)
def test_amx_bfloat16_tiles_are_read_from_the_cpu_flags(
    flags: str, expected: bool, tmp_path: Path
) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n")
    assert device.cpu_bf16_tiles(str(info)) is expected
    assert device.cpu_bf16_tiles(str(tmp_path / "missing")) is False


def _encoder_for(texts: int) -> object:
    from toolcat.search import batch_encoding

    embeddings._embedders.clear()
    return batch_encoding.encoder_for(embeddings.embedder(RETRIEVER), texts, 64)


def test_auto_runs_a_large_job_at_bfloat16_on_a_cpu_with_amx_else_on_onnxruntime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a job of AUTO_BF16_TEXTS texts or more, with nothing chosen, on a CPU with AMX
    bfloat16 tiles, gets the torch module at bfloat16; anything short of that keeps
    onnxruntime's workers, and says so."""
    from toolcat.search import batch_encoding

    monkeypatch.delenv(device.ENV, raising=False)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    monkeypatch.setattr(device, "cpu_bf16_tiles", lambda: True)
    cases = [
        (device.AUTO_BF16_TEXTS, batch_encoding.InProcess, "cpu (torch bfloat16)"),
        (device.AUTO_BF16_TEXTS - 1, batch_encoding.WorkerPool, "cpu (onnxruntime)"),
    ]
    try:
        for texts, kind, where in cases:
            encoder = _encoder_for(texts)
            try:
                assert isinstance(encoder, kind) and encoder.device == where
            finally:
                encoder.close()
        big = device.AUTO_BF16_TEXTS * 50
        monkeypatch.setattr(device, "cpu_bf16_tiles", lambda: False)  # no AMX
        encoder = _encoder_for(big)
        assert isinstance(encoder, batch_encoding.WorkerPool)
        encoder.close()
        monkeypatch.setattr(device, "cpu_bf16_tiles", lambda: True)
        monkeypatch.setenv(device.ENV, "cpu")  # onnxruntime asked for
        encoder = _encoder_for(big)
        assert isinstance(encoder, batch_encoding.WorkerPool)
        encoder.close()
        monkeypatch.delenv(device.ENV)
        monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "0")  # one session asked for
        encoder = _encoder_for(big)
        assert isinstance(encoder, batch_encoding.InProcess)
        assert encoder.device == "cpu (onnxruntime)"
        encoder.close()
    finally:
        embeddings._embedders.clear()


@pytest.mark.parametrize("missing", ["torch", "onnx", "drift", "broken"])
def test_auto_keeps_onnxruntime_when_bfloat16_cannot_run_or_drifts(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """auto never fails: without torch or onnx, with a module that cannot load, or with
    bfloat16 products that would move the vectors, the job stays on onnxruntime."""
    import importlib.util

    from toolcat.search import batch_encoding
    from toolcat.search.encoders import torch as torch_encoder

    monkeypatch.delenv(device.ENV, raising=False)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    monkeypatch.setattr(device, "cpu_bf16_tiles", lambda: True)
    if missing in ("torch", "onnx"):
        find = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == missing else find(name, *a),
        )
    elif missing == "drift":
        monkeypatch.setattr(torch_encoder, "HALF_PRECISION_COSINE", 1.0001)  # cannot be met
    else:
        monkeypatch.setattr(torch_encoder, "build", lambda path: 1 / 0)
    encoder = _encoder_for(device.AUTO_BF16_TEXTS)
    try:
        assert isinstance(encoder, batch_encoding.WorkerPool)
        assert encoder.device == "cpu (onnxruntime)"
    finally:
        encoder.close()
        embeddings._embedders.clear()


def test_a_reindex_past_the_threshold_stores_bfloat16_vectors_of_the_same_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole path, with the threshold lowered to the sample catalog: the report names
    bfloat16, the vectors are onnxruntime's at cosine >= 0.999, and a default reindex
    afterwards finds nothing to embed (the same producer)."""
    import numpy as np

    if not device.cpu_bf16_tiles():
        pytest.skip("this CPU has no AMX bfloat16 tiles")
    monkeypatch.delenv(device.ENV, raising=False)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    paths = {}
    try:
        for name, threshold in (("bf16", 30), ("onnxruntime", 10**9)):
            monkeypatch.setattr(device, "AUTO_BF16_TEXTS", threshold)
            embeddings._embedders.clear()
            paths[name] = tmp_path / f"{name}.db"
            with Catalog(paths[name]) as catalog:
                catalog.register(SAMPLE_TOOLKITS)
                report = catalog.reindex()
            assert report.embedded > 30
            assert report.device == (
                "cpu (torch bfloat16)" if name == "bf16" else "cpu (onnxruntime)"
            )
        mine, theirs = _stored(paths["bf16"]), _stored(paths["onnxruntime"])
        assert mine.keys() == theirs.keys()
        a = np.vstack([np.frombuffer(mine[h], dtype="<f4") for h in sorted(mine)])
        b = np.vstack([np.frombuffer(theirs[h], dtype="<f4") for h in sorted(mine)])
        assert unit_cosines(a, b).min() >= 0.999
        assert not np.array_equal(a, b)  # really another engine's vectors
        with Catalog(paths["bf16"]) as catalog:  # threshold back out of reach
            assert catalog.reindex().embedded == 0
    finally:
        embeddings._embedders.clear()
