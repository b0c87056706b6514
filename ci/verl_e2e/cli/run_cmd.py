"""The commands that touch a container engine: `image`, `run-cell`, `run`. Exit codes stay in `cli.main`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import UsageError
from verl_e2e.plan.contract import Plan
from verl_e2e.plan.gitchanges import resolve_commit
from verl_e2e.run import cachelayout, slurm
from verl_e2e.run.backends import docker_client
from verl_e2e.run.image import DEFAULT_EXTRA_PIP, ensure_image, pullable_ref
from verl_e2e.run.prefetch import plan_downloads, run_downloads

if TYPE_CHECKING:  # the runner and the judge load when a command runs or judges cells, not for `plan`
    from verl_e2e.judge.verdict import Verdict
    from verl_e2e.run.launch import CellRequest


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
    image.add_argument("--matrix", metavar="PATH", help="matrix.yaml to use (default: the one shipped)")

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
    prefetch.add_argument("--matrix", metavar="PATH", help="matrix.yaml to use (default: the one shipped)")

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
    base.add_argument("cell", type=Path, metavar="PLAN_JSON", help="the plan.json the change's cells came from")
    base.add_argument("--cell-id", required=True, help="which cell of the plan to find or run on the merge base")
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
    p.add_argument("--matrix", metavar="PATH", help="matrix.yaml to use (default: the one shipped)")


def request_from(args: argparse.Namespace) -> CellRequest:
    """The run stage's one input, from whichever of run-cell, run, base-run or image was parsed."""
    from verl_e2e.run.launch import CellRequest  # noqa: PLC0415

    plan_file = getattr(args, "cell", None)
    return CellRequest(
        bridge=getattr(args, "bridge", None),
        out=getattr(args, "out", None),
        backend=getattr(args, "backend", "docker"),
        image=getattr(args, "image", None),
        verl=getattr(args, "verl", None),
        gpus=getattr(args, "gpus", None),
        env=tuple(getattr(args, "env", ())),
        phase_timeout=getattr(args, "phase_timeout", None),
        import_check=getattr(args, "import_check", "fast"),
        num_gpus=getattr(args, "num_gpus", None),
        hydra=tuple(getattr(args, "hydra", ())),
        megatron_lm=getattr(args, "megatron_lm", "auto"),
        preflight=not getattr(args, "no_preflight", False),
        bridge_tests=not getattr(args, "no_bridge_tests", False),
        retries=getattr(args, "retries", 1),
        cache=getattr(args, "cache", None),
        cache_layout=getattr(args, "cache_layout", "verl-e2e"),
        ulimit=tuple(getattr(args, "ulimit", ())),
        plan_file=plan_file if isinstance(plan_file, Path) else None,
        cell_id=getattr(args, "cell_id", None),
        slurm=slurm.options_from(args) if hasattr(args, "slurm_arg") else {},
        base=getattr(args, "base", None),
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
    from verl_e2e.run.launch import sayer  # noqa: PLC0415

    manifest = run_downloads(downloads, cache, token=token, say=sayer(stdout))
    stdout.write(f"verl-e2e: prefetched {len(manifest['done'])} item(s) into {cache}\n")
    return 0


def cmd_image(args: argparse.Namespace, stdout: TextIO) -> int:
    from verl_e2e.run import launch  # noqa: PLC0415

    matrix = load_matrix(args.matrix)
    inputs = launch.image_inputs(request_from(args), matrix)
    if args.print_tag:
        stdout.write(inputs.tag + "\n")
        return 0
    if args.print_ref:
        stdout.write(pullable_ref(docker_client(), inputs.tag) + "\n")
        return 0
    result = ensure_image(docker_client(), inputs, push=args.push, pull=not args.no_pull, say=launch.sayer(stdout))
    stdout.write(f"{result.tag} ({result.how}{', pushed' if result.pushed else ''})\n")
    return 0


def finish(verdicts: list[Verdict], stdout: TextIO, table: bool = False) -> int:
    """Exit 0 when every cell passed or was skipped, 1 otherwise."""
    from verl_e2e.judge.verdict import render_text as render_verdict  # noqa: PLC0415

    if table:
        stdout.write("\n" + "".join(f"{v.result:<8} {v.cell_id}  {v.headline}\n" for v in verdicts))
    else:
        stdout.write("".join("\n" + render_verdict(v) for v in verdicts))
    return 0 if all(v.result in ("Pass", "Skipped") for v in verdicts) else 1


def cmd_run_cell(args: argparse.Namespace, stdout: TextIO) -> int:
    from verl_e2e.run import launch  # noqa: PLC0415

    return finish([launch.run_one(request_from(args), load_matrix(args.matrix), stdout)], stdout)


def bridge_at_planned_head(plan: Plan, bridge: Path) -> None:
    """A plan made from git (--repo, --head) is for one Bridge commit; the checkout the cells mount
    must be that commit, or the run tests a different Bridge than the one planned."""
    head = str(plan.context.get("head") or "")
    if not head:
        return  # planned from a file list, a diff or an example: no commit to hold the checkout to
    try:
        at = resolve_commit(str(bridge), "HEAD")
    except UsageError:
        raise UsageError(
            f"run: the plan is for Bridge {head[:12]}, but --bridge {bridge} is not a git checkout, so it cannot "
            f"be shown to be that commit; pass a checkout at {head[:12]}"
        ) from None
    if at != head:
        raise UsageError(
            f"run: the plan is for Bridge {head[:12]} (--head), but --bridge {bridge} is at {at[:12]}; "
            f"check out {head[:12]} there (git -C {bridge} checkout {head[:12]}) or plan the commit it is at"
        )
