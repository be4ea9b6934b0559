"""Tool definitions from Python code: the ``@tool`` decorator, modules and entry points.

``@tool`` only attaches metadata and returns the function unchanged; registration is a
separate step that reads a module's decorated functions (importing the module once, at
admin time) and builds a ``Toolkit`` whose implementations are ``module:function``
strings. The parameters schema comes from the signature through pydantic, and per-argument
descriptions from the docstring's ``Args:`` section (Google, NumPy or reST style).
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from ..definitions.importpath import searched
from ..errors import ManifestError
from ..models import Toolkit

TOOL_ATTR = "__toolcat_tool__"
MODULE_ATTR = "__toolcat__"
ENTRY_POINT_GROUP = "toolcat.toolkits"

T = TypeVar("T")


@dataclass(frozen=True)
class ToolOptions:
    """What ``@tool(...)`` records; ``None`` means "derive it from the code"."""

    name: str | None = None
    description: str | None = None
    tags: tuple[str, ...] = ()
    defer_loading: bool | None = None
    idempotent: bool = False
    streaming: bool = False
    annotations: dict[str, Any] = field(default_factory=dict)
    examples: tuple[str, ...] = ()
    search_hint: str | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    max_result_bytes: int | None = None


@overload
def tool(obj: T, /) -> T: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    tags: Iterable[str] = (),
    defer_loading: bool | None = None,
    idempotent: bool = False,
    streaming: bool = False,
    read_only: bool | None = None,
    destructive: bool | None = None,
    open_world: bool | None = None,
    examples: Iterable[str] = (),
    search_hint: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    max_result_bytes: int | None = None,
) -> Callable[[T], T]: ...


def tool(
    obj: Any = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    tags: Iterable[str] = (),
    defer_loading: bool | None = None,
    idempotent: bool = False,
    streaming: bool = False,
    read_only: bool | None = None,
    destructive: bool | None = None,
    open_world: bool | None = None,
    examples: Iterable[str] = (),
    search_hint: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    max_result_bytes: int | None = None,
) -> Any:
    """Mark a function (or a pydantic model with ``__call__``) as a tool.

    Use bare (``@tool``) or with options (``@tool(tags=["read-only"], defer_loading=True)``).
    The object is returned unchanged; nothing is registered until a module is registered.
    """
    hints = {"read_only": read_only, "destructive": destructive, "open_world": open_world}
    options = ToolOptions(
        name=name,
        description=description,
        tags=tuple(tags),
        defer_loading=defer_loading,
        idempotent=idempotent,
        streaming=streaming,
        annotations={k: v for k, v in hints.items() if v is not None},
        examples=tuple(examples),
        search_hint=search_hint,
        timeout=timeout,
        max_concurrency=max_concurrency,
        max_result_bytes=max_result_bytes,
    )

    def attach(target: T) -> T:
        setattr(target, TOOL_ATTR, options)
        return target

    return attach(obj) if obj is not None else attach


def _strip_titles(schema: Any) -> Any:
    """Drop the ``title`` pydantic generates on every schema object (noise for a model)."""
    if isinstance(schema, dict):
        cleaned = {k: v for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
        for key in ("properties", "$defs", "definitions", "patternProperties"):
            if isinstance(cleaned.get(key), dict):
                cleaned[key] = {n: _strip_titles(s) for n, s in cleaned[key].items()}
        for key in ("items", "additionalProperties", "not"):
            if isinstance(cleaned.get(key), dict):
                cleaned[key] = _strip_titles(cleaned[key])
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            if isinstance(cleaned.get(key), list):
                cleaned[key] = [_strip_titles(s) for s in cleaned[key]]
        return cleaned
    return schema


def _docstring(obj: Any) -> tuple[str, dict[str, str]]:
    """(description without parameter sections, parameter descriptions)."""
    text = inspect.getdoc(obj) or ""
    if not text:
        return "", {}
    import docstring_parser

    parsed = docstring_parser.parse(text)
    parts = [p for p in (parsed.short_description, parsed.long_description) if p]
    params = {p.arg_name: p.description for p in parsed.params if p.description}
    return "\n\n".join(parts).strip(), params


def _has_description(annotation: Any) -> bool:
    from pydantic.fields import FieldInfo

    if typing.get_origin(annotation) is typing.Annotated:
        return any(
            isinstance(m, FieldInfo) and m.description for m in typing.get_args(annotation)[1:]
        )
    return False


def function_schemas(func: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(parameters schema, output schema or ``None``) of a function, via pydantic."""
    from pydantic import BaseModel, Field, TypeAdapter, create_model

    signature = inspect.signature(func)
    hints = typing.get_type_hints(func, include_extras=True)
    _, documented = _docstring(func)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name == "self":
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ValueError(f"parameter {param.name!r} is positional-only; tools take keywords")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        description = None if _has_description(annotation) else documented.get(param.name)
        # A parameter named like a BaseModel attribute ("schema", "copy") gets an internal
        # field name; its alias keeps the real name in the schema.
        internal = f"arg_{len(fields)}" if hasattr(BaseModel, param.name) else param.name
        alias = param.name if internal != param.name else None
        extra: dict[str, Any] = {}
        if description:
            extra["description"] = description
        if alias:
            extra["alias"] = alias
        fields[internal] = (annotation, Field(default, **extra))
    model = create_model(f"{func.__name__}_arguments", **fields)
    parameters = _strip_titles(model.model_json_schema())
    output = None
    returns = hints.get("return", None)
    if returns is not None and returns is not type(None):
        output = _strip_titles(TypeAdapter(returns).json_schema(mode="serialization"))
    return parameters, output


