"""Command line: every `verl-e2e` command. The only place that turns errors into exit codes.

Exit codes: 0 ok, 1 a run failed, 2 bad input (arguments, files, revisions, matrix.yaml). Every
path is checked right after parsing (`paths`), and a file-system error that still escapes names
its file in one line; slow steps report on stderr (`progress`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from verl_e2e import __version__
from verl_e2e.cli import github_args, paths, run_cmd, surface_cmd
from verl_e2e.cli.progress import Progress
from verl_e2e.config.matrix import LEVELS, Matrix, load_matrix
from verl_e2e.errors import UsageError, VerlE2EError
from verl_e2e.plan import budget
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.contract import Plan, render_json, render_text, write_github
from verl_e2e.plan.examples import EXAMPLES


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (one line, exit 2) instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def parse_levels(text: str) -> list[int] | None:
    """'auto' -> None; 'all' -> 0..5; '0,2' -> [0, 2]."""
    value = text.strip().lower()
    if value == "auto":
        return None
    if value == "all":
        return list(LEVELS)
    levels: set[int] = set()
    for part in value.replace(" ", "").split(","):
        if not part.isdigit() or int(part) not in LEVELS:
            raise UsageError(
                f"--levels {text}: unknown level {part!r}; expected 'auto', 'all' or a comma list of 0-5 "
                "(e.g. --levels 0,2)"
            )
        levels.add(int(part))
    return sorted(levels)


def _change_arguments(p: argparse.ArgumentParser) -> None:
    """What changed and which levels: shared by `plan` and `run`."""
    src = p.add_argument_group("what changed (one of)")
    src.add_argument(
        "--changed-files",
        metavar="FILE",
        help="`git diff --name-status` lines or bare paths; '-' reads stdin",
    )
    src.add_argument(
        "--diff",
        metavar="FILE",
        help="the change's unified diff (as `git diff` or GitHub's API prints it): the changed lines and the "
        "functions they sit in decide; alone or with --changed-files",
    )
    src.add_argument("--repo", metavar="PATH", help="a Bridge checkout to diff (needs --base; --head defaults to HEAD)")
    p.add_argument(
        "--runners",
        metavar="JSON",
        help="this site's GPU runner labels per GPU count, e.g. "
        '{"2": ["self-hosted", "gpu-2"]} (default: matrix.yaml\'s runners)',
    )
    src.add_argument(
        "--example",
        nargs="?",
        const="new-provider",
        choices=sorted(EXAMPLES),
        help="plan a built-in example change (default: new-provider)",
    )
    p.add_argument("--base", metavar="REV", help="base revision; the diff starts at its merge base with --head")
    p.add_argument("--head", metavar="REV", default=None, help="head revision (default: HEAD)")
    p.add_argument(
        "--levels",
        default="auto",
        help="'auto' (from the rules), 'all', or a list such as 0,2 (default: auto)",
    )
    p.add_argument(
        "--family",
        action="append",
        default=[],
        metavar="NAME",
        help="run on this model family instead (repeatable or comma list; 'all': every family)",
    )
    p.add_argument("--model", metavar="HF_ID", help="use this checkpoint instead of the family's")
    p.add_argument(
        "--scheduled",
        action="store_true",
        help="the scheduled full run: every family's Level 0 and the weekly multi-GPU layouts (no change needed)",
    )
    p.add_argument(
        "--budget",
        type=budget.minutes,
        metavar="GPU_MINUTES",
        help="GPU-minutes an automatic plan may spend; cells over it are listed as not run, with the request "
        "that runs them (default: matrix.yaml's defaults.gpu_budget_minutes; 0: no limit; explicit --levels "
        "are not limited)",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="verl-e2e",
        description="Run a Megatron-Bridge change inside verl's Megatron PPO loop: plan, run, judge, report.",
    )
    parser.add_argument("--version", action="version", version=f"verl-e2e {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    plan = sub.add_parser(
        "plan",
        help="choose coverage levels for a change and expand them into cells",
        description="Choose coverage levels 0-5 from a change's paths (rules in matrix.yaml), or take them "
        "from --levels, and expand them into cells: one verl run each.",
        epilog="examples:\n  verl-e2e plan --example\n"
        "  git diff --name-status main... | verl-e2e plan --changed-files -\n"
        "  verl-e2e plan --repo ../Megatron-Bridge --base origin/main --head HEAD --format json\n"
        "  verl-e2e plan --levels 0,2 --family qwen_vl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _change_arguments(plan)
    plan.add_argument(
        "--format", choices=("text", "json", "github"), default="text", help="output format (default: text)"
    )
    plan.add_argument("--out", metavar="FILE", help="also write the JSON plan to FILE (the workflow's plan artifact)")
    plan.add_argument("--matrix", metavar="PATH", help="matrix.yaml to use (default: the one shipped)")

    validate = sub.add_parser(
        "validate",
        help="check a matrix.yaml against its schema and report every problem",
        description="Check a matrix.yaml (a site's copy, or the shipped one) against the JSON Schema shipped "
        "with verl-e2e, then the checks across fields (families, runners, globs, patterns). Every problem is "
        "reported at once as FILE::$.json.path: message. Exit 0 when valid, 2 otherwise.",
    )
    validate.add_argument("path", nargs="?", help="matrix.yaml (default: the one shipped)")

    families = sub.add_parser(
        "families",
        help="list the model families and their checkpoints",
        description="List matrix.yaml's model families: the checkpoint each runs (or its dummy config) and "
        "whether it is MoE, VLM or has MTP layers; use a name with `plan --family` or `/verl-e2e family=`.",
    )
    families.add_argument("--matrix", metavar="PATH", help="matrix.yaml to read (default: the one shipped)")

    evidence = sub.add_parser(
        "evidence",
        help="read a bare verl log (e.g. from a manual run) and print what it shows",
        description="Parse a verl console log: steps, progress, saves, resume, first exception, failure "
        "class, NaNs, validation metrics, traced wrapper variables and Bridge import paths.",
    )
    evidence.add_argument("log", metavar="LOG", help="a verl console log; '-' reads stdin")
    evidence.add_argument("--format", choices=("json", "text"), default="text")
    evidence.add_argument("--matrix", metavar="PATH", help="matrix.yaml with extra failure signatures")

    judge = sub.add_parser(
        "judge",
        help="(re-)judge run dirs: write evidence.json, verdict.json, junit.xml and print the summary",
        description="Judge each run dir from its logs and records. Exit 0 when every cell passed or was "
        "skipped, 1 when any failed or was blocked.",
    )
    judge.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run dirs written by run-cell (or by hand)")
    judge.add_argument("--baseline", metavar="LOG", help="a known-good run's log for the Level 5 trend")
    judge.add_argument("--format", choices=("text", "json"), default="text")
    judge.add_argument("--matrix", metavar="PATH", help="matrix.yaml with extra failure signatures")

    run_cmd.add_commands(sub)
    github_args.add_commands(sub)
    surface_cmd.add_command(sub)
    run = sub.add_parser(
        "run",
        help="plan a change and run every cell locally (plan -> image -> cells -> run dirs)",
        description="The all-in-one local command: plan, ensure the image, run each cell into OUT/<cell id>. "
        "Without a Docker engine or GPUs it stops before running, says why and prints the docker commands "
        "it would have run (exit 2).",
    )
    _change_arguments(run)
    run_cmd.run_options(run, dry_run_defaults=True)
    run.add_argument("--dry-run", action="store_true", help="print the plan and the docker commands only")
    return parser


def _plan_request(args: argparse.Namespace, stdin: TextIO) -> PlanRequest:
    """The plan stage's one input, from `plan` or `run`'s arguments."""
    changed = args.changed_files
    return PlanRequest(
        command=args.command,
        changed_files=changed,
        diff=args.diff,
        repo=args.repo,
        base=args.base,
        head=args.head,
        example=args.example,
        levels=parse_levels(args.levels),
        families=tuple(f.strip() for item in args.family for f in item.split(",") if f.strip()),
        model=args.model,
        scheduled=args.scheduled,
        budget=args.budget,
        runners=getattr(args, "runners", None),
        stdin=stdin.read() if changed == "-" else None,
    )


def _planned(args: argparse.Namespace, matrix: Matrix, stdin: TextIO, progress: Progress) -> Plan:
    """The plan of `plan` or `run`; reading a large checkout's history is a step that may take a while."""
    with progress.step("reading the change and choosing levels"):
        return make_plan(_plan_request(args, stdin), matrix)


