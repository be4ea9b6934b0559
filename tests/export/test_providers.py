"""Schema export: each format checked against its provider's documented constraints, names
mapped reversibly, Gemini's argument rewriting undone, Anthropic's deferred loading."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import fastjsonschema
import pytest
from click.testing import CliRunner

from tests.helpers import SAMPLE_TOOLKITS, toolkit_data
from toolcat import Catalog, InvalidQueryError, Toolkit, UnknownToolError
from toolcat.cli import cli
from toolcat.export import FORMATS
from toolcat.models import check_json_schema
from toolcat.registry.python import toolkit_from_module

# The constraints below are restated from each provider's documentation, not imported from
# toolcat.export, so the test does not agree with the code by construction.
OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # OpenAI function calling guide
ANTHROPIC_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # Anthropic tool use: "name"
GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$")  # FunctionDeclaration.name
MCP_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")  # MCP 2025-11-25, tools: "Tool names"
TOP_LEVEL_REJECTED = {"oneOf", "anyOf", "allOf", "enum", "not"}
# Gemini API reference, Schema object: its fields, its Type enum, its format values.
GEMINI_FIELDS = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
GEMINI_FORMATS = {
    "STRING": {"enum", "date-time"},
    "NUMBER": {"float", "double"},
    "INTEGER": {"int32", "int64"},
}

TRICKY = [
    {
        "name": "find_user",
        "description": "Find a user by id or by e-mail.",
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "anyOf": [
                {"properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"]},
                {
                    "properties": {"email": {"type": "string", "format": "email"}},
                    "required": ["email"],
                },
            ],
        },
    },
    {
        "name": "plant_tree",
        "description": "Store a tree of labelled nodes.",
        "defer_loading": True,
        "parameters": {
            "type": "object",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "label": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                    "required": ["label"],
                }
            },
            "properties": {"root": {"$ref": "#/$defs/node"}},
            "required": ["root"],
        },
    },
    {
        "name": "odd_types",
        "description": "Arguments of every awkward kind.",
        "parameters": {
            "type": "object",
            "properties": {
                "maybe": {"type": ["string", "null"]},
                "fixed": {"const": "always"},
                "level": {"type": "integer", "enum": [1, 2, 3]},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "rows": {"type": "array", "items": {"type": "object"}},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "when": {"type": "string", "format": "date-time"},
                "ratio": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["labels", "level"],
            "additionalProperties": False,
        },
    },
]


@pytest.fixture
def export_catalog(catalog: Catalog) -> Catalog:
    catalog.register(
        SAMPLE_TOOLKITS,
        toolkit_from_module("tests.fixtures.tools"),
        Toolkit.model_validate(toolkit_data("tricky", tools=TRICKY, module=None)),
    )
    return catalog


def every_tool(catalog: Catalog) -> list[Any]:
    return catalog.list(include_deferred=True, limit=1000).tools


def check_openai_parameters(parameters: dict[str, Any]) -> None:
    assert parameters["type"] == "object"
    assert not TOP_LEVEL_REJECTED & set(parameters)
    check_json_schema(parameters, "parameters")


def check_gemini_schema(node: dict[str, Any], top: bool = False) -> None:
    assert set(node) <= GEMINI_FIELDS, set(node) - GEMINI_FIELDS
    if "anyOf" in node:
        for option in node["anyOf"]:
            check_gemini_schema(option)
    else:
        assert node["type"] in GEMINI_TYPES
    if "format" in node:
        assert node["format"] in GEMINI_FORMATS.get(node["type"], set()), node
    if "enum" in node:
        assert node["type"] == "STRING" and all(isinstance(v, str) for v in node["enum"])
    if node.get("type") == "OBJECT":
        assert node.get("properties"), "Gemini refuses an OBJECT without properties"
    for child in (node.get("properties") or {}).values():
        check_gemini_schema(child)
    if "items" in node:
        check_gemini_schema(node["items"])
    assert set(node.get("required", [])) <= set(node.get("properties", {}))
    if top:
        assert node["type"] == "OBJECT"


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_tool_meets_the_providers_constraints(export_catalog: Catalog, fmt: str) -> None:
    tools = every_tool(export_catalog)
    exported = export_catalog.export(tools, fmt)
    declarations = exported.tools
    if fmt == "gemini":
        assert len(declarations) == 1 and set(declarations[0]) == {"functionDeclarations"}
        declarations = declarations[0]["functionDeclarations"]
    if fmt == "openai-responses":  # deferred tools sit in one namespace per toolkit
        from openai.types.responses import NamespaceTool

        flat = []
        for entry in declarations:
            if entry["type"] == "namespace":
                namespace = NamespaceTool.model_validate(entry)
                assert not namespace.model_extra and namespace.description
                assert all(t["defer_loading"] is True for t in entry["tools"])
                flat += [
                    {k: v for k, v in t.items() if k != "defer_loading"} for t in entry["tools"]
                ]
            else:
                flat.append(entry)
        declarations = flat
    assert len(declarations) == len(tools)
    for declaration in declarations:
        if fmt == "openai-chat":
            assert set(declaration) == {"type", "function"} and declaration["type"] == "function"
            function = declaration["function"]
            assert set(function) == {"name", "description", "parameters"}
            assert OPENAI_NAME.match(function["name"])
            check_openai_parameters(function["parameters"])
        elif fmt == "openai-responses":
            assert set(declaration) == {"type", "name", "description", "parameters", "strict"}
            assert OPENAI_NAME.match(declaration["name"])
            check_openai_parameters(declaration["parameters"])
        elif fmt == "anthropic":
            assert set(declaration) <= {"name", "description", "input_schema", "defer_loading"}
            assert ANTHROPIC_NAME.match(declaration["name"])
            schema = declaration["input_schema"]
            assert schema["type"] == "object" and not {"oneOf", "allOf", "anyOf"} & set(schema)
            check_json_schema(schema, "input_schema")
        elif fmt == "gemini":
            assert set(declaration) <= {"name", "description", "parameters"}
            assert GEMINI_NAME.match(declaration["name"])
            if "parameters" in declaration:
                check_gemini_schema(declaration["parameters"], top=True)
        else:
            import mcp.types

            tool = mcp.types.Tool.model_validate(declaration)
            assert MCP_NAME.match(tool.name) and tool.input_schema["type"] == "object"
            check_json_schema(tool.input_schema, "inputSchema")


def test_top_level_alternatives_are_merged_for_openai(export_catalog: Catalog) -> None:
    exported = export_catalog.export(["find_user"], "openai-chat")
    parameters = exported.tools[0]["function"]["parameters"]
    assert set(parameters["properties"]) == {"id", "email"}
    assert "required" not in parameters  # neither argument is required by every alternative
    assert "give exactly one set of these arguments: id | email" in parameters["description"]
    assert "$schema" not in parameters


def test_anthropic_defers_and_tool_references_use_exported_names(export_catalog: Catalog) -> None:
    exported = export_catalog.export(every_tool(export_catalog), "anthropic")
    by_name = {d["name"]: d for d in exported.tools}
    assert by_name["delete_file"]["defer_loading"] is True
    assert "defer_loading" not in by_name["read_file"]
    hits = export_catalog.search("remove a file from disk", k=2)
    blocks = exported.tool_references(hits)
    assert blocks[0] == {"type": "tool_reference", "tool_name": "delete_file"}
    assert all(b["tool_name"] in by_name for b in blocks)
    partial = export_catalog.export(["read_file"], "anthropic")
    with pytest.raises(UnknownToolError):
        partial.tool_references(hits)


def test_names_are_fitted_and_mapped_back(catalog: Catalog) -> None:
    long_kit, long_tool = "k" * 64, "t" * 64
    tool = {"name": "search", "description": "Search things."}
    catalog.register(
        Toolkit.model_validate(toolkit_data("alpha", tools=[tool], module=None)),
        Toolkit.model_validate(toolkit_data("beta", tools=[tool], module=None)),
        Toolkit.model_validate(
            toolkit_data(long_kit, tools=[{**tool, "name": long_tool}], module=None)
        ),
        Toolkit.model_validate(
            toolkit_data("other", tools=[{**tool, "name": long_tool}], module=None)
        ),
        Toolkit.model_validate(
            toolkit_data("digits", tools=[{**tool, "name": "1st_tool"}], module=None)
        ),
    )
    tools = every_tool(catalog)
    for fmt in FORMATS:
        exported = catalog.export(tools, fmt)
        assert len(exported.names) == len(tools) == 5
        for name, address in exported.names.items():
            original = catalog.get(address)
            assert exported.name_of(original) == name
        assert exported.address(exported.name_of("alpha.search")).startswith("alpha.search@")
    openai = catalog.export(tools, "openai-chat")
    assert {"alpha__search", "beta__search", "1st_tool"} <= set(openai.names)
    assert all(len(n) <= 64 for n in openai.names)
    assert "alpha.search" in catalog.export(tools, "mcp").names
    assert "_1st_tool" in catalog.export(tools, "gemini").names  # must start with a letter or _
    again = catalog.export(list(reversed(tools)), "openai-chat")
    assert set(again.names) == set(openai.names)  # hash suffixes do not depend on order
    with pytest.raises(UnknownToolError):
        openai.address("no_such_name")
    with pytest.raises(InvalidQueryError, match="unknown export format"):
        catalog.export(tools, "cohere")


def test_gemini_arguments_round_trip_into_a_real_call(export_catalog: Catalog) -> None:
    exported = export_catalog.export(["everything"], "gemini")
    declaration = exported.tools[0]["functionDeclarations"][0]
    properties = declaration["parameters"]["properties"]
    assert properties["mapping"]["type"] == "STRING"  # a free-form object, as JSON text
    assert properties["point"]["type"] == "OBJECT" and "x" in properties["point"]["properties"]
    assert properties["maybe"] == {"type": "STRING", "nullable": True} | {
        k: v for k, v in properties["maybe"].items() if k not in ("type", "nullable")
    }
    assert exported.json_arguments == {"everything": ["mapping"]}
    # what Gemini would send back
    sent = {
        "text": "t",
        "count": 1,
        "ratio": 0.5,
        "flag": True,
        "items": ["a"],
        "mapping": json.dumps({"a": 1}),
        "maybe": None,
        "mode": "fast",
        "colour": "red",
        "point": {"x": 1.0, "y": 2.0},
        "box": {"name": "b", "size": 2},
    }
    arguments = exported.arguments("everything", sent)
    assert arguments["mapping"] == {"a": 1} and sent["mapping"] == '{"a": 1}'
    result = export_catalog.call(exported.address("everything"), arguments)
    assert result.success, result.error


def test_gemini_rewrites_recursion_and_awkward_types(export_catalog: Catalog) -> None:
    exported = export_catalog.export(["plant_tree", "odd_types"], "gemini")
    tree, odd = exported.tools[0]["functionDeclarations"]
    node = tree["parameters"]["properties"]["root"]
    depth = 0
    while "children" in node.get("properties", {}):
        node = node["properties"]["children"]["items"]
        depth += 1
    assert depth >= 7 and node["type"] == "STRING"  # recursion cut, rest as JSON text
    props = odd["parameters"]["properties"]
    assert props["maybe"] == {"type": "STRING", "nullable": True}
    assert props["fixed"] == {"enum": ["always"], "type": "STRING"}
    assert props["level"]["type"] == "INTEGER" and "enum" not in props["level"]
    assert props["either"] == {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}
    assert props["when"] == {"type": "STRING", "format": "date-time"}
    assert props["rows"]["items"]["type"] == "STRING"
    assert "level is one of [1, 2, 3]" in odd["description"]
    assert "ratio: exclusiveMinimum=0" in odd["description"]
    assert set(exported.json_arguments["odd_types"]) == {"labels", "rows[]"}
    back = exported.arguments(
        "odd_types", {"labels": '{"a": "b"}', "rows": ['{"k": 1}', "not json"], "level": 2}
    )
    assert back == {"labels": {"a": "b"}, "rows": [{"k": 1}, "not json"], "level": 2}
    validate = fastjsonschema.compile(export_catalog.get("odd_types").parameters)
    validate({"labels": back["labels"], "level": 2, "rows": [{"k": 1}]})


def test_cli_export(export_catalog: Catalog) -> None:
    runner = CliRunner()
    db = str(export_catalog.path)
    out = runner.invoke(cli, ["--db", db, "export", "--format", "anthropic", "--all"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["format"] == "anthropic"
    assert len(data["tools"]) == len(every_tool(export_catalog)) == len(data["names"])
    out = runner.invoke(
        cli,
        [
            "--db",
            db,
            "export",
            "--format",
            "openai-chat",
            "--query",
            "time zones",
            "-k",
            "2",
            "--tools-only",
        ],
    )
    tools = json.loads(out.output)
    assert len(tools) == 2 and tools[0]["type"] == "function"
    out = runner.invoke(cli, ["--db", db, "export", "--format", "gemini", "--toolkit", "math"])
    declarations = json.loads(out.output)["tools"][0]["functionDeclarations"]
    assert {d["name"] for d in declarations} == {
        t.name for t in export_catalog.list(toolkit="math", include_deferred=True).tools
    }
    out = runner.invoke(cli, ["--db", db, "export", "--format", "mcp"])
    assert out.exit_code == 2 and "exactly one of" in out.output


def _openai_model(model: Any, data: dict[str, Any]) -> Any:
    """``data`` parsed by an ``openai`` type, failing on fields the type does not know."""
    parsed = model.model_validate(data)
    assert not parsed.model_extra, parsed.model_extra
    return parsed


def test_openai_responses_namespaces_search_tool_and_search_output(
    export_catalog: Catalog,
) -> None:
    from openai.types.responses import FunctionTool, NamespaceTool, ToolSearchTool
    from openai.types.responses.response_tool_search_output_item_param import (
        ResponseToolSearchOutputItemParam,
    )

    always_on = export_catalog.list(limit=1000).tools
    exported = export_catalog.export(always_on, "openai-responses")
    assert all(entry["type"] == "function" for entry in exported.tools)
    for entry in exported.tools:
        _openai_model(FunctionTool, entry)
    search = exported.search_tool()
    assert _openai_model(ToolSearchTool, search).execution == "client"

    hits = export_catalog.search("remove an old file", k=3)
    deferred = [h.tool for h in hits.hits if h.tool.defer_loading]
    assert deferred, "the sample catalog defers delete_file"
    output = exported.tool_search_output(hits, "call_1")
    parsed = _openai_model(ResponseToolSearchOutputItemParam, output)
    assert parsed.call_id == "call_1" and parsed.execution == "client"
    loaded = {}
    for entry in output["tools"]:
        namespace = _openai_model(NamespaceTool, entry)
        for function in namespace.tools:
            loaded[(namespace.name, function.name)] = function
    assert len(loaded) == len(deferred)
    for tool in deferred:
        namespace = tool.toolkit
        assert exported.address(tool.name, namespace=namespace) == f"{tool.id}@{tool.version}"
        assert loaded[(namespace, tool.name)].defer_loading is True
    with pytest.raises(UnknownToolError):
        exported.address(deferred[0].name)  # without its namespace, not this tool

    everything = export_catalog.export(every_tool(export_catalog), "openai-responses")
    spaces = {e["name"]: e for e in everything.tools if e["type"] == "namespace"}
    assert spaces["files"]["description"] == export_catalog.versions("files")[-1].description
    assert "delete_file" in {t["name"] for t in spaces["files"]["tools"]}


def test_anthropic_search_tools_and_limits(export_catalog: Catalog) -> None:
    exported = export_catalog.export(every_tool(export_catalog), "anthropic")
    assert exported.search_tool("bm25") == {
        "type": "tool_search_tool_bm25_20251119",
        "name": "tool_search_tool_bm25",
    }
    assert exported.search_tool("regex")["name"] == "tool_search_tool_regex"
    custom = exported.search_tool()
    assert custom["name"] == "tool_search" and custom["input_schema"]["required"] == ["query"]
    with pytest.raises(InvalidQueryError, match="kinds: bm25, regex"):
        exported.search_tool("vector")
    with pytest.raises(InvalidQueryError, match="search tools exist for"):
        export_catalog.export(every_tool(export_catalog), "gemini").search_tool()
    many = dataclasses.replace(exported, tools=[{"defer_loading": True}] * 10_001)
    with pytest.raises(
        InvalidQueryError, match="at most 10,000 tools and this export defers 10,001"
    ):
        many.search_tool("bm25")
