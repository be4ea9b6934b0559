"""Checking a call's arguments against the tool's JSON Schema, filling defaults."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentsError, ToolDeniedError

Validator = Callable[[dict[str, Any]], dict[str, Any]]


class RemoteReferenceError(Exception):
    """A schema reference would need a fetch (``$id`` scopes can make ``#/...`` remote)."""


class _NoFetch(dict):  # type: ignore[type-arg]
    """fastjsonschema's URI handlers: every scheme refuses, so nothing is ever fetched
    (without a handler it calls ``urlopen``)."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        def refuse(uri: str) -> Any:
            raise RemoteReferenceError(
                f"the tool's schema refers to {uri!r}; toolcat never fetches schemas"
            )

        return refuse


_NO_FETCH = _NoFetch()


def compile_validator(schema: dict[str, Any]) -> Validator:
    """A function that checks arguments against ``schema`` and returns them with defaults.

    Arguments the schema does not name are refused unless the schema allows extra ones
    (``additionalProperties`` or ``patternProperties``): a misspelt argument is an error, not
    silently ignored. Validation is compiled by fastjsonschema (a few µs a call), which also
    fills ``default`` values.
    """
    import fastjsonschema

    from ..models import remote_references

    remote = remote_references(schema)
    if remote:  # a catalog row written behind registration's back: never fetch it
        raise ToolDeniedError(
            f"the tool's parameters schema has a non-local $ref {remote[0]!r}; "
            "toolcat never fetches schemas"
        )
    properties = schema.get("properties") or {}
    closed = "additionalProperties" not in schema and "patternProperties" not in schema
    try:
        check = fastjsonschema.compile(schema, use_default=True, handlers=_NO_FETCH)
    except RemoteReferenceError as e:
        raise ToolDeniedError(str(e)) from None
    except Exception:  # a schema fastjsonschema cannot compile: fall back to jsonschema
        check = _jsonschema_check(schema)  # (jsonschema >= 4.18 never fetches either)

    def validate(arguments: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, dict):
            raise InvalidArgumentsError(
                f"arguments must be a JSON object, not {type(arguments).__name__}"
            )
        if closed:
            unknown = sorted(set(arguments) - set(properties))
            if unknown:
                expected = ", ".join(properties) or "no arguments"
                raise InvalidArgumentsError(
                    f"unknown argument{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))}; this tool takes: {expected}"
                )
        data = copy.deepcopy(arguments)
        try:
            result = check(data)
        except fastjsonschema.JsonSchemaValueException as e:
            raise InvalidArgumentsError(_explain(e, schema)) from None
        return result if isinstance(result, dict) else data

    return validate


def _explain(error: Any, schema: dict[str, Any]) -> str:
    path = [str(p) for p in (error.path or [])[1:]]
    where = f"argument {'.'.join(path)!r}" if path else "arguments"
    message = (error.message or "invalid").removeprefix((error.name or "") + " ")
    if error.rule == "required":
        return f"{where}: {message}; required: {', '.join(schema.get('required', []))}"
    expected = error.rule_definition
    detail = f" (expected {error.rule} {expected!r})" if error.rule != "type" else ""
    return f"{where} {message}{detail}; got {error.value!r}"[:2000]


def _jsonschema_check(schema: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)

    def check(data: dict[str, Any]) -> dict[str, Any]:
        for name, prop in (schema.get("properties") or {}).items():
            if isinstance(prop, dict) and "default" in prop and name not in data:
                data[name] = copy.deepcopy(prop["default"])
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path)
            raise InvalidArgumentsError(
                f"argument {where!r}: {error.message}" if where else error.message
            )
        return data

    return check
