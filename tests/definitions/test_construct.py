"""``construct`` builds the same models as pydantic's ``model_construct`` and
``model_validate`` (search hits are built with it), and steps aside where it does not fit."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from toolcat.definitions.construct import construct
from toolcat.models import RegisteredTool, SearchHit, SearchResult, ToolAnnotations


def tool_values() -> dict[str, Any]:
    return {
        "id": "weather.get_forecast",
        "name": "get_forecast",
        "toolkit": "weather",
        "version": "1.2",
        "description": "Forecast for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "tags": ["read-only", "weather"],
        "defer_loading": True,
        "output_schema": None,
        "idempotent": True,
        "streaming": False,
        "annotations": ToolAnnotations(read_only=True),
        "implementation": "weather.api:forecast",
        "examples": ["will it rain in Paris"],
        "search_hint": "rain snow temperature",
        "timeout": 5.0,
        "max_concurrency": None,
        "max_result_bytes": None,
        "deprecated": False,
        "module": "weather",
    }


def test_equal_to_model_construct_and_model_validate() -> None:
    built = construct(RegisteredTool, tool_values())
    assert type(built) is RegisteredTool
    assert built == RegisteredTool.model_construct(**tool_values())
    assert built == RegisteredTool.model_validate(tool_values())
    assert built.model_fields_set == RegisteredTool.model_validate(tool_values()).model_fields_set
    assert built.model_dump() == RegisteredTool.model_validate(tool_values()).model_dump()
    assert built.model_dump_json() == RegisteredTool.model_validate(tool_values()).model_dump_json()
    assert repr(built) == repr(RegisteredTool.model_validate(tool_values()))
    hit = construct(SearchHit, {"rank": 1, "score": 2.5, "tool": built, "match": "strong"})
    assert hit == SearchHit(rank=1, score=2.5, tool=built, match="strong")
    result = construct(
        SearchResult,
        {"revision": 3, "query": "rain", "mode": "bm25", "hits": [hit], "warnings": []},
    )
    assert result == SearchResult(revision=3, query="rain", mode="bm25", hits=[hit])
    assert (
        result.model_dump()
        == SearchResult(revision=3, query="rain", mode="bm25", hits=[hit]).model_dump()
    )
    assert result.no_match is False


def test_values_missing_a_field_get_its_default() -> None:
    values = tool_values()
    del values["examples"], values["deprecated"]
    built = construct(RegisteredTool, values)
    assert built.examples == [] and built.deprecated is False
    assert built == RegisteredTool.model_construct(**tool_values() | {"examples": []})


class Aliased(BaseModel):
    name: str = Field(alias="toolName")
    size: int = 0


def test_a_model_with_aliases_goes_through_model_construct() -> None:
    built = construct(Aliased, {"toolName": "x", "size": 2})
    assert built.name == "x" and built.size == 2
    assert built == Aliased.model_construct(toolName="x", size=2)
