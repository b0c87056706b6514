"""Evidence -> Verdict: the level's checks decide Pass / Fail / Blocked, in the skill's words.

Pure: takes the run dir's records and each phase's Evidence, returns a Verdict with the skill's five
deliverables (each Pass, Fail, Skipped or Not requested), the checks behind them, key lines,
limitations and follow-ups. Blocked is only ever the overall result: the run stopped for the
environment (data, reward model, Ray, vLLM, dependencies, disk, cluster) or imported the wrong
Bridge, so it is not evidence against the provider. A cell that never ran is a Fail, not a Skip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

from verl_e2e.judge import timing, training, weights
from verl_e2e.judge.blame import Changes, compatibility_follow_up, culprit_phrase, megatron_limitation, megatron_source
from verl_e2e.judge.checks import Check, bridge_import, build_checks
from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.quotes import detected_limitations, first_exception, key_lines, reproduce
from verl_e2e.judge.rundir import PhaseRun
from verl_e2e.plan.cells import Cell

Result = Literal["Pass", "Fail", "Blocked"]
DeliverableResult = Literal["Pass", "Fail", "Skipped", "Not requested"]
CLUSTER_AT_SETUP = frozenset({"nccl", "oom", "hang"})  # before model build: the cluster, not Bridge
TRIAGE = {
    "model_build": "check that the provider is finalized with verl's mpu parallel sizes (TP/PP/CP/EP)",
    "checkpoint_save": "rerun with SAVE_FREQ=-1 to separate model construction from checkpointing",
    "checkpoint_load": "rerun Level 1 to separate saving from loading; compare the saved layout",
    "runtime": "read the first exception; in rollout before actor construction it is likely verl/vLLM",
    "nan": "NaN/Inf in training metrics: check loss scaling, LR and the provider's initialisation",
    "hang": "the phase timed out; look at the log tail for the last step and a stuck collective",
    "oom": "out of memory: lower micro-batch or response length, or use a larger runner",
    "nccl": "a collective failed: check the runner's GPUs and NCCL settings, then rerun",
    "setup": "fix the runner environment (data, reward model, Ray, disk, dependencies), then rerun",
    "interrupted": "the run was interrupted or cancelled; rerun it",
    "killed": "a process was killed with SIGKILL and no out-of-memory line says why; check the host's kernel log",
    "did_not_run": "the cell never reached verl's wrapper; read driver.log in the run dir",
    "harness": "the cell harness failed; read driver.log in the run dir and report it to verl-e2e",
    **training.ADVICE,
}


@dataclass(frozen=True)
class Deliverable:
    name: str
    result: DeliverableResult
    detail: str


@dataclass(frozen=True)
class Verdict:
    cell_id: str
    level: int
    variant: str
    family: str
    model: str
    result: Result
    headline: str
    requested: str
    deliverables: list[Deliverable]
    checks: list[Check]
    key_lines: list[str]
    limitations: list[str]
    follow_ups: list[str]
    failure_class: str
    failed_phase: str | None
    duration_s: float | None
    repos: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    log_capture: str = ""
    exception: str | None = None  # the root exception of the first failed phase, "Type: message"
    comparison: dict[str, str] | None = None  # against the merge base (`regression.compare`), if known
    coverage: dict[str, Any] | None = None  # the PR's changed functions it executed (`coverage.measure`)
    timings: dict[str, Any] | None = None  # where the time went (`timing.breakdown`)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _failure(phases: Sequence[PhaseRun], evidences: Mapping[str, Evidence]) -> tuple[str, str | None, str]:
    """(failure_class, phase, stage) of the first phase that failed, or ("none", None, "done")."""
    for phase in phases:
        ev = evidences.get(phase.name)
        stage = ev.stage if ev else "setup"
        found = ev.failure_class if ev is not None else "none"
        if phase.status == "timeout":
            return "hang", phase.name, stage
        if phase.status == "killed":
            return (found if found in ("oom", "setup") else "killed"), phase.name, stage
        if phase.status == "cancelled":
            return "interrupted", phase.name, stage
        if found not in ("none", "nan"):
            return found, phase.name, stage
        if phase.status in ("failed", "error") or (phase.exit_code not in (None, 0)):
            return (found if found != "none" else "runtime"), phase.name, stage
    # A run that finished with NaN/Inf losses or grad norms trained nothing, whatever its level checks:
    # non-finite metrics fail every cell, not only the levels that list `no_nan`.
    for phase in phases:
        ev = evidences.get(phase.name)
        if ev is not None and ev.nan_or_inf_in_metrics:
            return "nan", phase.name, ev.stage
    return "none", None, "done"


@dataclass(frozen=True)
class _Outcome:
    result: Result
    reason: str
    failure_class: str
    failed_phase: str | None


def _outcome(  # noqa: PLR0917 - one call site, every argument a different record
    phases: Sequence[PhaseRun],
    evidences: Mapping[str, Evidence],
    checks: Sequence[Check],
    wrong_bridge: str | None,
    provenance: Mapping[str, Any],
    problems: Sequence[str],
) -> _Outcome:
    failure_class, failed_phase, stage = _failure(phases, evidences)
    setup_failure = provenance.get("setup_failure")
    if wrong_bridge is not None:
        reason = f"wrong Bridge imported ({wrong_bridge}): not evidence either way"
        return _Outcome("Blocked", reason, "setup", failed_phase)
    if setup_failure:
        klass = str(setup_failure.get("class", "setup"))
        reason = f"{setup_failure.get('step', 'setup')}: {setup_failure.get('reason', 'failed')}"
        return _Outcome("Blocked" if klass == "setup" else "Fail", reason, klass, None)
    broken = [p for p in problems if p.startswith("phases.json")]
    if broken:
        return _Outcome("Blocked", f"the run dir's {broken[0]}: its phases cannot be judged", "harness", None)
    if all(p.status == "not_run" for p in phases):
        exit_code = provenance.get("host_exit_code")
        why = f"the cell did not run (the driver exited {exit_code} before the first phase)"
        return _Outcome("Fail", why if exit_code is not None else "the cell did not run", "did_not_run", None)
    # the node's RAM (data/signatures.yaml host-oom) is the environment too: Ray kills a worker whoever used it
    host_oom = failure_class == "oom" and any(ev.failure_signature == "host-oom" for ev in evidences.values())
    if failure_class == "setup" or host_oom:
        return _Outcome("Blocked", "stopped by the environment, not by the provider", failure_class, failed_phase)
    if failure_class == "interrupted" or (failure_class in CLUSTER_AT_SETUP and stage in ("empty", "setup")):
        when = ", not stopped by the PR's code" if failure_class == "interrupted" else ""  # at any stage
        reason = f"{failure_class}{when or ' before Bridge model construction (cluster setup)'}"
        return _Outcome("Blocked", reason, failure_class, failed_phase)
    if any(c.result == "Fail" for c in checks) or failure_class != "none":
        return _Outcome("Fail", "", failure_class, failed_phase)
    host_exit = provenance.get("host_exit_code")
    if isinstance(host_exit, int) and host_exit != 0:  # the host's own word outranks records from inside the cell
        reason = f"the cell's process exited {host_exit} on the host, though its own records read as a pass"
        return _Outcome("Fail", reason, "harness", None)
    return _Outcome("Pass", "", failure_class, failed_phase)


def _headline(
    cell: Cell, out: _Outcome, checks: Sequence[Check], evidences: Mapping[str, Evidence], changes: Changes | None
) -> str:
    model = cell.model + (" (dummy)" if cell.dummy_config is not None else "")
    what = f"Level {cell.level} ({cell.variant}) of {model} through verl's Megatron PPO"
    if out.result == "Pass":
        return f"Pass - {what}"
    where = f" in phase {out.failed_phase}" if out.failed_phase else ""
    if out.failure_class == "killed":
        cause = f"killed (137){where}"
    elif out.failure_class == "oom" and any(ev.failure_signature for ev in evidences.values()):
        cause = f"out of memory{where}"
    else:
        cause = out.reason or (f"{out.failure_class}{where}" if out.failed_phase else "checks failed")
    failing = next((ev for ev in evidences.values() if ev.exception), None)
    first_exc = failing.exception if failing is not None else None
    if first_exc:
        cause += f": {first_exc['type']}: {first_exc['message'][:160]}".rstrip(": ")
        cause += culprit_phrase(failing, changes)
    elif out.result == "Fail":
        failed = training.failed_in_order(checks)
        if failed:
            cause += f" ({failed[0].name}: {failed[0].detail})"
    return f"{out.result} - {what}: {cause}"


def _log_capture(ran: Sequence[PhaseRun], log_sizes: Mapping[str, int | None], where: str) -> Deliverable:
    missing = [p.log for p in ran if log_sizes.get(p.name) is None]
    empty = [p.log for p in ran if log_sizes.get(p.name) == 0]
    if not ran:
        return Deliverable("Log capture", "Fail", f"{where}: no phase ran, so no verl log was written")
    if missing or empty:
        bad = [f"{name} missing" for name in missing] + [f"{name} empty" for name in empty]
        return Deliverable("Log capture", "Fail", f"{where}: {', '.join(bad)}")
    sizes = ", ".join(f"{p.log} ({log_sizes[p.name]} bytes)" for p in ran)
    return Deliverable("Log capture", "Pass", f"{where}: {sizes}")


def _deliverables(
    cell: Cell,
    phases: Sequence[PhaseRun],
    checks: Sequence[Check],
    log_sizes: Mapping[str, int | None],
    log_capture: str,
) -> list[Deliverable]:
    """The skill's five deliverables, from the checks (Blocked is the overall result, never one of these)."""
    by_name = {c.name: c for c in checks}
    ran = [p for p in phases if p.status != "not_run"]
    checked = ("no_nan", "weights_loaded", *training.CHECK_CLASS)  # shown when they fail
    run_names = ("steps_completed", "exit_zero", "vanilla_mbridge_false", *checked)
    run_checks = [by_name[n] for n in run_names if n in by_name and (n not in checked or by_name[n].result == "Fail")]
    run_ok = bool(ran) and all(c.result == "Pass" for c in run_checks)
    variant_names = ("saves", "resume", "no_nan", "grad_norm_nonzero", "learning_signal", "mtp_trained")
    variant_checks = [c for c in checks if c.name in variant_names]
    if cell.level == 0:
        variants = Deliverable("Requested variants", "Not requested", "Level 0 only")
    elif not ran:
        variants = Deliverable("Requested variants", "Skipped", f"{cell.variant}: the cell did not run")
    elif variant_checks:
        passed = all(c.result == "Pass" for c in variant_checks)
        detail = "; ".join(f"{c.name}: {c.detail}" for c in variant_checks)
        variants = Deliverable("Requested variants", "Pass" if passed else "Fail", detail)
    else:
        variants = Deliverable("Requested variants", "Pass" if run_ok else "Fail", f"{cell.variant} ran")
    tests = by_name.get("bridge_tests") or Check("bridge_tests", "Skipped", "not requested for this cell")
    imported = by_name.get("local_bridge_import") or Check("local_bridge_import", "Skipped", "not checked")
    backend: DeliverableResult = "Pass" if run_ok else ("Skipped" if not ran else "Fail")
    return [
        Deliverable("Bridge-side checks", tests.result, tests.detail),
        Deliverable("Local Bridge import in verl", imported.result, imported.detail),
        Deliverable(
            "verl Megatron backend run",
            backend,
            f"{cell.variant}: " + "; ".join(c.detail for c in run_checks if c in run_checks[:2] or c.result == "Fail"),
        ),
        variants,
        _log_capture(ran, log_sizes, log_capture or "the run dir"),
    ]


