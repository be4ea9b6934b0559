"""OpenAPI import: documents read into toolkits, calls forwarded to a real local HTTP API."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.fixtures import openapi_app
from tests.helpers import free_port, run_script, table_snapshot
from toolcat import Catalog
from toolcat.cli import cli
from toolcat.errors import ImportFailedError, ManifestError
from toolcat.registry.openapi import toolkit_from_openapi
from toolcat.remote.openapi import parse_implementation

SHARED = next(
    (p / "shared" / "openapi" for p in Path(__file__).resolve().parents if (p / "shared").is_dir()),
    Path("/nonexistent"),
)


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    base, server = openapi_app.serve(free_port())
    yield base
    server.should_exit = True


@pytest.fixture
def pets(catalog: Catalog, api: str) -> Catalog:
    catalog.register_openapi(f"{api}/openapi.json", toolkit="pets")
    return catalog


def test_one_tool_per_operation_with_merged_parameters(pets: Catalog, api: str) -> None:
    tools = {t.name: t for t in pets.iter_tools(toolkit="pets")}
    assert sorted(tools) == [
        "createPet",
        "echo_put",
        "getPet",
        "listPets",
        "private",
        "slow",
        "text",
    ]
    create = tools["createPet"]
    assert create.description == "Add a pet"
    assert create.defer_loading
    assert {"pets", "write", "openapi"} <= set(create.tags)
    assert create.parameters["required"] == ["name", "species"]
    assert set(create.parameters["properties"]) == {"X-Request-Id", "name", "species", "tags"}
    plan = parse_implementation(create.implementation or "")
    assert plan.base_url == f"{api}/api"  # the relative server URL, resolved against the document
    assert (plan.method, plan.path) == ("POST", "/pets")
    assert plan.args["X-Request-Id"] == ("header", "X-Request-Id")
    assert plan.args["species"] == ("body", "species")
    listing = tools["listPets"]
    assert listing.description == "List pets.\n\nThe pets, optionally only those of one species."
    assert listing.parameters["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "default": 10,
        "description": "How many pets at most.",
    }
    assert listing.annotations is not None and listing.annotations.read_only
    get = tools["getPet"]
    assert get.parameters["required"] == ["petId"]  # from the path item's parameters
    echo = tools["echo_put"]
    echo_plan = parse_implementation(echo.implementation or "")
    assert echo_plan.args["name"] == ("query", "name")
    assert echo_plan.args["body_name"] == ("body", "name")  # renamed, not dropped
    tree = echo.parameters["properties"]["tree"]
    assert tree["properties"]["children"]["items"] == {
        "description": "(recursive: Node; any JSON value)"
    }


def test_calls_send_path_query_header_and_body(pets: Catalog) -> None:
    created = pets.call(
        "createPet", {"name": "Tom", "species": "cat", "X-Request-Id": "r-1", "tags": ["grey"]}
    )
    assert created.success, created.error
    assert created.data["name"] == "Tom" and created.data["tags"] == ["grey"]
    pet_id = created.data["id"]
    got = pets.call("getPet", {"petId": pet_id})
    assert got.success and got.data == created.data
    pets.call("createPet", {"name": "Rex", "species": "dog"})
    cats = pets.call("listPets", {"species": "cat"})
    assert cats.success and [p["name"] for p in cats.data] == ["Tom"]
    echoed = pets.call(
        "echo_put", {"word": "a b/c", "ids": [1, 2], "name": "q", "body_name": "b", "tree": {}}
    )
    assert echoed.success, echoed.error
    assert echoed.data["raw_path"] == "/api/echo/a%20b%2Fc"  # one path segment
    assert ["ids", "1,2"] in echoed.data["query"]  # explode: false
    assert echoed.data["body"] == {"name": "b", "tree": {}}
    assert pets.call("text").data == "just text"


def test_async_call(pets: Catalog) -> None:
    result = asyncio.run(pets.acall("listPets", {"limit": 1}))
    assert result.success and isinstance(result.data, list)


def test_non_2xx_is_a_tool_error_with_status_and_body(pets: Catalog) -> None:
    result = pets.call("getPet", {"petId": 999})
    assert not result.success and result.error_code == "TOOL_ERROR"
    assert "GET /api/pets/999 answered 404 Not Found" in (result.error or "")
    assert "no such pet" in (result.error or "")
    unauthorised = pets.call("private")
    assert unauthorised.error_code == "TOOL_ERROR" and "401" in (unauthorised.error or "")
    invalid = pets.call("createPet", {"name": "no species"})
    assert invalid.error_code == "INVALID_ARGUMENTS"


def test_timeout(catalog: Catalog, api: str) -> None:
    catalog.register_openapi(
        f"{api}/openapi.json", toolkit="pets", operations=["slow"], timeout=0.3
    )
    assert catalog.get("slow").timeout == 0.3
    result = catalog.call("slow", {"seconds": 3})
    assert result.error_code == "TIMEOUT", result
    assert catalog.call("slow", {"seconds": 0}).success


def test_secret_header_resolved_from_env_never_stored(
    catalog: Catalog, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PET_TOKEN", raising=False)
    catalog.register_openapi(
        f"{api}/openapi.json",
        toolkit="pets",
        operations=["private"],
        headers={"Authorization": "Bearer ${PET_TOKEN}"},
    )
    missing = catalog.call("private")
    assert missing.error_code == "IMPORT_FAILED" and "PET_TOKEN" in (missing.error or "")
    monkeypatch.setenv("PET_TOKEN", openapi_app.TOKEN)
    result = catalog.call("private")
    assert result.success and result.data == {"secret": "the cake"}
    with sqlite3.connect(catalog.path) as conn:
        stored = "\n".join(conn.iterdump())
    assert "${PET_TOKEN}" in stored and openapi_app.TOKEN not in stored


def test_filters(catalog: Catalog, api: str) -> None:
    spec = f"{api}/openapi.json"
    catalog.register_openapi(spec, toolkit="writes", include_tags=["WRITE"])
    assert [t.name for t in catalog.iter_tools(toolkit="writes")] == ["createPet"]
    catalog.register_openapi(spec, toolkit="two", operations=["getPet", "slow"])
    assert sorted(t.name for t in catalog.iter_tools(toolkit="two")) == ["getPet", "slow"]
    before = table_snapshot(catalog.path)
    close = r"no operation with id 'getPets' \(did you mean getPet"
    with pytest.raises(ManifestError, match=close):
        catalog.register_openapi(spec, toolkit="bad", operations=["getPets"])
    with pytest.raises(ManifestError, match="no operation has the tag"):
        catalog.register_openapi(spec, toolkit="bad", include_tags=["nope"])
    assert table_snapshot(catalog.path) == before


def test_versions_and_reregistration(catalog: Catalog) -> None:
    document = copy.deepcopy(openapi_app.DOCUMENT)
    first = catalog.register_openapi(document, toolkit="pets", base_url="http://127.0.0.1:9")
    assert (first.status, first.version) == ("added", "1.0.0")
    same = catalog.register_openapi(document, toolkit="pets", base_url="http://127.0.0.1:9")
    assert (same.status, same.version) == ("unchanged", "1.0.0")
    document["paths"]["/text"]["get"]["summary"] = "Plain text, changed"
    changed = catalog.register_openapi(document, toolkit="pets", base_url="http://127.0.0.1:9")
    assert changed.version == "1.0.1" and changed.changes["changed"] == ["text"]


def _bad(document: dict[str, Any], path: str, method: str, **changes: Any) -> dict[str, Any]:
    bad = copy.deepcopy(document)
    bad["paths"][path][method].update(changes)
    return bad


def test_bad_documents_are_clear_errors_and_change_nothing(
    catalog: Catalog, tmp_path: Path
) -> None:
    base = "http://127.0.0.1:9"
    catalog.register_openapi(openapi_app.DOCUMENT, toolkit="pets", base_url=base)
    before = table_snapshot(catalog.path)
    swagger = tmp_path / "swagger.yaml"
    swagger.write_text("swagger: '2.0'\npaths: {}\n")
    with pytest.raises(ManifestError, match=r"swagger.yaml: not an OpenAPI 3.0/3.1 document"):
        catalog.register_openapi(swagger, toolkit="x")
    no_id = copy.deepcopy(openapi_app.DOCUMENT)
    del no_id["paths"]["/slow"]["get"]["operationId"]
    with pytest.raises(ManifestError, match=r"operation GET /slow has no operationId"):
        catalog.register_openapi(no_id, toolkit="pets", base_url=base)
    missing_ref = _bad(
        openapi_app.DOCUMENT, "/slow", "get", parameters=[{"$ref": "#/components/parameters/Nope"}]
    )
    with pytest.raises(ManifestError, match=r"operation 'slow' \(GET /slow\): \$ref .*Nope"):
        catalog.register_openapi(missing_ref, toolkit="pets", base_url=base)
    no_server = copy.deepcopy(openapi_app.DOCUMENT)  # "/api" is relative, the source is no URL
    with pytest.raises(ManifestError, match="give the API's URL with base_url"):
        catalog.register_openapi(no_server, toolkit="pets")
    with pytest.raises(ImportFailedError, match="cannot read OpenAPI document"):
        catalog.register_openapi(tmp_path / "missing.json", toolkit="pets")
    assert table_snapshot(catalog.path) == before


def test_colliding_operation_ids_are_all_kept(catalog: Catalog) -> None:
    document = copy.deepcopy(openapi_app.DOCUMENT)
    document["paths"]["/text"]["get"]["operationId"] = "echo_put"  # "echo.put" fits to this too
    catalog.register_openapi(document, toolkit="pets", base_url="http://127.0.0.1:9")
    names = sorted(t.name for t in catalog.iter_tools(toolkit="pets"))
    assert len(names) == 7 and "echo_put" in names
    suffixed = [n for n in names if n.startswith("echo_put_")]
    assert len(suffixed) == 1 and len(suffixed[0]) == len("echo_put_") + 8


@pytest.mark.parametrize(("file", "count"), [("tmdb_oas.json", 54), ("spotify_oas.json", 40)])
def test_real_documents_register_every_operation(catalog: Catalog, file: str, count: int) -> None:
    path = SHARED / file
    if not path.exists():
        pytest.skip(f"{path} is not here")
    document = json.loads(path.read_text())
    ids = [
        op["operationId"]
        for item in document["paths"].values()
        for method, op in item.items()
        if method in ("get", "put", "post", "delete", "patch")
    ]
    result = catalog.register_openapi(path, toolkit=file.split("_")[0])
    assert result.tools == count == len(ids)
    tools = list(catalog.iter_tools(toolkit=result.toolkit))
    plans = {parse_implementation(t.implementation or "").path for t in tools}
    assert plans == set(document["paths"])
    assert all(t.description and t.parameters["type"] == "object" for t in tools)
    assert catalog.search("search for a movie by title" if "tmdb" in file else "album tracks").hits


def test_cli_register_openapi(db_path: Path, api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PET_TOKEN", openapi_app.TOKEN)
    runner = CliRunner()
    args = ["--db", str(db_path), "register", "--openapi", f"{api}/openapi.json"]
    out = runner.invoke(
        cli,
        [
            *args,
            "--toolkit",
            "pets",
            "--header",
            "Authorization=Bearer ${PET_TOKEN}",
            "--operation",
            "private",
            "--operation",
            "text",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["results"][0]["tools"] == 2
    called = runner.invoke(cli, ["--db", str(db_path), "call", "private"])
    assert called.exit_code == 0 and "the cake" in called.output
    tagged = runner.invoke(cli, [*args, "--toolkit", "w", "--include-tag", "write"])
    assert tagged.exit_code == 0 and "added     w 1.0.0 (1 tool)" in tagged.output
    no_kit = runner.invoke(cli, args)
    assert no_kit.exit_code != 0 and "--openapi needs --toolkit NAME" in no_kit.output
    stray = runner.invoke(cli, ["--db", str(db_path), "register", "x.yaml", "--operation", "a"])
    assert stray.exit_code != 0 and "go with --openapi" in stray.output
    bad_header = runner.invoke(cli, [*args, "--toolkit", "p", "--header", "novalue"])
    assert bad_header.exit_code != 0 and "expected NAME=VALUE" in bad_header.output


def test_openapi_30_yaml_spellings_become_json_schema(catalog: Catalog, tmp_path: Path) -> None:
    spec = tmp_path / "api.yaml"
    spec.write_text(
        """
