"""A toolkit's source kind (manifest, Python code, MCP server, OpenAPI document) never changes
silently: every pair of kinds, through the Python API and the CLI."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures import openapi_app
from tests.helpers import ROOT, table_snapshot, toolkit_data, write_manifest
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import VersionConflictError
from toolcat.registry.python import toolkit_from_module
from toolcat.remote.mcp import close_all

SERVER = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'mcp_server.py'}"
BASE = "http://127.0.0.1:9"


def _manifest(catalog: Catalog, tmp_path: Path, replace: bool) -> Any:
    path = write_manifest(tmp_path, toolkit_data("kit", "5.0.0"))
    return catalog.register(path, replace=replace)


def _python(catalog: Catalog, tmp_path: Path, replace: bool) -> Any:
    toolkit = toolkit_from_module("tests.fixtures.tools", name="kit", version="6.0.0")
    return catalog.register(toolkit, replace=replace)


def _mcp(catalog: Catalog, tmp_path: Path, replace: bool) -> Any:
    return catalog.register_mcp(SERVER, toolkit="kit", version="7.0.0", replace=replace)


def _openapi(catalog: Catalog, tmp_path: Path, replace: bool) -> Any:
    document = copy.deepcopy(openapi_app.DOCUMENT)
    return catalog.register_openapi(
        document, toolkit="kit", version="8.0.0", base_url=BASE, replace=replace
    )


KINDS: dict[str, tuple[Callable[[Catalog, Path, bool], Any], str]] = {
    "manifest": (_manifest, "a manifest"),
    "python": (_python, "Python code"),
    "mcp": (_mcp, "an MCP server"),
    "openapi": (_openapi, "an OpenAPI document"),
}
FAST_MCP = {("mcp", "openapi"), ("manifest", "mcp")}  # each MCP registration starts a server
PAIRS = [
    pytest.param(
        a,
        b,
        id=f"{a}-then-{b}",
        marks=[pytest.mark.slow] if "mcp" in (a, b) and (a, b) not in FAST_MCP else [],
    )
    for a in KINDS
    for b in KINDS
    if a != b
]


@pytest.fixture(autouse=True)
def _close() -> Any:
    yield
    close_all()


@pytest.mark.parametrize(("first", "then"), PAIRS)
def test_a_toolkit_keeps_its_source_kind_unless_replaced(
    catalog: Catalog, tmp_path: Path, first: str, then: str
) -> None:
    register_first, first_phrase = KINDS[first]
    register_then, then_phrase = KINDS[then]
    register_first(catalog, tmp_path, False)
    before = table_snapshot(catalog.path)
    with pytest.raises(VersionConflictError) as refused:
        register_then(catalog, tmp_path, False)
    message = str(refused.value)
    assert "\n" not in message
    assert f"toolkit 'kit' comes from {first_phrase}" in message
    assert f"this registration from {then_phrase}" in message
    assert "--replace" in message
    assert table_snapshot(catalog.path) == before
    register_then(catalog, tmp_path, True)
    assert catalog.versions("kit")[-1].active
    # the same kind again is no change of kind
    register_then(catalog, tmp_path, False)


def test_the_same_kind_registers_new_versions_freely(catalog: Catalog) -> None:
    document = copy.deepcopy(openapi_app.DOCUMENT)
    catalog.register_openapi(document, toolkit="pets", base_url=BASE)
    document["paths"]["/text"]["get"]["summary"] = "Changed"
    assert catalog.register_openapi(document, toolkit="pets", base_url=BASE).version == "1.0.1"


def test_openapi_imports_stored_before_kinds_were_recorded_are_still_openapi(
    catalog: Catalog,
) -> None:
    """Older catalogs stored an OpenAPI import's document path as its source."""
    import sqlite3

    catalog.register_openapi(copy.deepcopy(openapi_app.DOCUMENT), toolkit="pets", base_url=BASE)
    with sqlite3.connect(catalog.path) as conn:
        conn.execute("UPDATE toolkits SET source = 'pets.json'")
    document = copy.deepcopy(openapi_app.DOCUMENT)
    document["paths"]["/text"]["get"]["summary"] = "Changed"
    assert catalog.register_openapi(document, toolkit="pets", base_url=BASE).version == "1.0.1"


def test_cli_import_cannot_take_over_a_manifest_toolkit(
    db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reported attack: ``register --openapi … --toolkit math`` over a manifest's math."""
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec.json"
    import json

    spec.write_text(json.dumps(openapi_app.DOCUMENT))
    manifest = write_manifest(tmp_path, toolkit_data("math", "1.0.0"))
    runner = CliRunner()
    db = ["--db", str(db_path)]
    assert runner.invoke(cli, [*db, "register", str(manifest)]).exit_code == 0
    before = table_snapshot(db_path)
    imports = [
        ["--openapi", str(spec), "--base-url", BASE],
        ["--mcp-stdio", SERVER],
        ["--module", "tests.fixtures.tools"],
    ]  # an MCP import is refused after reading the server's tools, before writing
    for args in imports:
        out = runner.invoke(cli, [*db, "register", *args, "--toolkit", "math"])
        assert out.exit_code == VersionConflictError.exit_code, out.output
        assert "toolkit 'math' comes from a manifest" in out.output
        assert "--replace" in out.output and "Traceback" not in out.output
        assert len(out.output.strip().splitlines()) == 1, out.output
        assert table_snapshot(db_path) == before
    taken = runner.invoke(cli, [*db, "register", *imports[0], "--toolkit", "math", "--replace"])
    assert taken.exit_code == 0, taken.output
    assert "added     math 1.0.1 (7 tools)" in taken.output


def test_a_pinned_import_version_is_overwritten_only_with_replace(catalog: Catalog) -> None:
    document = copy.deepcopy(openapi_app.DOCUMENT)
    catalog.register_openapi(document, toolkit="pets", version="2.0", base_url=BASE)
    document["paths"]["/text"]["get"]["summary"] = "Changed"
    with pytest.raises(VersionConflictError, match="already registered"):
        catalog.register_openapi(document, toolkit="pets", version="2.0", base_url=BASE)
    again = catalog.register_openapi(
        document, toolkit="pets", version="2.0", base_url=BASE, replace=True
    )
    assert (again.status, again.version) == ("replaced", "2.0")
    assert [v.version for v in catalog.versions("pets")] == ["2.0"]
