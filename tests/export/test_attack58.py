"""attack58: schema export (``toolcat export``, ``Catalog.export``) against hostile manifests.

A tool's parameters come from a manifest (or an MCP server, or an OpenAPI document): input.
Registration bounds a tool's definition at 1 MiB of JSON; what an export makes of it must be
bounded too (HOSTILE.md, "Unbounded work or memory": a bound per item)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import ToolcatError

MAX_EXPORT_BYTES = 1 << 20  # what registration allows one tool's definition


def _fan_manifest(fan: int, description: str | None = None) -> dict[str, Any]:
    """One tool whose parameters are a ~260-byte schema (more with a ``description`` of the
    definition): a definition whose ``fan`` properties all refer to the definition itself (a
    tree, legal JSON Schema)."""
    props = {f"p{i}": {"$ref": "#/$defs/N"} for i in range(fan)}
    definition: dict[str, Any] = {"type": "object", "properties": props}
    if description is not None:
        definition["description"] = description
    return {
        "toolkit": "fan",
        "version": "1.0.0",
        "description": "Fan-out of references.",
        "module": "toolcat.samples.math",
        "tools": [
            {
                "name": "fan",
                "description": "A tree of nodes.",
                "implementation": "toolcat.samples.math:prime_factors",
                "parameters": {
                    "type": "object",
                    "properties": {"x": {"$ref": "#/$defs/N"}},
                    "$defs": {"N": definition},
                },
            }
        ],
    }


@pytest.fixture
def fan_catalog(tmp_path: Path) -> Path:
    manifest = tmp_path / "fan.json"
    manifest.write_text(json.dumps(_fan_manifest(5)))
    db = tmp_path / "catalog.db"
    with Catalog(db) as cat:
        cat.register(manifest)
    assert manifest.stat().st_size < 1024
    return db


def test_gemini_export_of_a_small_fanning_schema_is_bounded(fan_catalog: Path) -> None:
    with Catalog(fan_catalog) as cat:
        tool = cat.get("fan.fan")
        assert len(json.dumps(tool.parameters)) < 1024
        try:
            exported = cat.export([tool], "gemini")
        except ToolcatError:
            return  # refusing the schema in one line is a bound too
    size = len(json.dumps(exported.tools))
    assert size <= MAX_EXPORT_BYTES, f"a <1 KiB schema exported as {size:,} bytes"


def test_cli_gemini_export_of_a_fanning_schema_is_bounded(fan_catalog: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--db", str(fan_catalog), "export", "--format", "gemini", "--all", "--tools-only"]
    )
    assert "unexpected" not in result.output
    assert len(result.output) <= MAX_EXPORT_BYTES, f"{len(result.output):,} bytes printed"


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic", "mcp"])
def test_other_formats_do_not_inline_references(fan_catalog: Path, fmt: str) -> None:
    """The formats that keep ``$ref`` as it is stay the size of the definition."""
    with Catalog(fan_catalog) as cat:
        exported = cat.export(["fan.fan"], fmt)
    assert len(json.dumps(exported.tools)) < 4096


def _free_form_catalog(tmp_path: Path) -> Catalog:
    manifest = tmp_path / "g.json"
    manifest.write_text(
        json.dumps(
            {
                "toolkit": "g",
                "version": "1.0.0",
                "description": "A tool taking any JSON value.",
                "module": "toolcat.samples.math",
                "tools": [
                    {
                        "name": "t",
                        "description": "Takes a blob.",
                        "implementation": "toolcat.samples.math:prime_factors",
                        "parameters": {
                            "type": "object",
                            "properties": {"blob": {"description": "any value"}},
                        },
                    }
                ],
            }
        )
    )
    cat = Catalog(tmp_path / "catalog.db")
    cat.register(manifest)
    return cat


def test_gemini_arguments_from_a_model_never_raise(tmp_path: Path) -> None:
    """A Gemini call's arguments are the model's output: input. A free-form argument comes
    back as JSON text and ``arguments`` decodes it; text too deep to decode must be left as
    text (or refused as a ToolcatError), never escape as RecursionError."""
    with _free_form_catalog(tmp_path) as cat:
        exported = cat.export(["g.t"], "gemini")
        assert exported.json_arguments == {"t": ["blob"]}
        deep = "[" * 100_000 + "]" * 100_000
        try:
            decoded = exported.arguments("t", {"blob": deep})
        except ToolcatError:
            return
        assert decoded == {"blob": deep}


def test_gemini_arguments_decode_plain_json_text(tmp_path: Path) -> None:
    with _free_form_catalog(tmp_path) as cat:
        exported = cat.export(["g.t"], "gemini")
        assert exported.arguments("t", {"blob": '{"a": [1, 2]}'}) == {"blob": {"a": [1, 2]}}
        assert exported.arguments("t", {"blob": "not json"}) == {"blob": "not json"}
