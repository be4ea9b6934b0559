"""A catalog whose last pages are random bytes (a torn copy, a bad disk): every read path
says "damaged" in one line naming the file, never an untranslated ``DatabaseError``."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from tests.store.test_damage import OPERATIONS
from toolcat import Catalog, CatalogDamagedError, CatalogError, ToolcatError

PAGE = 4096
READS = [
    name
    for name in OPERATIONS
    if name
    in {
        "list",
        "list_summaries",
        "search_bm25",
        "search_summaries",
        "search_regex",
        "get",
        "toolkits",
        "versions",
        "status",
        "usage",
    }
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("pages") / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(SAMPLE_TOOLKITS)
    return db


def torn(pristine: Path, folder: Path, seed: int) -> Path:
    """A copy of ``pristine`` whose last 1-6 pages are random bytes (``seed`` picks which)."""
    chance = random.Random(seed)
    db = folder / f"torn-{seed}.db"
    shutil.copy(pristine, db)
    pages = chance.randint(1, 6)
    with open(db, "r+b") as f:
        f.seek(-pages * PAGE, 2)
        f.write(chance.randbytes(pages * PAGE))
    return db


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("where", ["last", "within"])
def test_every_read_of_torn_pages_is_ok_or_damaged(
    pristine: Path, tmp_path: Path, seed: int, where: str
) -> None:
    db = (torn if where == "last" else torn_within)(pristine, tmp_path, seed)
    for name in READS:
        try:
            with Catalog(db) as catalog:
                OPERATIONS[name](catalog)
        except ToolcatError as e:
            assert isinstance(e, CatalogError) and str(db) in str(e), f"{name}: {e}"
        # anything else (sqlite3.DatabaseError) fails the test with its traceback


def torn_within(pristine: Path, folder: Path, seed: int) -> Path:
    """A copy of ``pristine`` with 1-6 pages of random bytes from a page ``seed`` picks
    past the first: which table's pages come last depends on the order a registration
    wrote them in, so the pages ``list`` reads are looked for anywhere."""
    chance = random.Random(seed)
    db = folder / f"torn-within-{seed}.db"
    shutil.copy(pristine, db)
    count = db.stat().st_size // PAGE
    first = chance.randint(1, count - 1)
    pages = min(chance.randint(1, 6), count - first)
    with open(db, "r+b") as f:
        f.seek(first * PAGE)
        f.write(chance.randbytes(pages * PAGE))
    return db


def test_the_cli_lists_torn_pages_as_damaged(pristine: Path, tmp_path: Path) -> None:
    seed = next(s for s in range(200) if lists_as_damaged(torn_within(pristine, tmp_path, s)))
    db = tmp_path / f"torn-within-{seed}.db"
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "list", "--include-deferred"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == CatalogError.exit_code, done.stderr
    assert done.stderr.count("\n") == 1 and f"catalog '{db}' is damaged" in done.stderr


def lists_as_damaged(db: Path) -> bool:
    """Whether listing ``db`` meets the damage (some torn pages hold nothing list reads)."""
    try:
        with Catalog(db) as catalog:
            catalog.list_summaries(include_deferred=True, limit=1000)
    except CatalogDamagedError:
        return True
    except ToolcatError:
        return False
    except Exception:  # the code before: an untranslated DatabaseError also marks the seed
        return True
    return False
