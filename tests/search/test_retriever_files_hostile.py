"""The packaged retriever's files as an attacker (or a broken copy) leaves them: a FIFO or a
link to /dev/zero in place of a file is damage, reported as "not a regular file" (never read,
never "missing"); and each failure gives one piece of advice."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.errors import EmbeddingError
from toolcat.search import embeddings
from toolcat.search.embeddings import RETRIEVER_FOLDER
from toolcat.search.encoders import export as exports

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")


def plant(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
@pytest.mark.parametrize("name", ["model.onnx", "tokenizer.json"])
def test_a_file_that_is_not_regular_is_damage_not_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, kind: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(exports, "_digests", {})
    copy = tmp_path / "retriever"
    shutil.copytree(RETRIEVER_FOLDER, copy)
    plant(copy / name, kind)
    monkeypatch.setattr(embeddings, "RETRIEVER_FOLDER", copy)
    monkeypatch.setattr(embeddings, "_embedders", {})
    with pytest.raises(exports.ExportMismatch, match=f"{name} is not a regular file"):
        exports.read_export(copy).check()
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS / "files.yaml")
        result = catalog.search("erase an old document", k=3, mode="hybrid")
        assert result.mode == "bm25"
        (warning,) = [w for w in result.warnings if "BM25 only" in w]
        assert f"{name} is not a regular file" in warning and "missing" not in warning
        assert "toolcat is damaged: install it again" in warning
        with pytest.raises(EmbeddingError) as raised:
            catalog.reindex(full=True)
    message = str(raised.value)
    assert "not a regular file" in message
    assert message.count("pip install") == 1 and "reinstall toolcat" not in message


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_a_description_that_is_not_regular_is_never_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``retriever.json`` itself a FIFO (which a read would wait on for ever) or a link to
    /dev/zero: refused as damage at once, and search answers with BM25."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(exports, "_digests", {})
    copy = tmp_path / "retriever"
    shutil.copytree(RETRIEVER_FOLDER, copy)
    plant(copy / "retriever.json", kind)
    monkeypatch.setattr(embeddings, "RETRIEVER_FOLDER", copy)
    monkeypatch.setattr(embeddings, "_embedders", {})
    with pytest.raises(exports.ExportMismatch, match=r"retriever\.json is not a regular file"):
        exports.read_export(copy)
    with Catalog(tmp_path / "catalog.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS / "files.yaml")
        result = catalog.search("erase an old document", k=3, mode="hybrid")
        assert result.mode == "bm25" and result.hits
