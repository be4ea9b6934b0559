"""Health check of implementations, run in a child process (``python -m toolcat.runtime.check``).

The parent sends ``[{"id", "implementation", "parameters"}...]`` as JSON on stdin; the child
imports each implementation, checks that it can be called and that its signature accepts
the schema's parameters, and prints ``[{"id", "ok", "problems"}...]``. A child process keeps
the admin's own process free of tool imports and their side effects.
"""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from ..errors import ImportFailedError, ToolDeniedError
from .call import as_callable
from .loader import load


def signature_problems(func: Any, parameters: dict[str, Any]) -> list[str]:
    """Mismatches between ``func``'s signature and a parameters schema."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []  # builtins without a signature: nothing to compare
    params = signature.parameters
    properties = set((parameters.get("properties") or {}).keys())
    required = set(parameters.get("required") or [])
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    keyword_names = {
        n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    problems = []
    if not takes_kwargs:
        problems += [
            f"the schema has {name!r} but the function takes no such argument"
            for name in sorted(properties - keyword_names)
        ]
    for name, param in params.items():
        no_default = param.default is param.empty
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or not no_default:
            continue
        if param.kind is param.POSITIONAL_ONLY:
            problems.append(f"argument {name!r} is positional-only; tools are called by keyword")
        elif name not in required:
            problems.append(f"argument {name!r} has no default but the schema does not require it")
    return problems


def check_tool(entry: dict[str, Any]) -> dict[str, Any]:
    problems: list[str] = []
    try:
        if entry.get("trusted", True):
            found = load(entry.get("implementation"), entry["id"])
        else:
            found = load(entry.get("implementation"), entry["id"], root=entry.get("module"))
        func = as_callable(found)
        problems = signature_problems(func, entry.get("parameters") or {})
    except (ImportFailedError, ToolDeniedError) as e:
        problems = [str(e)]
    return {"id": entry["id"], "ok": not problems, "problems": problems}


def main() -> None:
    from ..definitions.importpath import adopt_parent_path

    adopt_parent_path()
    entries = json.load(sys.stdin)
    json.dump([check_tool(e) for e in entries], sys.stdout)


if __name__ == "__main__":
    main()
