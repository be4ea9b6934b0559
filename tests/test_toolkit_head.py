"""``check_head`` takes only a head a validated ``Toolkit`` could have: every value that
``Toolkit`` refuses (or would have normalised) is refused in a head made elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from toolcat.models import MAX_TOOLS_PER_TOOLKIT, ToolHead, Toolkit, check_head


def _head(**changes: Any) -> Any:
    toolkit = Toolkit.model_validate(
        {
            "name": "kit",
            "version": "1.0.0",
            "description": "d",
            "tags": ["a", "b"],
            "module": "kitpkg",
            "tools": [
                {"name": "t", "description": "x", "parameters": {"type": "object"}},
                {
                    "name": "u",
                    "description": "y",
                    "parameters": {"type": "object"},
                    "implementation": "kitpkg.tools:u",
                },
            ],
        }
    )
    return toolkit.head()._replace(**changes)


def test_a_validated_toolkits_head_passes() -> None:
    assert check_head(_head()) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"name": "Kit Name"},
        {"name": ""},
        {"version": "01.0"},  # Toolkit stores it as 1.0
        {"version": "one"},
        {"version": " 1.0.0"},
        {"description": "x" * 70_000},
        {"tags": (" a",)},
        {"tags": ("a", "a")},
        {"tags": ("",)},
        {"module": "kit pkg"},
        {"tools": (ToolHead("t", None), ToolHead("t", None))},
        {"tools": (ToolHead("bad name", None),)},
        {"tools": (ToolHead("t", "not an implementation"),)},
        {"tools": (ToolHead("t", "otherpkg:run"),)},
        {"tools": tuple(ToolHead(f"t{i}", None) for i in range(MAX_TOOLS_PER_TOOLKIT + 1))},
    ],
)
def test_a_head_no_toolkit_could_have_is_refused(changes: dict[str, Any]) -> None:
    assert check_head(_head(**changes)) is not None
