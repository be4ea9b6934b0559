"""``toolcat call`` prints what a tool said (a warning, its error, an artifact's name, type
and description) on the admin's terminal: an OSC sequence there retitles the terminal, and
``\\x1b[2J`` clears it. Text from a tool is made printable first."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from toolcat import Catalog
from toolcat.cli import cli
from toolcat.registry.python import toolkit_from_module


def test_call_prints_no_escape_sequence_a_tool_sent(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.attack.tools"))
    result = CliRunner().invoke(cli, ["--db", str(db), "call", "noisy"])
    said = result.stderr
    assert "boom" in said and "warn" in said and "artifact name" in said, said
    assert "\x1b" not in said and "\x07" not in said, said
