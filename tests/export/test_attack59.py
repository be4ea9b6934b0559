"""attack59: the Gemini export's bound on inlined references (attack58's fix).

``MAX_INLINED_NODES`` counts schema nodes, not bytes: each inlined copy of a definition
carries its text along (a description, an enum), so a small schema whose definition holds
one long description still exports as thousands of copies of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.export.test_attack58 import _fan_manifest
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import ToolcatError

MAX_EXPORT_BYTES = 1 << 20  # what registration allows one tool's definition (attack58's bound)
DESCRIPTION = 20_000  # characters of one definition's description


_manifest = _fan_manifest  # attack58's self-referring schema, with a description


@pytest.fixture
def wordy_catalog(tmp_path: Path) -> Path:
    manifest = tmp_path / "fan.json"
    manifest.write_text(json.dumps(_manifest(5, "d" * DESCRIPTION)))
    db = tmp_path / "catalog.db"
    with Catalog(db) as cat:
        cat.register(manifest)
    assert manifest.stat().st_size < 21_000
    return db


def test_gemini_export_of_a_wordy_fanning_schema_is_bounded(wordy_catalog: Path) -> None:
    with Catalog(wordy_catalog) as cat:
        try:
            exported = cat.export(["fan.fan"], "gemini")
        except ToolcatError:
            return  # refusing the schema in one line is a bound too
    size = len(json.dumps(exported.tools))
    assert size <= MAX_EXPORT_BYTES, f"a ~20 KB schema exported as {size:,} bytes"


def test_cli_gemini_export_of_a_wordy_fanning_schema_is_bounded(wordy_catalog: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(wordy_catalog), "export", "--format", "gemini", "--all", "--tools-only"]
    )
    assert len(result.output) <= MAX_EXPORT_BYTES, f"{len(result.output):,} bytes printed"


def test_held_a_wordy_definition_used_once_exports_once(tmp_path: Path) -> None:
    """Held: without fan-out, the description is exported once (no amplification)."""
    manifest = tmp_path / "one.json"
    manifest.write_text(json.dumps(_manifest(0, "d" * DESCRIPTION)))
    with Catalog(tmp_path / "c.db") as cat:
        cat.register(manifest)
        exported = cat.export(["fan.fan"], "gemini")
    assert len(json.dumps(exported.tools)) < 3 * DESCRIPTION


def test_held_arguments_too_deep_to_decode_are_left_as_text(tmp_path: Path) -> None:
    """Held: a model's argument text nested past the JSON parser is handed on as text."""
    manifest = tmp_path / "fan.json"
    manifest.write_text(json.dumps(_manifest(5, "n")))
    with Catalog(tmp_path / "c.db") as cat:
        cat.register(manifest)
        exported = cat.export(["fan.fan"], "gemini")
        name = exported.tools[0]["functionDeclarations"][0]["name"]
        paths = exported.json_arguments.get(name) or []
        assert paths
        deep = "[" * 200_000
        top = paths[0].split(".")[0].split("[")[0]
        got = exported.arguments(name, {top: deep})
    assert isinstance(got, dict)
