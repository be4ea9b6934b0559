"""What a new user trips on: a mistyped --db, no way back after deprecate, exit codes that
say a call failed, JSON errors under --json, an empty catalog that says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS, toolkit_data, write_manifest
from toolcat import Catalog, CatalogError, Toolkit
from toolcat.cli import cli


def run(db: Path, *args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(cli, ["--db", str(db), *args])
    assert result.exit_code == code, (result.output, result.stderr)
    return result


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("search", "read a file"),
        ("show", "read_file"),
        ("status",),
        ("toolkits",),
        ("versions", "files"),
        ("deprecate", "files@1.0.0"),
        ("remove", "files"),
        ("reindex",),
        ("usage",),
        ("export", "--format", "openai-chat", "--all"),
        ("call", "calculate", "--args", "{}"),
        ("serve",),
    ],
    ids=lambda args: args[0],
)
def test_reading_commands_need_an_existing_catalog(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "mistyped" / "catalgo.db"
    result = CliRunner().invoke(cli, ["--db", str(db), *args], input="")
    assert result.exit_code == CatalogError.exit_code, result.output
    assert f"no catalog at '{db}'" in result.stderr and "toolcat init" in result.stderr
    assert not db.parent.exists()  # neither the file nor its folder was made


def test_init_and_register_create_the_catalog(tmp_path: Path) -> None:
    first = tmp_path / "a" / "catalog.db"
    assert run(first, "init").stdout.strip() == str(first) and first.exists()
    second = tmp_path / "b" / "catalog.db"
    run(second, "register", str(SAMPLE_TOOLKITS))
    assert "files.read_file" in run(second, "list").stdout
    with pytest.raises(CatalogError, match="no catalog at"):
        Catalog(tmp_path / "c.db", create=False)
    Catalog(tmp_path / "c.db").close()  # the library creates by default


def two_versions(db: Path, tmp_path: Path) -> None:
    for version in ("1.0.0", "2.0.0"):
        run(db, "register", str(write_manifest(tmp_path, toolkit_data(version=version))))


def test_activate_takes_a_deprecation_back(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    two_versions(db, tmp_path)
    out = run(db, "deprecate", "weather@2.0.0").stdout
    assert "active: weather 1.0.0" in out
    out = run(db, "activate", "weather@2.0.0").stdout
    assert "active: weather 2.0.0" in out
    versions = json.loads(run(db, "versions", "weather", "--json").stdout)["versions"]
    assert [(v["version"], v["active"], v["deprecated"]) for v in versions] == [
        ("1.0.0", False, False),
        ("2.0.0", True, False),
    ]
    run(db, "deprecate", "weather@1.0.0")
    out = run(db, "activate", "weather@1.0.0").stdout  # not newest: 2.0.0 stays active
    assert "weather@1.0.0 is not deprecated; active: weather 2.0.0" in out
    assert "no version '9.0'" in run(db, "activate", "weather@9.0", code=4).stderr
    for command in ("activate", "deprecate"):
        assert "TOOLKIT@VERSION" in run(db, command, "weather", code=2).stderr


def test_activate_in_the_library(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data()))
    revision = catalog.deprecate("weather@1.0.0")
    assert catalog.toolkits() == []
    assert catalog.activate("weather", "1.0.0") == revision + 1
    assert [v.version for v in catalog.toolkits()] == ["1.0.0"]
    assert catalog.activate("weather@1.0.0") == revision + 1  # already: nothing changes
    assert catalog.get("weather.get_forecast").deprecated is False


@pytest.mark.parametrize(
    ("args", "code", "error_code"),
    [
        (("calculate", "--args", '{"expression": "1/0"}'), 16, "TOOL_ERROR"),
        (("sleeps", "--args", '{"seconds": 5}', "--timeout", "0.2"), 11, "TIMEOUT"),
        (("calculate", "--args", '{"expression": "6*7"}'), 0, None),
    ],
    ids=["tool-error", "timeout", "success"],
)
def test_call_exits_non_zero_when_the_tool_failed(
    tmp_path: Path, args: tuple[str, ...], code: int, error_code: str | None
) -> None:
    db = tmp_path / "catalog.db"
    run(db, "register", str(SAMPLE_TOOLKITS))
    run(db, "register", "--module", "tests.fixtures.tools")
    done = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "call", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stderr
    assert json.loads(done.stdout)["error_code"] == error_code  # the result, printed as ever
    shell = subprocess.run(
        ["bash", "-c", f'"$0" -m toolcat --db "$1" call {" ".join(map(repr, args))} && echo next',
         sys.executable, str(db)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ("next" in shell.stdout) is (code == 0)


@pytest.mark.parametrize(
    ("args", "code", "error_code"),
    [
        (("show", "nosuch"), 4, "UNKNOWN_TOOL"),
        (("versions", "nosuch"), 4, "UNKNOWN_TOOLKIT"),
        (("list", "--cursor", "garbage"), 7, "INVALID_QUERY"),
        (("search", "x", "--mode", "regex", "--tag", "["), 0, None),
    ],
    ids=["show", "versions", "list", "search"],
)
def test_json_commands_print_their_errors_as_json(
    tmp_path: Path, args: tuple[str, ...], code: int, error_code: str | None
) -> None:
    db = tmp_path / "catalog.db"
    run(db, "register", str(SAMPLE_TOOLKITS))
    result = run(db, *args, "--json", code=code)
    shape = json.loads(result.stdout)
    if error_code is None:
        assert "error" not in shape
        return
    assert shape["error"]["code"] == error_code and shape["error"]["message"]
    assert result.stderr.startswith("error: ")


def test_toolkits_on_an_empty_catalog_says_so(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    run(db, "init")
    assert "no active toolkits" in run(db, "toolkits").stdout
    assert json.loads(run(db, "toolkits", "--json").stdout) == {"toolkits": []}


def test_a_missing_import_root_names_the_cli_flag(tmp_path: Path) -> None:
    data = toolkit_data()
    del data["module"]
    result = run(tmp_path / "c.db", "register", str(write_manifest(tmp_path, data)), code=3)
    assert "--trust-any-module" in result.stderr
