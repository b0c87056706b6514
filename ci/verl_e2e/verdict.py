"""Evidence -> Verdict: the level's checks decide Pass / Fail / Blocked / Skipped, per the skill.

Pure: takes the run dir's records and each phase's Evidence, returns a Verdict with the skill's five
deliverables, the checks behind them, key lines, limitations and follow-ups. Blocked means the run
stopped before Bridge model construction for environment reasons, or imported the wrong Bridge; it
is never evidence against the provider.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from verl_e2e.cells import Cell
from verl_e2e.evidence import Evidence
from verl_e2e.rundir import PhaseRun

Result = Literal["Pass", "Fail", "Blocked", "Skipped", "Not requested"]
BLOCKING_AT_SETUP = frozenset({"nccl", "oom", "hang", "interrupted"})
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
}
SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")


@dataclass(frozen=True)
class Check:
    name: str
    result: Literal["Pass", "Fail", "Skipped"]
    detail: str


@dataclass(frozen=True)
class Deliverable:
    name: str
    result: Result
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- checks


def _bridge_tests(tests: Mapping[str, Any] | None) -> Check:
    if not tests:
        return Check("bridge_tests", "Skipped", "focused Bridge tests were not run")
    status = str(tests.get("status", "")).lower()
    command = tests.get("command", "focused Bridge tests")
    summary = tests.get("summary", "")
    if status in ("pass", "passed"):
        return Check("bridge_tests", "Pass", f"{command} ({summary})".strip())
    if status in ("fail", "failed", "error"):
        return Check("bridge_tests", "Fail", f"{command}: {summary or 'failed'}")
    return Check("bridge_tests", "Skipped", tests.get("reason", f"{command}: {status or 'not run'}"))


def bridge_import(provenance: Mapping[str, Any], evidences: Sequence[Evidence]) -> tuple[Check, bool]:
    """(check, wrong_bridge). Both the driver and a Ray worker must import the mounted checkout."""
    recorded: dict[str, str] = {}
    processes: list[str] = []
    for ev in evidences:
        for where in ("driver", "ray-worker"):
            if where in ev.bridge_imports:
                recorded.setdefault(where.replace("-", "_"), ev.bridge_imports[where])
        processes += ev.bridge_imports.get("processes", [])
    for where, path in (provenance.get("bridge_import") or {}).items():
        if isinstance(path, str):
            recorded[where.replace("-", "_")] = path
    expected = (provenance.get("bridge") or {}).get("src")
    if not recorded:
        return Check("local_bridge_import", "Fail", "the imported megatron.bridge path was not recorded"), False

    def local(path: str) -> bool:
        if expected:
            return path.startswith(expected.rstrip("/") + "/")
        return "/src/megatron/bridge/" in path and "-packages/" not in path

    wrong = {w: p for w, p in recorded.items() if not local(p)}
    stray = [p for p in processes if not local(p)]
    if stray:
        wrong["a verl process"] = stray[0]
    if wrong:
        where, path = next(iter(wrong.items()))
        return Check("local_bridge_import", "Fail", f"{where} imported {path}, not the checkout under test"), True
    missing = [w for w in ("driver", "ray_worker") if w not in recorded]
    shown = recorded.get("ray_worker") or recorded.get("driver") or ""
    if processes:
        shown += f" (and {len(processes)} verl process(es) imported the same checkout)"
    if missing:
        return Check("local_bridge_import", "Fail", f"{shown} (no {' or '.join(missing)} record)"), False
    return Check("local_bridge_import", "Pass", shown), False


def _vanilla(evidences: Mapping[str, Evidence]) -> Check:
    seen = {name: ev.traced_env.get("VANILLA_MBRIDGE") for name, ev in evidences.items()}
    if seen and all(v == "False" for v in seen.values()):
        return Check("vanilla_mbridge_false", "Pass", "VANILLA_MBRIDGE=False")
    bad = {n: v for n, v in seen.items() if v != "False"}
    detail = ", ".join(f"{n}: {'not traced' if v is None else 'VANILLA_MBRIDGE=' + v}" for n, v in bad.items())
    return Check("vanilla_mbridge_false", "Fail", detail or "no phase log")


def _steps(cell: Cell, evidences: Mapping[str, Evidence]) -> Check:
    notes = []
    ok = True
    for phase in cell.phases:
        want = int(phase.expect.get("steps", 1))
        ev = evidences.get(phase.name)
        got = ev.max_step if ev else None
        notes.append(f"{phase.name}: step {got if got is not None else 'none'}/{want}")
        ok = ok and got is not None and got >= want
    return Check("steps_completed", "Pass" if ok else "Fail", "; ".join(notes))


def _exit(phases: Sequence[PhaseRun]) -> Check:
    bad = [
        f"{p.name}: {p.status}" + (f" (exit {p.exit_code})" if p.exit_code not in (None, 0) else "")
        for p in phases
        if p.status != "ok" or p.exit_code != 0
    ]
    return Check("exit_zero", "Fail" if bad else "Pass", "; ".join(bad) or "every phase exited 0")


def _saves(cell: Cell, evidences: Mapping[str, Evidence], listing: Mapping[str, Any] | None) -> Check:
    notes, ok = [], True
    for phase in cell.phases:
        want = [int(s) for s in phase.expect.get("saves", [])]
        if not want:
            continue
        ev = evidences.get(phase.name)
        on_disk = [int(s) for s in ((listing or {}).get(phase.name) or {}).get("steps", [])]
        got = sorted(set((ev.saves if ev else []) + on_disk))
        notes.append(f"{phase.name}: saved {got or 'nothing'}, expected {want}")
        ok = ok and set(want) <= set(got)
    return Check("saves", "Pass" if ok else "Fail", "; ".join(notes) or "no save expected")


def _resume(cell: Cell, evidences: Mapping[str, Evidence], listing: Mapping[str, Any] | None) -> Check:
    notes, ok = [], True
    for phase in cell.phases:
        expect = phase.expect
        ev = evidences.get(phase.name)
        if "resumed_from" in expect:
            got = ev.resumed_from if ev else None
            notes.append(f"{phase.name}: resumed from {got if got is not None else 'nothing'}")
            ok = ok and got == int(expect["resumed_from"])
        if "tracker" in expect:
            tracker = ((listing or {}).get(phase.name) or {}).get("tracker")
            source = "latest_checkpointed_iteration.txt"
            if tracker is None and ev and ev.saves:
                tracker, source = max(ev.saves), "last save in the log"
            notes.append(f"tracker {tracker if tracker is not None else 'missing'} ({source})")
            ok = ok and tracker is not None and int(tracker) == int(expect["tracker"])
    return Check("resume", "Pass" if ok else "Fail", "; ".join(notes) or "no resume expected")


def _no_nan(evidences: Mapping[str, Evidence]) -> Check:
    bad = [m for ev in evidences.values() for m in ev.nan_metrics]
    if any(ev.nan_or_inf_in_metrics for ev in evidences.values()):
        return Check("no_nan", "Fail", "NaN/Inf in " + ", ".join(bad[:3]))
    return Check("no_nan", "Pass", "no NaN/Inf in loss, reward, KL, entropy, grad norm or logprob metrics")


def _grad_norm(evidences: Mapping[str, Evidence]) -> Check:
    points = [p for ev in evidences.values() for p in ev.series.get("actor/grad_norm", [])]
    if not points:
        return Check("grad_norm_nonzero", "Fail", "no actor/grad_norm metric was logged")
    if any(ev.zero_grad_norm for ev in evidences.values()):
        return Check("grad_norm_nonzero", "Fail", f"actor/grad_norm stuck at 0 over {len(points)} steps")
    return Check("grad_norm_nonzero", "Pass", f"actor/grad_norm nonzero over {len(points)} steps")


def _thirds(series: list[list[float]]) -> tuple[float, float]:
    values = [v for _, v in sorted(series)]
    k = max(1, len(values) // 3)
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def learning_signal(evidences: Mapping[str, Evidence], baseline: Evidence | None = None) -> Check:
    """Reward (or score) trend against the start, and against a baseline run when one is given."""
    ev = next(iter(evidences.values()), None)
    if ev is None:
        return Check("learning_signal", "Fail", "no log")
    key = next((k for k in SCORE_KEYS if len(ev.series.get(k, [])) >= 4), None)
    if key is None:
        return Check("learning_signal", "Fail", "fewer than 4 steps of reward/score metrics were logged")
    start, end = _thirds(ev.series[key])
    notes = [f"{key} {start:.3f} -> {end:.3f} (first vs last third)"]
    ok = end > start
    val_i, val_f = ev.initial_validation, ev.final_validation
    if val_i and val_f:
        common = sorted(set(val_i) & set(val_f))
        if common:
            k = common[0]
            notes.append(f"{k} {val_i[k]:.3f} -> {val_f[k]:.3f}")
            ok = ok and val_f[k] >= val_i[k]
    if baseline is not None and len(baseline.series.get(key, [])) >= 4:
        _, base_end = _thirds(baseline.series[key])
        tolerance = max(0.05, abs(base_end) * 0.1)
        notes.append(f"baseline ends at {base_end:.3f} (tolerance {tolerance:.3f})")
        ok = ok and end >= base_end - tolerance
    verdict = "learning-signal passed" if ok else "no learning signal"
    return Check("learning_signal", "Pass" if ok else "Fail", f"{verdict}: " + "; ".join(notes))


# --------------------------------------------------------------------------------------------- judging


def _failure(phases: Sequence[PhaseRun], evidences: Mapping[str, Evidence]) -> tuple[str, str | None, str]:
    """(failure_class, phase, stage) of the first phase that failed, or ("none", None, "done")."""
    for phase in phases:
        ev = evidences.get(phase.name)
        stage = ev.stage if ev else "setup"
        if phase.status == "timeout":
            return "hang", phase.name, stage
        if phase.status == "killed":
            return "oom", phase.name, stage
        if phase.status == "cancelled":
            return "interrupted", phase.name, stage
        if ev is not None and ev.failure_class not in ("none", "nan"):
            return ev.failure_class, phase.name, stage
        if phase.status in ("failed", "error") or (phase.exit_code not in (None, 0)):
            return (ev.failure_class if ev and ev.failure_class != "none" else "runtime"), phase.name, stage
    return "none", None, "done"


def _key_lines(evidences: Mapping[str, Evidence], phases: Sequence[PhaseRun]) -> list[str]:
    lines: list[str] = []
    for name, ev in evidences.items():
        prefix = f"[{name}] " if len(evidences) > 1 else ""
        if "VANILLA_MBRIDGE" in ev.traced_env:
            lines.append(f"{prefix}VANILLA_MBRIDGE={ev.traced_env['VANILLA_MBRIDGE']}")
        if ev.progress_final:
            lines.append(f"{prefix}Training Progress: {ev.progress_final}")
        if ev.max_step is not None:
            lines.append(f"{prefix}training/global_step:{ev.max_step}")
        if ev.saves:
            lines.append(f"{prefix}saved global_step_{', global_step_'.join(map(str, ev.saves))}")
        if ev.resumed_from is not None:
            lines.append(f"{prefix}resumed from global_step_{ev.resumed_from}")
        if ev.exception:
            lines.append(f"{prefix}{ev.exception['type']}: {ev.exception['message']}".rstrip(": "))
        elif ev.failure_line:
            lines.append(f"{prefix}{ev.failure_line}")
    for phase in phases:
        if phase.status in ("timeout", "killed", "cancelled") and phase.log_tail:
            lines.append(f"[{phase.name}] {phase.status}; last line: {phase.log_tail[-1]}")
    return lines


def _detected_limitations(
    cell: Cell, evidences: Mapping[str, Evidence], phases: Sequence[PhaseRun], recorded: Sequence[str]
) -> list[str]:
    out = list(cell.limitations) + list(recorded)
    for ev in evidences.values():
        command = ev.command or ""
        commands = " ".join([command, *(p.command or "" for p in phases)])
        if ev.traced_env.get("USE_DUMMY_MODEL") == "True" and not any(x.startswith("dummy model") for x in out):
            out.append("dummy model: proves construction and training mechanics only")
        if "reward_model.enable=False" in commands and not any(x.startswith("reward model disabled") for x in out):
            out.append("reward model disabled (reward.reward_model.enable=False)")
        if "enforce_eager=True" in commands and not any("enforce_eager" in x for x in out):
            out.append("rollout runs with enforce_eager=True")
        if ev.residual_noise:
            out.append(f"residual shutdown noise after the last step ({len(ev.residual_noise)} line(s)), accepted")
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class _Outcome:
    result: Result
    reason: str
    failure_class: str
    failed_phase: str | None


def _outcome(
    phases: Sequence[PhaseRun],
    evidences: Mapping[str, Evidence],
    checks: Sequence[Check],
    wrong_bridge: str | None,
    setup_failure: Mapping[str, Any] | None,
) -> _Outcome:
    failure_class, failed_phase, stage = _failure(phases, evidences)
    if wrong_bridge is not None:
        reason = f"wrong Bridge imported ({wrong_bridge}): not evidence either way"
        return _Outcome("Blocked", reason, "setup", failed_phase)
    if setup_failure:
        klass = str(setup_failure.get("class", "setup"))
        reason = f"{setup_failure.get('step', 'setup')}: {setup_failure.get('reason', 'failed')}"
        return _Outcome("Blocked" if klass == "setup" else "Fail", reason, klass, None)
    if all(p.status == "not_run" for p in phases):
        return _Outcome("Skipped", "the cell did not run", failure_class, failed_phase)
    if failure_class == "setup" or (failure_class in BLOCKING_AT_SETUP and stage == "setup"):
        reason = f"{failure_class} failure before Bridge model construction"
        return _Outcome("Blocked", reason, failure_class, failed_phase)
    if any(c.result == "Fail" for c in checks) or failure_class != "none":
        return _Outcome("Fail", "", failure_class, failed_phase)
    return _Outcome("Pass", "", failure_class, failed_phase)


def _headline(cell: Cell, out: _Outcome, checks: Sequence[Check], evidences: Mapping[str, Evidence]) -> str:
    model = cell.model + (" (dummy)" if cell.dummy_config is not None else "")
    what = f"Level {cell.level} ({cell.variant}) of {model} through verl's Megatron PPO"
    if out.result == "Pass":
        return f"Pass - {what}"
    if out.result == "Skipped":
        return f"Skipped - {out.reason}"
    cause = out.reason or (f"{out.failure_class} in phase {out.failed_phase}" if out.failed_phase else "checks failed")
    first_exc = next((ev.exception for ev in evidences.values() if ev.exception), None)
    if first_exc:
        cause += f": {first_exc['type']}: {first_exc['message'][:160]}".rstrip(": ")
    elif out.result == "Fail":
        failing = [c for c in checks if c.result == "Fail"]
        if failing:
            cause += f" ({failing[0].name}: {failing[0].detail})"
    return f"{out.result} - {what}: {cause}"


def _deliverables(
    cell: Cell, phases: Sequence[PhaseRun], checks: Sequence[Check], out: _Outcome, log_capture: str
) -> list[Deliverable]:
    """The skill's five deliverables, from the checks."""
    by_name = {c.name: c for c in checks}
    ran = [p for p in phases if p.status != "not_run"]
    run_checks = [by_name[n] for n in ("steps_completed", "exit_zero", "vanilla_mbridge_false") if n in by_name]
    run_ok = bool(ran) and all(c.result == "Pass" for c in run_checks)
    variant_checks = [
        c for c in checks if c.name in ("saves", "resume", "no_nan", "grad_norm_nonzero", "learning_signal")
    ]
    if cell.level == 0:
        variants = Deliverable("Requested variants", "Not requested", "Level 0 only")
    elif variant_checks:
        passed = all(c.result == "Pass" for c in variant_checks)
        detail = "; ".join(f"{c.name}: {c.detail}" for c in variant_checks)
        variants = Deliverable("Requested variants", "Pass" if passed else "Fail", detail)
    else:
        variants = Deliverable("Requested variants", "Pass" if run_ok else "Fail", f"{cell.variant} ran")
    tests = by_name.get("bridge_tests") or Check("bridge_tests", "Skipped", "not requested for this cell")
    imported = by_name.get("local_bridge_import") or Check("local_bridge_import", "Skipped", "not checked")
    backend: Result = "Pass" if run_ok else ("Skipped" if not ran else "Fail")
    logs_ok = bool(ran) and all(p.log for p in ran)
    out_list = [
        Deliverable("Bridge-side checks", tests.result, tests.detail),
        Deliverable("Local Bridge import in verl", imported.result, imported.detail),
        Deliverable(
            "verl Megatron backend run",
            backend,
            f"{cell.variant}: " + "; ".join(c.detail for c in run_checks[:2]),
        ),
        variants,
        Deliverable("Log capture", "Pass" if logs_ok else "Fail", log_capture or ", ".join(p.log for p in ran)),
    ]
    if out.result == "Blocked":
        out_list = [d if d.result != "Fail" else Deliverable(d.name, "Blocked", d.detail) for d in out_list]
    return out_list


