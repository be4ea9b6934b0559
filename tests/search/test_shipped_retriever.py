"""The shipped retriever's files (src/toolcat/retriever/): the ONNX graph, run offline with
onnxruntime and tokenizers alone, gives the training-time torch model's vectors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
onnxruntime = pytest.importorskip("onnxruntime")
tokenizers = pytest.importorskip("tokenizers")

FOLDER = Path(__file__).resolve().parents[2] / "src" / "toolcat" / "retriever"
META = json.loads((FOLDER / "retriever.json").read_text())


def test_metadata_names_the_files_and_how_to_rebuild_them() -> None:
    assert META["model_id"] == "toolcat-tool-retriever-v1"
    assert (META["dimension"], META["max_seq_length"], META["quantization"]) == (384, 256, "int8")
    for name, digest in META["sha256"].items():
        assert hashlib.sha256((FOLDER / name).read_bytes()).hexdigest() == digest, name
    assert (FOLDER / "model.onnx").stat().st_size <= 30 * 1024 * 1024
    assert not list(FOLDER.glob("*.data"))  # self-contained graph
    assert META["script"].startswith("python scripts/train_retriever.py")
    assert f"--seed {META['seed']}" in META["script"]
    assert META["trained_on"] and META["pairs"] > 0


def encode(texts: list[str]) -> np.ndarray:
    tokenizer = tokenizers.Tokenizer.from_file(str(FOLDER / "tokenizer.json"))
    tokenizer.enable_truncation(META["max_seq_length"])
    tokenizer.enable_padding()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        str(FOLDER / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    encodings = tokenizer.encode_batch(texts)
    arrays = {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }
    names = [i.name for i in session.get_inputs()]
    assert [o.name for o in session.get_outputs()] == ["sentence_embedding"]
    return session.run(None, {n: arrays[n] for n in names})[0]


def test_graph_vectors_match_the_training_time_model() -> None:
    """int8 graph against the fp32 torch model that training ended with: cosine ≥ 0.99 for
    every reference text (measured 0.9995), unit length, and each text nearer its own
    reference vector than any other's."""
    reference = json.loads((FOLDER / "reference.json").read_text())
    texts = reference["texts"]
    expected = np.array(reference["vectors"], dtype=np.float32)
    assert len(texts) >= 16 and expected.shape == (len(texts), 384)
    found = encode(texts)
    assert found.shape == expected.shape
    assert np.allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-3)
    cosines = np.sum(found * expected, axis=1)
    assert cosines.min() >= 0.99, cosines
    assert (np.argmax(found @ expected.T, axis=1) == np.arange(len(texts))).all()


def test_graph_is_not_the_base_model() -> None:
    """A guard against shipping the wrong weights: the fine-tuned model moved the vectors
    away from the base MiniLM's (same texts, cosine well below 1)."""
    pytest.importorskip("sentence_transformers")
    from toolcat.search.embeddings import MINILM, embedder

    texts = json.loads((FOLDER / "reference.json").read_text())["texts"][:4]
    base = embedder(MINILM).model_encode(texts)
    assert np.sum(encode(texts) * base, axis=1).max() < 0.99
