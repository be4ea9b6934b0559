"""Checking a call's arguments against the tool's JSON Schema, filling defaults."""

from __future__ import annotations

import contextvars
import copy
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..definitions import patterns
from ..errors import InvalidArgumentsError, ToolDeniedError

Validator = Callable[[dict[str, Any]], dict[str, Any]]

PATTERN_BUDGET_S = 1.0
"""Seconds (CPU) all of one call's JSON Schema ``pattern`` checks may take together."""
MAX_SCHEMA_PATTERN_LENGTH = 10_000


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
        _bound_patterns(check)
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
        budget = _PatternBudget()
        token = _BUDGET.set(budget)
        try:
            result = check(data)
        except fastjsonschema.JsonSchemaValueException as e:
            if budget.failure:
                raise InvalidArgumentsError(_pattern_failure(e.path, budget.failure)) from None
            raise InvalidArgumentsError(_explain(e, schema)) from None
        except patterns.PatternError as e:
            raise InvalidArgumentsError(_pattern_failure(None, str(e))) from None
        finally:
            _BUDGET.reset(token)
        if budget.failure:
            raise InvalidArgumentsError(_pattern_failure(None, budget.failure))
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

    validator = _with_bounded_patterns(jsonschema.Draft202012Validator)(schema)

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


# Bounded ``pattern`` checks -----------------------------------------------------------------
# A schema's ``pattern`` comes from whoever wrote the tool (or the MCP server it was imported
# from): it runs on the ``regex`` engine through toolcat.definitions.patterns, refused if it
# would unroll into a huge program, with one time budget per call. A check that runs out of
# budget is an INVALID_ARGUMENTS error naming the field, never a hang.


class _PatternBudget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + PATTERN_BUDGET_S
        self.failure: str | None = None

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


_BUDGET: contextvars.ContextVar[_PatternBudget | None] = contextvars.ContextVar(
    "toolcat_pattern_budget", default=None
)
_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII


class _BoundedPattern:
    """Stands in for a compiled ``re`` pattern in fastjsonschema's generated code."""

    def __init__(self, original: re.Pattern[str]) -> None:
        self.pattern = original.pattern
        self.flags = original.flags & _FLAGS

    def search(self, value: str) -> Any:
        return self._run("search", value)

    def match(self, value: str) -> Any:
        return self._run("match", value)

    def _run(self, how: str, value: str) -> Any:
        budget = _BUDGET.get() or _PatternBudget()
        compiled = patterns.compile(self.pattern, self.flags, max_length=MAX_SCHEMA_PATTERN_LENGTH)
        remaining = budget.remaining()
        try:
            if remaining <= 0:
                raise TimeoutError
            return getattr(compiled, how)(value, timeout=remaining)
        except TimeoutError:
            budget.failure = budget.failure or _timed_out(self.pattern)
            return None  # no match: the generated code raises, naming the field


def _timed_out(pattern: str) -> str:
    return (
        f"the check against pattern {pattern[:80]!r} ran longer than {PATTERN_BUDGET_S:g} s "
        "(catastrophic backtracking in the tool's schema?)"
    )


def _bound_patterns(check: Callable[..., Any]) -> None:
    """Swap the ``re`` patterns fastjsonschema compiled into ``check`` for bounded ones."""
    compiled = getattr(check, "__globals__", {}).get("REGEX_PATTERNS")
    if not isinstance(compiled, dict):
        if _has_pattern(check):
            raise TypeError("cannot bound this fastjsonschema version's patterns")
        return
    for key, value in list(compiled.items()):
        if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
            compiled[key] = _BoundedPattern(value)


def _has_pattern(check: Callable[..., Any]) -> bool:
    return "REGEX_PATTERNS" in getattr(getattr(check, "__code__", None), "co_names", ())


def _pattern_failure(path: Any, reason: str) -> str:
    names = [str(p) for p in (path or [])[1:]]
    where = f"argument {'.'.join(names)!r}" if names else "arguments"
    return f"{where}: {reason}"


def _with_bounded_patterns(cls: Any) -> Any:
    """``cls`` (a jsonschema validator class) with ``pattern`` and ``patternProperties``
    checked through toolcat.definitions.patterns under the call's budget."""
    import jsonschema

    def matches(pattern: str, value: str) -> bool | None:
        """Whether ``value`` matches; None once a check has run out of the call's budget
        (the first failure is the one reported)."""
        budget = _BUDGET.get() or _PatternBudget()
        if budget.failure:
            return None
        try:
            return patterns.check_pattern(pattern, value, budget.remaining())
        except patterns.PatternTimeout:
            budget.failure = _timed_out(pattern)
            raise patterns.PatternError(budget.failure) from None

    def pattern(validator: Any, expected: str, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        try:
            if matches(expected, instance) is False:
                yield jsonschema.ValidationError(f"{instance!r} does not match {expected!r}")
        except patterns.PatternError as e:
            yield jsonschema.ValidationError(str(e))

    def pattern_properties(
        validator: Any, expected: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for key_pattern, subschema in expected.items():
            for key, value in instance.items():
                try:
                    hit = matches(key_pattern, key)
                except patterns.PatternError as e:
                    yield jsonschema.ValidationError(str(e))
                    return
                if hit:
                    yield from validator.descend(
                        value, subschema, path=key, schema_path=key_pattern
                    )

    extend: Any = jsonschema.validators.extend
    return extend(cls, {"pattern": pattern, "patternProperties": pattern_properties})
