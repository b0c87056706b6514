"""The run stage's entry: one `CellRequest` in, run dirs and verdicts out.

The CLI parses `run-cell`, `run`, `base-run` and `image` once into a `CellRequest` and hands it down;
everything a cell run derives from it — the cell record read from a plan, the cell adapted to the GPU
count and extra Hydra overrides, the image inputs and the ensured image, the cache layout, the
Megatron-Core the compatibility record picks, the plan's changed lines for the judge — is worked out
here, top-down, so following a cell's arguments never climbs back into the CLI.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.judge.verdict import Verdict
from verl_e2e.plan.cells import Cell, cell_from_json
from verl_e2e.run import cachelayout
from verl_e2e.run.adapt import adapt_cell
from verl_e2e.run.backends import docker_client, docker_command
from verl_e2e.run.image import DEFAULT_EXTRA_PIP, ImageInputs, ensure_image, verl_commit
from verl_e2e.run.runcell import run_cell
from verl_e2e.run.runinputs import megatron_choice, plan_changes
from verl_e2e.run.runopts import DEFAULT_ULIMITS, RunOptions, host_gpus, parse_env_pairs


@dataclass(frozen=True)
class CellRequest:
    """What the person asked of a cell run, as parsed: paths, flags and repeatable items, no derivations."""

    bridge: Path | None = None
    out: Path | None = None
    backend: str = "docker"
    image: str | None = None
    verl: Path | None = None
    gpus: str | None = None
    env: tuple[str, ...] = ()
    phase_timeout: float | None = None
    import_check: str = "fast"
    num_gpus: int | None = None
    hydra: tuple[str, ...] = ()
    megatron_lm: str = "auto"
    preflight: bool = True
    bridge_tests: bool = True
    retries: int = 1
    cache: Path | None = None
    cache_layout: str = "verl-e2e"
    ulimit: tuple[str, ...] = ()
    plan_file: Path | None = None  # the plan.json or cell record the cells came from (its context)
    cell_id: str | None = None
    slurm: dict[str, Any] = field(default_factory=dict)  # slurm.options_from's fields
    base: str | None = None  # image inputs: base image, extra pip specs, offline wheels, repository
    extra_pip: str = DEFAULT_EXTRA_PIP
    wheels: Path | None = None
    repository: str = "verl-e2e"


def sayer(stdout: TextIO) -> Callable[[str], None]:
    def say(message: str) -> None:
        stdout.write(f"verl-e2e: {message}\n")
        stdout.flush()

    return say


def cell_from_file(path: Path, cell_id: str | None) -> Cell:
    """A cell record, or the cell `cell_id` of a plan.json; a wrong file or id is one UsageError line."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"run-cell: {path}: no such file; write one with `verl-e2e plan --out plan.json`") from None
    except ValueError as exc:
        raise UsageError(f"run-cell: {path}: not JSON ({exc}); pass a cell record or a plan") from None
    if isinstance(data, dict) and "cells" in data:
        ids = [c["id"] for c in data["cells"]]
        if cell_id is None:
            raise UsageError(f"run-cell: {path} is a plan; pick a cell with --cell-id (one of: {', '.join(ids)})")
        chosen = next((c for c in data["cells"] if c["id"] == cell_id), None)
        if chosen is None:
            raise UsageError(f"run-cell: --cell-id {cell_id}: not in {path}; expected one of: {', '.join(ids)}")
        data = chosen
    try:
        return cell_from_json(data)
    except (TypeError, KeyError) as exc:
        raise UsageError(f"run-cell: {path}: not a cell record ({exc}); take a cell from `verl-e2e plan`") from None


def parse_ulimits(items: tuple[str, ...] | list[str]) -> dict[str, int]:
    limits = dict(DEFAULT_ULIMITS)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise UsageError(f"--ulimit {item}: expected NAME=VALUE, e.g. memlock=-1 or memlock=default")
        if value == "default":
            limits.pop(name, None)
            continue
        try:
            limits[name] = int(value)
        except ValueError:
            raise UsageError(f"--ulimit {item}: VALUE must be an integer, -1 (unlimited) or 'default'") from None
    return limits


def run_options(req: CellRequest, matrix: Matrix, cell_file: Path, out: Path, image: str | None) -> RunOptions:
    """The runner's options for one cell: the request plus what the matrix and the plan file add."""
    root = req.cache or Path(matrix.defaults.host_cache)
    cache = cachelayout.host_paths(root, req.cache_layout)
    layout_env = cachelayout.cell_env(req.cache_layout, matrix.defaults.container_paths["datasets"])
    if req.bridge is None:
        raise UsageError("a Megatron-Bridge checkout is needed to run a cell: pass --bridge PATH")
    megatron = megatron_choice(req.megatron_lm, req.plan_file, req.verl, req.bridge, matrix)
    return RunOptions(
        cell_file=cell_file,
        bridge=req.bridge,
        out=out,
        backend=req.backend,
        image=image,
        verl=req.verl,
        gpus=req.gpus,
        env=layout_env | parse_env_pairs(req.env),
        phase_timeout=req.phase_timeout,
        import_check=req.import_check,
        **megatron,
        preflight="auto" if req.preflight else "off",
        retries=max(0, req.retries),
        bridge_tests="auto" if req.bridge_tests else "skip",
        cache=cache,
        container_paths=dict(matrix.defaults.container_paths),
        ulimits=parse_ulimits(req.ulimit),
        changes=plan_changes(req.plan_file) if req.plan_file is not None else None,
        **req.slurm,
    )