def _cmd_plan(
    args: argparse.Namespace, env: Mapping[str, str], stdin: TextIO, stdout: TextIO, progress: Progress
) -> int:
    matrix = load_matrix(args.matrix)
    plan = _planned(args, matrix, stdin, progress)
    if args.out:
        Path(args.out).write_text(render_json(plan), encoding="utf-8")
    if args.format == "json":
        stdout.write(render_json(plan))
    elif args.format == "github":
        outputs = write_github(plan, matrix, env)
        stdout.write(render_text(plan, matrix))
        if not env.get("GITHUB_OUTPUT"):
            stdout.write("".join(f"{k}={v}\n" for k, v in outputs.items()))
    else:
        stdout.write(render_text(plan, matrix))
    return 0


def _cmd_run(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, progress: Progress) -> int:
    matrix = load_matrix(args.matrix)
    if not args.dry_run and (args.bridge is None or args.out is None):
        raise UsageError("run: --bridge PATH and --out DIR are needed to run cells (or pass --dry-run to see them)")
    plan = _planned(args, matrix, stdin, progress)
    if args.bridge is not None:  # a dry run refuses what the run would refuse
        run_cmd.bridge_at_planned_head(plan, args.bridge)
    stdout.write(render_text(plan, matrix))
    if not plan.cells:
        stdout.write("verl-e2e: nothing to run\n")
        return 0
    if args.dry_run:
        return _dry_run(args, matrix, plan, stdout)
    from verl_e2e.run import launch  # noqa: PLC0415 - the runner and docker load when cells run

    verdicts = launch.run_many(plan.cells, run_cmd.request_from(args), matrix, stdout)
    return run_cmd.finish(verdicts, stdout, table=True)


