"""Reading toolkit manifests (YAML, TOML or JSON; one toolkit per file).

Every problem becomes a ``ManifestError`` naming the file, toolkit, tool and field, so an
admin can go straight to the line to fix.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..definitions.walks import is_text
from ..errors import MAX_PROBLEMS, ManifestError
from ..models import ToolFieldError, Toolkit
from .limits import (
    MAX_DEPTH,
    MAX_IMPORTED_BYTES,
    MAX_IMPORTED_TOOL_BYTES,
    NotJson,
    check_number_text,
    decode_manifest,
    read_manifest_bytes,
    value_problems,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".toml", ".json")
MAX_FIELD_CHARS = 120


def parse_manifest_text(text: str, suffix: str) -> Any:
    """Parse manifest text by file suffix; syntax errors become ``ManifestError`` with a line.

    Duplicate keys (JSON and YAML) and YAML aliases are refused; numbers JSON cannot carry
    are kept as ``limits.NotJson`` markers for ``check_values`` to locate.
    """
    duplicates: list[ManifestError] = []
    data = _parse(text, suffix, duplicates)
    if duplicates:
        raise ManifestError.of(duplicates)
    return data


def _parse(text: str, suffix: str, duplicates: list[ManifestError]) -> Any:
    """The parsed manifest; duplicate keys are appended to ``duplicates``."""
    try:
        if suffix in (".yaml", ".yml"):
            return _parse_yaml(text, duplicates)
        if suffix == ".toml":
            return _parse_toml(text)
        if suffix == ".json":
            return _parse_json(text, duplicates)
    except RecursionError:
        raise ManifestError(f"nested deeper than {MAX_DEPTH} levels") from None
    raise ManifestError(
        f"unknown manifest type {suffix!r}; use one of {', '.join(MANIFEST_SUFFIXES)}"
    )


def _parse_yaml(text: str, duplicates: list[ManifestError]) -> Any:
    import yaml

    from .yaml_strict import StrictLoader

    loader = None
    try:
        loader = StrictLoader(text)  # its reader refuses control characters (NUL...) here
        data = loader.get_single_data()
    except yaml.reader.ReaderError as e:
        at = text.count("\n", 0, e.position) + 1
        raise ManifestError(
            f"invalid YAML at line {at}: character U+{e.character:04X} is not allowed "
            "(control characters must be escaped in a double-quoted string)"
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ManifestError(f"invalid YAML{line}: {problem}") from e
    except ValueError as e:  # int() of a 5,000-digit literal on Python 3.11+
        raise ManifestError(f"invalid YAML: {e}") from e
    finally:
        if loader is not None:
            loader.dispose()
    duplicates.extend(
        ManifestError(f"duplicate key {key!r} at line {line}; each key may appear once")
        for key, line in loader.duplicates
    )
    return data


def _parse_toml(text: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    try:
        return tomllib.loads(text)  # TOML itself refuses duplicate keys
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"invalid TOML: {e}") from e
    except ValueError as e:
        raise ManifestError(f"invalid TOML: {e}") from e


def _parse_json(text: str, problems: list[ManifestError]) -> Any:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(items)  # the last value of a key wins, as in a plain json.loads
        if len(found) != len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen and key not in duplicates:
                    duplicates.append(key)
                seen.add(key)
        return found

    try:
        data = json.loads(
            text,
            object_pairs_hook=pairs,
            parse_int=check_number_text,
            parse_constant=lambda name: NotJson(name, f"{name} is not a JSON number"),
        )
    except json.JSONDecodeError as e:
        raise ManifestError(f"invalid JSON at line {e.lineno}: {e.msg}") from e
    problems.extend(
        ManifestError(f"duplicate key {key!r}; each key may appear once") for key in duplicates
    )
    return data


def check_values(data: Any) -> tuple[list[ManifestError], bool]:
    """Problems with values that cannot round-trip through JSON, each located by toolkit, tool
    and field; and whether any of them must stop validation."""
    problems: list[ManifestError] = []
    blocking = False
    toolkit = _toolkit_name(data)
    for path, reason, stops in value_problems(data):
        blocking = blocking or stops
        tool, field = _locate(data, path)
        problems.append(ManifestError(reason, toolkit=toolkit, tool=tool, field=field))
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems, blocking


def toolkit_from_data(data: Any, found: list[ManifestError] | None = None) -> Toolkit:
    """Validate parsed manifest data as a ``Toolkit``.

    Args:
        data: The parsed manifest.
        found: Problems already found while parsing (duplicate keys), reported with the rest.

    Raises:
        ManifestError: Every problem found (up to ``MAX_PROBLEMS``), each naming toolkit,
            tool and field.
    """
    toolkit_name = _toolkit_name(data)
    problems = [
        ManifestError(p.reason, toolkit=toolkit_name, tool=p.tool, field=p.field)
        for p in found or []
    ]
    if not isinstance(data, dict):
        problems.append(
            ManifestError("a manifest must be a mapping with 'toolkit', 'version' and 'tools'")
        )
        raise ManifestError.of(problems)
    value_found, blocking = check_values(data)
    problems += value_found
    if blocking:
        raise ManifestError.of(problems)
    try:
        toolkit = Toolkit.model_validate(data)
    except ValidationError as e:
        raise ManifestError.of([*problems, *_manifest_errors(e, data)]) from None
    if problems:
        raise ManifestError.of(problems)
    return toolkit


def load_manifest(path: str | os.PathLike[str]) -> Toolkit:
    """Read and validate one manifest file (a regular file of at most 4 MiB)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in MANIFEST_SUFFIXES:
        raise ManifestError(
            f"unknown manifest type {suffix!r}; use one of {', '.join(MANIFEST_SUFFIXES)}",
            file=str(path),
        )
    text = decode_manifest(read_manifest_bytes(path), path)
    try:
        duplicates: list[ManifestError] = []
        return toolkit_from_data(_parse(text, suffix, duplicates), duplicates)
    except ManifestError as e:
        raise e.in_file(str(path)) from e