def _follow_ups(cell: Cell, out: _Outcome, evidences: Mapping[str, Evidence], checks: Sequence[Check]) -> list[str]:
    if out.result == "Blocked":
        fix = TRIAGE.get(out.failure_class, "fix the environment")
        return [f"{fix}; then rerun with `/verl-e2e level={cell.level}`"]
    if out.result != "Fail":
        return ["none"]
    hint = next((ev.hint for ev in evidences.values() if ev.hint), None)
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
) -> Verdict:
    """Decide a cell from its phases' records and evidence (and a baseline run for Level 5)."""
    provenance = provenance or {}
    import_check, wrong = bridge_import(provenance, list(evidences.values()))
    builders = {
        "bridge_tests": lambda: _bridge_tests(bridge_tests),
        "local_bridge_import": lambda: import_check,
        "vanilla_mbridge_false": lambda: _vanilla(evidences),
        "steps_completed": lambda: _steps(cell, evidences),
        "exit_zero": lambda: _exit(phases),
        "saves": lambda: _saves(cell, evidences, checkpoints),
        "resume": lambda: _resume(cell, evidences, checkpoints),
        "no_nan": lambda: _no_nan(evidences),
        "grad_norm_nonzero": lambda: _grad_norm(evidences),
        "learning_signal": lambda: learning_signal(evidences, baseline),
    }
    checks = [builders[name]() for name in cell.checks if name in builders]
    out = _outcome(phases, evidences, checks, import_check.detail if wrong else None, provenance.get("setup_failure"))
    command = next((p.command for p in phases if p.command), None) or next(
        (ev.command for ev in evidences.values() if ev.command), None
    )
    durations = [p.duration_s for p in phases if p.duration_s is not None]
    return Verdict(
        cell_id=cell.id,
        level=cell.level,
        variant=cell.variant,
        family=cell.family,
        model=cell.model,
        result=out.result,
        headline=_headline(cell, out, checks, evidences),
        requested=f"Level {cell.level} ({cell.variant})",
        deliverables=_deliverables(cell, phases, checks, out, log_capture),
        checks=checks,
        key_lines=_key_lines(evidences, phases),
        limitations=_detected_limitations(cell, evidences, phases, provenance.get("limitations", [])),
        follow_ups=_follow_ups(cell, out, evidences, checks),
        failure_class=out.failure_class,
        failed_phase=out.failed_phase,
        duration_s=sum(durations) if durations else None,
        repos={k: provenance[k] for k in ("bridge", "verl", "image") if k in provenance},
        command=command,
        log_capture=log_capture,
    )


def _repo_line(info: Mapping[str, Any] | None) -> str:
    if not info:
        return "not recorded"
    dirty = info.get("dirty") or []
    return f"{info.get('commit', '?')}" + (f" plus dirty files: {', '.join(dirty[:10])}" if dirty else " (clean)")


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
        f"- Command: {v.command or 'not recorded'}",
        f"- Key lines: {'; '.join(v.key_lines) or 'none'}",
        "Limitations:",
        *(f"- {x}" for x in v.limitations or ["none"]),
        "Follow-ups:",
        *(f"- {x}" for x in v.follow_ups),
    ]
    return "\n".join(lines) + "\n"


def verdict_from_json(data: Mapping[str, Any]) -> Verdict:
    """Inverse of `Verdict.to_json` (verdict.json in a run dir)."""
    fields = dict(data)
    fields["deliverables"] = [Deliverable(**d) for d in data.get("deliverables", [])]
    fields["checks"] = [Check(**c) for c in data.get("checks", [])]
    return Verdict(**fields)
