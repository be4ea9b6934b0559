"""Reading toolkit manifests (YAML, TOML or JSON; one toolkit per file).

Every problem becomes a ``ManifestError`` naming the file, toolkit, tool and field, so an
admin can go straight to the line to fix.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ManifestError
from ..models import ToolFieldError, Toolkit

MANIFEST_SUFFIXES = (".yaml", ".yml", ".toml", ".json")


def parse_manifest_text(text: str, suffix: str) -> Any:
    """Parse manifest text by file suffix; syntax errors become ``ManifestError`` with a line."""
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = f" at line {mark.line + 1}" if mark is not None else ""
            problem = getattr(e, "problem", None) or str(e)
            raise ManifestError(f"invalid YAML{line}: {problem}") from e
    if suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ManifestError(f"invalid TOML: {e}") from e
    if suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"invalid JSON at line {e.lineno}: {e.msg}") from e
    raise ManifestError(
        f"unknown manifest type {suffix!r}; use one of {', '.join(MANIFEST_SUFFIXES)}"
    )


def toolkit_from_data(data: Any) -> Toolkit:
    """Validate parsed manifest data as a ``Toolkit``."""
    if not isinstance(data, dict):
        raise ManifestError("a manifest must be a mapping with 'toolkit', 'version' and 'tools'")
    try:
        return Toolkit.model_validate(data)
    except ValidationError as e:
        raise _manifest_error(e, data) from None


def load_manifest(path: str | os.PathLike[str]) -> Toolkit:
    """Read and validate one manifest file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"cannot read manifest: {e}", file=str(path)) from e
    try:
        return toolkit_from_data(parse_manifest_text(text, path.suffix.lower()))
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
    """Load every manifest under ``paths`` as (toolkit, source file) pairs."""
    return [(load_manifest(p), str(p)) for p in manifest_paths(paths)]


def _manifest_error(error: ValidationError, data: dict[str, Any]) -> ManifestError:
    toolkit_name = data.get("toolkit", data.get("name"))
    toolkit = toolkit_name if isinstance(toolkit_name, str) else None
    problems = error.errors()
    tool: str | None = None
    field: str | None = None
    first = problems[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ToolFieldError):
        tool, field, reason = cause.tool, cause.field, cause.reason
    else:
        loc = list(first["loc"])
        if len(loc) >= 2 and loc[0] == "tools" and isinstance(loc[1], int):
            tool = _tool_label(data, loc[1])
            loc = loc[2:]
        field = ".".join(str(part) for part in loc) or None
        reason = _reason(first)
    if len(problems) > 1:
        reason += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
    return ManifestError(reason, toolkit=toolkit, tool=tool, field=field)


def _tool_label(data: dict[str, Any], index: int) -> str:
    tools = data.get("tools")
    if isinstance(tools, list) and index < len(tools) and isinstance(tools[index], dict):
        name = tools[index].get("name")
        if isinstance(name, str) and name:
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