def image_inputs(req: CellRequest, matrix: Matrix, pinned: bool = False) -> ImageInputs:
    """What the image is made of; `pinned`: without --verl, the verl commit matrix.yaml pins (what the
    image job clones), so a dry run names the real tag instead of a placeholder."""
    verl = req.verl
    if verl is None and not pinned:
        raise UsageError("a verl checkout is needed to compute or build the image: pass --verl PATH (or --image TAG)")
    return ImageInputs(
        base=req.base or matrix.defaults.image,
        verl=verl.resolve() if verl is not None else Path(matrix.defaults.verl_repo),
        verl_commit=verl_commit(verl) if verl is not None else matrix.defaults.verl_ref,
        extra_pip=req.extra_pip,
        wheels=req.wheels,
        repository=req.repository,
    )


def image_tag(req: CellRequest, matrix: Matrix) -> str:
    return image_inputs(req, matrix, pinned=True).tag


def _image(req: CellRequest, matrix: Matrix, console: TextIO) -> str | None:
    """The image a docker cell runs: --image as given, else the one `image` would ensure."""
    if req.backend != "docker" or req.image is not None:
        return req.image
    return ensure_image(docker_client(), image_inputs(req, matrix), say=sayer(console)).tag


def write_cell(cell: Cell, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    cell_file = out / "cell.json"
    cell_file.write_text(json.dumps(cell.to_json(), indent=2))
    return cell_file


def run_prepared(cell: Cell, req: CellRequest, matrix: Matrix, console: TextIO, image: str | None) -> Verdict:
    """Run a cell as it stands (no adaptation, the image given) into req.out."""
    if req.out is None:
        raise UsageError("a run dir is needed: pass --out DIR")
    return run_cell(run_options(req, matrix, write_cell(cell, req.out), req.out, image), console)


def run_one(req: CellRequest, matrix: Matrix, console: TextIO) -> Verdict:
    """`run-cell`: the requested cell, adapted, in its image, judged."""
    if req.plan_file is None:
        raise UsageError("run-cell: a cell record or plan.json is needed")
    cell = adapt_cell(cell_from_file(req.plan_file, req.cell_id), num_gpus=req.num_gpus, hydra=req.hydra)
    return run_prepared(cell, req, matrix, console, _image(req, matrix, console))


def would_run(cells: list[Cell], req: CellRequest, matrix: Matrix, image: str) -> list[str]:
    """The equivalent `docker run` command of each cell (what `run` prints when it cannot run)."""
    out = req.out or Path("verl-e2e-runs")
    lines = []
    for cell in cells:
        opts = run_options(req, matrix, out / cell.id / "cell.json", out / cell.id, image)
        lines.append(shlex.join(docker_command(cell, opts)))
    return lines


def engine_problem(req: CellRequest, cells: list[Cell]) -> str | None:
    """Why this host cannot run the cells, or None."""
    if req.backend == "docker":
        try:
            docker_client()
        except UsageError as exc:
            return str(exc)
    if req.gpus != "none" and req.backend != "slurm":  # Slurm allocates the GPUs elsewhere
        have, need = host_gpus(), max(c.gpus for c in cells)
        if have < need:
            return f"this host has {have} GPU(s), a cell needs up to {need} (--gpus none runs without)"
    return None


def run_many(cells: list[Cell], req: CellRequest, matrix: Matrix, console: TextIO) -> list[Verdict]:
    """`run`: every cell of a plan in turn, one run dir each under req.out; refuses (printing the
    commands it would run) where this host has no engine or too few GPUs."""
    problem = engine_problem(req, cells)
    if problem:
        image = req.image or (image_inputs(req, matrix).tag if req.verl is not None else "IMAGE")
        console.write(f"verl-e2e: cannot run here: {problem}\nverl-e2e: it would run {len(cells)} cell(s):\n")
        console.write("".join(f"  {line}\n" for line in would_run(cells, req, matrix, image)))
        raise UsageError(f"run: {problem}")
    image = _image(req, matrix, console) or req.image or "IMAGE"
    out = req.out or Path("verl-e2e-runs")
    verdicts = []
    for index, cell in enumerate(cells, start=1):
        console.write(f"verl-e2e: cell {index}/{len(cells)}: {cell.id}\n")
        adapted = adapt_cell(cell, num_gpus=req.num_gpus, hydra=req.hydra)
        verdict = run_prepared(adapted, _under(req, out / cell.id), matrix, console, image)
        verdicts.append(verdict)
        console.write(f"verl-e2e: {cell.id}: {verdict.result}\n")
    return verdicts


def _under(req: CellRequest, out: Path) -> CellRequest:
    return replace(req, out=out)
