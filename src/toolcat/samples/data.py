"""Query, convert and validate JSON and CSV data."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from toolcat import report_artifact, report_progress, report_status, tool
from toolcat.definitions import patterns

__toolcat__ = {
    "toolkit": "data",
    "version": "1.0.0",
    "description": "Query, convert and validate JSON and CSV data.",
    "tags": ["data"],
}

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+|\*)\]")


def _load(document: Any) -> Any:
    if isinstance(document, str):
        try:
            return json.loads(document)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"not valid JSON at line {e.lineno} column {e.colno}: {e.msg}"
            ) from None
    return document


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _rows(csv_text: str, delimiter: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(csv_text), delimiter=delimiter)
    return [{k: _number(v) if v is not None else None for k, v in row.items()} for row in reader]


@tool(
    tags=["read-only"],
    idempotent=True,
    examples=["get the email of every user from this json"],
)
def json_query(document: Any, path: str) -> Any:
    """Pick values out of a JSON document with a dotted path such as 'items[0].name' or 'users[*].email'.

    Args:
        document: JSON text or an already-parsed value.
        path: Dotted path; [n] indexes a list, [*] maps over it.
    """
    values = [_load(document)]
    for key, index in _STEP.findall(path):
        next_values = []
        for value in values:
            if key:
                if not isinstance(value, dict) or key not in value:
                    raise KeyError(f"no key {key!r} at this point of the path {path!r}")
                next_values.append(value[key])
            elif index == "*":
                if not isinstance(value, list):
                    raise TypeError(f"[*] needs a list in the path {path!r}")
                next_values.extend(value)
            else:
                if not isinstance(value, list) or int(index) >= len(value):
                    raise IndexError(f"no item [{index}] at this point of the path {path!r}")
                next_values.append(value[int(index)])
        values = next_values
    return values if "[*]" in path else values[0]


@tool(tags=["read-only"], idempotent=True, examples=["turn this spreadsheet export into json"])
def csv_to_json(csv_text: str, delimiter: str = ",") -> list[dict[str, Any]]:
    """Parse CSV text into a list of JSON records keyed by the header row, converting numbers.

    Args:
        csv_text: CSV with a header row.
        delimiter: One-character field separator.
    """
    return _rows(csv_text, delimiter)


@tool(tags=["read-only"], idempotent=True, examples=["export these records as csv"])
def json_to_csv(records: list[dict[str, Any]], delimiter: str = ",") -> str:
    """Turn a list of JSON objects into CSV text with a header row.

    Args:
        records: Objects to write; their keys become the columns.
        delimiter: One-character field separator.
    """
    columns = list(dict.fromkeys(key for record in records for key in record))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, delimiter=delimiter, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in record.items()}
        )
    return out.getvalue()


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["describe the columns of this dataset"],
)
def csv_summary(csv_text: str, delimiter: str = ",") -> dict[str, Any]:
    """Profile CSV data - row count, and for each column its type, missing values, distinct values and numeric range.

    Args:
        csv_text: CSV with a header row.
        delimiter: One-character field separator.
    """
    rows = _rows(csv_text, delimiter)
    columns: dict[str, Any] = {}
    for name in rows[0] if rows else []:
        values = [r.get(name) for r in rows]
        present = [v for v in values if v not in (None, "")]
        numbers = [v for v in present if isinstance(v, (int, float))]
        column: dict[str, Any] = {
            "type": "number" if present and len(numbers) == len(present) else "text",
            "missing": len(values) - len(present),
            "distinct": len({str(v) for v in present}),
        }
        if numbers:
            column.update(min=min(numbers), max=max(numbers), mean=sum(numbers) / len(numbers))
        columns[name] = column
    return {"rows": len(rows), "columns": columns}


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["does this payload match the schema"],
)
def validate_json(document: Any, schema: dict[str, Any]) -> dict[str, Any]:
    """Check a JSON document against a JSON Schema and list every violation with its location.

    Args:
        document: JSON text or an already-parsed value.
        schema: The JSON Schema to check against.
    """
    import jsonschema
    import referencing

    # An empty registry: a remote "$ref" is an error, never a fetch.
    validator = _bounded_validator(jsonschema.Draft202012Validator)(
        schema, registry=referencing.Registry()
    )
    try:
        errors = [
            {"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
            for e in validator.iter_errors(_load(document))
        ]
    except referencing.exceptions.Unresolvable as e:
        raise ValueError(f"unresolvable $ref {e}; only references inside the schema work") from None
    return {"valid": not errors, "errors": errors[:100]}


PATTERN_BUDGET_S = 2.0


def _bounded_validator(cls: Any) -> Any:
    """``cls`` with ``pattern``, ``patternProperties`` and ``additionalProperties`` matched by
    toolcat.definitions.patterns (bounded size, one time budget for the whole validation)."""
    import time

    import jsonschema

    deadline = time.monotonic() + PATTERN_BUDGET_S

    def matches(pattern: str, value: str) -> bool:
        return patterns.check_pattern(pattern, value, deadline - time.monotonic())

    def pattern(validator: Any, expected: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not matches(expected, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {expected!r}")

    def pattern_properties(validator: Any, expected: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for key_pattern, subschema in expected.items():
            for key, value in instance.items():
                if matches(key_pattern, key):
                    yield from validator.descend(
                        value, subschema, path=key, schema_path=key_pattern
                    )

    def additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        named = schema.get("properties", {})
        keyed = schema.get("patternProperties", {})
        extras = [
            key for key in instance if key not in named and not any(matches(p, key) for p in keyed)
        ]
        if validator.is_type(allowed, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], allowed, path=extra)
        elif not allowed and extras:
            listed = ", ".join(repr(e) for e in sorted(extras))
            yield jsonschema.ValidationError(f"additional properties are not allowed: {listed}")

    extend: Any = jsonschema.validators.extend
    return extend(
        cls,
        {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
        },
    )


def _diff(before: Any, after: Any, path: str, changes: list[dict[str, Any]]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before.keys() | after.keys():
            sub = f"{path}/{key}"
            if key not in after:
                changes.append({"op": "removed", "path": sub, "before": before[key]})
            elif key not in before:
                changes.append({"op": "added", "path": sub, "after": after[key]})
            else:
                _diff(before[key], after[key], sub, changes)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            _diff(a, b, f"{path}/{i}", changes)
    elif before != after:
        changes.append({"op": "changed", "path": path or "/", "before": before, "after": after})


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["total sales per region from this csv as a report"],
)
def group_report(csv_text: str, group_by: str, value: str, delimiter: str = ",") -> dict[str, Any]:
    """Group CSV rows by one column and total another - count, sum, mean, min and max per group - returned as a summary and as a CSV report file.

    Reports its status and progress while it runs; the full report comes back as the
    artifact ``<group_by>-<value>-report.csv`` (largest sum first).

    Args:
        csv_text: CSV with a header row.
        group_by: The column whose values form the groups.
        value: The numeric column to total; rows where it is not a number are skipped.
        delimiter: One-character field separator.
    """
    report_status("parsing", f"reading CSV to group by {group_by!r}")
    rows = _rows(csv_text, delimiter)
    columns = list(rows[0]) if rows else []
    for column in (group_by, value):
        if column not in columns:
            raise ValueError(f"no column {column!r}; the columns are: {', '.join(columns) or '-'}")
    report_status("aggregating", f"{len(rows)} rows")
    groups: dict[str, list[float]] = {}
    skipped = 0
    step = max(1, len(rows) // 20)  # about 20 progress events, however long the data
    for done, row in enumerate(rows, 1):
        number = row.get(value)
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            groups.setdefault(str(row.get(group_by) or ""), []).append(float(number))
        else:
            skipped += 1
        if done % step == 0 or done == len(rows):
            report_progress(done, len(rows), f"{done} of {len(rows)} rows")
    report_status("writing report", f"{len(groups)} groups")
    table: list[dict[str, Any]] = [
        {
            group_by: group,
            "count": len(numbers),
            "sum": round(sum(numbers), 6),
            "mean": round(sum(numbers) / len(numbers), 6),
            "min": min(numbers),
            "max": max(numbers),
        }
        for group, numbers in groups.items()
    ]
    table.sort(key=lambda r: (-r["sum"], str(r[group_by])))
    out = io.StringIO()
    fields = [group_by, "count", "sum", "mean", "min", "max"]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    report_artifact(
        f"{group_by}-{value}-report.csv",
        out.getvalue(),
        mime_type="text/csv",
        description=f"{value} per {group_by}: count, sum, mean, min, max ({len(table)} groups)",
    )
    return {"rows": len(rows), "skipped": skipped, "groups": len(table), "top": table[:5]}


@tool(
    tags=["read-only"],
    idempotent=True,
    defer_loading=True,
    examples=["what changed between two config files"],
)
def json_diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """Compare two JSON documents and list the paths that were added, removed or changed.

    Args:
        before: JSON text or value.
        after: JSON text or value.
    """
    changes: list[dict[str, Any]] = []
    _diff(_load(before), _load(after), "", changes)
    return sorted(changes, key=lambda c: c["path"])
