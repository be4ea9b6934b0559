"""Hostile manifests: each is refused quickly with one line per problem naming file, toolkit,
tool and field, and the catalog stays as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import table_snapshot, toolkit_data, write_manifest
from toolcat import Catalog, ManifestError, Toolkit
from toolcat.errors import MAX_PROBLEMS
from toolcat.registry.limits import MAX_MANIFEST_BYTES
from toolcat.registry.manifest import load_manifest

HEADER = "toolkit: bomb\nversion: 1.0.0\nmodule: m\n"


def refused(catalog: Catalog, path: Path, *words: str) -> ManifestError:
    before = table_snapshot(catalog.path)
    started = time.monotonic()
    with pytest.raises(ManifestError) as err:
        catalog.register(path)
    assert time.monotonic() - started < 10
    for word in words:
        assert word in str(err.value), str(err.value)
    assert err.value.file == str(path)
    assert table_snapshot(catalog.path) == before
    return err.value


def test_billion_laughs_is_refused_at_the_first_alias(tmp_path: Path, catalog: Catalog) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = tmp_path / "laughs.yaml"
    path.write_text(
        HEADER + "x-bomb:\n" + "\n".join("  " + line for line in lines) + "\ntools: []\n"
    )
    refused(catalog, path, "aliases (*a0) are not allowed", "line 6")


def test_an_alias_inside_a_default_is_refused(tmp_path: Path, catalog: Catalog) -> None:
    path = tmp_path / "alias.yaml"
    path.write_text(
        HEADER + "x: &v 5\ntools:\n  - name: t\n    description: d\n    implementation: m:t\n"
        "    parameters: {type: object, properties: {n: {type: integer, default: *v}}}\n"
    )
    refused(catalog, path, "aliases (*v)")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_duplicate_keys_are_refused_naming_the_key(
    tmp_path: Path, catalog: Catalog, suffix: str
) -> None:
    if suffix == ".json":
        text = (
            '{"toolkit": "dup", "version": "1.0", "module": "m", "tools": [{"name": "t", '
            '"description": "d", "implementation": "m:t", "implementation": "os:system"}]}'
        )
    else:
        text = (
            "toolkit: dup\nversion: '1.0'\nmodule: m\ntools:\n  - name: t\n    description: d\n"
            "    implementation: m:t\n    implementation: os:system\n"
        )
    path = tmp_path / f"dup{suffix}"
    path.write_text(text)
    error = refused(catalog, path, "duplicate key 'implementation'", "toolkit 'dup'")
    if suffix == ".yaml":
        assert "line 8" in str(error)


@pytest.mark.parametrize(
    ("json_text", "yaml_text", "reason"),
    [
        ("NaN", ".nan", "not a JSON number"),
        ("-Infinity", "-.inf", "not a JSON number"),
        ("9" * 5000, "9" * 5000, "5000 digits"),
        (str(2**64), str(2**64), "64-bit"),
        ('"\\ud800"', '"\\ud800"', "lone surrogate"),
    ],
    ids=["nan", "infinity", "5000-digits", "2**64", "surrogate"],
)
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_values_that_cannot_round_trip_json(
    tmp_path: Path, catalog: Catalog, json_text: str, yaml_text: str, reason: str, suffix: str
) -> None:
    data = toolkit_data()
    data["tools"][0]["parameters"]["properties"]["days"]["default"] = "PLACEHOLDER"
    path = write_manifest(tmp_path, data, suffix, name="odd")
    literal = json_text if suffix == ".json" else yaml_text
    path.write_text(
        path.read_text().replace('"PLACEHOLDER"', literal).replace("PLACEHOLDER", literal)
    )
    error = refused(catalog, path, reason)
    assert (error.toolkit, error.tool, error.field) == (
        "weather",
        "get_forecast",
        "parameters.properties.days.default",
    )


def test_nesting_past_the_depth_bound(tmp_path: Path, catalog: Catalog) -> None:
    schema: dict[str, object] = {"type": "object"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"x": schema}}
    data = toolkit_data(tools=[{"name": "deep", "description": "d", "parameters": schema}])
    error = refused(catalog, write_manifest(tmp_path, data, ".json"), "deeper than 64 levels")
    assert error.tool == "deep" and error.field is not None and len(error.field) < 200


def test_a_manifest_too_large(tmp_path: Path, catalog: Catalog) -> None:
    path = tmp_path / "big.yaml"
    with open(path, "w") as handle:
        handle.write(HEADER + "description: '")
        handle.write("x" * (MAX_MANIFEST_BYTES + 10))
        handle.write("'\ntools: []\n")
    refused(catalog, path, "manifests are limited to 4 MiB")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_files_that_are_not_regular(tmp_path: Path, kind: str) -> None:
    """Through the CLI, with a timeout: a FIFO or /dev/zero must not hang the reader."""
    path = tmp_path / "m.yaml"
    if kind == "fifo":
        os.mkfifo(path)
        expected = "a FIFO"
    else:
        path.symlink_to("/dev/zero")
        expected = "a device"
    result = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(tmp_path / "c.db"), "register", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: is {expected}; a manifest must be a regular file"
    ]


def test_a_directory_named_like_a_manifest(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.mkdir()
    with pytest.raises(ManifestError, match="is a directory, not a manifest file"):
        load_manifest(path)


def test_every_problem_is_reported_one_line_each(tmp_path: Path) -> None:
    data = toolkit_data()
    data["tools"][0]["description"] = " "
    data["tools"][0]["parameters"]["properties"]["days"]["default"] = float("nan")
    data["tools"][1]["name"] = "bad name!"
    data["tools"][1]["timeout"] = -1
    data["tools"][1]["implementation"] = "os:system"
    path = tmp_path / "many.json"
    path.write_text(json.dumps(data))
    other = write_manifest(tmp_path, {**toolkit_data("second"), "tolls": []})
    db = tmp_path / "c.db"
    result = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "register", str(path), str(other)],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert lines == [
        f"error: {path}: toolkit 'weather', tool 'get_forecast', field "
        "'parameters.properties.days.default': NaN is not a JSON number",
        f"error: {other}: toolkit 'second', field 'tolls': unknown field (a typo?)",
    ]  # NaN stops validation of its file; the other file's problems still come
    del data["tools"][0]["parameters"]["properties"]["days"]["default"]
    path.write_text(json.dumps(data))
    as_json = subprocess.run(
        [sys.executable, "-m", "toolcat", "--db", str(db), "register", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert as_json.returncode == 3
    problems = json.loads(as_json.stdout)["error"]["problems"]
    assert {(p["tool"], p["field"]) for p in problems} == {
        ("get_forecast", "description"),
        ("bad name!", "name"),
        ("bad name!", "timeout"),
    }
    assert all(p["file"] == str(path) and p["toolkit"] == "weather" for p in problems)
    assert not db.exists() or Catalog(db).revision == 0


def test_problems_are_bounded(tmp_path: Path) -> None:
    tools = [{"name": f"t{i}", "description": " "} for i in range(50)]
    path = write_manifest(tmp_path, toolkit_data(tools=tools))
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert len(err.value.problems) == MAX_PROBLEMS and err.value.total == 50
    assert err.value.lines()[-1] == "... and 30 more problems"
    assert str(err.value).endswith("(and 49 more problems)") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        ("toolkit", "files\n", "toolkit"),
        ("name", "read_file\n", "name"),
        ("version", "1.0.0\n", "version"),
        ("module", "weather_tools\n", "module"),
        ("implementation", "weather_tools.forecast:get_forecast\n", "implementation"),
    ],
)
def test_names_with_a_trailing_newline_are_refused(
    tmp_path: Path, where: str, value: str, field: str
) -> None:
    data = toolkit_data()
    if where in ("name", "implementation"):
        data["tools"][0][where] = value
    else:
        data[where] = value
    with pytest.raises(ManifestError) as err:
        load_manifest(write_manifest(tmp_path, data, ".json"))
    assert err.value.field == field


def test_remove_with_a_newline_leaves_the_toolkit(catalog: Catalog) -> None:
    catalog.register(Toolkit.model_validate(toolkit_data("files")))
    for ref in ("files\n", " files", "files@1.0.0\n"):
        with pytest.raises(Exception, match="not a toolkit name"):
            catalog.remove(ref)
    assert [t.toolkit for t in catalog.toolkits()] == ["files"]
    for address in ("files.get_forecast\n", "get_forecast ", "files.get_forecast@1.0.0\n"):
        with pytest.raises(Exception, match="unknown tool"):
            catalog.get(address)
    assert catalog.get("files.get_forecast@1.0.0").name == "get_forecast"


def test_a_toolkit_built_in_code_is_held_to_the_same_values(catalog: Catalog) -> None:
    data = toolkit_data()
    data["tools"][0]["parameters"]["properties"]["days"]["default"] = float("inf")
    with pytest.raises(ManifestError, match="not a JSON number"):
        catalog.register(Toolkit.model_validate(data))
    assert catalog.revision == 0