def _follow_ups(
    cell: Cell, out: _Outcome, evidences: Mapping[str, Evidence], checks: Sequence[Check], provenance: Mapping[str, Any]
) -> list[str]:
    failing = next((ev for ev in evidences.values() if ev.exception), None)
    hint = compatibility_follow_up(failing, provenance) if out.result == "Fail" else None
    hint = hint or next((ev.hint for ev in evidences.values() if ev.hint), None)
    if out.result == "Blocked":
        fix = hint or TRIAGE.get(out.failure_class, "fix the environment")
        return [f"{fix.rstrip('.')}; then rerun with `/verl-e2e level={cell.level}`"]
    if out.result != "Fail":
        return ["none"]
    follow = [hint or TRIAGE.get(out.failure_class, "read the first error in the log")]
    if any(c.name == "bridge_tests" and c.result == "Fail" for c in checks):
        follow.append("fix the failing Bridge unit tests first")
    return follow


def judge(
    cell: Cell,
    *,
    phases: Sequence[PhaseRun],
    evidences: Mapping[str, Evidence],
    provenance: Mapping[str, Any] | None = None,
    bridge_tests: Mapping[str, Any] | None = None,
    checkpoints: Mapping[str, Any] | None = None,
    baseline: Evidence | None = None,
    log_capture: str = "",
    log_sizes: Mapping[str, int | None] | None = None,
    problems: Sequence[str] = (),
    changes: Changes | None = None,
    updates: Mapping[str, Any] | None = None,
    moe: bool = False,
) -> Verdict:
    """Decide a cell from its phases' records and evidence (and a baseline run for Level 5); `updates`
    is the probe's optimizer-step record, `moe` whether the model routes tokens to experts."""
    provenance = provenance or {}
    if log_sizes is None:  # callers without a run dir on disk: the evidence says how much was read
        log_sizes = {name: ev.bytes_read for name, ev in evidences.items()}
    import_check, wrong = bridge_import(provenance, list(evidences.values()))
    checks = build_checks(
        cell,
        phases=phases,
        evidences=evidences,
        import_check=import_check,
        bridge_tests=bridge_tests,
        checkpoints=checkpoints,
        baseline=baseline,
        updates=updates,
        moe=moe,
    )
    skipped = list(dict.fromkeys(w for ev in evidences.values() for w in ev.skipped_weights))
    loaded = weights.check(skipped, changes)
    checks += [loaded] if loaded else []
    out = _outcome(phases, evidences, checks, import_check.detail if wrong else None, provenance, problems)
    if loaded and out.result == "Fail" and out.failure_class == "none":  # the change's names: a build problem
        out = replace(out, failure_class="model_build")
    if out.result == "Fail" and out.failure_class == "none":  # no exception: the first failed training check names it
        out = replace(out, failure_class=training.failed_class(checks))
    command = reproduce(phases) or next((ev.command for ev in evidences.values() if ev.command), None)
    durations = [p.duration_s for p in phases if p.duration_s is not None]
    return Verdict(
        **identity(cell),
        result=out.result,
        headline=_headline(cell, out, checks, evidences, changes),
        requested=f"Level {cell.level} ({cell.variant})",
        deliverables=_deliverables(cell, phases, checks, log_sizes, log_capture),
        checks=checks,
        key_lines=key_lines(evidences, phases),
        limitations=detected_limitations(
            cell, evidences, phases, [*_recorded_limitations(provenance), *filter(None, [weights.limitation(skipped)])]
        ),
        follow_ups=[weights.FOLLOW_UP]  # the skill's model-build hint is about the provider, not names
        if loaded and out.result == "Fail" and not out.reason and out.failed_phase is None
        else _follow_ups(cell, out, evidences, checks, provenance),
        failure_class=out.failure_class,
        failed_phase=out.failed_phase,
        duration_s=sum(durations) if durations else None,
        repos={k: provenance[k] for k in ("bridge", "verl", "image", "megatron_lm", "runner") if k in provenance}
        | {"megatron": megatron_source(provenance)},
        command=command,
        log_capture=log_capture,
        exception=first_exception(evidences, out.failed_phase),
    )


