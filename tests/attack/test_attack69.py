"""Attack 69: ``auto`` runs a large reindex through the torch module at bfloat16 on a CPU with
AMX (``device.bulk_cpu_encoder``, ``batch_encoding.encoder_for``), linear weights cast once
(``TorchEncoder``), the report naming what encoded (``ReindexReport.device``).

Tests marked "Failed before the fix" failed on the code as of 1b46cc9 (fixed since: the
module stands in for onnxruntime only when it agrees with it, and is built from the export
as loaded; a module in ``sys.modules`` without a spec reads as not installed;
TOOLCAT_REINDEX_WORKERS is read before anything is dropped); the others held and guard what
was tried. Real catalogs and the real model throughout: only the threshold
(``device.AUTO_BF16_TEXTS``), the CPU's flags (``device.cpu_bf16_tiles``), the environment,
``sys.modules`` and the model's files (a copy of the packaged retriever, changed as a
different export or a concurrent writer would change it) are set by the tests."""

from __future__ import annotations

import gc
import hashlib
import json
import shutil
import sqlite3
import sys
import types
import weakref
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import batch_encoding, embeddings
from toolcat.search.embeddings import RETRIEVER, RETRIEVER_FOLDER
from toolcat.search.encoders import device
from toolcat.search.encoders.onnx import OnnxEncoder

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from toolcat.search.encoders.torch import TorchEncoder, unit_cosines  # noqa: E402

BF16 = "cpu (torch bfloat16)"
ORT = "cpu (onnxruntime)"
CPU_BF16_TILES = device.cpu_bf16_tiles  # the real reader (the tests below set the flags)


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    """auto, two onnxruntime workers wanted, a CPU with bfloat16 tiles (torch emulates them
    where there are none: the vectors are the same, only slower), no embedder made before
    or kept after."""
    monkeypatch.delenv(device.ENV, raising=False)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "2")
    monkeypatch.setattr(device, "cpu_bf16_tiles", lambda: True)
    embeddings._embedders.clear()
    yield
    embeddings._embedders.clear()


def _stored(db: Path) -> dict[str, Any]:
    import numpy as np

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT content_hash, vector FROM embeddings").fetchall()
    return {h: np.frombuffer(v, dtype="<f4") for h, v in rows}


def _cosines(mine: dict[str, Any], theirs: dict[str, Any]) -> Any:
    import numpy as np

    assert mine.keys() == theirs.keys()
    keys = sorted(mine)
    return unit_cosines(np.vstack([mine[h] for h in keys]), np.vstack([theirs[h] for h in keys]))


