"""attack57: the rows of a registration (``store/rows.py``: definitions taken as they are,
the toolkit's hash spliced from encoded members) and FTS5's merge settings while a
registration fills an empty index (``store/writer.py`` ``_filling``)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from toolcat import Catalog
from toolcat.models import Tool, ToolAnnotations, Toolkit, canonical_json
from toolcat.store import writer
from toolcat.store.rows import rows_of

from ..helpers import toolkit_data, write_manifest

ROOT = Path(__file__).resolve().parents[2]


class Unit(BaseModel):
    name: str = "metric"
    symbol: str | None = None


def _construct(tool: dict[str, Any]) -> Toolkit:
    return Toolkit.model_construct(
        name="kit",
        version="1.0",
        description="",
        tags=[],
        defer_loading=False,
        module=None,
        tools=[Tool.model_construct(**{"name": "t", "description": "A tool.", **tool})],
    )


def _validated(tool: dict[str, Any]) -> Toolkit:
    return Toolkit(name="kit", version="1.0", tools=[Tool(name="t", description="A tool.", **tool)])


@pytest.mark.parametrize(
    ("make", "tool"),
    [
        (_validated, {"parameters": {"type": "object", "unit": Unit()}}),
        (_validated, {"parameters": {"type": "object", "units": [[Unit(symbol=None)]]}}),
        (_validated, {"output_schema": {"type": "object", "default": Unit()}}),
        (_construct, {"annotations": {"title": "T", "extra": 1, "read_only": None}}),
        (_construct, {"annotations": {}}),
        (_construct, {"output_schema": {"a": [Unit()]}, "timeout": float("nan")}),
        (_construct, {"annotations": ToolAnnotations.model_construct(title="T")}),
        (_validated, {"annotations": {"read_only": True}, "parameters": {"type": "object"}}),
    ],
    ids=[
        "model-in-parameters",
        "deep-model",
        "model-in-output-schema",
        "annotations-dict",
        "annotations-empty-dict",
        "constructed-model-and-nan",
        "annotations-constructed",
        "plain",
    ],
)
def test_the_digest_is_the_toolkits_content_hash_whatever_it_holds(
    make: Any, tool: dict[str, Any]
) -> None:
    """pydantic leaves out the None fields of a model wherever it sits when a definition is
    dumped without them, and dumps a dict given as the annotations as it is: putting back
    only the tool's and a ``ToolAnnotations``' None fields gave another text (and hash)
    than ``content_hash`` dumps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns of a dict where a model belongs
        toolkit = make(tool)
        rows = rows_of(toolkit)
        assert rows.digest == toolkit.content_hash()
        for made, model in zip(rows.tools, toolkit.tools, strict=True):
            assert made.definition == canonical_json(
                model.model_dump(mode="json", exclude_none=True)
            )


def test_a_toolkit_from_code_with_a_model_inside_stores_its_content_hash(tmp_path: Path) -> None:
    toolkit = _validated({"parameters": {"type": "object", "unit": Unit()}})
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(toolkit)
        assert catalog.register(toolkit)[0].status == "unchanged"
    conn = sqlite3.connect(db)
    try:
        (stored,) = conn.execute("SELECT content_hash FROM toolkits").fetchone()
    finally:
        conn.close()
    assert stored == toolkit.content_hash()


def _config(db: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT k, v, typeof(v) FROM tools_fts_config"
            " WHERE k IN ('automerge', 'crisismerge') ORDER BY k"
        ).fetchall()
    finally:
        conn.close()


def _set_config(db: Path, key: str, value: Any) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT OR REPLACE INTO tools_fts_config (k, v) VALUES (?, ?)", (key, value))
        conn.commit()
    finally:
        conn.close()


def _kit(folder: Path, name: str = "kit", n: int = 3) -> Path:
    tools = [{"name": f"t{i}", "description": f"Forecast number {i}."} for i in range(n)]
    return write_manifest(folder, toolkit_data(name, tools=tools), ".json", name=name)


