"""scripts/research/distill_documents.py: the corpus's tool definitions and the encoding its
speed and cache steps use (the figures in docs/benchmarks.md come from them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "research" / "distill_documents.py"


def _script():
    spec = importlib.util.spec_from_file_location("distill_documents", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lookup_weather(city: str, days: int = 3, metric: bool = True) -> None:
    """Look up the weather forecast for a city.

    Args:
        city: The city's name, as people write it.
        days: How many days ahead.
    """


def test_a_documented_function_becomes_a_tool_with_its_parameters_described():
    tool = _script()._tool("lookup_weather", lookup_weather)
    assert tool.name == "lookup_weather"
    assert tool.description == "Look up the weather forecast for a city."
    properties = tool.parameters["properties"]
    assert properties["city"] == {
        "type": "string",
        "description": "The city's name, as people write it.",
    }
    assert properties["days"]["type"] == "integer"  # from the default, the docstring has none
    assert properties["metric"] == {"type": "boolean"}
    assert tool.parameters["required"] == ["city"]
    assert _script()._tool("bare", lambda: None) is None  # no docstring, no tool


def test_encoding_in_batches_of_like_length_keeps_each_texts_vector_in_its_place():
    pytest.importorskip("onnxruntime")
    np = pytest.importorskip("numpy")
    script = _script()
    from toolcat.search.embeddings import DEFAULT_MODEL, embedder

    texts = [f"tool {i}: " + "does something useful with files " * (i % 7) for i in range(40)]
    session = script._session(script.PACKAGED / "model.onnx", 1)
    batched = script._encode(session, texts, slots=256)  # many batches, sorted by length
    alone = np.vstack([script._encode(session, [t]) for t in texts[:5]])
    assert np.allclose(batched[:5], alone, atol=1e-5)
    # the packaged graph through the script gives the vectors reindex stores
    stored = embedder(DEFAULT_MODEL).encode(texts)
    assert float((batched * stored).sum(1).min()) > 0.999


def test_a_text_longer_than_a_batch_is_encoded_alone_and_the_cache_never_overwrites(tmp_path):
    pytest.importorskip("onnxruntime")
    np = pytest.importorskip("numpy")
    script = _script()
    session = script._session(script.PACKAGED / "model.onnx", 1)
    texts = ["short tool: reads a file", "long tool: " + "parses many records " * 20, "x: y"]
    vectors = script._encode(session, texts, slots=16)  # the long one past 16 token slots
    alone = np.vstack([script._encode(session, [t]) for t in texts])
    assert vectors.shape == (3, 384) and np.allclose(vectors, alone, atol=1e-5)
    taken = tmp_path / "taken.db"
    taken.write_bytes(b"someone's cache")
    with pytest.raises(SystemExit, match="exists"):
        script.cache(script.PACKAGED / "model.onnx", tmp_path / "teacher.db", taken)
    assert taken.read_bytes() == b"someone's cache"
