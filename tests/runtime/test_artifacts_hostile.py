"""The artifacts folder against what comes from outside: a root and a TTL from the
environment, folders the admin keeps beside the call folders, a symlinked or shared root,
artifacts that would fill the disk, a media type or a text that a tool chose."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolcat import Catalog
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts

BIG = artifacts.INLINE_BYTES + 1  # written to a file
PAST = time.time() - artifacts.TTL_SECONDS - 3600


def aged(folder: Path, *files: str) -> Path:
    """``folder`` made with ``files`` in it, last changed before the TTL."""
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_text("mine")
    os.utime(folder, (PAST, PAST))
    return folder


@pytest.fixture
def art_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("art") / "catalog.db"
    with Catalog(path) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.artifact_tools"))
    return path


@pytest.fixture
def reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``TOOLCAT_ARTIFACTS=<tmp>/myreports``, a folder the admin also keeps other things in."""
    root = tmp_path / "myreports"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(root))
    monkeypatch.delenv("TOOLCAT_ARTIFACTS_TTL", raising=False)
    monkeypatch.delenv("TOOLCAT_ARTIFACTS_MAX_BYTES", raising=False)
    yield root


def test_the_sweep_deletes_only_call_folders_it_made(reports: Path, tmp_path: Path) -> None:
    taxes = aged(reports / "2023-taxes", "return.pdf")
    thesis = aged(reports / "thesis", "draft.tex")
    hexlike = aged(reports / ("0" * 32), "notes.txt")  # the old call-id shape, not ours now
    elsewhere = aged(tmp_path / "elsewhere", "keep.txt")
    link = reports / f"call-{'a' * 32}"  # our name, but a link: never followed nor removed
    link.symlink_to(elsewhere)
    ours = aged(reports / f"call-{'b' * 32}", "old.csv")
    artifacts.CallFolder().write("report.csv", b"x" * BIG)
    assert not ours.exists()
    for folder in (taxes, thesis, hexlike, elsewhere):
        assert [p.read_text() for p in folder.iterdir()] == ["mine"]
    assert link.is_symlink()


@pytest.mark.parametrize("kind", ["symlink", "group-writable", "world-writable", "a file"])
def test_a_root_that_is_not_a_private_folder_is_refused(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "home"
    old = aged(target / f"call-{'c' * 32}", "old.csv")
    root = tmp_path / "root"
    if kind == "symlink":
        root.symlink_to(target)
    elif kind == "a file":
        root.write_text("not a folder")
    else:
        root.mkdir()
        root.chmod(0o770 if kind == "group-writable" else 0o707)
        old = aged(root / f"call-{'c' * 32}", "old.csv")
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(root))
    with pytest.raises(ValueError, match="not a real folder of yours"):
        artifacts.CallFolder().write("report.csv", b"x" * BIG)
    assert (old / "old.csv").read_text() == "mine"  # nothing swept there
    assert not list(target.glob("call-*/report.csv")) and not list(tmp_path.glob("*/*/report.csv"))


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf", "-inf", "soon", ""])
def test_a_ttl_that_is_not_a_positive_number_is_refused(
    ttl: str, reports: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = reports / f"call-{'d' * 32}"  # a call still running: written a moment ago
    running.mkdir()
    (running / "part.csv").write_text("mine")
    monkeypatch.setenv("TOOLCAT_ARTIFACTS_TTL", ttl)
    with pytest.raises(ValueError, match=r"TOOLCAT_ARTIFACTS_TTL must be a finite number"):
        artifacts.CallFolder().write("report.csv", b"x" * BIG)
    assert (running / "part.csv").read_text() == "mine"


def test_a_call_says_why_its_artifact_was_not_kept(
    art_db: Path, reports: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS_TTL", "0")
    with Catalog(art_db, isolation="thread") as catalog:
        result = catalog.call("emit", {"size": BIG})
    assert result.success and result.data == "emitted" and not result.artifacts
    (warning,) = [e.message for e in result.events if e.level == "warning"]
    assert "TOOLCAT_ARTIFACTS_TTL" in (warning or "") and "\n" not in (warning or "")


def test_the_folder_as_a_whole_is_capped_oldest_calls_first(
    reports: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS_MAX_BYTES", str(3 * BIG))
    admin = aged(reports / "2023-taxes", "return.pdf")
    folders = []
    for step in range(5):
        written = artifacts.CallFolder().write("report.csv", b"x" * BIG)
        os.utime(written.parent, (time.time() - 100 + step, time.time() - 100 + step))
        folders.append(written.parent)
        held = sum(f.stat().st_size for f in reports.glob("call-*/*"))
        assert held <= 3 * BIG
    assert [f.exists() for f in folders] == [False, False, True, True, True]
    assert (admin / "return.pdf").read_text() == "mine"  # not ours: neither counted nor removed
    one = artifacts.CallFolder()
    one.write("a.csv", b"x" * BIG)
    one.write("b.csv", b"x" * BIG)
    with pytest.raises(ValueError, match="would pass its cap"):  # the call alone is too big
        one.write("c.csv", b"x" * (BIG * 2))


@pytest.mark.parametrize("cap", ["0", "-1", "1e9", "lots", "1.5"])
def test_a_total_cap_that_is_not_a_whole_number_is_refused(
    cap: str, reports: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLCAT_ARTIFACTS_MAX_BYTES", cap)
    with pytest.raises(ValueError, match="TOOLCAT_ARTIFACTS_MAX_BYTES must be a whole number"):
        artifacts.CallFolder().write("report.csv", b"x" * BIG)


def test_twenty_mib_of_control_characters_come_back_from_a_worker(
    art_db: Path, reports: Path
) -> None:
    size = 20 * 1024 * 1024  # under the 32 MiB limit; escaped as JSON text it is 120 MB
    with Catalog(art_db, isolation="process") as catalog:
        result = catalog.call("emit", {"size": size, "char": "\x01"})
    assert result.success, result.error
    (artifact,) = result.artifacts
    assert artifact.size == size and artifact.mime_type == "text/plain"
    assert artifact.content() == b"\x01" * size


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("text/csv", "text/csv"),
        ("Text/CSV; charset=utf-8", "text/csv"),
        ("application/vnd.ms-excel+xml", "application/vnd.ms-excel+xml"),
        ("text/html\x1b]0;owned\x07", "application/octet-stream"),
        ("../../etc/passwd", "application/octet-stream"),
        ("text/plain\nX-Evil: 1", "application/octet-stream"),
        ("text", "application/octet-stream"),
        ("/csv", "application/octet-stream"),
        ("text/" + "a" * 200, "application/octet-stream"),
    ],
)
@pytest.mark.parametrize("size", [10, BIG])
def test_media_types_keep_rfc_6838_grammar_only(
    given: str, kept: str, size: int, art_db: Path, reports: Path
) -> None:
    with Catalog(art_db, isolation="thread") as catalog:
        result = catalog.call("emit", {"size": size, "mime_type": given})
    (artifact,) = result.artifacts
    assert artifact.mime_type == kept
