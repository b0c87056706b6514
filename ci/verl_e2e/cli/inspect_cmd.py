"""The inspecting commands: `validate`, `families`, `evidence`, `judge` (they read, never run)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import TextIO

import yaml

from verl_e2e.cli.progress import Progress
from verl_e2e.config.cross_checks import semantic_problems
from verl_e2e.config.matrix import default_matrix_path, load_matrix
from verl_e2e.config.schema_check import validate_document
from verl_e2e.config.signatures import Signature
from verl_e2e.config.yaml_read import stringify_keys
from verl_e2e.errors import ConfigError, UsageError
from verl_e2e.judge.evidence import Evidence, parse_stream
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.parallel import parse_file
from verl_e2e.judge.verdict import render_text as render_verdict


def cmd_validate(args: argparse.Namespace, stdout: TextIO) -> int:
    path = Path(args.path) if args.path else default_matrix_path()
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); pass the path of a matrix.yaml") from None
    except yaml.YAMLError:
        load_matrix(path)  # raises the formatted syntax error
    problems = validate_document(stringify_keys(document), str(path))
    problems = problems or semantic_problems(stringify_keys(document), str(path))
    if problems:
        raise ConfigError("\n".join(problems))
    matrix = load_matrix(path)  # cross-field checks (families, runners, globs, regexes)
    stdout.write(
        f"{path}: valid ({len(matrix.levels)} levels, {len(matrix.families)} families, "
        f"{len(matrix.escalations) + len(matrix.rules)} rules)\n"
    )
    return 0


def cmd_families(args: argparse.Namespace, stdout: TextIO) -> int:
    matrix = load_matrix(args.matrix)
    for fam in matrix.families.values():
        flags = [f for f in ("moe", "vlm", "mtp") if fam.flags.get(f)]
        # how its cells differ, from the records real runs left (`no_critic`, `merged_lora` in matrix.yaml)
        flags += ["critic-free"] * (fam.no_critic is not None) + ["merged-lora"] * (fam.merged_lora is not None)
        dummy = " (dummy)" if fam.model.dummy is not None else ""
        stdout.write(f"{fam.name:<16} {fam.model.model}{dummy}  {' '.join(flags)}".rstrip() + "\n")
        if fam.cannot_run is not None:
            kinds = f" ({', '.join(fam.blocked_kinds)} variants)" if fam.blocked_kinds else ""
            stdout.write(f"{'':<16} cannot run in verl today{kinds}: {fam.cannot_run}\n")
    return 0


def _signatures(matrix_path: str | None) -> tuple[Signature, ...]:
    return load_matrix(matrix_path).signatures


def cmd_evidence(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, progress: Progress) -> int:
    sigs = _signatures(args.matrix)
    if args.log == "-":
        with progress.step("reading the log from stdin"):
            ev = parse_stream(getattr(stdin, "buffer", None) or io.BytesIO(stdin.read().encode()), sigs)
    elif Path(args.log).is_dir():
        with progress.step(f"reading the logs in {args.log}"):
            return _evidence_of_dir(Path(args.log), sigs, args.format, stdout)
    else:
        path = Path(args.log)
        if not path.is_file():
            raise UsageError(f"evidence: {args.log}: no such file; pass the path of a verl console log or '-'")
        with progress.step(f"reading {path}"):
            ev = parse_file(path, sigs)
    if args.format == "json":
        stdout.write(json.dumps(ev.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        stdout.write(render_evidence(ev))
    return 0


def _evidence_of_dir(folder: Path, sigs: tuple[Signature, ...], fmt: str, stdout: TextIO) -> int:
    """A run dir (or any folder of logs): the evidence of each verl log in it, phase logs first."""
    logs = sorted(p for p in folder.glob("*.log") if p.name not in ("driver.log", "bridge-tests.log"))
    if not logs:
        raise UsageError(
            f"evidence: {folder}: a directory without verl logs (*.log); pass a log file, or "
            f"`verl-e2e judge {folder}` to judge a run dir"
        )
    evidence = {p.name: parse_file(p, sigs) for p in logs}
    if fmt == "json":
        stdout.write(json.dumps({n: e.to_json() for n, e in evidence.items()}, indent=2, sort_keys=True) + "\n")
    else:
        stdout.write("".join(f"== {name}\n{render_evidence(e)}" for name, e in evidence.items()))
    return 0


def cmd_judge(args: argparse.Namespace, stdout: TextIO, progress: Progress) -> int:
    sigs = _signatures(args.matrix)
    if args.baseline and not Path(args.baseline).is_file():
        raise UsageError(f"judge: --baseline {args.baseline}: no such file; pass a known-good run's log")
    verdicts = []
    for i, path in enumerate(args.run_dirs, 1):
        with progress.step(f"judging {path} ({i} of {len(args.run_dirs)})"):
            verdicts.append(judge_run_dir(path, args.baseline, sigs))
    if args.format == "json":
        stdout.write(json.dumps([v.to_json() for v in verdicts], indent=2, sort_keys=True) + "\n")
    else:
        stdout.write("\n".join(f"== {v.cell_id}\n{render_verdict(v)}" for v in verdicts))
    return 0 if all(v.result in ("Pass", "Skipped") for v in verdicts) else 1


def render_evidence(ev: Evidence) -> str:
    """A short human reading of a log's evidence."""
    exc = f"{ev.exception['type']}: {ev.exception['message'][:200]}" if ev.exception else "none"
    rows = [
        ("stage reached", ev.stage + (f" (failed in {ev.failed_in})" if ev.failed_in else "")),
        ("failure class", ev.failure_class + (f" ({ev.failure_signature})" if ev.failure_signature else "")),
        ("first exception", exc),
        ("steps", f"{ev.step_lines} step lines, last step {ev.max_step}"),
        ("progress", ev.progress_final or "none"),
        ("saves", ", ".join(map(str, ev.saves)) or "none"),
        (
            "resume",
            f"from step {ev.resumed_from}"
            if ev.resumed_from is not None
            else ("from scratch" if ev.from_scratch else "not shown"),
        ),
        ("NaN/Inf", ", ".join(ev.nan_metrics[:3]) or "none"),
        ("VANILLA_MBRIDGE", ev.traced_env.get("VANILLA_MBRIDGE", "not traced")),
        (
            "Bridge imports",
            ", ".join(f"{k}={v}" for k, v in ev.bridge_imports.items() if k != "other") or "not recorded",
        ),
        ("culprit", ev.culprit["chain"] if ev.culprit else "none"),
        ("hint", ev.hint or "none"),
    ]
    width = max(len(k) for k, _ in rows)
    return "".join(f"{k:<{width}}  {v}\n" for k, v in rows)