@pytest.mark.parametrize(
    ("key", "value"),
    [("automerge", 100), ("automerge", -1), ("crisismerge", -1), ("automerge", 65)],
)
def test_a_setting_fts5_refuses_does_not_stop_registration(
    tmp_path: Path, key: str, value: int
) -> None:
    """A value written into ``tools_fts_config`` by hand (or by a damaged file) that FTS5
    refuses to be set to: FTS5 reads it as its default, and the registration that puts the
    settings back after filling the index put back its default instead of failing with
    "SQL logic error" (the CLI: "a bug in toolcat")."""
    db = tmp_path / "c.db"
    Catalog(db, create=True).close()
    _set_config(db, key, value)
    manifest = _kit(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "register", str(manifest)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with Catalog(db) as catalog:
        assert [tool.id for tool in catalog.list().tools] == ["kit.t0", "kit.t1", "kit.t2"]
        assert catalog.search("forecast", mode="bm25", k=5).hits
    assert dict((k, v) for k, v, _ in _config(db)) == {"automerge": 4, "crisismerge": 16}


def test_a_failed_registration_over_a_refused_setting_leaves_it(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    Catalog(db, create=True).close()
    _set_config(db, "automerge", 100)
    before = _config(db)
    folder = tmp_path / "bad"
    folder.mkdir()
    _kit(folder, "good", 3)
    other = toolkit_data("good", tools=[{"name": "t0", "description": "Other wording."}])
    write_manifest(folder, other, ".json", name="other")  # the version twice: refused
    with Catalog(db) as catalog, pytest.raises(Exception, match="also defined"):
        catalog.register([folder])
    assert _config(db) == before


@pytest.mark.parametrize("value", ["8", None, 2.5, b"\x00", 2**62])
def test_odd_prior_settings_register_and_keep_fts5s_answers(tmp_path: Path, value: Any) -> None:
    db = tmp_path / "c.db"
    Catalog(db, create=True).close()
    _set_config(db, "automerge", value)
    with Catalog(db) as catalog:
        catalog.register(_kit(tmp_path, n=30))
        hits = catalog.search("forecast number 7", mode="bm25", k=1).hits
        assert [hit.tool.name for hit in hits] == ["t7"]


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from toolcat import Catalog
    from toolcat.store import writer

    def flush(self):  # the settings are FTS5's while it fills: die there
        rows = self._conn.execute(
            "SELECT k, v FROM tools_fts_config WHERE k IN ('automerge', 'crisismerge')"
        ).fetchall()
        print(sorted(rows), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    writer.PendingFts.flush = flush
    Catalog(sys.argv[1]).register(sys.argv[2])
    """
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no SIGKILL")
def test_a_registration_killed_while_filling_leaves_fts5s_settings(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    Catalog(db, create=True).close()
    _set_config(db, "crisismerge", 12)
    before = _config(db)
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(db), str(_kit(tmp_path))],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    # killed with FTS5's filling settings in the table
    assert done.stdout.split() == ["[('automerge',", "0),", "('crisismerge',", "64)]"]
    assert _config(db) == before
    with Catalog(db) as catalog:
        assert catalog.list().tools == []
        catalog.register(_kit(tmp_path))
    assert _config(db) == [("automerge", 4, "integer"), ("crisismerge", 12, "integer")]


def test_filling_is_not_used_where_the_index_holds_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.db"
    with Catalog(db, create=True) as catalog:
        catalog.register(_kit(tmp_path, "first"))
    _set_config(db, "automerge", 100)  # FTS5 would refuse it: untouched, not even read
    before = _config(db)
    seen: list[Any] = []
    original = writer.PendingFts.flush

    def flush(self: Any) -> None:
        seen.append(
            self._conn.execute("SELECT v FROM tools_fts_config WHERE k = 'automerge'").fetchall()
        )
        original(self)

    monkeypatch.setattr(writer.PendingFts, "flush", flush)
    with Catalog(db) as catalog:
        catalog.register(_kit(tmp_path, "second"))
    assert seen and all(rows == [(100,)] for rows in seen)
    assert _config(db) == before
