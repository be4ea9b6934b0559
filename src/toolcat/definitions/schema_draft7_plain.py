"""A fast path for draft-07 meta-validation: schemas made only of the common keywords.

Most parameter schemas use a handful of keywords (``type``, ``properties``, ``required``,
``description``, ``enum``, ``items``...). ``plainly_valid`` checks those directly, a few
microseconds a schema where the compiled meta-schema costs ~100 (a fifth of a bulk
registration). It answers True only for a schema the draft-07 meta-schema surely accepts;
anything it does not know for certain (``$ref``, ``pattern``, an array of ``items``, a
float where an integer belongs...) answers False, and the caller runs the full meta-schema,
whose error message is the one the admin sees. tests/definitions/test_schema_draft7_plain.py
holds it to the full meta-schema on every benchmark schema and on mutations of them.
"""

from __future__ import annotations

from typing import Any

from . import walks

SIMPLE_TYPES = frozenset(["array", "boolean", "integer", "null", "number", "object", "string"])
_TEXT = frozenset(
    ["title", "description", "$comment", "format", "contentMediaType", "contentEncoding"]
)
_ANY = frozenset(["default", "const"])
_NUMBER = frozenset(["maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"])
_COUNT = frozenset(
    ["maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties"]
)
_FLAG = frozenset(["uniqueItems", "readOnly"])
_SCHEMA = frozenset(["items", "additionalProperties", "not", "contains", "propertyNames"])
_SCHEMA_MAP = frozenset(["properties", "definitions"])
_SCHEMA_LIST = frozenset(["allOf", "anyOf", "oneOf"])
# Keywords of the meta-schema this module leaves to it (formats, references, regexes...).
_DEFERRED = frozenset(
    [
        "$id",
        "$schema",
        "$ref",
        "pattern",
        "patternProperties",
        "additionalItems",
        "dependencies",
        "multipleOf",
        "if",
        "then",
        "else",
    ]
)
MAX_NESTING = 32  # deeper schemas go to the meta-schema (no recursion limit to meet here)


def plainly_valid(schema: Any, depth: int = 0) -> bool:
    """True when draft-07's meta-schema surely accepts ``schema``; False when it may not.
    In C where it was built (definitions/walks.py)."""
    native = walks.compiled()
    if native is not None and depth == 0:
        return bool(native.plainly_valid(schema, MAX_NESTING))
    if type(schema) is bool:
        return True
    if type(schema) is not dict or depth > MAX_NESTING:
        return False
    for key, value in schema.items():
        kind = type(value)
        if key in _TEXT:
            if kind is not str:
                return False
        elif key == "type":
            if kind is str:
                if value not in SIMPLE_TYPES:
                    return False
            elif not _type_list(value):
                return False
        elif key in _SCHEMA_MAP:
            if kind is not dict:
                return False
            for child in value.values():
                if not plainly_valid(child, depth + 1):
                    return False
        elif key == "required":
            if not _unique_texts(value):
                return False
        elif key in _SCHEMA:
            if not plainly_valid(value, depth + 1):
                return False
        elif key == "enum" or key == "examples":
            if kind is not list:
                return False
        elif key in _ANY:
            continue
        elif key in _NUMBER:
            if kind is not int and kind is not float:
                return False
        elif key in _COUNT:
            if kind is not int or value < 0:
                return False
        elif key in _FLAG:
            if kind is not bool:
                return False
        elif key in _SCHEMA_LIST:
            if kind is not list or not value:
                return False
            for child in value:
                if not plainly_valid(child, depth + 1):
                    return False
        elif key in _DEFERRED or type(key) is not str:
            return False
        # any other key is a keyword draft-07 does not know: the meta-schema leaves it alone
    return True


def _type_list(value: Any) -> bool:
    return (
        type(value) is list
        and bool(value)
        and all(type(v) is str and v in SIMPLE_TYPES for v in value)
        and len(set(value)) == len(value)
    )


def _unique_texts(value: Any) -> bool:
    return (
        type(value) is list and all(type(v) is str for v in value) and len(set(value)) == len(value)
    )
