"""Load matrix.yaml, validate it against the shipped JSON Schema, and turn it into frozen dataclasses.

Every refusal names the file, the key path (`$.levels.2.variants.moe.gpus`), what was found and what
was expected, plus the closest valid key for a typo. All schema problems are reported in one go.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from verl_e2e.config.aspects import Aspect, build_aspects
from verl_e2e.config.cross_checks import semantic_problems
from verl_e2e.config.globs import PathSet
from verl_e2e.config.schema_check import validate_document
from verl_e2e.config.signatures import Signature, build_signatures, default_signatures
from verl_e2e.config.yaml_read import Loader, stringify_keys
from verl_e2e.errors import ConfigError, did_you_mean
from verl_e2e.resources import matrix_path

Flag = Literal["moe", "vlm", "mtp"]
LEVELS = (0, 1, 2, 3, 4, 5)


@dataclass(frozen=True)
class Phase:
    name: str
    env: Mapping[str, str]
    args: tuple[str, ...]
    expect: Mapping[str, Any]


@dataclass(frozen=True)
class Variant:
    name: str
    applies_to: Literal["all", "moe", "vlm", "mtp", "quant", "custom"]
    gpus: int
    minutes: int
    timeout_minutes: int
    env: Mapping[str, str]
    args: tuple[str, ...]
    limitations: tuple[str, ...]
    checks: tuple[str, ...]
    phases: tuple[Phase, ...]
    scheduled: bool = False  # only in the scheduled full run (cells.scheduled_cells), never for a PR


@dataclass(frozen=True)
class Level:
    id: int
    title: str
    proves: str
    optional: bool
    env: Mapping[str, str]
    args: tuple[str, ...]
    limitations: tuple[str, ...]
    variants: tuple[Variant, ...]


@dataclass(frozen=True)
class ModelRef:
    model: str
    dummy: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Family:
    """A Bridge model directory and what to run it on. Flags are True, False or file globs."""

    name: str
    model: ModelRef
    moe_model: ModelRef | None
    flags: Mapping[str, bool | PathSet]
    multimodal_command: str | None
    tests: tuple[str, ...]
    dir: str = ""  # the Bridge model directory (default: the family's name)
    architectures: tuple[str, ...] = ()  # HF architectures whose registration this family runs
    mtp_model: ModelRef | None = None
    # why this family cannot run in verl today, and the run that showed it (None: it can); `blocked_kinds`
    # the variant kinds it applies to (empty: every kind)
    cannot_run: str | None = None
    blocked_kinds: tuple[str, ...] = ()
    no_critic: str | None = None  # why verl cannot build its critic: its cells run GRPO (no critic) instead
    merged_lora: str | None = None  # why the rollout cannot take its adapters unmerged: LoRA cells merge them
    remote_code: str | None = None  # why the checkpoint needs its own code: cells pass trust_remote_code

    def blocked(self, kind: str) -> str | None:
        """Why a variant of this kind cannot run on this family in verl today, or None."""
        if self.cannot_run is None or (self.blocked_kinds and kind not in self.blocked_kinds):
            return None
        return self.cannot_run

    def has(self, flag: Flag, files_in_family: tuple[str, ...] = ()) -> bool:
        """Whether the flag applies; a glob-limited flag applies only if one of the files matches it."""
        value = self.flags.get(flag, False)
        if isinstance(value, bool):
            return value
        return any(value.matches(f) for f in files_in_family)

    def model_for(self, flag: str) -> ModelRef:
        if flag == "moe" and self.moe_model is not None:
            return self.moe_model
        if flag == "mtp" and self.mtp_model is not None:
            return self.mtp_model
        return self.model

    def supports(self, kind: str) -> bool:
        """Whether a variant of this kind has a model here (QAT and custom layers run on any model)."""
        if kind in ("all", "quant", "custom"):
            return True
        extra = {"moe": self.moe_model, "mtp": self.mtp_model}.get(kind)
        return extra is not None or self.flags.get(kind, False) is not False


@dataclass(frozen=True)
class Rule:
    name: str
    why: str
    paths: PathSet
    levels: frozenset[int]
    family: Literal["changed", "default"]
    diff: re.Pattern[str] | None = None
    when_no_diff: Literal["match", "skip"] = "match"
    only: Flag | None = None
    kind: str = "all"  # the variant kind its levels run (as an aspect's `kind`)
    unless_only_in: re.Pattern[str] | None = None  # not when every changed function (exact) matches
    unless_ran_at: int | None = None  # not when a recorded cell of this level ran every changed function


@dataclass(frozen=True)
class Defaults:
    family: str
    verl_repo: str
    verl_ref: str
    image: str
    wrapper: str
    reward_model: str | None
    container_paths: Mapping[str, str]
    host_cache: str
    max_matrix_jobs: int
    gpu_budget_minutes: int = 240  # per automatic plan; 0: no limit (budget.py)
    kind_families: Mapping[str, str] = field(default_factory=dict)  # variant kind -> family for generic changes


@dataclass(frozen=True)
class Matrix:
    source: str
    defaults: Defaults
    runners: tuple[tuple[int, tuple[str, ...]], ...]  # ascending GPU counts
    levels: Mapping[int, Level]
    families: Mapping[str, Family]
    escalations: tuple[Rule, ...]
    ignore: tuple[tuple[str, PathSet], ...]
    rules: tuple[Rule, ...]
    signatures: tuple[Signature, ...] = ()  # matrix.yaml's own, then the shipped defaults
    aspects: tuple[Aspect, ...] = ()
    unsupported: Mapping[str, str] = field(default_factory=dict)  # HF architecture -> why no family runs it
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def __repr__(self) -> str:
        return f"Matrix({self.source!r})"

    @property
    def base_env(self) -> Mapping[str, str]:
        return self.levels[0].env

    def family_for_architecture(self, arch: str) -> Family | None:
        return next((f for f in self.families.values() if arch in f.architectures), None)

    def dir_family(self, directory: str) -> Family | None:
        """The fallback family of a model directory: the one named like it, else its only family."""
        if directory in self.families:
            return self.families[directory]
        found = [f for f in self.families.values() if f.dir == directory]
        return found[0] if len(found) == 1 else None

    def runner_for(self, gpus: int) -> tuple[int, tuple[str, ...]] | None:
        return next(((n, labels) for n, labels in self.runners if n >= gpus), None)


# ----------------------------------------------------------------------------------------- loading


def default_matrix_path() -> Path:
    """The matrix shipped in the wheel, or the repository's own when running from a checkout."""
    return matrix_path()


