from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import SAMPLE_TOOLKITS
from toolcat import Catalog


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "catalog.db"


@pytest.fixture
def catalog(db_path: Path) -> Iterator[Catalog]:
    with Catalog(db_path) as cat:
        yield cat


@pytest.fixture
def sample_catalog(catalog: Catalog) -> Catalog:
    catalog.register(SAMPLE_TOOLKITS)
    return catalog


@pytest.fixture
def sample_path(db_path: Path) -> Path:
    """A catalog file with the sample toolkits registered, no connection left open."""
    with Catalog(db_path) as cat:
        cat.register(SAMPLE_TOOLKITS)
    return db_path
