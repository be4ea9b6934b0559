"""Failures of the file or the machine: each is a one-line ``CatalogError`` naming the file and
the cause, within a bounded wait, and a failed change leaves the catalog as it was."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS, table_snapshot, toolkit_data
from toolcat import Catalog, CatalogError, Toolkit
from toolcat.store import connection

PAGE = 4096


def toolcat(db: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def big_toolkit(name: str, tools: int) -> Toolkit:
    tool = {"name": "t", "description": "A tool with a long description. " * 40}
    return Toolkit.model_validate(
        toolkit_data(name, tools=[{**tool, "name": f"t{i}"} for i in range(tools)])
    )


def test_a_lock_held_past_the_busy_timeout_is_a_clear_error(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 300)
    with Catalog(db_path) as catalog:
        catalog.register(Toolkit.model_validate(toolkit_data()))
        before = table_snapshot(db_path)
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with pytest.raises(CatalogError) as err:
                catalog.register(Toolkit.model_validate(toolkit_data("other")))
            assert time.monotonic() - started < 5
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        message = str(err.value)
        assert str(db_path) in message and "is locked" in message and "0.3 s" in message
        assert "\n" not in message and "rollback" not in message
        assert table_snapshot(db_path) == before
        catalog.register(Toolkit.model_validate(toolkit_data("other")))  # usable again
        assert catalog.revision == 2


def test_a_full_disk_is_a_clear_error_and_keeps_the_catalog(db_path: Path) -> None:
    with Catalog(db_path) as catalog:
        catalog.register(Toolkit.model_validate(toolkit_data()))
        before = table_snapshot(db_path)
        pages = catalog._conn.execute("PRAGMA page_count").fetchone()[0]
        catalog._conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk is full
        with pytest.raises(CatalogError) as err:
            catalog.register(big_toolkit("huge", 300))
        message = str(err.value)
        assert str(db_path) in message and "full" in message
        assert "rollback" not in message.lower()
        assert table_snapshot(db_path) == before
        assert [t.toolkit for t in catalog.toolkits()] == ["weather"]
        catalog._conn.execute("PRAGMA max_page_count = 1073741823")
        catalog.register(big_toolkit("huge", 300))
        assert len(catalog.toolkits()) == 2


def _damaged_catalog(tmp_path: Path) -> Path:
    """A sample catalog whose ``tools`` table root page is overwritten with garbage."""
    db = tmp_path / "damaged.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    conn = sqlite3.connect(db)
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tools'").fetchone()[0]
    conn.close()
    assert not Path(f"{db}-wal").exists()  # checkpointed on close: the page is in the file
    with open(db, "r+b") as handle:
        handle.seek((root - 1) * PAGE)
        handle.write(b"\x0d" + b"\xff" * (PAGE - 1))
    return db


@pytest.mark.parametrize(
    "args",
    [("list",), ("search", "read a file"), ("search", "read", "--mode", "regex"), ("show", "x")],
    ids=["list", "search", "regex", "show"],
)
def test_a_damaged_page_hit_mid_query_is_a_clear_error(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    db = _damaged_catalog(tmp_path)
    assert_one_line_error(toolcat(db, *args), 8, str(db), "is damaged", "malformed")


def test_a_damaged_page_in_the_library(tmp_path: Path) -> None:
    db = _damaged_catalog(tmp_path)
    with Catalog(db) as catalog, pytest.raises(CatalogError, match="is damaged"):
        catalog.list(include_deferred=True)
    with Catalog(db) as catalog:  # a failed read leaves no transaction open behind it
        with pytest.raises(CatalogError):
            catalog.search("read a file", mode="bm25")
        assert not catalog._conn.in_transaction
        assert [t.toolkit for t in catalog.toolkits()][:2] == ["data", "files"]


@pytest.mark.parametrize("kind", ["fifo", "device", "foreign", "text", "empty-sqlite-foreign"])
def test_files_that_are_no_catalog(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "catalog.db"
    expected = {
        "fifo": "it is a FIFO",
        "device": "it is a device",
        "foreign": "is not an SQLite database",
        "text": "is not an SQLite database",
        "empty-sqlite-foreign": "not a toolcat catalog",
    }[kind]
    if kind == "fifo":
        os.mkfifo(db)
    elif kind == "device":
        db = Path("/dev/zero")
    elif kind == "foreign":
        db.write_bytes(os.urandom(3 * PAGE))
    elif kind == "text":
        db.write_text("name,value\nx,1\n" * 100)
    else:
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE people (name TEXT)")
        conn.close()
    before = None if kind in ("fifo", "device") else db.read_bytes()
    result = toolcat(db, "list", timeout=30)  # a FIFO must not hang the open
    assert_one_line_error(result, 8, str(db), expected)
    if before is not None:
        assert db.read_bytes() == before


@pytest.mark.parametrize("mode", ["bm25", "regex", "embedding", "hybrid", None])
def test_invalid_bytes_in_a_query_in_every_mode(tmp_path: Path, mode: str | None) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    query = os.fsdecode(b"x\xff")  # what a shell's $'x\377' becomes in sys.argv
    extra = ("--mode", mode) if mode else ()
    result = toolcat(db, "search", query, *extra)
    assert_one_line_error(result, 7, "not valid UTF-8")


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--cursor", os.fsdecode(b"\xff")),
        ("list", "--toolkit", os.fsdecode(b"files\xff")),
        ("list", "--tag", os.fsdecode(b"\xff")),
        ("show", os.fsdecode(b"read_file\xff")),
        ("versions", os.fsdecode(b"files\xff")),
        ("remove", "files\n"),
        ("show", "files.read_file\n"),
    ],
    ids=["cursor", "toolkit", "tag", "show", "versions", "remove-newline", "show-newline"],
)
def test_hostile_names_and_filters_are_clean_errors(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    before = table_snapshot(db)
    result = toolcat(db, *args)
    assert result.returncode in (4, 7), result.stderr
    assert_one_line_error(result, result.returncode)
    assert table_snapshot(db) == before  # `remove $'files\n'` left `files` alone
