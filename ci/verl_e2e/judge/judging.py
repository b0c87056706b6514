"""Judge a run dir: parse each phase's log, decide the verdict, write evidence/verdict/JUnit.

The I/O edge around the pure `evidence` and `verdict` modules; `verl-e2e judge RUN_DIR` and
`run-cell` (after the last phase) both call `judge_run_dir`, so any old run can be re-judged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from verl_e2e import safefs
from verl_e2e.config.matrix import load_matrix
from verl_e2e.config.signatures import Signature
from verl_e2e.errors import ConfigError
from verl_e2e.judge import coverage, junit, likely, timing
from verl_e2e.judge.blame import Changes, frames_phrase, likely_follow_up, rollout_advice
from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.parallel import parse_file
from verl_e2e.judge.rundir import load_run_dir, write_json
from verl_e2e.judge.verdict import Verdict, judge
from verl_e2e.plan.cells import Cell


def _size(log: Path) -> int | None:
    """The log's size if it is a plain file (a link or a special file in a run dir is not read)."""
    try:
        fd = safefs.open_regular(log, safefs.LOG_LIMIT)
    except (OSError, safefs.UnsafeFileError):
        return None
    size = os.fstat(fd).st_size
    os.close(fd)
    return size


def _changes(run_dir: Path) -> dict[str, Any] | None:
    """The PR's changed lines and functions the host wrote beside the run (`changes.json`), if any:
    {"lines": {path: [[first, last], ...]}, "functions": {path: [qualname, ...]}, "names": {path: [dotted
    string literals on the added lines, ...]}, "defaults": [{path, line, owner, name, ...}, ...]}."""
    try:
        data = json.loads(safefs.read_text(run_dir / "changes.json"))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("lines"), dict):
        return None
    lines = {
        str(k): [[r[0], r[1]] for r in v if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) for x in r)]
        for k, v in data["lines"].items()
        if isinstance(v, list)
    }
    found = {"lines": lines, "functions": _strings(data.get("functions")), "names": _strings(data.get("names"))}
    return found | {"defaults": likely.records(data.get("defaults"))}  # absent in older run dirs: none


def _strings(value: Any) -> dict[str, list[str]]:
    """{path: [str, ...]} from an untrusted JSON value; anything else is dropped."""
    if not isinstance(value, dict):
        return {}
    return {str(k): [q for q in v if isinstance(q, str)] for k, v in value.items() if isinstance(v, list)}


def _ran(run_dir: Path) -> list[tuple[str, str]] | None:
    """(path, qualname) of every Bridge function the cell's processes recorded; None without a record."""
    try:
        data = json.loads(safefs.read_text(run_dir / "bridge-functions.json", 64 * 1024 * 1024))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None
    items = data.get("functions") if isinstance(data, dict) else None
    return [
        (i["file"], i["qualname"])
        for i in items or []
        if isinstance(i, dict) and isinstance(i.get("file"), str) and isinstance(i.get("qualname"), str)
    ]


def _import_culprit(verdict: Verdict, provenance: Mapping[str, Any], changes: Changes | None) -> Verdict:
    """A Bridge module verl imports that failed before Ray started (the driver's import check): where its
    traceback ran through a line this PR changed, the headline says so, as for a failure in a log."""
    failure = provenance.get("setup_failure")
    if not isinstance(failure, Mapping) or failure.get("step") != "imports" or verdict.result != "Fail":
        return verdict
    modules = (provenance.get("import_check") or {}).get("modules") or {}
    errors = (
        [e for e in modules.values() if isinstance(e, Mapping) and e.get("in_bridge")]
        if isinstance(modules, Mapping)
        else []
    )
    root = "src/megatron/bridge/"
    frames = [
        {"path": f["file"][f["file"].index(root) :], "line": f.get("line"), "function": f.get("function", "")}
        for f in (errors[0].get("frames") or [] if errors else [])
        if isinstance(f, Mapping) and isinstance(f.get("file"), str) and root in f["file"]
    ]
    phrase = frames_phrase(frames, changes)
    return replace(verdict, headline=verdict.headline + phrase) if phrase else verdict


def _updates(run_dir: Path) -> dict[str, Any] | None:
    """The probe's optimizer-step records (`updates.json`), read as untrusted data; None without one."""
    try:
        data = json.loads(safefs.read_text(run_dir / "updates.json", 16 * 1024 * 1024))
    except (OSError, ValueError, safefs.UnsafeFileError):
        return None
    return data if isinstance(data, dict) else None


def _is_moe(family: str) -> bool:
    """Whether the cell's family routes tokens to experts (rollout and trainer then differ more)."""
    try:
        found = load_matrix().families.get(family)
    except (OSError, ValueError, ConfigError):
        return False
    return bool(found is not None and found.has("moe"))


def _known_break(verdict: Verdict, cell: Cell) -> Verdict:
    """A failed or blocked cell of a family matrix.yaml records as unable to run in verl today (or, for a
    cell that built a critic, unable to build its critic) says so first among its follow-ups: the failure
    is likely that known break, not the change under test."""
    if verdict.result not in ("Fail", "Blocked"):
        return verdict
    try:
        matrix = load_matrix()
    except (OSError, ValueError, ConfigError):
        return verdict
    found, level = matrix.families.get(verdict.family), matrix.levels.get(verdict.level)
    kind = next((v.applies_to for v in level.variants if v.name == verdict.variant), "all") if level else "all"
    why = found.blocked(kind) if found is not None else None
    gae = all(p.env.get("ADV_ESTIMATOR", "gae") == "gae" for p in cell.phases)
    if why is None and found is not None and found.no_critic is not None and gae:
        follow = (
            f"matrix.yaml records that verl cannot build {verdict.family}'s critic today: {found.no_critic}; "
            "this cell built one (GAE), and a plan runs this family critic-free (GRPO)"
        )
        return replace(verdict, follow_ups=[follow, *verdict.follow_ups])
    if why is None:
        return verdict
    follow = f"matrix.yaml records that {verdict.family} cannot run in verl today: {why}; a plan makes no such cell"
    return replace(verdict, follow_ups=[follow, *verdict.follow_ups])


