"""``toolcat call --save-artifacts`` into a folder that cannot be: refused before the tool
runs, in one line that names the option."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from toolcat import Catalog
from toolcat.cli import cli
from toolcat.registry.python import toolkit_from_module
from toolcat.runtime import artifacts


@pytest.mark.parametrize("where", ["under a file", "a file", "under /proc"])
def test_an_impossible_save_folder_is_refused_before_the_call(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = tmp_path / "kept"
    monkeypatch.setenv("TOOLCAT_ARTIFACTS", str(kept))
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(toolkit_from_module("tests.fixtures.artifact_tools"))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    folder = {
        "under a file": a_file / "reports",
        "a file": a_file,
        "under /proc": Path("/proc/self/no-such/reports"),
    }[where]
    size = str(artifacts.INLINE_BYTES + 1)  # the tool would write a call folder if it ran
    args = ["--db", str(db), "call", "emit", "--args", f'{{"size": {size}}}']
    result = CliRunner().invoke(cli, [*args, "--save-artifacts", str(folder)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "--save-artifacts" in result.stderr and "unexpected" not in result.stderr
    assert "emitted" not in result.stdout and not kept.exists()  # the tool never ran
    assert a_file.read_text() == "mine"
