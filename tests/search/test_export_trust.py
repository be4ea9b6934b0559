"""The ONNX export is not trusted blindly (issue 21): a wrong graph, a shuffled tokenizer,
corrupted weights or a swapped saved graph in the export cache is refused (made again by
reindex, or a fallback with a one-line note at query time), an encoder failing during a
query falls back to BM25, and vectors remember what made them, so a reindex after a bad
export embeds them again."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.search import embeddings
from toolcat.search.embeddings import embedder, model_location
from toolcat.search.encoders import export as exports
from toolcat.search.encoders import onnx as onnx_encoder

pytest.importorskip("sentence_transformers")
pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

MINILM = "all-MiniLM-L6-v2"
QUERY = "erase an old document"


@pytest.fixture(scope="module")
def exported() -> Path:
    """The base MiniLM's export in the user cache (made once per machine, as reindex does)."""
    embedder(MINILM).export_onnx()
    folder = exports.export_dir(MINILM, model_location(MINILM))
    assert (folder / "meta.json").exists()
    return folder


@pytest.fixture
def cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exported: Path) -> Iterator[Path]:
    """A copy of the export in an empty user cache, at the folder the model looks in, and
    a fresh process-wide embedder registry (the loaded model kept: no second load)."""
    model = embedder(MINILM).model()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "_embedders", {})
    monkeypatch.setattr(exports, "_digests", {})
    embedder(MINILM)._model = model
    target = exports.export_dir(MINILM, model_location(MINILM))
    shutil.copytree(exported, target)
    yield target


def fast(folder: Path) -> Path:
    return exports.fast_dir(folder, exports.ort_version())


def wrong_graph(source: Path, target: Path) -> None:
    """A valid graph of the same shape whose word embeddings are shuffled: loads, runs,
    and gives other vectors."""
    import numpy as np
    from onnx import numpy_helper

    model = onnx.load(str(source))
    biggest = max(model.graph.initializer, key=lambda i: np.prod(i.dims))
    weights = numpy_helper.to_array(biggest)
    shuffled = weights[np.random.default_rng(0).permutation(len(weights))]
    biggest.CopyFrom(numpy_helper.from_array(shuffled, biggest.name))
    onnx.save(model, str(target))


def reference(texts: list[str]) -> object:
    return embedder(MINILM).model_encode(texts)


def agrees(got: object, texts: list[str]) -> float:
    import numpy as np

    return float((np.asarray(got) * np.asarray(reference(texts))).sum(axis=1).min())


def stored_vectors_agree(db: Path) -> float:
    import numpy as np

    from toolcat.models import Tool
    from toolcat.search.embeddings import embedding_text

    with Catalog(db, embedding_model=MINILM) as catalog:
        rows = catalog._conn.execute(
            "SELECT t.definition, e.vector FROM tools t JOIN embeddings e "
            "ON e.content_hash = t.content_hash AND e.model = ?",
            (MINILM,),
        ).fetchall()
    texts = [embedding_text(Tool.model_construct(**json.loads(d))) for d, _ in rows]
    got = np.vstack([np.frombuffer(v, dtype="<f4") for _, v in rows])
    return agrees(got, texts)


@pytest.mark.slow
def test_wrong_graph_is_made_again_by_reindex(cached: Path, tmp_path: Path) -> None:
    wrong_graph(cached / "model.onnx", cached / "model.onnx")
    shutil.rmtree(fast(cached))  # the exported graph is what would be served
    db = tmp_path / "catalog.db"
    with Catalog(db, embedding_model=MINILM) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        assert catalog.reindex().embedded == 38
        result = catalog.search(QUERY, k=3)
    assert result.warnings == [] and result.hits[0].tool.id == "files.delete_file"
    assert stored_vectors_agree(db) >= 0.999
    assert agrees([embedder(MINILM).encode_query(QUERY)], [QUERY]) >= 0.999


def test_shuffled_tokenizer_is_refused_with_a_note(cached: Path) -> None:
    path = cached / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    ids = [vocab[t] for t in tokens]
    data["model"]["vocab"] = dict(zip(tokens, ids[1000:] + ids[:1000], strict=True))
    path.write_text(json.dumps(data))
    model = embedder(MINILM)
    vector = model.encode_query(QUERY)
    assert agrees([vector], [QUERY]) >= 0.999  # not through the shuffled tokenizer
    assert "does not match its digests (tokenizer.json" in model.note


def test_corrupted_weights_are_refused_never_a_traceback(cached: Path, tmp_path: Path) -> None:
    for path in (fast(cached) / exports.FAST_WEIGHTS, cached / "model.onnx"):
        data = bytearray(path.read_bytes())
        middle = len(data) // 2
        data[middle : middle + 65536] = b"\xff" * 65536  # same size: NaN weights
        path.write_bytes(bytes(data))
    model = embedder(MINILM)
    assert agrees([model.encode_query(QUERY)], [QUERY]) >= 0.999
    assert "does not match its digests" in model.note
    db = tmp_path / "catalog.db"
    with Catalog(db, embedding_model=MINILM) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()  # refused, exported again
    assert stored_vectors_agree(db) >= 0.999


def test_swapped_saved_graph_is_skipped(cached: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    wrong_graph(cached / "model.onnx", wrong / "model.onnx")
    staging = tmp_path / "wrong-fast"
    staging.mkdir()
    onnx_encoder._save_optimised(wrong / "model.onnx", staging)
    for name in (exports.FAST_GRAPH, exports.FAST_WEIGHTS):
        shutil.copy(staging / name, fast(cached) / name)  # another model's saved graph
    model = embedder(MINILM)
    assert agrees([model.encode_query(QUERY)], [QUERY]) >= 0.999
    encoder = model.query_encoder()
    assert encoder is not None and encoder.graph == "exported"  # the checked export, slower


def test_encoder_failure_during_a_query_falls_back_to_bm25(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
        model = catalog.status()["embedding_model"]
        encoder = embedder(model).query_encoder()
        assert encoder is not None

        class Failing:
            def run(self, *args: object, **kwargs: object) -> object:
                raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION")

        monkeypatch.setattr(encoder, "session", Failing())
        result = catalog.search("erase an old document from the workspace folder", k=3)
        assert result.mode == "bm25" and result.hits[0].tool.id == "files.delete_file"
        assert len(result.warnings) == 1 and "failed (RuntimeError)" in result.warnings[0]
        assert "BM25 only" in result.warnings[0]


def test_reindex_re_embeds_vectors_of_another_or_unknown_export(
    cached: Path, tmp_path: Path
) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db, embedding_model=MINILM) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        assert catalog.reindex().embedded == 38
        # Vectors a bad export made (before exports were checked): wrong, origin unknown.
        catalog._conn.execute("UPDATE embeddings SET vector = zeroblob(length(vector))")
        catalog._conn.execute("DELETE FROM meta WHERE key = 'embedding_producer'")
        again = catalog.reindex()
        assert (again.embedded, again.skipped) == (38, 0)
        assert catalog.reindex().embedded == 0  # recorded now: nothing to redo
    assert stored_vectors_agree(db) >= 0.999
