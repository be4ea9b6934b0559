"""JSON Schema ``pattern`` checks at call time are bounded: a ReDoS pattern in a tool's schema
ends in an INVALID_ARGUMENTS result naming the field, within the budget, through the real
catalog and through both validators (fastjsonschema and the jsonschema fallback)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.helpers import toolkit_data
from toolcat import Catalog, InvalidArgumentsError, Toolkit
from toolcat.runtime import arguments

HOSTILE = "a" * 40 + "!"


def kit(pattern: str, **extra: Any) -> Toolkit:
    parameters = {
        "type": "object",
        "properties": {"message": {"type": "string", "pattern": pattern}},
        "required": ["message"],
        **extra,
    }
    tools = [
        {
            "name": "fails",
            "description": "Raises with the message.",
            "parameters": parameters,
            "implementation": "tests.fixtures.tools:fails",
        }
    ]
    return Toolkit.model_validate(toolkit_data("redos", module="tests.fixtures", tools=tools))


def test_a_redos_pattern_is_an_invalid_arguments_result(catalog: Catalog) -> None:
    catalog.register(kit(r"^(a|aa)+$"))
    started = time.process_time()
    result = catalog.call("redos.fails", {"message": HOSTILE}, timeout=60)
    assert time.process_time() - started < arguments.PATTERN_BUDGET_S + 2
    assert result.error_code == "INVALID_ARGUMENTS", result
    assert "'message'" in (result.error or "") and "ran longer than" in (result.error or "")
    ok = catalog.call("redos.fails", {"message": "aaaa"})
    assert ok.error_code == "TOOL_ERROR"  # the pattern passed; the tool itself raised
    bad = catalog.call("redos.fails", {"message": "b"})
    assert bad.error_code == "INVALID_ARGUMENTS" and "pattern" in (bad.error or "")


def test_a_pattern_that_repeats_too_much_is_refused(catalog: Catalog) -> None:
    catalog.register(kit("(?:(?:a{1000}){1000}){1000}"))
    started = time.process_time()
    result = catalog.call("redos.fails", {"message": "aaa"})
    assert time.process_time() - started < 2
    assert result.error_code == "INVALID_ARGUMENTS" and "repeats too much" in (result.error or "")


@pytest.mark.parametrize("fallback", [False, True])
def test_both_validators_are_bounded(monkeypatch: pytest.MonkeyPatch, fallback: bool) -> None:
    if fallback:
        import fastjsonschema

        def refuse(*_: Any, **__: Any) -> Any:
            raise fastjsonschema.JsonSchemaDefinitionException("not this time")

        monkeypatch.setattr(fastjsonschema, "compile", refuse)
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": r"^(a|aa)+$"}},
        "patternProperties": {r"^(x|xx)+$": {"type": "integer"}},
    }
    validate = arguments.compile_validator(schema)
    assert validate({"code": "aa"}) == {"code": "aa"}
    started = time.process_time()
    with pytest.raises(InvalidArgumentsError, match="code") as caught:
        validate({"code": HOSTILE})
    assert "\n" not in str(caught.value)
    with pytest.raises(InvalidArgumentsError):
        validate({"x" * 40 + "!": 1})
    assert time.process_time() - started < 2 * arguments.PATTERN_BUDGET_S + 2
    with pytest.raises(InvalidArgumentsError, match=r"pattern|match"):
        validate({"code": "b"})