def with_runners(matrix: Matrix, runners: Mapping[int, list[str]]) -> Matrix:
    """The matrix with a site's runner labels (GPU count -> labels); they must fit every variant."""
    # scheduled-only layouts run where a runner is large enough (cells.scheduled_cells), PR cells everywhere
    need = max(v.gpus for lvl in matrix.levels.values() for v in lvl.variants if not v.scheduled)
    if max(runners) < need:
        raise ConfigError(
            f"--runners: the largest runner has {max(runners)} GPUs, but a variant needs {need}; "
            f"add a label list for {need} GPUs"
        )
    return replace(matrix, runners=tuple(sorted((n, tuple(labels)) for n, labels in runners.items())))


def load_matrix(path: str | os.PathLike[str] | None = None) -> Matrix:
    """Read, validate and build the matrix. Raises ConfigError with every problem found."""
    file = Path(path) if path is not None else default_matrix_path()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{file}: cannot read the matrix ({exc.strerror}); pass --matrix PATH to a matrix.yaml"
        ) from None
    try:
        document = stringify_keys(yaml.load(text, Loader=Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}; fix the syntax") from None
    problems = validate_document(document, str(file))
    if not problems:
        problems = semantic_problems(document, str(file))
    if problems:
        raise ConfigError(_join(problems, file))
    return _build(document, str(file))


def _join(problems: list[str], file: Path) -> str:
    more = f" (and {len(problems) - 1} more problem(s); run `verl-e2e validate {file}` to list all)"
    return problems[0] + (more if len(problems) > 1 else "")


# ---------------------------------------------------------------------------------------- building


def _env(node: Mapping[str, Any] | None) -> Mapping[str, str]:
    return dict(node or {})


def _regex(node: Mapping[str, Any], key: str, where: str) -> re.Pattern[str] | None:
    try:
        return re.compile(node[key]) if key in node else None
    except re.error as exc:
        raise ConfigError(f"{where}.{key}: invalid regular expression ({exc}); fix the pattern") from None


def _rule(node: Mapping[str, Any], where: str) -> Rule:
    return Rule(
        name=node["name"],
        why=node["why"],
        paths=PathSet.parse(node["paths"], f"{where}.paths"),
        levels=frozenset(node["levels"]),
        family=node.get("family", "default"),
        diff=_regex(node, "diff", where),
        when_no_diff=node.get("when_no_diff", "match"),
        only=node.get("only"),
        kind=node.get("kind", "all"),
        unless_only_in=_regex(node, "unless_only_in", where),
        unless_ran_at=node.get("unless_ran_at"),
    )


def _family(name: str, node: Mapping[str, Any]) -> Family:
    flags: dict[str, bool | PathSet] = {}
    for flag in ("moe", "vlm", "mtp"):
        value = node.get(flag, False)
        flags[flag] = value if isinstance(value, bool) else PathSet.parse(value, f"$.families.{name}.{flag}")
    moe, mtp = node.get("moe_model"), node.get("mtp_model")
    blocked, critic, merged = node.get("cannot_run", {}), node.get("no_critic"), node.get("merged_lora")
    return Family(
        name=name,
        model=ModelRef(node["model"], node.get("dummy")),
        moe_model=ModelRef(moe["model"], moe.get("dummy")) if moe else None,
        flags=flags,
        multimodal_command=node.get("multimodal_command"),
        tests=tuple(node.get("tests", ())),
        dir=node.get("dir", name),
        architectures=tuple(node.get("architectures", ())),
        mtp_model=ModelRef(mtp["model"], mtp.get("dummy")) if mtp else None,
        cannot_run=f"{blocked['why']} (seen: {blocked['seen']})" if blocked else None,
        blocked_kinds=tuple(blocked.get("kinds", ())),
        no_critic=f"{critic['why']} (seen: {critic['seen']})" if critic else None,
        merged_lora=f"{merged['why']} (seen: {merged['seen']})" if merged else None,
        remote_code=node.get("remote_code"),
    )


def _variant(name: str, node: Mapping[str, Any]) -> Variant:
    return Variant(
        name=name,
        applies_to=node.get("applies_to", "all"),
        gpus=node["gpus"],
        minutes=node["minutes"],
        timeout_minutes=node["timeout_minutes"],
        env=_env(node.get("env")),
        args=tuple(node.get("args", ())),
        limitations=tuple(node.get("limitations", ())),
        checks=tuple(node["checks"]),
        phases=tuple(
            Phase(p["name"], _env(p.get("env")), tuple(p.get("args", ())), dict(p.get("expect", {})))
            for p in node["phases"]
        ),
        scheduled=bool(node.get("scheduled", False)),
    )


def _unique_architectures(families: Mapping[str, Family], unsupported: Mapping[str, str], source: str) -> None:
    owner: dict[str, str] = {}
    for fam in families.values():
        for arch in fam.architectures:
            if arch in owner or arch in unsupported:
                raise ConfigError(
                    f"{source}::$.families.{fam.name}.architectures: {arch} is also claimed by "
                    f"{owner.get(arch, 'unsupported')}; an architecture runs on exactly one family"
                )
            owner[arch] = fam.name


def _build(doc: Mapping[str, Any], source: str) -> Matrix:
    d = doc["defaults"]
    defaults = Defaults(
        family=d["family"],
        verl_repo=d.get("verl_repo", "https://github.com/verl-project/verl"),
        verl_ref=d["verl_ref"],
        image=d["image"],
        wrapper=d["wrapper"],
        reward_model=d.get("reward_model"),
        container_paths=dict(d["container_paths"]),
        host_cache=d.get("host_cache", "/var/cache/verl-e2e"),
        max_matrix_jobs=d.get("max_matrix_jobs", 256),
        gpu_budget_minutes=d.get("gpu_budget_minutes", 240),
        kind_families=dict(d.get("kind_families", {})),
    )
    families = {name: _family(name, node) for name, node in sorted(doc["families"].items())}
    if defaults.family not in families:
        raise ConfigError(
            f"{source}::$.defaults.family: found {defaults.family!r}, expected a key of $.families"
            f"{did_you_mean(defaults.family, families)}; add the family or pick an existing one"
        )
    levels = {
        int(k): Level(
            id=int(k),
            title=v["title"],
            proves=v.get("proves", ""),
            optional=v.get("optional", False),
            env=_env(v.get("env")),
            args=tuple(v.get("args", ())),
            limitations=tuple(v.get("limitations", ())),
            variants=tuple(_variant(n, node) for n, node in v["variants"].items()),
        )
        for k, v in doc["levels"].items()
    }
    runners = tuple(sorted((int(k), tuple(v)) for k, v in doc["runners"].items()))
    need = max(v.gpus for lvl in levels.values() for v in lvl.variants)
    if runners[-1][0] < need:
        raise ConfigError(
            f"{source}::$.runners: the largest runner has {runners[-1][0]} GPUs, but a variant needs {need}; "
            "add a runner with enough GPUs"
        )
    escalations = tuple(_rule(r, f"{source}::$.escalations[{i}]") for i, r in enumerate(doc.get("escalations", [])))
    rules = tuple(_rule(r, f"{source}::$.rules[{i}]") for i, r in enumerate(doc["rules"]))
    seen: set[str] = set()
    for rule in (*escalations, *rules):
        if rule.name in seen:
            raise ConfigError(f"{source}: rule name {rule.name!r} appears twice; rule names must be unique")
        seen.add(rule.name)
    ignore = tuple((name, PathSet.parse(g, f"{source}::$.ignore.{name}")) for name, g in doc.get("ignore", {}).items())
    extra = build_signatures(doc.get("signatures", []), f"{source}::$.signatures")
    _unique_architectures(families, doc.get("unsupported", {}), source)
    return Matrix(
        source,
        defaults,
        runners,
        levels,
        families,
        escalations,
        ignore,
        rules,
        signatures=extra + default_signatures(),
        aspects=build_aspects(doc.get("aspects", []), f"{source}::$.aspects"),
        unsupported=dict(doc.get("unsupported", {})),
        raw=doc,
    )
