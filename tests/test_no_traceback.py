"""Hostile input that used to end in a traceback: each is a one-line error with its
documented exit code, from the CLI and from the library."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import toolkit_data, write_manifest
from toolcat import Catalog, InvalidQueryError, ManifestError, Toolkit


def toolcat(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\ufffe"], ids=repr)
@pytest.mark.parametrize("where", ["key", "value", "quoted"])
def test_a_yaml_manifest_with_a_control_character(tmp_path: Path, char: str, where: str) -> None:
    text = {
        "key": f"toolkit: demo\nversion: '1.0'\nde{char}scription: x\n",
        "value": f"toolkit: demo\nversion: '1.0'\ndescription: a{char}b\n",
        "quoted": f"toolkit: demo\nversion: '1.0'\ndescription: 'a{char}b'\n",
    }[where]
    manifest = tmp_path / "demo.yaml"
    manifest.write_text(text, encoding="utf-8")
    with pytest.raises(ManifestError) as err, Catalog(tmp_path / "lib.db") as catalog:
        catalog.register(manifest)
    assert "line 3" in str(err.value) and f"U+{ord(char):04X}" in str(err.value)
    line = one_line_error(toolcat(tmp_path / "cli.db", "register", str(manifest)), 3)
    assert str(manifest) in line and "line 3" in line


def nested_cursor(depth: int) -> str:
    return base64.urlsafe_b64encode(("[" * depth + "]" * depth).encode()).decode().rstrip("=")


@pytest.mark.parametrize("depth", [50, 5_000, 100_000])
def test_a_cursor_of_deeply_nested_json(tmp_path: Path, depth: int) -> None:
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        catalog.register(Toolkit.model_validate(toolkit_data()))
        with pytest.raises(InvalidQueryError, match="invalid cursor"):
            catalog.list(cursor=nested_cursor(depth))
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(100)  # a deep stack already in use: still no RecursionError
        try:
            with pytest.raises(InvalidQueryError, match="invalid cursor"):
                catalog.list_summaries(cursor=nested_cursor(depth))
        finally:
            sys.setrecursionlimit(old)
    if depth <= 5_000:  # the longest fits on a command line
        line = one_line_error(toolcat(db, "list", "--cursor", nested_cursor(depth)), 7)
        assert len(line) < 200


def test_call_arguments_of_deeply_nested_json(tmp_path: Path) -> None:
    result = toolcat(tmp_path / "catalog.db", "call", "x", "--args", "[" * 50_000 + "]" * 50_000)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "nested too deeply" in result.stderr


def test_two_manifests_of_one_batch_defining_one_version_differently(tmp_path: Path) -> None:
    folder = tmp_path / "manifests"
    folder.mkdir()
    first = write_manifest(folder, toolkit_data(version="1.0"), name="a")
    second = write_manifest(folder, toolkit_data(version="1.0.0", description="other"), name="b")
    db = tmp_path / "catalog.db"
    with Catalog(db) as catalog:
        with pytest.raises(ManifestError) as err:
            catalog.register(folder)
        assert catalog.toolkits() == [] and catalog.revision == 0
        with pytest.raises(ManifestError):
            catalog.register(folder, replace=True)  # which one would --replace keep?
        same = write_manifest(folder, toolkit_data(version="1.0"), name="b")  # identical: fine
        assert same == second
        assert [r.status for r in catalog.register(folder)] == ["added", "unchanged"]
    assert str(first) in str(err.value) and str(second) in str(err.value)
    assert "--replace" not in str(err.value)
    write_manifest(folder, toolkit_data(version="1.0", description="other"), name="b")
    line = one_line_error(toolcat(tmp_path / "cli.db", "register", str(folder)), 3)
    assert str(first) in line and str(second) in line


def test_an_unexpected_exception_is_one_line_in_the_cli(tmp_path: Path) -> None:
    """The last net, for bugs: no traceback without --debug."""
    script = (
        "import sys\n"
        "from toolcat import cli, catalog\n"
        "def boom(*a, **k): raise KeyError('surprise')\n"
        "catalog.Catalog.toolkits = boom\n"
        "sys.argv = ['toolcat', '--db', sys.argv[1], 'toolkits']\n"
        "cli.main()\n"
    )
    db = tmp_path / "catalog.db"
    Catalog(db).close()
    result = subprocess.run(
        [sys.executable, "-c", script, str(db)], capture_output=True, text=True, check=False
    )
    line = one_line_error(result, 1)
    assert "unexpected KeyError" in line and "--debug" in line
