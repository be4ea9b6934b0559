from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import table_snapshot, toolkit_data, write_manifest
from toolcat import Catalog, ManifestError
from toolcat.registry.manifest import load_manifest, manifest_paths


def test_yaml_toml_and_json_give_the_same_toolkit(tmp_path: Path) -> None:
    data = toolkit_data()
    from_yaml = load_manifest(write_manifest(tmp_path, data, ".yaml"))
    from_json = load_manifest(write_manifest(tmp_path, data, ".json"))
    toml = tmp_path / "weather.toml"
    toml.write_text(
        """
toolkit = "weather"
version = "1.0.0"
description = "Current conditions and forecasts."
tags = ["network", "weather"]
module = "weather_tools"

[[tools]]
name = "get_forecast"
description = "Daily forecast for a city."
implementation = "weather_tools.forecast:get_forecast"
tags = ["read-only"]
defer_loading = true
idempotent = true
examples = ["will it rain in Lyon this weekend"]
[tools.parameters]
type = "object"
required = ["city"]
[tools.parameters.properties.city]
type = "string"
description = "City name"
[tools.parameters.properties.days]
type = "integer"
minimum = 1
maximum = 14
default = 5

[[tools]]
name = "current_conditions"
description = "Temperature, wind and sky right now at a place."
implementation = "weather_tools.now:current_conditions"
tags = ["read-only"]
[tools.parameters]
type = "object"
required = ["city"]
[tools.parameters.properties.city]
type = "string"
"""
    )
    from_toml = load_manifest(toml)
    assert from_yaml == from_json == from_toml
    assert from_yaml.content_hash() == from_toml.content_hash()


