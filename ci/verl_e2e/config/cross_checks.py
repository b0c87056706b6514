"""Cross-field checks of a schema-valid matrix.yaml, all at once (the schema checks one field at a time).

`verl-e2e validate` and `load_matrix` report every problem in one go, so a maintainer fixes a matrix
in one edit instead of one error per run: unknown family references, runners too small for a
variant, duplicate rule names, an architecture claimed twice, patterns and globs that do not compile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from verl_e2e.config.globs import PathSet
from verl_e2e.errors import ConfigError, did_you_mean


def _regex(problems: list[str], where: str, pattern: Any) -> None:
    if isinstance(pattern, str):
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"{where}: invalid regular expression ({exc}); fix the pattern")


def _globs(problems: list[str], where: str, patterns: Any) -> None:
    if isinstance(patterns, list):
        try:
            PathSet.parse(patterns, where)
        except ConfigError as exc:
            problems.append(str(exc))


def _families(doc: Mapping[str, Any], source: str, problems: list[str]) -> None:
    families = doc.get("families", {})
    defaults = doc.get("defaults", {})
    if defaults.get("family") not in families:
        problems.append(
            f"{source}::$.defaults.family: found {defaults.get('family')!r}, expected a key of $.families"
            f"{did_you_mean(str(defaults.get('family')), families)}; add the family or pick an existing one"
        )
    for kind, fam in defaults.get("kind_families", {}).items():
        if fam not in families:
            problems.append(
                f"{source}::$.defaults.kind_families.{kind}: found {fam!r}, expected a key of $.families"
                f"{did_you_mean(str(fam), families)}"
            )
        elif _blocks_every_kind(families.get(fam)):
            # every shared change of that kind would be planned onto a family whose cells cannot run
            problems.append(
                f"{source}::$.defaults.kind_families.{kind}: {fam!r} has a cannot_run record; expected a family "
                "whose cells run"
            )
    owner: dict[str, str] = {}
    for name, node in families.items():
        for arch in node.get("architectures", []):
            if arch in owner or arch in doc.get("unsupported", {}):
                other = owner.get(arch, "unsupported")
                problems.append(
                    f"{source}::$.families.{name}.architectures: {arch} is also claimed by {other}; "
                    "an architecture runs on exactly one family"
                )
            owner.setdefault(arch, name)
        for flag in ("moe", "vlm", "mtp"):
            _globs(problems, f"{source}::$.families.{name}.{flag}", node.get(flag))


def _rules(doc: Mapping[str, Any], source: str, problems: list[str]) -> None:
    seen: set[str] = set()
    for section in ("escalations", "rules"):
        for i, rule in enumerate(doc.get(section, [])):
            where = f"{source}::$.{section}[{i}]"
            if rule.get("name") in seen:
                problems.append(f"{where}: rule name {rule.get('name')!r} appears twice; rule names must be unique")
            seen.add(rule.get("name"))
            _regex(problems, f"{where}.diff", rule.get("diff"))
            _globs(problems, f"{where}.paths", rule.get("paths"))
    for i, aspect in enumerate(doc.get("aspects", [])):
        _regex(problems, f"{source}::$.aspects[{i}].pattern", aspect.get("pattern"))
        _globs(problems, f"{source}::$.aspects[{i}].paths", aspect.get("paths"))
    for name, patterns in doc.get("ignore", {}).items():
        _globs(problems, f"{source}::$.ignore.{name}", patterns)


def _runners(doc: Mapping[str, Any], source: str, problems: list[str]) -> None:
    runners = sorted(int(k) for k in doc.get("runners", {}))
    for level, node in doc.get("levels", {}).items():
        for name, variant in node.get("variants", {}).items():
            gpus = variant.get("gpus", 0)
            if variant.get("scheduled"):
                continue  # runs only where a runner is large enough (the scheduled run skips it elsewhere)
            if not runners or runners[-1] < gpus:
                problems.append(
                    f"{source}::$.runners: the largest runner has {runners[-1] if runners else 0} GPUs, but a "
                    f"variant needs {gpus} (levels.{level}.variants.{name}); add a runner with enough GPUs"
                )


def semantic_problems(doc: Mapping[str, Any], source: str) -> list[str]:
    """Every cross-field problem of a document that already passed the JSON Schema."""
    problems: list[str] = []
    _families(doc, source, problems)
    _rules(doc, source, problems)
    _runners(doc, source, problems)
    _architectures(doc, source, problems)
    return problems


def _architectures(doc: Mapping[str, Any], source: str, problems: list[str]) -> None:
    """An aspect that names an architecture kind needs a family of that kind to run on."""
    kinds = doc.get("defaults", {}).get("kind_families", {})
    for i, node in enumerate(doc.get("aspects", [])):
        arch = node.get("architecture")
        if arch is not None and arch not in kinds:
            problems.append(
                f"{source}::$.aspects[{i}].architecture: {arch!r} has no family; add "
                f"defaults.kind_families.{arch} (a family whose model has such layers)"
            )


def _blocks_every_kind(node: object) -> bool:
    """A family whose cannot_run record holds for every kind of its cells (no `kinds` limit)."""
    record = node.get("cannot_run") if isinstance(node, dict) else None
    return isinstance(record, dict) and not record.get("kinds")
