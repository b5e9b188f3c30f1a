"""The YAML loader of scenario files: PyYAML's safe loader (libyaml's parser where PyYAML has it),
each distinct plain scalar resolved and built once per file.

A 10,000-job file repeats its keys and most of its values ("gpus", "training", 2) thousands of
times, and PyYAML matched each occurrence against its implicit-tag regular expressions and built
its value again. The values of the core scalar tags (str, int, float, bool, null) are immutable,
so one object serves every occurrence; anything else goes through PyYAML as before.
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from yaml.nodes import Node, ScalarNode

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_IMMUTABLE_TAGS: Final = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null"))


class ScenarioLoader(_SafeLoader):  # type: ignore[valid-type,misc]  # the C loader when there is one
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._plain_tags: dict[str, str] = {}
        self._scalars: dict[tuple[str, str], Any] = {}

    def resolve(self, kind: type[Node], value: Any, implicit: tuple[bool, bool]) -> str:
        # A plain scalar's tag depends on its text alone where no path resolver is registered.
        if kind is ScalarNode and implicit[0] and not self.yaml_path_resolvers:
            tag = self._plain_tags.get(value)
            if tag is None:
                tag = self._plain_tags[value] = super().resolve(kind, value, implicit)
            return tag
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if type(node) is ScalarNode and node.tag in _IMMUTABLE_TAGS:
            key = (node.tag, node.value)
            if key in self._scalars:
                return self._scalars[key]
            built = self._scalars[key] = super().construct_object(node, deep)
            return built
        return super().construct_object(node, deep)


def load(text: str) -> Any:
    """The document of a YAML text, as yaml.safe_load reads it; raises yaml.YAMLError."""
    return yaml.load(text, Loader=ScenarioLoader)  # a safe loader