def _edit(path: list[Any], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(toolkit_data())
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()

# (id, manifest data, expected toolkit, tool, field, words in the reason)
BAD_MANIFESTS = [
    ("toolkit-missing", _edit(["toolkit"], _DELETE), None, None, "toolkit", "required"),
    (
        "toolkit-ill-formed",
        _edit(["toolkit"], "Weather Tools"),
        "Weather Tools",
        None,
        "toolkit",
        "a-z",
    ),
    ("version-bad", _edit(["version"], "one point two"), "weather", None, "version", "PEP 440"),
    (
        "tool-name-bad",
        _edit(["tools", 0, "name"], "get forecast!"),
        "weather",
        "get forecast!",
        "name",
        "1-64",
    ),
    (
        "tool-name-missing",
        _edit(["tools", 1, "name"], _DELETE),
        "weather",
        "#2",
        "name",
        "required",
    ),
    (
        "params-not-object",
        _edit(["tools", 0, "parameters"], {"type": "string"}),
        "weather",
        "get_forecast",
        "parameters",
        "type 'object'",
    ),
    (
        "params-invalid-schema",
        _edit(["tools", 0, "parameters", "properties", "days", "minimum"], "one"),
        "weather",
        "get_forecast",
        "parameters",
        "not valid JSON Schema",
    ),
    (
        "params-not-a-mapping",
        _edit(["tools", 0, "parameters"], ["city"]),
        "weather",
        "get_forecast",
        "parameters",
        "dictionary",
    ),
    (
        "duplicate-tools",
        _edit(["tools", 1, "name"], "get_forecast"),
        "weather",
        "get_forecast",
        "name",
        "duplicate",
    ),
    (
        "impl-not-module-attr",
        _edit(["tools", 0, "implementation"], "weather_tools.forecast"),
        "weather",
        "get_forecast",
        "implementation",
        "package.module:attribute",
    ),
    (
        "impl-outside-module",
        _edit(["tools", 0, "implementation"], "os:system"),
        "weather",
        "get_forecast",
        "implementation",
        "outside",
    ),
    (
        "unknown-tool-field",
        _edit(["tools", 0, "descripton"], "typo"),
        "weather",
        "get_forecast",
        "descripton",
        "unknown field",
    ),
    ("unknown-toolkit-field", _edit(["tolls"], []), "weather", None, "tolls", "unknown field"),
    ("no-tools", _edit(["tools"], []), "weather", None, "tools", "at least one tool"),
    (
        "empty-description",
        _edit(["tools", 0, "description"], "  "),
        "weather",
        "get_forecast",
        "description",
        "needs a description",
    ),
]


@pytest.mark.parametrize(
    ("data", "toolkit", "tool", "field", "reason"),
    [case[1:] for case in BAD_MANIFESTS],
    ids=[case[0] for case in BAD_MANIFESTS],
)
def test_bad_manifest_names_file_toolkit_tool_and_field(
    tmp_path: Path,
    catalog: Catalog,
    data: dict[str, Any],
    toolkit: str | None,
    tool: str | None,
    field: str,
    reason: str,
) -> None:
    catalog.register(write_manifest(tmp_path, toolkit_data("other")))
    path = write_manifest(tmp_path, data, name="broken")
    before = table_snapshot(catalog.path)
    with pytest.raises(ManifestError) as err:
        catalog.register(path)
    e = err.value
    assert (e.file, e.toolkit, e.tool, e.field) == (str(path), toolkit, tool, field)
    assert reason in e.reason
    message = str(e)
    assert message.startswith(str(path))
    assert f"field {field!r}" in message
    if tool:
        assert f"tool {tool!r}" in message
    assert table_snapshot(catalog.path) == before


@pytest.mark.parametrize(
    ("suffix", "text", "expected"),
    [
        (".yaml", "toolkit: weather\ntools: [\n", "invalid YAML at line"),
        (".json", '{"toolkit": "weather",', "invalid JSON at line 1"),
        (".toml", "toolkit = \n", "invalid TOML"),
        (".yaml", "- just\n- a list\n", "must be a mapping"),
        (".yaml", "", "must be a mapping"),
    ],
    ids=["yaml", "json", "toml", "not-a-mapping", "empty"],
)
def test_syntax_errors_name_the_file(
    tmp_path: Path, catalog: Catalog, suffix: str, text: str, expected: str
) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(text)
    with pytest.raises(ManifestError, match=expected) as err:
        catalog.register(path)
    assert err.value.file == str(path)
    assert catalog.revision == 0


def test_a_bad_manifest_in_a_directory_registers_nothing(tmp_path: Path, catalog: Catalog) -> None:
    write_manifest(tmp_path, toolkit_data("alpha"))
    write_manifest(tmp_path, _edit(["version"], "not a version"), name="beta")
    (tmp_path / "notes.txt").write_text("ignored: not a manifest")
    with pytest.raises(ManifestError, match=r"beta\.yaml"):
        catalog.register(tmp_path)
    assert catalog.revision == 0
    assert catalog.list(include_deferred=True).tools == []


def test_directory_without_manifests_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no manifests"):
        manifest_paths([tmp_path])
    with pytest.raises(ManifestError, match="no such file"):
        manifest_paths([tmp_path / "missing.yaml"])
    (tmp_path / "x.ini").write_text("")
    with pytest.raises(ManifestError, match="unknown manifest type"):
        load_manifest(tmp_path / "x.ini")


def test_numeric_versions_and_implementations_without_module_root(tmp_path: Path) -> None:
    data = toolkit_data(version=2)
    del data["module"]
    data["tools"][0]["implementation"] = "anywhere.at_all:func"
    toolkit = load_manifest(write_manifest(tmp_path, data))
    assert toolkit.version == "2"


def test_descriptions_and_tool_counts_are_bounded(catalog: Catalog, tmp_path: Path) -> None:
    """The same bounds as imports: a manifest under 4 MiB can still hold a 3 MB description
    or 10,001 tools."""
    long = toolkit_data("long")
    long["tools"][0]["description"] = "x" * 70_000
    many = toolkit_data(
        "many",
        tools=[
            {"name": f"t{i}", "description": "d", "implementation": f"weather_tools.m:t{i}"}
            for i in range(10_001)
        ],
    )
    before = table_snapshot(catalog.path)
    with pytest.raises(ManifestError) as raised:
        catalog.register(write_manifest(tmp_path, long), write_manifest(tmp_path, many, ".json"))
    lines = raised.value.lines()
    assert any(
        "tool 'get_forecast', field 'description': the description is 70,000 characters; "
        "at most 65,536" in line
        for line in lines
    ), lines
    assert any(
        "field 'tools': 10,001 tools; a toolkit holds at most 10,000" in line for line in lines
    )
    assert table_snapshot(catalog.path) == before