def tool_definition(obj: Any, options: ToolOptions | None = None) -> dict[str, Any]:
    """The manifest entry (a dict) of a decorated function or pydantic model class."""
    from pydantic import BaseModel

    options = options or getattr(obj, TOOL_ATTR, None) or ToolOptions()
    qualname = getattr(obj, "__qualname__", "")
    if "<locals>" in qualname or not qualname:
        raise ValueError("tools must be defined at module level, so they can be imported")
    description, _ = _docstring(obj)
    if isinstance(obj, type) and issubclass(obj, BaseModel):
        if "__call__" not in vars(obj):
            raise ValueError(f"model {qualname} needs a __call__ method to be a tool")
        parameters = _strip_titles(obj.model_json_schema())
        _, output = function_schemas(obj.__call__)
    else:
        parameters, output = function_schemas(obj)
    definition: dict[str, Any] = {
        "name": options.name or obj.__name__,
        "description": options.description or description,
        "parameters": parameters,
        "implementation": f"{obj.__module__}:{qualname}",
    }
    optional = {
        "output_schema": output,
        "tags": list(options.tags),
        "defer_loading": options.defer_loading,
        "idempotent": options.idempotent,
        "streaming": options.streaming,
        "annotations": options.annotations,
        "examples": list(options.examples),
        "search_hint": options.search_hint,
        "timeout": options.timeout,
        "max_concurrency": options.max_concurrency,
        "max_result_bytes": options.max_result_bytes,
    }
    definition.update({k: v for k, v in optional.items() if v not in (None, False, [], {})})
    return definition


def toolkit_from_module(
    module_name: str,
    *,
    name: str | None = None,
    version: str | None = None,
) -> Toolkit:
    """Import ``module_name`` and build a toolkit of its ``@tool`` objects, in order.

    Toolkit fields come from the arguments, else from a module-level ``__toolcat__`` dict
    (``toolkit``, ``version``, ``description``, ``tags``, ``defer_loading``), else from the
    module (its last name part, ``__version__``, the docstring's first paragraph).

    Raises:
        ManifestError: The module cannot be imported, has no tools, or a tool's definition
            is invalid (the message names the tool and field).
    """
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ManifestError(
            f"cannot import module: {type(e).__name__}: {e}{searched(e)}", file=module_name
        ) from e
    meta: dict[str, Any] = dict(getattr(module, MODULE_ATTR, {}) or {})
    tools = []
    for obj in list(vars(module).values()):
        if getattr(obj, TOOL_ATTR, None) is None or getattr(obj, "__module__", None) != module_name:
            continue
        try:
            tools.append(tool_definition(obj))
        except (ValueError, TypeError) as e:
            raise ManifestError(
                str(e), file=module_name, tool=getattr(obj, "__name__", None)
            ) from e
    if not tools:
        raise ManifestError("no @tool functions in this module", file=module_name)
    doc = (module.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    data = {
        "toolkit": name or meta.get("toolkit") or module_name.rsplit(".", 1)[-1].lower(),
        "version": version or meta.get("version") or getattr(module, "__version__", None),
        "description": meta.get("description", doc),
        "tags": meta.get("tags", []),
        "defer_loading": meta.get("defer_loading", False),
        "module": module_name,
        "tools": tools,
    }
    if not data["version"]:
        raise ManifestError(
            "no version: pass --version, or set __toolcat__ = {'version': ...} or "
            "__version__ in the module",
            file=module_name,
        )
    from .manifest import toolkit_from_data

    try:
        return toolkit_from_data(data)
    except ManifestError as e:
        raise e.in_file(module_name) from e


def toolkits_from_entry_points() -> list[tuple[Toolkit, str]]:
    """Toolkits that installed packages declare under the ``toolcat.toolkits`` entry point.

    An entry point names a module (``pkg.tools``), registered like ``--module``, or an object
    (``pkg.tools:TOOLKIT``) that is a ``Toolkit`` or a function returning one.
    """
    from importlib.metadata import entry_points

    found: list[tuple[Toolkit, str]] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {entry.name} = {entry.value}"
        if ":" not in entry.value:
            found.append((toolkit_from_module(entry.value), source))
            continue
        try:
            obj = entry.load()
            toolkit = obj() if callable(obj) and not isinstance(obj, Toolkit) else obj
        except Exception as e:
            raise ManifestError(f"cannot load: {type(e).__name__}: {e}", file=source) from e
        if not isinstance(toolkit, Toolkit):
            raise ManifestError("does not give a toolcat.Toolkit", file=source)
        found.append((toolkit, source))
    return found


def manifest_data(toolkit: Toolkit) -> dict[str, Any]:
    """A toolkit as manifest data (``toolkit:`` first, defaults left out)."""
    data = toolkit.model_dump(mode="json", exclude_defaults=True)
    data.pop("name", None)
    data["tools"] = [t.model_dump(mode="json", exclude_defaults=True) for t in toolkit.tools]
    return {"toolkit": toolkit.name, "version": toolkit.version, **data}


def manifest_text(toolkit: Toolkit, fmt: str = "yaml") -> str:
    """The manifest of ``toolkit`` as YAML or JSON text."""
    data = manifest_data(toolkit)
    if fmt == "json":
        import json

        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        import yaml

        header = "# Generated by `toolcat manifest`; edit the Python source, not this file.\n"
        return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    raise ManifestError(f"unknown manifest format {fmt!r}; use yaml or json")