def _reindexed(db: Path, threshold: int, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    monkeypatch.setattr(device, "AUTO_BF16_TEXTS", threshold)
    with Catalog(db) as catalog:
        if not catalog.toolkits():
            catalog.register(SAMPLE_TOOLKITS)
        return catalog.reindex(**kw)


def _encoder_for(texts: int) -> Any:
    return batch_encoding.encoder_for(embeddings.embedder(RETRIEVER), texts, 64)


# --- a copy of the packaged retriever, changed as another export would be ------------------


def _retriever_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the packaged retriever that the process takes for it (its saved graphs and
    digests in a cache of the test's own)."""
    folder = tmp_path / "retriever"
    shutil.copytree(RETRIEVER_FOLDER, folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "RETRIEVER_FOLDER", folder)
    embeddings._embedders.clear()
    return folder


def _reseal(folder: Path) -> None:
    """Record the files' digests again: the folder is a consistent export of its own."""
    meta = json.loads((folder / "retriever.json").read_text())
    for name in meta["sha256"]:
        meta["sha256"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "retriever.json").write_text(json.dumps(meta))


def _cls_pooled(folder: Path) -> None:
    """The graph pooling its first token (CLS) instead of the mean of its tokens, as the
    BAAI/bge models are exported: a BERT encoder under BERT's names, every weight the same."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(folder / "model.onnx"))
    graph = model.graph
    nodes = list(graph.node)
    concat = next(n for n in nodes if n.op_type == "Concat" and "model.1/" in n.name)
    hidden = next(n for n in nodes if n.op_type == "Mul" and "model.1/" in n.name).input[0]
    graph.initializer.append(numpy_helper.from_array(np.array(0, dtype=np.int64), "cls_at"))
    cls = helper.make_node("Gather", [hidden, "cls_at"], ["cls"], axis=1, name="/cls/Gather")
    graph.node.insert(nodes.index(concat), cls)
    concat.input[0] = "cls"
    onnx.save(model, str(folder / "model.onnx"))
    _reseal(folder)


def test_an_export_that_pools_otherwise_is_not_stored_from_the_torch_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (bug, wrong vectors stored): the torch module always mean-pools
    and counts positions from 0; its only check compared bfloat16 with its own float32. For
    an export that computes otherwise (here CLS pooling, as every bge model; RoBERTa's
    positions likewise), ``auto`` stored the module's vectors (cosine 0.30 to onnxruntime's,
    report "cpu (torch bfloat16)") under the export's digest: search compared them with
    onnxruntime's query vectors, and no later reindex re-embedded them (same producer).
    Now the module stands in only when it agrees with onnxruntime on a few texts."""
    _cls_pooled(_retriever_copy(tmp_path, monkeypatch))
    reports = {}
    for name, threshold in (("auto", 30), ("onnxruntime", 10**9)):
        embeddings._embedders.clear()
        reports[name] = _reindexed(tmp_path / f"{name}.db", threshold, monkeypatch)
    assert reports["onnxruntime"].device == ORT and reports["auto"].embedded > 30
    assert reports["auto"].device == ORT
    cosines = _cosines(_stored(tmp_path / "auto.db"), _stored(tmp_path / "onnxruntime.db"))
    assert cosines.min() >= 0.999


@pytest.mark.parametrize("chosen", ["torch", "bf16"])
def test_the_torch_module_asked_for_by_name_is_refused_for_an_export_it_cannot_match(
    chosen: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same check where the torch module is asked for (and on a GPU, where ``auto``
    takes it: not testable here, the same ``device._torch``): before, ``bf16`` or ``torch``
    with a CLS-pooled export stored the module's vectors under the export's digest. Now it
    is a one-line error naming the way out, and nothing is stored."""
    _cls_pooled(_retriever_copy(tmp_path, monkeypatch))
    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    monkeypatch.setenv(device.ENV, chosen)
    embeddings._embedders.clear()
    with Catalog(db) as catalog, pytest.raises(EmbeddingError) as caught:
        catalog.reindex()
    message = str(caught.value)
    assert "\n" not in message and "does not give onnxruntime's vectors" in message
    assert "TOOLCAT_REINDEX_DEVICE=cpu" in message
    assert _stored(db) == {}


def test_an_export_changed_after_it_loaded_is_not_rebuilt_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (bug, trusting a file on disk): ``encoder_for`` handed the
    torch module the export's *folder*, read again, while the catalog records the digest of
    the export loaded before (the worker pool checks its workers against that digest: "a
    reindex worker answered vectors of another graph"). Files replaced in between (an
    upgrade, another process making the export again; here two words' ids swapped in the
    tokenizer, the folder consistent with itself) were rebuilt and stored under the old
    digest: "email" encoded as "stock". Now the module is built from the loaded export,
    its files checked against its digests: a mismatch leaves the job on onnxruntime, whose
    workers refuse it."""
    folder = _retriever_copy(tmp_path, monkeypatch)
    embedder = embeddings.embedder(RETRIEVER)
    loaded = embedder.document_encoder()
    assert isinstance(loaded, OnnxEncoder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["email"], vocab["stock"] = vocab["stock"], vocab["email"]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    _reseal(folder)
    encoder = batch_encoding.encoder_for(embedder, device.AUTO_BF16_TEXTS, 64)
    try:
        if isinstance(encoder, batch_encoding.InProcess):
            assert encoder.encode is not None
            texts = ["send email: Send an email message to a contact"]
            assert unit_cosines(encoder.encode(texts), loaded.encode(texts)).min() >= 0.999
        else:
            assert isinstance(encoder, batch_encoding.WorkerPool) and encoder.device == ORT
    finally:
        encoder.close()


# --- what auto runs, and what the report says ----------------------------------------------


@pytest.mark.parametrize(
    ("chosen", "workers", "kind", "where"),
    [
        (None, "2", batch_encoding.InProcess, BF16),
        (" AUTO\t", "2", batch_encoding.InProcess, BF16),
        ("auto", "1", batch_encoding.InProcess, BF16),  # N workers: onnxruntime's, not asked
        ("cpu", "2", batch_encoding.WorkerPool, ORT),
        ("auto", "0", batch_encoding.InProcess, ORT),  # one session in process, onnxruntime
        ("auto", "-5", batch_encoding.InProcess, ORT),  # negative counts as 0
        ("torch", "2", batch_encoding.InProcess, "cpu (torch float32)"),
        ("bf16", "0", batch_encoding.InProcess, BF16),  # asked for: at any size or count
    ],
)
def test_each_setting_gets_the_encoder_the_report_names(
    chosen: str | None, workers: str, kind: type, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: for a job past the threshold, the encoder each combination of
    TOOLCAT_REINDEX_DEVICE and TOOLCAT_REINDEX_WORKERS gets, and the device it reports;
    0 workers keeps meaning one onnxruntime session."""
    if chosen is not None:
        monkeypatch.setenv(device.ENV, chosen)
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", workers)
    encoder = _encoder_for(device.AUTO_BF16_TEXTS * 10)
    try:
        assert isinstance(encoder, kind) and encoder.device == where
    finally:
        encoder.close()


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        (device.ENV, "bf16x", device.ENV),
        (device.ENV, "auto,bf16", device.ENV),
        ("TOOLCAT_REINDEX_WORKERS", "two", "TOOLCAT_REINDEX_WORKERS"),
    ],
)
def test_a_bad_setting_is_refused_for_a_large_job_too(
    name: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a value neither variable accepts is one line naming it, never auto's torch."""
    monkeypatch.setenv(name, value)
    with pytest.raises(EmbeddingError, match=says) as raised:
        _encoder_for(device.AUTO_BF16_TEXTS * 10).close()
    assert "\n" not in str(raised.value)


def test_a_bad_worker_count_is_refused_before_anything_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Failed before the fix (bug, silent no-op and loss): TOOLCAT_REINDEX_WORKERS was read
    only where the batches start. With nothing to embed a typo passed (exit 0, unlike
    TOOLCAT_REINDEX_DEVICE since attack68); with vectors of another producer it was refused
    only after they had all been dropped, leaving the catalog without semantic search for an
    error in a setting. Now it is read before anything else, as the device is."""
    db = tmp_path / "c.db"
    assert _reindexed(db, 10**9, monkeypatch).embedded > 0
    monkeypatch.setenv("TOOLCAT_REINDEX_WORKERS", "two")
    with Catalog(db) as catalog, pytest.raises(EmbeddingError, match="TOOLCAT_REINDEX_WORKERS"):
        catalog.reindex()  # nothing to embed
    with Catalog(db) as catalog:
        catalog._conn.execute("DELETE FROM meta WHERE key = 'embedding_producer'")
    with Catalog(db) as catalog, pytest.raises(EmbeddingError, match="TOOLCAT_REINDEX_WORKERS"):
        catalog.reindex()  # vectors of unknown origin: all to embed again
    with Catalog(db) as catalog:
        assert catalog.status()["coverage"]["embedding"]["indexed"] > 0


@pytest.mark.parametrize("module", ["torch", "onnx"])
@pytest.mark.parametrize("stub", ["none", "no spec", "empty"])
def test_a_stubbed_or_broken_module_leaves_auto_on_onnxruntime(
    module: str, stub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``none`` and ``empty`` held (``sys.modules[m] = None``: not installed; a module with
    a spec and nothing in it: the module cannot load, onnxruntime). ``no spec`` failed before
    the fix (bug, crash instead of the fallback): a stub put in ``sys.modules`` without a
    spec (``types.ModuleType``, as programs do to keep a heavy import out) made
    ``importlib.util.find_spec`` raise ValueError out of every reindex (torch: from the GPU
    probe, at any size; onnx: from a large job's probe), where ``auto`` never fails."""
    if stub == "none":
        monkeypatch.setitem(sys.modules, module, None)
    else:
        fake = types.ModuleType(module)
        fake.__spec__ = None if stub == "no spec" else ModuleSpec(module, None)
        monkeypatch.setitem(sys.modules, module, fake)
    encoder = _encoder_for(device.AUTO_BF16_TEXTS)
    try:
        assert isinstance(encoder, batch_encoding.WorkerPool) and encoder.device == ORT
    finally:
        encoder.close()


def _watch_bulk_encoders(monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref[Any]]:
    """Weak references to every module ``device.bulk_cpu_encoder`` makes from now on."""
    made: list[weakref.ref[Any]] = []
    bulk = device.bulk_cpu_encoder

    def watched(*args: Any) -> Any:
        found = bulk(*args)
        if found is not None:
            made.append(weakref.ref(found))
        return found

    monkeypatch.setattr(device, "bulk_cpu_encoder", watched)
    return made


def test_the_threshold_counts_the_texts_to_embed_and_no_choice_outlives_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: in one process (the embedder cached for it), a job of exactly the threshold's
    texts runs at bfloat16 and one text short of it on onnxruntime, each report saying so;
    the module made for a job is freed with it (the embedder keeps onnxruntime's encoder);
    a recorded use is embedded by the embedder (onnxruntime), not by the job's module."""
    import numpy as np

    made = _watch_bulk_encoders(monkeypatch)
    first = tmp_path / "first.db"
    with Catalog(first) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        texts = len(catalog._conn.execute("SELECT DISTINCT content_hash FROM tools").fetchall())
        assert catalog.record_use("is it raining in lisbon", next(catalog.iter_tools()).id)
    reports = [_reindexed(first, texts, monkeypatch)]
    gc.collect()
    assert len(made) == 1 and made[0]() is None
    embedder = embeddings.embedder(RETRIEVER)
    assert isinstance(embedder.document_encoder(), OnnxEncoder)
    reports.append(_reindexed(tmp_path / "second.db", texts + 1, monkeypatch))
    assert [(r.embedded, r.device) for r in reports] == [(texts, BF16), (texts, ORT)]
    with sqlite3.connect(first) as conn:
        (blob,) = conn.execute("SELECT vector FROM usage WHERE vector IS NOT NULL").fetchone()
    usage = np.frombuffer(blob, dtype="<f4")
    assert np.allclose(usage, embedder.encode(["is it raining in lisbon"])[0], atol=1e-5)


def test_a_job_stopped_at_bfloat16_resumes_on_onnxruntime_with_the_same_models_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held: a reindex interrupted after its first bfloat16 batch keeps that batch; the rest
    (below the threshold now) is embedded on onnxruntime under the same producer, and every
    vector agrees with onnxruntime's; the module is freed though the interruption is kept."""
    made = _watch_bulk_encoders(monkeypatch)

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    db = tmp_path / "mixed.db"
    with pytest.raises(KeyboardInterrupt) as stopped:
        _reindexed(db, 31, monkeypatch, batch_size=8, progress=stop)
    gc.collect()
    assert len(made) == 1 and made[0]() is None and stopped.value is not None
    first = _stored(db)
    assert len(first) == 8
    report = _reindexed(db, 31, monkeypatch)  # 30 left: under the threshold
    assert report.embedded == 30 and report.device == ORT
    reference = tmp_path / "onnxruntime.db"
    assert _reindexed(reference, 10**9, monkeypatch).device == ORT
    mixed, theirs = _stored(db), _stored(reference)
    assert _cosines(mixed, theirs).min() >= 0.999
    assert any((first[h] != theirs[h]).any() for h in first)  # the first batch: bfloat16's
    assert _reindexed(db, 31, monkeypatch).embedded == 0  # one producer


# --- the module at bfloat16 ----------------------------------------------------------------


def test_weights_cast_once_give_the_autocast_runs_vectors_bit_for_bit(tmp_path: Path) -> None:
    """Held: the linear layers cast to bfloat16 once give exactly the vectors of bfloat16
    autocast over float32 weights, on the sample tools' texts and one past the model's 256
    tokens; LayerNorm and the embedding tables stay float32; and both stay onnxruntime's at
    cosine >= 0.999."""
    import numpy as np

    with Catalog(tmp_path / "c.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        texts = [embeddings.embedding_text(tool) for tool in catalog.iter_tools()]
    # (texts of a token or two, "get" or "!", are at 0.9987-0.999 from onnxruntime's int8
    # graph in float32 as well: not the bfloat16 products', and no tool's text is so short)
    texts.append(" ".join(texts))
    cast = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype="bfloat16")
    assert cast.engine == "torch bfloat16"
    assert max(len(e.ids) for e in cast.tokenizer.encode_batch(texts)) == 256  # truncated
    autocast = TorchEncoder(RETRIEVER_FOLDER, device="cpu", dtype="float32")
    autocast.dtype = torch.bfloat16  # products at bfloat16, the weights left float32
    mine, theirs = cast.encode(texts), autocast.encode(texts)
    assert np.array_equal(mine, theirs)
    kinds = {
        (type(m).__name__, m.weight.dtype) for m in cast.module.modules() if hasattr(m, "weight")
    }
    assert kinds == {
        ("Linear", torch.bfloat16),
        ("LayerNorm", torch.float32),
        ("Embedding", torch.float32),
    }
    ort = OnnxEncoder(RETRIEVER_FOLDER, threads=0).encode(texts)
    assert unit_cosines(mine, ort).min() >= 0.999


# --- the CPU's flags -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe\x00garbage\x80\nflags\t: amx_bf16\n", True),  # binary before: replaced
        (b"processor\t: 0\nmodel name\t: amx_bf16 inside\n", False),  # no flags line
        (b"vmx flags\t: amx_bf16\nflags\t: fpu sse\n", False),  # another line's flags
        (b"flags\t: fpu sse\nflags\t: fpu amx_bf16\n", False),  # the first CPU's line decides
        (b"flags\t: fpu\x00amx_bf16\n", False),  # one word with a NUL in it
        (b"flags\t: AMX_BF16\n", False),  # the kernel's flags are lower case
        (b"", False),
    ],
)
def test_the_cpu_flags_are_read_from_the_first_flags_line_only(
    content: bytes, expected: bool, tmp_path: Path
) -> None:
    """Held: odd contents of the flags file are read without error, conservatively. (The
    path is fixed, /proc/cpuinfo, written by the kernel: a FIFO or a huge file there is not
    within anyone's reach but root's, so neither is tried.)"""
    info = tmp_path / "cpuinfo"
    info.write_bytes(content)
    assert CPU_BF16_TILES(str(info)) is expected
    assert CPU_BF16_TILES(str(tmp_path)) is False  # a folder: no flags
