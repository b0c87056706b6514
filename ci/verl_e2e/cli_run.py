"""The commands that touch a container engine: `image`, `run-cell`, `run`. Exit codes stay in `cli.main`."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from verl_e2e import cachelayout, slurm
from verl_e2e.adapt import adapt_cell
from verl_e2e.cells import Cell, cell_from_json
from verl_e2e.config import Matrix, load_matrix
from verl_e2e.errors import UsageError
from verl_e2e.image import DEFAULT_EXTRA_PIP, ImageInputs, ensure_image, pullable_ref, verl_commit
from verl_e2e.prefetch import plan_downloads, run_downloads
from verl_e2e.runcell import (
    DEFAULT_ULIMITS,
    RunOptions,
    docker_client,
    docker_command,
    host_gpus,
    parse_env_pairs,
    run_cell,
)
from verl_e2e.runinputs import megatron_choice, plan_changes
from verl_e2e.verdict import Verdict
from verl_e2e.verdict import render_text as render_verdict


def sayer(stdout: TextIO) -> Callable[[str], None]:
    def say(message: str) -> None:
        stdout.write(f"verl-e2e: {message}\n")
        stdout.flush()

    return say


def add_commands(sub: Any) -> None:
    image = sub.add_parser(
        "image",
        help="ensure the verl image: reuse it, pull it or build it (tag = hash of its inputs)",
        description="Compute the image tag from its inputs (Dockerfile, base image, verl commit, extra "
        "dependencies) and make sure the image exists: present locally, pulled from the registry, or built.",
    )
    image.add_argument("--verl", type=Path, required=True, help="a verl checkout at the commit to bake in")
    image.add_argument("--base", help="base image (default: defaults.image in matrix.yaml)")
    image.add_argument(
        "--extra-pip", default=DEFAULT_EXTRA_PIP, help=f"pip specs to add (default: {DEFAULT_EXTRA_PIP!r})"
    )
    image.add_argument("--wheels", type=Path, help="a directory of wheels to install offline in the build")
    image.add_argument("--repository", default="verl-e2e", help="image repository, e.g. ghcr.io/org/verl-e2e")
    image.add_argument("--push", action="store_true", help="push the image after building it")
    image.add_argument("--no-pull", action="store_true", help="never try the registry before building")
    image.add_argument("--print-tag", action="store_true", help="print the tag and stop (no engine needed)")
    image.add_argument(
        "--print-ref",
        action="store_true",
        help="print how cells should pull the ensured image: repository@sha256:digest where the registry "
        "gave one (a tag can be moved), else the tag",
    )
    image.add_argument("--matrix", metavar="PATH")

    prefetch = sub.add_parser(
        "prefetch",
        help="warm a runner's cache: models, dummy-model configs, the reward model and raw GSM8K",
        description="Download once into the runner cache what cells need, since cells run with the hub off.",
    )
    prefetch.add_argument("--family", action="append", default=[], metavar="NAME", help="only these families")
    prefetch.add_argument("--cache", type=Path, help="cache root (default: defaults.host_cache in matrix.yaml)")
    prefetch.add_argument("--cache-layout", choices=sorted(cachelayout.LAYOUTS), default="verl-e2e")
    prefetch.add_argument("--token-env", metavar="NAME", help="variable holding a hub token for gated models")
    prefetch.add_argument("--dry-run", action="store_true", help="list the downloads only")
    prefetch.add_argument("--matrix", metavar="PATH")

    cell = sub.add_parser(
        "run-cell",
        help="run one cell in the verl container (or locally) and judge it",
        description="Run one cell through the in-container driver: import checks, data, model, each phase of "
        "verl's wrapper; always leaves a complete run dir (cell.json, provenance.json, one log per phase, "
        "phases.json, driver.log, evidence.json, verdict.json, junit.xml). "
        "Exit 0 on Pass or Skipped, 1 otherwise.",
    )
    cell.add_argument("cell", type=Path, metavar="CELL_JSON", help="a cell record, or plan.json with --cell-id")
    cell.add_argument("--cell-id", help="which cell of a plan.json")
    run_options(cell)

    base = sub.add_parser(
        "base-run",
        help="the same cell on the merge base: from the runner's cache, or run once (--run) and cached",
        description="Find the result of a cell on the plan's merge base in CACHE/base-runs (keyed by cell, merge "
        "base, image or verl commit, runner labels, taken from --like, the change's own run dir) and copy it to "
        "--out; with --run, run it on the merge-base checkout (--bridge) when none is cached and keep it.",
    )
    base.add_argument("cell", type=Path, metavar="PLAN_JSON")
    base.add_argument("--cell-id", required=True)
    base.add_argument("--like", type=Path, required=True, metavar="RUN_DIR", help="the change's run dir of the cell")
    base.add_argument("--merge-base", help="default: the plan's merge base")
    base.add_argument("--run", action="store_true", help="run the cell on the merge base when none is cached")
    run_options(base)


def run_options(p: argparse.ArgumentParser, dry_run_defaults: bool = False) -> None:
    """Options shared by run-cell, run and base-run; `run --dry-run` needs no --bridge or --out."""
    p.add_argument("--bridge", type=Path, required=not dry_run_defaults, help="the Megatron-Bridge checkout under test")
    p.add_argument(
        "--out",
        type=Path,
        required=not dry_run_defaults,
        help="run dir (run: a parent for one run dir per cell"
        + ("; default ./verl-e2e-runs)" if dry_run_defaults else ")"),
    )
    p.add_argument("--backend", choices=("docker", "local", "slurm"), default="docker")
    p.add_argument("--image", help="image tag to run (default: the one `verl-e2e image` ensures)")
    p.add_argument("--verl", type=Path, help="verl checkout (required with --backend local or to build the image)")
    p.add_argument("--gpus", help="none, all, or device ids like 0,1 (default: the cell's GPU count)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra container variable")
    p.add_argument("--phase-timeout", type=float, metavar="SECONDS", help="per-phase limit (default: the cell's)")
    p.add_argument(
        "--import-check",
        choices=("fast", "full", "location"),
        default="fast",
        help="fast (default): the driver resolves megatron.bridge and verl's own Ray workers report theirs; "
        "full: also import it in the driver and a separate Ray task (~50 s more); location: resolve only",
    )
    p.add_argument(
        "--num-gpus",
        type=int,
        metavar="N",
        help="run the cell on N GPUs instead of the plan's count (NUM_GPUS; stated as a limitation)",
    )
    p.add_argument(
        "--hydra",
        action="append",
        default=[],
        metavar="OVERRIDE",
        help="extra Hydra override for every phase, e.g. data.dataloader_num_workers=0 (repeatable)",
    )
    p.add_argument(
        "--megatron-lm",
        default="auto",
        metavar="WHICH",
        help="Megatron-Core for the run: auto (default: Bridge's pinned 3rdparty/Megatron-LM, unless "
        "matrix.yaml's compatibility record knows that commit fails with this verl; then the record's "
        "fallback, stated as a limitation), submodule, installed (the environment's megatron-core), or "
        "the path of a Megatron-LM tree",
    )
    p.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the environment preflight (and the overrides it adds for missing APEX, flash-attn, nvtx)",
    )
    p.add_argument("--no-bridge-tests", action="store_true", help="skip the focused Bridge tests")
    slurm.add_arguments(p)
    p.add_argument(
        "--retries",
        type=int,
        default=1,
        metavar="N",
        help="run a cell Blocked by a transient cause (Ray start-up, NCCL timeout, node lost) up to N more times "
        "(default 1; earlier attempts are kept in attempt-K/)",
    )
    p.add_argument("--cache", type=Path, help="runner cache root (default: defaults.host_cache in matrix.yaml)")
    p.add_argument(
        "--cache-layout",
        choices=sorted(cachelayout.LAYOUTS),
        default="verl-e2e",
        help="verl-e2e (models/, datasets/, hf/) or verl-ci (the layout verl's CI runners have under $HOME)",
    )
    p.add_argument(
        "--ulimit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="container ulimit (default memlock=-1, stack=67108864); VALUE 'default' keeps the host's",
    )
    p.add_argument("--matrix", metavar="PATH")


def _cells_from(path: Path, cell_id: str | None) -> Cell:
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


def options(args: argparse.Namespace, matrix: Matrix, cell_file: Path, out: Path, image: str | None) -> RunOptions:
    root = args.cache or Path(matrix.defaults.host_cache)
    cache = cachelayout.host_paths(root, args.cache_layout)
    layout_env = cachelayout.cell_env(args.cache_layout, matrix.defaults.container_paths["datasets"])
    return RunOptions(
        cell_file=cell_file,
        bridge=args.bridge,
        out=out,
        backend=args.backend,
        image=image,
        verl=args.verl,
        gpus=args.gpus,
        env=layout_env | parse_env_pairs(args.env),
        phase_timeout=args.phase_timeout,
        import_check=args.import_check,
        **megatron_choice(args, matrix),
        preflight="off" if args.no_preflight else "auto",
        retries=max(0, args.retries),
        bridge_tests="skip" if args.no_bridge_tests else "auto",
        cache=cache,
        container_paths=dict(matrix.defaults.container_paths),
        ulimits=parse_ulimits(args.ulimit),
        changes=plan_changes(args.cell) if isinstance(getattr(args, "cell", None), Path) else None,
        **slurm.options_from(args),
    )


def parse_ulimits(items: list[str]) -> dict[str, int]:
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


def _image_inputs(args: argparse.Namespace, matrix: Matrix, pinned: bool = False) -> ImageInputs:
    """What the image is made of; `pinned`: without --verl, the verl commit matrix.yaml pins (what the
    image job clones), so a dry run names the real tag instead of a placeholder."""
    verl = args.verl
    if verl is None and not pinned:
        raise UsageError("a verl checkout is needed to compute or build the image: pass --verl PATH (or --image TAG)")
    return ImageInputs(
        base=getattr(args, "base", None) or matrix.defaults.image,
        verl=verl.resolve() if verl is not None else Path(matrix.defaults.verl_repo),
        verl_commit=verl_commit(verl) if verl is not None else matrix.defaults.verl_ref,
        extra_pip=getattr(args, "extra_pip", DEFAULT_EXTRA_PIP),
        wheels=getattr(args, "wheels", None),
        repository=getattr(args, "repository", "verl-e2e"),
    )


def cmd_prefetch(args: argparse.Namespace, env: Mapping[str, str], stdout: TextIO) -> int:
    matrix = load_matrix(args.matrix)
    cache = args.cache or Path(matrix.defaults.host_cache)
    families = [f.strip() for item in args.family for f in item.split(",") if f.strip()]
    downloads = plan_downloads(matrix, families, cache, args.cache_layout)
    if args.dry_run:
        stdout.write("".join(f"{d.repo_id:<48} -> {d.local_dir}  ({d.why})\n" for d in downloads))
        return 0
    token = None
    if args.token_env:
        token = env.get(args.token_env)
        if not token:
            raise UsageError(f"prefetch: --token-env {args.token_env}: the variable is not set")
    manifest = run_downloads(downloads, cache, token=token, say=sayer(stdout))
    stdout.write(f"verl-e2e: prefetched {len(manifest['done'])} item(s) into {cache}\n")
    return 0


def image_tag(args: argparse.Namespace, matrix: Matrix) -> str:
    return _image_inputs(args, matrix, pinned=True).tag


def cmd_image(args: argparse.Namespace, stdout: TextIO) -> int:
    matrix = load_matrix(args.matrix)
    inputs = _image_inputs(args, matrix)
    if args.print_tag:
        stdout.write(inputs.tag + "\n")
        return 0
    if args.print_ref:
        stdout.write(pullable_ref(docker_client(), inputs.tag) + "\n")
        return 0
    result = ensure_image(
        docker_client(),
        inputs,
        push=args.push,
        pull=not args.no_pull,
        say=sayer(stdout),
    )
    stdout.write(f"{result.tag} ({result.how}{', pushed' if result.pushed else ''})\n")
    return 0


def _finish(verdict: Verdict, stdout: TextIO) -> int:
    stdout.write("\n" + render_verdict(verdict))
    return 0 if verdict.result in ("Pass", "Skipped") else 1


def cmd_run_cell(args: argparse.Namespace, stdout: TextIO) -> int:
    matrix = load_matrix(args.matrix)
    cell = adapt_cell(_cells_from(args.cell, args.cell_id), num_gpus=args.num_gpus, hydra=args.hydra)
    image = args.image
    if args.backend == "docker" and image is None:
        image = ensure_image(docker_client(), _image_inputs(args, matrix), say=sayer(stdout)).tag
    args.out.mkdir(parents=True, exist_ok=True)
    cell_file = args.out / "cell.json"
    cell_file.write_text(json.dumps(cell.to_json(), indent=2))
    return _finish(run_cell(options(args, matrix, cell_file, args.out, image), stdout), stdout)


def would_run(cells: list[Cell], args: argparse.Namespace, matrix: Matrix, image: str) -> list[str]:
    """The equivalent `docker run` command of each cell (what `run` prints when it cannot run)."""
    lines = []
    for cell in cells:
        opts = options(args, matrix, args.out / cell.id / "cell.json", args.out / cell.id, image)
        lines.append(shlex.join(docker_command(cell, opts)))
    return lines


def engine_problem(args: argparse.Namespace, cells: list[Cell]) -> str | None:
    """Why this host cannot run the cells, or None."""
    if args.backend == "docker":
        try:
            docker_client()
        except UsageError as exc:
            return str(exc)
    if args.gpus != "none" and args.backend != "slurm":  # Slurm allocates the GPUs elsewhere
        have, need = host_gpus(), max(c.gpus for c in cells)
        if have < need:
            return f"this host has {have} GPU(s), a cell needs up to {need} (--gpus none runs without)"
    return None


def run_cells(cells: list[Cell], args: argparse.Namespace, matrix: Matrix, stdout: TextIO) -> int:
    image = args.image or "IMAGE"
    problem = engine_problem(args, cells)
    if problem:
        if args.image is None and args.verl is not None:
            image = _image_inputs(args, matrix).tag
        stdout.write(f"verl-e2e: cannot run here: {problem}\nverl-e2e: it would run {len(cells)} cell(s):\n")
        stdout.write("".join(f"  {line}\n" for line in would_run(cells, args, matrix, image)))
        raise UsageError(f"run: {problem}")
    if args.backend == "docker" and args.image is None:
        image = ensure_image(docker_client(), _image_inputs(args, matrix), say=sayer(stdout)).tag
    cells = [adapt_cell(c, num_gpus=args.num_gpus, hydra=args.hydra) for c in cells]
    verdicts = []
    for index, cell in enumerate(cells, start=1):
        stdout.write(f"verl-e2e: cell {index}/{len(cells)}: {cell.id}\n")
        out = args.out / cell.id
        out.mkdir(parents=True, exist_ok=True)
        (out / "cell.json").write_text(json.dumps(cell.to_json(), indent=2))
        verdict = run_cell(options(args, matrix, out / "cell.json", out, image), stdout)
        verdicts.append(verdict)
        stdout.write(f"verl-e2e: {cell.id}: {verdict.result}\n")
    stdout.write("\n" + "".join(f"{v.result:<8} {v.cell_id}  {v.headline}\n" for v in verdicts))
    return 0 if all(v.result in ("Pass", "Skipped") for v in verdicts) else 1
