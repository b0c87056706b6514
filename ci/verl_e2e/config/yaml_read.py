"""matrix.yaml's reading rules, shared by the loader and `verl-e2e validate`: YAML's safe loader
without timestamp typing, and the string keys JSON Schema speaks of."""

from __future__ import annotations

from typing import Any

import yaml

_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


class Loader(_SafeBase):  # type: ignore[valid-type,misc]
    """Safe loader that keeps timestamps as strings, so a date-like value is never silently retyped."""


Loader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def stringify_keys(node: Any) -> Any:
    """YAML reads `0:` as an int key; JSON Schema (and our contracts) speak of string keys."""
    if isinstance(node, dict):
        return {str(k): stringify_keys(v) for k, v in node.items()}
    if isinstance(node, list):
        return [stringify_keys(v) for v in node]
    return node
