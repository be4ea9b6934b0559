"""``kill -9`` in the middle of a write: the catalog opens, ``PRAGMA integrity_check`` is ok,
and each toolkit is all there or not there at all."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog

TOOLS_PER_TOOLKIT = 40
KITS = 300

REGISTER = (
    textwrap.dedent(
        """
    import sys
    from tests.helpers import toolkit_data
    from toolcat import Catalog, Toolkit

    tool = {"name": "t", "description": "A tool that does a thing with words. " * 30}
    with Catalog(sys.argv[1]) as catalog:
        for start in range(0, KITS, 3):  # batches of three toolkits, one transaction each
            kits = [
                Toolkit.model_validate(toolkit_data(
                    f"kit{i}", tools=[{**tool, "name": f"t{j}"} for j in range(TOOLS)]
                ))
                for i in range(start, start + 3)
            ]
            catalog.register(kits)
            print("committed", flush=True)
    """
    )
    .replace("KITS", str(KITS))
    .replace("TOOLS", str(TOOLS_PER_TOOLKIT))
)


def _check_consistent(db: Path) -> int:
    """Assert the catalog is whole; returns how many toolkits it holds."""
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        counts = conn.execute(
            "SELECT k.name, count(t.id) FROM toolkits k LEFT JOIN tools t ON t.toolkit_id = k.id "
            "GROUP BY k.id"
        ).fetchall()
        assert all(n == TOOLS_PER_TOOLKIT for _, n in counts), counts
        assert len(counts) % 3 == 0  # whole batches only
        indexed = conn.execute("SELECT count(*) FROM tools_fts").fetchone()[0]
        assert indexed == len(counts) * TOOLS_PER_TOOLKIT
        revision = conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()[0]
        assert int(revision) == len(counts) // 3
    finally:
        conn.close()
    with Catalog(db) as catalog:  # opens, answers, and takes more writes
        assert len(catalog.toolkits()) == len(counts)
        if counts:
            assert catalog.search("thing with words", k=3, mode="bm25").hits
    return len(counts)


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.1])
def test_kill_9_during_registration(tmp_path: Path, delay: float) -> None:
    db = tmp_path / "catalog.db"
    child = subprocess.Popen(
        [sys.executable, "-c", REGISTER, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    with child.stdout:
        for _ in range(2):  # two batches committed: the third is being written
            assert child.stdout.readline().strip() == "committed"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL  # killed while still writing
    registered = _check_consistent(db)
    assert 6 <= registered < KITS


REINDEX = textwrap.dedent(
    """
    import sys
    from toolcat import Catalog

    def progress(done, total):
        print(done, total, flush=True)

    with Catalog(sys.argv[1]) as catalog:
        catalog.reindex(batch_size=2, progress=progress, full=True)
    """
)


@pytest.mark.slow
def test_kill_9_during_reindex(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
        total = len(list(catalog.iter_tools()))
    child = subprocess.Popen(
        [sys.executable, "-c", REINDEX, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    with child.stdout:
        first = child.stdout.readline().split()  # the first batch is committed
        assert first and int(first[0]) < total
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    vectors = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
    assert 0 < vectors < total
    conn.close()
    with Catalog(db) as catalog:
        assert len(list(catalog.iter_tools())) == total
        assert catalog.search("read a file", mode="bm25").hits
        report = catalog.reindex()  # resumes: only what the killed run had not committed
        assert 0 < report.embedded < total
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] == total
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