openapi: 3.0.3
info: {title: Counter, version: "1"}
servers: [{url: "https://{host}/v1", variables: {host: {default: counter.example.com}}}]
paths:
  /count:
    get:
      operationId: count
      parameters:
        - name: step
          in: query
          required: "false"
          schema: {type: integer, minimum: "0", exclusiveMinimum: true, nullable: true,
                   default: "2", example: 3}
        - name: form
          in: query
          schema: {type: object, additionalProperties: "true"}
      responses: {"200": {description: ok}}
"""
    )
    catalog.register_openapi(spec, toolkit="counter")
    tool = catalog.get("count")
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "step": {
                "type": ["integer", "null"],
                "exclusiveMinimum": 0,
                "default": 2,
                "examples": [3],
            },
            "form": {"type": "object", "additionalProperties": True},
        },
    }
    plan = parse_implementation(tool.implementation or "")
    assert plan.base_url == "https://counter.example.com/v1"


FAN_OUT = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a runaway expansion stops here
from toolcat.errors import ManifestError
from toolcat.registry.openapi import toolkit_from_openapi
ref = "#/components/schemas/S{}"
wide = lambda i: {f"p{j}": {"$ref": ref.format(i + 1)} for j in range(8)}
schemas = {f"S{i}": {"type": "object", "properties": wide(i)} for i in range(12)}
schemas["S12"] = {"type": "string", "description": "leaf"}
body = {"content": {"application/json": {"schema": {"$ref": ref.format(0)}}}}
document = {
    "openapi": "3.1.0",
    "info": {"title": "fan", "version": "1"},
    "servers": [{"url": "http://127.0.0.1:9"}],
    "paths": {"/x": {"post": {"operationId": "x", "requestBody": body}}},
    "components": {"schemas": schemas},
}
started = time.perf_counter()
try:
    toolkit_from_openapi(document, "fan", "1.0")
    message = None
except ManifestError as e:
    message = str(e)
print(json.dumps({
    "bytes": len(json.dumps(document)),
    "seconds": time.perf_counter() - started,
    # VmHWM: this process's own peak (ru_maxrss can carry the forking parent's across exec)
    "max_rss_mb": int(next(
        line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")
    )) / 1024,
    "message": message,
}))
"""