def manifest_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand directories into the manifests directly inside them (sorted by name)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(
                p for p in path.iterdir() if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES
            )
            if not inside:
                raise ManifestError(
                    f"no manifests ({', '.join(MANIFEST_SUFFIXES)}) in this directory",
                    file=str(path),
                )
            found.extend(inside)
        elif path.exists():
            found.append(path)
        else:
            raise ManifestError("no such file or directory", file=str(path))
    return found


def load_manifests(paths: Iterable[str | os.PathLike[str]]) -> list[tuple[Toolkit, str]]:
    """Load every manifest under ``paths`` as (toolkit, source file) pairs.

    Raises:
        ManifestError: The problems of every invalid file (up to ``MAX_PROBLEMS``).
    """
    loaded: list[tuple[Toolkit, str]] = []
    problems: list[ManifestError] = []
    for path in manifest_paths(paths):
        try:
            loaded.append((load_manifest(path), str(path)))
        except ManifestError as e:
            problems.append(e)
    if problems:
        raise ManifestError.of(problems)
    return loaded


def _manifest_errors(error: ValidationError, data: dict[str, Any]) -> list[ManifestError]:
    """One ``ManifestError`` per pydantic problem, located by toolkit, tool and field."""
    toolkit = _toolkit_name(data)
    found: list[ManifestError] = []
    for problem in error.errors():
        tool: str | None
        field: str | None
        cause = (problem.get("ctx") or {}).get("error")
        if isinstance(cause, ToolFieldError):
            tool, field, reason = cause.tool, cause.field, cause.reason
        else:
            tool, field = _locate(data, list(problem["loc"]))
            reason = _reason(problem)
        found.append(ManifestError(reason, toolkit=toolkit, tool=tool, field=field))
    return found


def _toolkit_name(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    name = data.get("toolkit", data.get("name"))
    return name if isinstance(name, str) and is_text(name) else None


def _locate(data: Any, loc: list[Any]) -> tuple[str | None, str | None]:
    """(tool label, dotted field) of a key path into the manifest."""
    tool: str | None = None
    if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int) and isinstance(data, dict):
        tool = _tool_label(data, loc[1])
        loc = loc[2:]
    field = ".".join(str(part) for part in loc) or None
    if field is not None and not is_text(field):
        field = field.encode("utf-8", "backslashreplace").decode("utf-8")
    if field is not None and len(field) > MAX_FIELD_CHARS:  # a path 300 levels deep
        field = f"{field[: MAX_FIELD_CHARS // 2]}…{field[-MAX_FIELD_CHARS // 2 :]}"
    return tool, field


def check_toolkit(toolkit: Toolkit) -> None:
    """Refuse a ``Toolkit`` built in code whose values cannot round-trip through JSON."""
    problems, _ = check_values(toolkit.model_dump(mode="python"))
    if problems:
        raise ManifestError.of(problems)


def _tool_label(data: dict[str, Any], index: int) -> str:
    tools = data.get("tools")
    if isinstance(tools, list) and index < len(tools) and isinstance(tools[index], dict):
        name = tools[index].get("name")
        if isinstance(name, str) and name and is_text(name):
            return name
    return f"#{index + 1}"


def _reason(problem: Any) -> str:
    kind = problem["type"]
    if kind == "extra_forbidden":
        return "unknown field (a typo?)"
    if kind == "missing":
        return "this field is required"
    message = str(problem["msg"])
    return message.removeprefix("Value error, ")


def imported_toolkit(
    source: str,
    *,
    toolkit: str,
    version: str,
    description: str,
    tags: Sequence[str],
    defer_loading: bool,
    tools: list[dict[str, Any]],
) -> Toolkit:
    """A toolkit built from tool definitions read elsewhere (an MCP server, an OpenAPI
    document), validated as a manifest would be; errors name ``source``. ``tags[0]`` is the
    kind of import (``mcp``, ``openapi``).

    A manifest is at most 4 MiB; an import is held to ``MAX_IMPORTED_TOOL_BYTES`` per tool
    definition and ``MAX_IMPORTED_BYTES`` in all (JSON), checked before validation."""
    sizes = [len(json.dumps(tool, ensure_ascii=False, default=str)) for tool in tools]
    problems = [
        ManifestError(
            f"the definition is {size:,} bytes of JSON; at most {MAX_IMPORTED_TOOL_BYTES:,}",
            file=source,
            toolkit=toolkit,
            tool=str(tool.get("name")),
        )
        for tool, size in zip(tools, sizes, strict=True)
        if size > MAX_IMPORTED_TOOL_BYTES
    ]
    if not problems and sum(sizes) > MAX_IMPORTED_BYTES:
        problems.append(
            ManifestError(
                f"the tools are {sum(sizes):,} bytes of JSON; an import holds at most "
                f"{MAX_IMPORTED_BYTES:,}",
                file=source,
                toolkit=toolkit,
            )
        )
    if problems:
        raise ManifestError.of(problems)
    data: dict[str, Any] = {
        "toolkit": toolkit,
        "version": version,
        "description": description,
        "tags": list(tags),
        "defer_loading": defer_loading,
        "tools": tools,
    }
    try:
        return toolkit_from_data(data)
    except ManifestError as e:
        raise e.in_file(source) from e
