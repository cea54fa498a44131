"""YAML config files, read strictly: a repeated key is an error, as it is in JSON files here.

A module of its own so that what reads JSON (a pod's ConfigMap, `routernet up`'s files, the
validating child of a router process: router/config/child.py) does not import PyYAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from router.config.views import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """Rejects repeated keys, which plain YAML resolves by silently keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                mark = key_node.start_mark
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, path: Path) -> Any:
    """The document in ``text``; ``path`` names it in errors (ConfigError, one line)."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML: {_yaml_reason(err)}") from None


def _yaml_reason(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.MarkedYAMLError) and err.problem_mark is not None:
        mark = err.problem_mark
        return f"line {mark.line + 1} column {mark.column + 1}: {err.problem}"
    return " ".join(str(err).split())