def _dry_run(args: argparse.Namespace, matrix: Matrix, plan: Plan, stdout: TextIO) -> int:
    """Write each cell's cell.json and print the commands that would run them, nothing else."""
    args.out = (args.out or Path("verl-e2e-runs")).resolve()
    if args.bridge is None:
        args.bridge = Path("../Megatron-Bridge")
        stdout.write("verl-e2e: no --bridge given; the commands use ../Megatron-Bridge\n")
    args.bridge = args.bridge.resolve()  # docker mounts need absolute paths
    from verl_e2e.run import launch  # noqa: PLC0415

    request = run_cmd.request_from(args)
    image = args.image or launch.image_tag(request, matrix)
    for cell in plan.cells:
        (args.out / cell.id).mkdir(parents=True, exist_ok=True)
        (args.out / cell.id / "cell.json").write_text(json.dumps(cell.to_json(), indent=2))
    stdout.write(f"verl-e2e: wrote {len(plan.cells)} cell.json file(s) under {args.out}; the commands:\n")
    stdout.write("".join(f"  {line}\n" for line in launch.would_run(plan.cells, request, matrix, image)))
    return 0


def main(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    env = os.environ if env is None else env
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
        paths.check(args)
        progress = Progress(stderr, f"verl-e2e {args.command}" if args.command else "verl-e2e")
        if args.command in ("run-cell", "run", "base-run"):
            from verl_e2e.run.runinputs import require_container_in_actions  # noqa: PLC0415

            slurm_container = getattr(args, "slurm_container", None)
            dry_run = bool(getattr(args, "dry_run", False))
            require_container_in_actions(args.command, args.backend, slurm_container, env, dry_run)
        if args.command == "plan":
            return _cmd_plan(args, env, stdin, stdout, progress)
        # the judge, the GitHub client and the runner load for the commands that use them, not for `plan`
        if args.command in ("validate", "families", "evidence", "judge"):
            from verl_e2e.cli import inspect_cmd  # noqa: PLC0415
        if args.command in ("report", "react", "reply", "trigger", "compare", "gate", "fork-notice"):
            from verl_e2e.cli import github_cmd  # noqa: PLC0415
        if args.command == "validate":
            return inspect_cmd.cmd_validate(args, stdout)
        if args.command == "families":
            return inspect_cmd.cmd_families(args, stdout)
        if args.command == "evidence":
            return inspect_cmd.cmd_evidence(args, stdin, stdout, progress)
        if args.command == "judge":
            return inspect_cmd.cmd_judge(args, stdout, progress)
        if args.command == "image":
            return run_cmd.cmd_image(args, stdout)
        if args.command == "run-cell":
            return run_cmd.cmd_run_cell(args, stdout)
        if args.command == "run":
            return _cmd_run(args, stdin, stdout, progress)
        if args.command == "base-run":
            from verl_e2e.cli import base_cmd  # noqa: PLC0415 - it loads the runner; plan should not

            return base_cmd.cmd_base_run(args, stdout)
        if args.command == "surface":
            return surface_cmd.cmd_surface(args, stdout, progress)
        if args.command == "prefetch":
            return run_cmd.cmd_prefetch(args, env, stdout)
        if args.command == "report":
            return github_cmd.cmd_report(args, env, stdout, progress)
        if args.command == "react":
            return github_cmd.cmd_react(args, env)
        if args.command == "reply":
            return github_cmd.cmd_reply(args, env, stdout)
        if args.command == "trigger":
            return github_cmd.cmd_trigger(args, env, stdout)
        if args.command == "compare":
            return github_cmd.cmd_compare(args, stdout, progress)
        if args.command == "gate":
            return github_cmd.cmd_gate(args, env, stdout)
        if args.command == "fork-notice":
            return github_cmd.cmd_fork_notice(args, env, stdout)
        parser.print_help(stdout)
        return 2
    except VerlE2EError as exc:
        stderr.write(f"verl-e2e: error: {exc}\n")
        return exc.exit_code
    except _docker_error() as exc:
        detail = str(getattr(exc, "explanation", None) or exc).strip().splitlines()[-1][:300]
        stderr.write(f"verl-e2e: error: the container engine refused: {detail}\n")
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        stderr.write("verl-e2e: interrupted\n")
        return 130
    except OSError as exc:
        if exc.filename is None:  # not a path's problem (a socket, a pipe): a bug to see in full
            raise
        stderr.write(f"verl-e2e: error: {exc.filename}: {exc.strerror or exc}; check the path and its permissions\n")
        return 2


def _docker_error() -> type[Exception]:
    """The docker SDK's base exception, imported only once an error reaches it: `plan` and the other
    commands that start no container do not pay for the SDK (and requests under it) at start-up."""
    import docker.errors  # noqa: PLC0415

    error: type[Exception] = docker.errors.DockerException
    return error


if __name__ == "__main__":
    sys.exit(main())
