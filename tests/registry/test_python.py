from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import yaml

from tests.fixtures import tools as fixture_tools
from tests.helpers import SAMPLE_TOOLKITS
from toolcat import ManifestError, Tool, tool
from toolcat.registry.manifest import toolkit_from_data
from toolcat.registry.python import (
    manifest_text,
    tool_definition,
    toolkit_from_module,
)

SAMPLE_MODULES = {
    "files": "toolcat.samples.files",
    "text": "toolcat.samples.text",
    "math": "toolcat.samples.math",
    "time": "toolcat.samples.timezones",
    "data": "toolcat.samples.data",
    "sqlite": "toolcat.samples.sqlite",
}


def test_decorator_returns_the_function_unchanged() -> None:
    def f(x: int) -> int:
        return x

    assert tool(f) is f
    assert tool(tags=["a"])(f) is f
    assert f(3) == 3


def test_schema_from_signature_and_docstring() -> None:
    definition = tool_definition(fixture_tools.everything)
    assert (
        definition["description"] == "Takes one of every kind of argument.\n\nThe long description."
    )
    assert definition["implementation"] == "tests.fixtures.tools:everything"
    params = definition["parameters"]
    props = params["properties"]
    assert params["type"] == "object"
    assert props["text"] == {"type": "string", "description": "Some text."}
    assert props["count"]["type"] == "integer" and props["ratio"]["type"] == "number"
    assert props["flag"]["type"] == "boolean"
    assert props["items"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Some items.",
    }
    assert props["mapping"]["additionalProperties"] == {"type": "integer"}
    assert {"type": "null"} in props["maybe"]["anyOf"]
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert params["$defs"]["Colour"]["enum"] == ["red", "blue"]
    assert set(params["$defs"]["Point"]["properties"]) == {"x", "y"}
    assert set(params["$defs"]["Box"]["properties"]) == {"name", "size"}
    assert props["described"] == {
        "type": "integer",
        "minimum": 0,
        "default": 1,
        "description": "From Field.",
    }
    assert props["default_text"]["default"] == "hello"
    assert set(params["required"]) == {
        "text",
        "count",
        "ratio",
        "flag",
        "items",
        "mapping",
        "maybe",
        "mode",
        "colour",
        "point",
        "box",
    }
    assert "title" not in params and "title" not in props["text"]
    assert definition["output_schema"]["type"] == "object"
    Tool.model_validate(definition)  # a valid definition


def test_numpy_and_rest_docstrings() -> None:
    numpy_def = tool_definition(fixture_tools.numpy_style)
    assert numpy_def["description"] == "Scale a value."
    assert numpy_def["parameters"]["properties"]["value"]["description"] == "The value to scale."
    assert numpy_def["parameters"]["properties"]["scale"]["description"] == "The factor."
    rest_def = tool_definition(fixture_tools.rest_style)
    assert rest_def["description"] == "Double a value."
    assert rest_def["parameters"]["properties"]["value"]["description"] == "The value to double."


def test_pydantic_model_with_call_is_a_tool() -> None:
    definition = tool_definition(fixture_tools.Greeting)
    assert definition["name"] == "Greeting"
    assert definition["description"] == "Greet someone by name."
    assert definition["parameters"]["properties"]["name"]["description"] == "Who to greet."
    assert definition["parameters"]["required"] == ["name"]
    assert definition["output_schema"] == {"type": "string"}


def test_nested_functions_are_refused() -> None:
    @tool
    def inner(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="module level"):
        tool_definition(inner)


def test_toolkit_from_module_reads_module_metadata() -> None:
    toolkit = toolkit_from_module("tests.fixtures.tools")
    assert (toolkit.name, toolkit.version, toolkit.module) == (
        "fixtures",
        "1.0.0",
        "tests.fixtures.tools",
    )
    names = [t.name for t in toolkit.tools]
    assert names[:2] == ["add", "everything"]
    assert "numpy_style" not in names  # not decorated
    add = toolkit.tools[0]
    assert add.tags == ["math"] and add.examples == ["add two numbers"]
    limited = next(t for t in toolkit.tools if t.name == "limited")
    assert limited.max_concurrency == 2
    renamed = toolkit_from_module("tests.fixtures.tools", name="other", version="2.0")
    assert (renamed.name, renamed.version) == ("other", "2.0")


def test_module_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ManifestError, match="cannot import module"):
        toolkit_from_module("tests.fixtures.broken_import")
    empty = types.ModuleType("empty_tools")
    monkeypatch.setitem(sys.modules, "empty_tools", empty)
    with pytest.raises(ManifestError, match="no @tool functions"):
        toolkit_from_module("empty_tools")
    versionless = types.ModuleType("versionless_tools")

    def f(x: int) -> int:
        """F."""
        return x

    f.__module__ = "versionless_tools"
    f.__qualname__ = "f"
    versionless.f = tool(f)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "versionless_tools", versionless)
    with pytest.raises(ManifestError, match="no version"):
        toolkit_from_module("versionless_tools")
    assert toolkit_from_module("versionless_tools", version="1").tools[0].name == "f"


def test_manifest_round_trip() -> None:
    toolkit = toolkit_from_module("tests.fixtures.tools")
    for fmt in ("yaml", "json"):
        text = manifest_text(toolkit, fmt)
        assert toolkit_from_data(yaml.safe_load(text)) == toolkit


@pytest.mark.parametrize("name", list(SAMPLE_MODULES))
def test_sample_manifests_are_generated_from_the_code(name: str) -> None:
    committed = (Path(SAMPLE_TOOLKITS) / f"{name}.yaml").read_text()
    assert committed == manifest_text(toolkit_from_module(SAMPLE_MODULES[name])), (
        f"regenerate: toolcat manifest --module {SAMPLE_MODULES[name]} -o data/toolkits/{name}.yaml"
    )