def test_references_that_fan_out_fail_fast_in_bounded_memory() -> None:
    """8 references wide, 12 deep, under 5 KB: 8**12 nodes if expanded (110 s and 3.9 GB before
    the bound). Measured in a fresh process, under a 1 GiB address-space limit."""
    found = json.loads(run_script(FAN_OUT, timeout=120).stdout)
    assert found["bytes"] < 5000
    assert found["message"] and "\n" not in found["message"]
    assert "$refs expand to more than 200,000 schema nodes" in found["message"]
    assert found["seconds"] < 10, found
    assert found["max_rss_mb"] < 400, found


def test_descriptions_and_operation_counts_are_bounded(catalog: Catalog) -> None:
    long = copy.deepcopy(openapi_app.DOCUMENT)
    long["paths"]["/text"]["get"]["description"] = "x" * 100_000
    before = table_snapshot(catalog.path)
    with pytest.raises(ManifestError, match=r"tool 'text', field 'description': the desc"):
        catalog.register_openapi(long, toolkit="pets", base_url="http://127.0.0.1:9")
    many = {
        "openapi": "3.1.0",
        "info": {"title": "many", "version": "1"},
        "paths": {f"/p{i}": {"get": {"operationId": f"op{i}"}} for i in range(10_001)},
    }
    with pytest.raises(ManifestError, match="10,001 operations selected; a toolkit holds at most"):
        catalog.register_openapi(many, toolkit="many", base_url="http://127.0.0.1:9")
    assert table_snapshot(catalog.path) == before