def _family_dir(family: str) -> str | None:
    """The cell's Bridge model directory (matrix.yaml `dir`, else the family's name); None if unknown."""
    try:
        found = load_matrix().families.get(family)
    except (OSError, ValueError, ConfigError):
        return None
    return (found.dir or found.name) if found is not None else None


def with_coverage(verdict: Verdict, run_dir: Path) -> Verdict:
    """The verdict with the PR's changed functions this cell executed (both records in the run dir)."""
    changes, ran = _changes(run_dir), _ran(run_dir)
    found = coverage.measure(changes["functions"], ran) if changes and ran is not None else None
    if found is None:
        return verdict
    extra = [x for x in [found.limitation()] if x and x not in verdict.limitations]
    record = {"summary": found.summary(), "executed": list(found.executed), "not_executed": list(found.not_executed)}
    verdict = replace(verdict, coverage=record, limitations=[*verdict.limitations, *extra])
    return _suspects(verdict, found.executed)


def _suspects(verdict: Verdict, executed: Sequence[str]) -> Verdict:
    """A failure with no traceback (NaN/Inf, a hang, skipped weights) has no frame to name, and one raised
    outside the PR's lines (in vLLM, in Megatron-Core, in Bridge code the PR did not touch) names a frame
    that may only be where the change's effect surfaced. Either way the PR's changed functions this cell
    ran are the next place to look, so the verdict says which."""
    in_change = "this PR changed:" in verdict.headline
    if verdict.result != "Fail" or in_change or not executed:
        return verdict
    named = ", ".join(f"`{e.split(':', 1)[1]}` ({e.split(':', 1)[0]})" for e in executed[:3])
    more = f" and {len(executed) - 3} more" if len(executed) > 3 else ""
    if verdict.exception:
        follow = f"the failing frame is outside this PR's lines, but this cell ran the changed {named}{more}"
        return replace(verdict, follow_ups=[*verdict.follow_ups, follow])
    follow = f"no traceback to name a frame: look first at the changed code this cell ran: {named}{more}"
    return replace(
        verdict,
        headline=f"{verdict.headline} (changed code this cell ran: {named}{more})",
        follow_ups=[follow, *rollout_advice(verdict.failure_class, executed, named, verdict.follow_ups)],
    )


def _likely_first(verdict: Verdict, evidences: dict[str, Evidence], changes: dict[str, Any] | None) -> Verdict:
    """A Fail whose headline names a changed default as the likely cause sends the author there first."""
    failing = next((ev for ev in evidences.values() if ev.exception), None)
    follow = likely_follow_up(failing, changes) if verdict.result == "Fail" else None
    return replace(verdict, follow_ups=[follow, *verdict.follow_ups]) if follow else verdict


def judge_run_dir(
    path: str | Path,
    baseline_log: str | Path | None = None,
    signatures: Iterable[Signature] | None = None,
    cell: Cell | None = None,
) -> Verdict:
    """Judge a run dir; `cell` (the planned one) overrides the run dir's cell.json, whose checks a
    run could have rewritten; limitations the run recorded on its copy are kept."""
    run = load_run_dir(path)
    if cell is not None:
        extra = [x for x in run.cell.limitations if x not in cell.limitations]
        run = replace(run, cell=replace(cell, limitations=[*cell.limitations, *extra]))
    sigs = tuple(signatures) if signatures is not None else None
    evidences: dict[str, Evidence] = {}
    log_sizes: dict[str, int | None] = {}
    for phase in run.phases:
        log = run.log_path(phase)
        log_sizes[phase.name] = _size(log)
        if phase.status != "not_run" and log_sizes[phase.name] is not None:
            evidences[phase.name] = parse_file(log, sigs)
    baseline = parse_file(baseline_log, sigs) if baseline_log else None
    changes = _changes(run.path)
    if changes is not None:  # which providers this cell's model builds through (`likely`)
        changes["family_dir"] = _family_dir(run.cell.family)
    verdict = judge(
        run.cell,
        phases=run.phases,
        evidences=evidences,
        provenance=run.provenance,
        bridge_tests=run.bridge_tests,
        checkpoints=run.checkpoints,
        baseline=baseline,
        log_capture=str(run.path),
        log_sizes=log_sizes,
        problems=run.problems,
        changes=changes,
        updates=_updates(run.path),
        moe=_is_moe(run.cell.family),
    )
    verdict = _likely_first(verdict, evidences, changes)
    verdict = replace(verdict, timings=timing.breakdown(run.provenance, run.phases, evidences))
    verdict = _import_culprit(verdict, run.provenance, _changes(run.path))
    verdict = _known_break(with_coverage(verdict, run.path), run.cell)
    write_json(run.path / "evidence.json", {name: ev.to_json() for name, ev in evidences.items()})
    write_json(run.path / "verdict.json", verdict.to_json())
    safefs.write_text(run.path / "junit.xml", junit.render([verdict]))
    return verdict