def _recorded_limitations(provenance: Mapping[str, Any]) -> list[str]:
    megatron = megatron_limitation(provenance)
    return [*provenance.get("limitations", []), *([megatron] if megatron else [])]


def identity(cell: Cell) -> dict[str, Any]:
    """The fields a verdict takes from its cell, whoever writes the verdict."""
    return {
        "cell_id": cell.id,
        "level": cell.level,
        "variant": cell.variant,
        "family": cell.family,
        "model": cell.model,
    }


def _repo_line(info: Mapping[str, Any] | None) -> str:
    if not info:
        return "not recorded"
    dirty = info.get("dirty") or []
    return f"{info.get('commit', '?')}" + (f" plus dirty files: {', '.join(dirty[:10])}" if dirty else " (clean)")


def image_line(repos: Mapping[str, Any]) -> str:
    image = repos.get("image")
    if not isinstance(image, Mapping) or not image.get("tag"):
        return "none (local backend: the host's environment)"
    line = f"{image['tag']}" + (f" ({image['id']})" if image.get("id") else " (digest not recorded)")
    return line + (f", built FROM {image['base']}" if image.get("base") else "")


def render_text(v: Verdict) -> str:
    """The skill's summary format for one cell."""
    lines = [
        f"Result: {v.headline}",
        f"Requested coverage: {v.requested}",
        f"Model: {v.model}",
        "Deliverables:",
        *(f"- {d.name}: {d.result} - {d.detail}" for d in v.deliverables),
        "Evidence:",
        f"- Bridge repo: {_repo_line(v.repos.get('bridge'))}",
        f"- verl repo: {_repo_line(v.repos.get('verl'))}",
        f"- Image: {image_line(v.repos)}",
        *(
            [
                f"- Versus the merge base: {v.comparison['outcome']} - {v.comparison.get('reason', '')}"
                + (f" ({v.comparison['base']})" if v.comparison.get("base") else "")
            ]
            if v.comparison
            else []
        ),
        *(
            f"- {k}: {x}"
            for k, x in (("Changed code", (v.coverage or {}).get("summary")), ("Time", timing.line(v.timings)))
            if x
        ),
        f"- Command: {v.command or 'not recorded'}",
        f"- Key lines: {'; '.join(v.key_lines) or 'none'}",
        "Limitations:",
        *(f"- {x}" for x in v.limitations or ["none"]),
        "Follow-ups:",
        *(f"- {x}" for x in v.follow_ups),
    ]
    return "\n".join(lines) + "\n"


def verdict_from_json(data: Mapping[str, Any]) -> Verdict:
    """Inverse of `Verdict.to_json` (verdict.json in a run dir); unknown result values are refused."""
    if data.get("result") not in get_args(Result):
        raise ValueError(f"result {data.get('result')!r} is not one of {', '.join(get_args(Result))}")
    fields = dict(data)
    fields["deliverables"] = [Deliverable(**d) for d in data.get("deliverables", [])]
    for d in fields["deliverables"]:
        if d.result not in get_args(DeliverableResult):
            allowed = ", ".join(get_args(DeliverableResult))
            raise ValueError(f"deliverable {d.name!r}: result {d.result!r} is not one of {allowed}")
    fields["checks"] = [Check(**c) for c in data.get("checks", [])]
    return Verdict(**fields)