def test_a_fetched_document_without_servers_is_served_from_its_own_origin(
    catalog: Catalog, api: str
) -> None:
    """The OpenAPI default server is "/", relative to where the document was served; a
    relative server URL resolves against the document's URL too."""
    catalog.register_openapi(f"{api}/docs/no-servers.json", toolkit="plain")
    assert catalog.call("plain.text").data == "just text"
    catalog.register_openapi(f"{api}/api/docs/relative.json", toolkit="relative")
    tool = catalog.get("relative.text")
    assert parse_implementation(tool.implementation or "").base_url == f"{api}/api"
    assert catalog.call("relative.text").data == "just text"
    with pytest.raises(ManifestError, match=r"no servers .*give the API's URL with base_url"):
        catalog.register_openapi(openapi_app.NO_SERVERS, toolkit="file")


def test_every_problem_of_a_document_is_reported(catalog: Catalog, tmp_path: Path) -> None:
    bad = copy.deepcopy(openapi_app.DOCUMENT)
    del bad["servers"]
    bad["paths"]["/slow"]["get"]["parameters"] = [{"$ref": "#/components/parameters/Nope"}]
    del bad["paths"]["/text"]["get"]["operationId"]
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps(bad))
    with pytest.raises(ManifestError) as raised:
        catalog.register_openapi(spec, toolkit="pets", headers={"X-Key": "abc\n"})
    lines = raised.value.lines()
    assert len(lines) == 4, lines
    assert any("no servers" in line for line in lines)
    assert any("$ref '#/components/parameters/Nope' points to nothing" in line for line in lines)
    assert any("GET /text has no operationId" in line for line in lines)
    assert any("header 'X-Key' cannot be sent: it holds a newline" in line for line in lines)
    out = CliRunner().invoke(
        cli, ["--db", str(catalog.path), "register", "--openapi", str(spec), "--toolkit", "pets"]
    )
    assert out.exit_code == ManifestError.exit_code
    assert "no servers" in out.output and "points to nothing" in out.output


