"""``toolcat cache prune`` against a cache it did not make: a symlinked cache root, a kept
export that is a symlink, the admin's own files in the cache folder, a FIFO for its
digests. Nothing but this code's own names, as real folders and files of this user, goes."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolcat.cli import cli
from toolcat.search import embeddings
from toolcat.search.embeddings import RETRIEVER, model_location
from toolcat.search.encoders import export as exports

pytest.importorskip("onnxruntime")


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TOOLCAT_ONNX_INT8", raising=False)
    monkeypatch.setattr(embeddings, "_embedders", {})
    monkeypatch.setattr(exports, "_digests", {})
    root = tmp_path / "cache" / "toolcat" / "onnx"
    root.parent.mkdir(parents=True)
    yield root


def a_home(folder: Path) -> Path:
    """A folder like someone's home: dot-entries and a document."""
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_ed25519").write_text("secret")
    (folder / ".bashrc").write_text("alias ll='ls -l'")
    (folder / "Documents").mkdir()
    (folder / "Documents" / "thesis.tex").write_text("draft")
    (folder / f"all-MiniLM-L6-v2-{'0' * 16}").mkdir()  # even a name the cache gives
    return folder


def intact(home: Path) -> bool:
    return (
        (home / ".ssh" / "id_ed25519").read_text() == "secret"
        and (home / ".bashrc").exists()
        and (home / "Documents" / "thesis.tex").read_text() == "draft"
        and (home / f"all-MiniLM-L6-v2-{'0' * 16}").is_dir()
    )


@pytest.mark.parametrize("flags", [["--all"], []])
def test_a_symlinked_cache_root_is_refused(cache: Path, tmp_path: Path, flags: list[str]) -> None:
    home = a_home(tmp_path / "home")
    cache.symlink_to(home)
    result = CliRunner().invoke(cli, ["cache", "prune", *flags])
    assert result.exit_code == 13, (result.stdout, result.stderr)
    assert "not a real folder of yours" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "unexpected" not in result.stderr
    assert intact(home)


def test_a_kept_export_that_is_a_symlink_is_not_followed(cache: Path, tmp_path: Path) -> None:
    home = a_home(tmp_path / "home")
    cache.mkdir()
    kept = exports.export_dir(RETRIEVER, model_location(RETRIEVER))
    kept.symlink_to(home)
    (home / ".fast-abcdefgh").mkdir()  # looks like a leftover of ours, in someone's folder
    (home / "fast-ort0.0.1").mkdir()  # looks like another onnxruntime's graph
    result = CliRunner().invoke(cli, ["cache", "prune"])
    assert result.exit_code == 0, result.output
    assert intact(home) and (home / ".fast-abcdefgh").is_dir() and (home / "fast-ort0.0.1").is_dir()
    assert kept.is_symlink()


def test_prune_all_deletes_only_what_the_cache_names(cache: Path, tmp_path: Path) -> None:
    cache.mkdir()
    stale = cache / f"all-MiniLM-L6-v2-{'1' * 16}"
    stale.mkdir()
    (stale / "model.onnx").write_bytes(b"x" * 1000)
    (cache / ".export-abcd_123").mkdir()  # an interrupted export
    outside = a_home(tmp_path / "outside")
    link = cache / f"linked-{'2' * 16}"  # our name, but a link: not followed, not counted
    link.symlink_to(outside)
    (cache / "notes.txt").write_text("mine")  # the admin's, not a name the cache gives
    (cache / "Documents").mkdir()
    result = CliRunner().invoke(cli, ["cache", "prune", "--all", "--json"])
    assert result.exit_code == 0, result.output
    removed = json.loads(result.stdout)["removed"]
    assert set(removed) - {exports.DIGEST_STAMPS} == {stale.name, ".export-abcd_123"}
    assert not stale.exists() and not (cache / ".export-abcd_123").exists()
    assert (cache / "notes.txt").read_text() == "mine" and (cache / "Documents").is_dir()
    assert link.is_symlink() and intact(outside)


def test_a_fifo_for_the_digests_does_not_hang_prune(cache: Path) -> None:
    cache.mkdir()
    os.mkfifo(cache / exports.DIGEST_STAMPS)
    finished: list[object] = []
    worker = threading.Thread(
        target=lambda: finished.append(CliRunner().invoke(cli, ["cache", "prune"])), daemon=True
    )
    worker.start()
    worker.join(30)
    if worker.is_alive():  # unblock the reader so the thread can end
        with open(cache / exports.DIGEST_STAMPS, "w"):
            pass
        worker.join(10)
        pytest.fail("prune hung on a FIFO in place of its digests")
    assert finished[0].exit_code == 0  # type: ignore[attr-defined]
