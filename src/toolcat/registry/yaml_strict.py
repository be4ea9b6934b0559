"""A YAML loader for manifests: the safe loader, without aliases or duplicate keys.

Aliases (``*name``) are refused outright: a few nested ones ("billion laughs") expand into
gigabytes, and a manifest has no need for them. A key that appears twice in one mapping is
recorded (with its line) instead of silently keeping the last value.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode

from .limits import check_number_text

_MAX_DUPLICATES = 100


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases and records duplicate keys."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int]] = []

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ComposerError(
                None,
                None,
                f"aliases (*{event.anchor}) are not allowed in a manifest; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        "found an unhashable key",
                        key_node.start_mark,
                    ) from None
                if duplicate and len(self.duplicates) < _MAX_DUPLICATES:
                    self.duplicates.append((str(key), key_node.start_mark.line + 1))
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> Any:
        value = str(self.construct_scalar(node)).replace("_", "")
        digits = value.lstrip("+-")
        if digits.isdigit() and not digits.startswith("0"):
            return check_number_text(value)  # decimal: bounded before int() converts it
        if len(digits) > 70:  # hex, octal, binary or sexagesimal: bounded by length
            return check_number_text(value)
        return super().construct_yaml_int(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
