"""matrix.yaml against its JSON Schema: every problem at once, each as one readable line.

jsonschema (Draft 2020-12) finds the problems; this module words them: the key path
(`$.levels.2.variants.moe.gpus`), what was found, what was expected, and the closest valid key for a
typo, so a maintainer fixes all of them in one edit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from verl_e2e.errors import did_you_mean


@cache
def schema() -> dict[str, Any]:
    text = resources.files("verl_e2e").joinpath("schema/matrix.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _key_path(error: ValidationError) -> str:
    parts = ["$"]
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else f".{p}")
    return "".join(parts)


def _describe(error: ValidationError) -> str:
    """One readable sentence for a schema error, with a 'did you mean' for unknown keys."""
    found = json.dumps(error.instance, default=str)
    if len(found) > 60:
        found = found[:57] + "..."
    validator, expected = error.validator, cast(Any, error.validator_value)
    schema_node = error.schema if isinstance(error.schema, Mapping) else {}
    if validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(schema_node.get("properties", {}))
        extra = sorted(set(error.instance) - allowed)
        hints = ", ".join(f"{k!r}{did_you_mean(k, allowed)}" for k in extra)
        return f"unknown key {hints}; expected one of: {', '.join(sorted(allowed))}"
    if validator == "required":
        instance = cast(Any, error.instance)
        missing = [k for k in expected if k not in instance]
        return f"missing required key {', '.join(repr(k) for k in missing)}"
    if validator == "propertyNames":
        return f"key {found} is not allowed here ({error.message})"
    if validator == "type":
        return f"found {found}, expected {expected if isinstance(expected, str) else ' or '.join(expected)}"
    if validator == "enum":
        return f"found {found}, expected one of {', '.join(json.dumps(v) for v in expected)}" + (
            did_you_mean(str(error.instance), [str(v) for v in expected])
        )
    if validator in ("minimum", "maximum", "minItems", "minLength", "pattern", "const", "uniqueItems"):
        return f"found {found}, expected {validator} {json.dumps(expected)}"
    return f"found {found}: {error.message}"


def validate_document(document: Any, source: str) -> list[str]:
    """All schema problems of a loaded document, as `file::$.path: message` lines."""
    validator = Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    lines = []
    for error in errors:
        best = error
        if error.validator in ("oneOf", "anyOf") and error.context:
            best = min(error.context, key=lambda e: len(list(e.relative_path)) * -1)
        lines.append(f"{source}::{_key_path(error)}: {_describe(best)}")
    return lines