@pytest.mark.parametrize("path", ["pets", "/pets/../admin", "/a/%2e%2e/b", "/\uff0e\uff0e/x"])
def test_paths_that_climb_are_refused_at_registration(catalog: Catalog, path: str) -> None:
    document = copy.deepcopy(openapi_app.NO_SERVERS)
    document["paths"] = {path: {"get": {"operationId": "climb"}}}
    with pytest.raises(ManifestError, match=r"field 'paths': path .* must start with '/'"):
        catalog.register_openapi(document, toolkit="climb", base_url="http://127.0.0.1:9")


def test_documents_are_bounded_and_read_safely(
    catalog: Catalog, api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolcat.registry import openapi

    spec = tmp_path / "pets.json"
    spec.write_text(json.dumps(openapi_app.DOCUMENT))
    monkeypatch.setattr(openapi, "MAX_DOCUMENT_BYTES", 1000)  # the pet document is ~5 KB
    for source in (spec, f"{api}/openapi.json"):
        with pytest.raises(ManifestError, match="is larger than 0 MiB"):
            catalog.register_openapi(source, toolkit="pets", base_url="http://127.0.0.1:9")
    monkeypatch.undo()
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ImportFailedError, match="not a regular file"):
        catalog.register_openapi(fifo, toolkit="pets")  # at once, not a hang
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00openapi")
    with pytest.raises(ManifestError, match="not UTF-8 text"):
        catalog.register_openapi(binary, toolkit="pets")
    chain = copy.deepcopy(openapi_app.DOCUMENT)
    parameters = chain["components"]["parameters"]
    for i in range(40):
        parameters[f"P{i}"] = {"$ref": f"#/components/parameters/P{i + 1}"}
    parameters["P40"] = {"name": "x", "in": "query"}
    chain["paths"]["/text"]["get"]["parameters"] = [{"$ref": "#/components/parameters/P0"}]
    with pytest.raises(ManifestError, match="starts a chain of over 24"):
        catalog.register_openapi(chain, toolkit="pets", base_url="http://127.0.0.1:9")


@pytest.mark.parametrize("index", ["\u00b2", "%C2%B2", "\u2460"])
def test_a_ref_index_of_other_digits_points_to_nothing(index: str) -> None:
    """str.isdigit() holds for "²" and "①", which int() refuses: such a list index in a
    document's $ref raised a ValueError, not a ManifestError."""
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "https://api.example.com"}],
        "x-list": [{"type": "string"}],
        "paths": {
            "/a": {
                "get": {
                    "operationId": "get_a",
                    "parameters": [
                        {"name": "q", "in": "query", "schema": {"$ref": f"#/x-list/{index}"}}
                    ],
                }
            }
        },
    }
    with pytest.raises(ManifestError, match="points to nothing"):
        toolkit_from_openapi(doc, "k", "1.0.0")
