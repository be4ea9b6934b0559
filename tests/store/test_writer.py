"""A registration's page cache: large while it writes, as it was afterwards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolcat import Catalog
from toolcat.store import writer

from ..helpers import toolkit_data, write_manifest


def test_a_registration_writes_with_a_large_page_cache_and_gives_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    register_one = writer._register_one

    def watched(conn: Any, *args: Any) -> Any:
        seen.append(conn.execute("PRAGMA cache_size").fetchone()[0])
        return register_one(conn, *args)

    monkeypatch.setattr(writer, "_register_one", watched)
    with Catalog(tmp_path / "c.db", create=True) as catalog:
        conn = catalog._conn
        before = conn.execute("PRAGMA cache_size").fetchone()[0]
        catalog.register(write_manifest(tmp_path, toolkit_data("kit"), ".json"))
        assert seen == [-writer.REGISTER_CACHE_KIB]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == before
        monkeypatch.setattr(writer, "_register_one", lambda *a: 1 / 0)
        with pytest.raises(ZeroDivisionError):  # a failed one gives it back too
            catalog.register(write_manifest(tmp_path, toolkit_data("other"), ".json"))
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == before
