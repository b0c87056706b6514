"""The checks a cell's verdict is built from: one function per check, each from the run's records.

Pure: phases, evidence, provenance and the checkpoint listing in, a `Check` out. Which checks a cell
runs is data (`checks:` of its level in matrix.yaml); `build_checks` runs them in that order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl_e2e.judge import restore, training
from verl_e2e.judge.checktypes import SCORE_KEYS, Check
from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.rundir import PhaseRun
from verl_e2e.plan.cells import Cell

__all__ = ["SCORE_KEYS", "Check", "bridge_import", "build_checks"]


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
    """(check, wrong_bridge). Both the driver and a Ray worker must import the mounted checkout, and the
    driver's import of every Bridge module verl imports must have succeeded."""
    failure = provenance.get("setup_failure") or {}
    if failure.get("step") == "imports" and failure.get("class") != "setup":
        return Check("local_bridge_import", "Fail", str(failure.get("reason", "the import failed"))), False
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
        listed = (listing or {}).get(phase.name) or {}
        tracker = listed.get("tracker")
        # a step directory alone may be what a save left when it raised: it counts once the tracker,
        # written after a save completes, has reached it
        on_disk = [int(s) for s in listed.get("steps", []) if isinstance(tracker, int) and int(s) <= tracker]
        got = sorted(set((ev.saves if ev else []) + on_disk))
        notes.append(f"{phase.name}: saved {got or 'nothing'}, expected {want}")
        ok = ok and set(want) <= set(got)
    return Check("saves", "Pass" if ok else "Fail", "; ".join(notes) or "no save expected")


def _resume(
    cell: Cell, evidences: Mapping[str, Evidence], listing: Mapping[str, Any] | None, updates: Mapping[str, Any] | None
) -> Check:
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
    compared = restore.phases_to_compare(cell.phases)
    if compared and ok:  # a resume that found its checkpoint: did the trained weights come back with it?
        came_back, why = restore.restored(updates, *compared)
        ok = came_back is not False
        notes = [*notes, f"weights at resume: {why}"] if ok else [why, *notes]  # the finding first
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


def build_checks(
    cell: Cell,
    *,
    phases: Sequence[PhaseRun],
    evidences: Mapping[str, Evidence],
    import_check: Check,
    bridge_tests: Mapping[str, Any] | None,
    checkpoints: Mapping[str, Any] | None,
    baseline: Evidence | None,
    updates: Mapping[str, Any] | None = None,
    moe: bool = False,
) -> list[Check]:
    """The cell's checks, in the order its level lists them, then those every cell gets: NaN/Inf (when
    a metric went non-finite), a nonzero update of what is trained, and a rollout engine that ran the
    trained weights."""
    builders = {
        "bridge_tests": lambda: _bridge_tests(bridge_tests),
        "local_bridge_import": lambda: import_check,
        "vanilla_mbridge_false": lambda: _vanilla(evidences),
        "steps_completed": lambda: _steps(cell, evidences),
        "exit_zero": lambda: _exit(phases),
        "saves": lambda: _saves(cell, evidences, checkpoints),
        "resume": lambda: _resume(cell, evidences, checkpoints, updates),
        "no_nan": lambda: _no_nan(evidences),
        "grad_norm_nonzero": lambda: _grad_norm(evidences),
        "learning_signal": lambda: training.learning_signal(evidences, baseline),
        "update_nonzero": lambda: training.update_check(updates, evidences),
        "rollout_matches_trainer": lambda: training.rollout_check(evidences, moe),
        "mtp_trained": lambda: training.mtp_check(evidences),
    }
    names = list(cell.checks)
    if "no_nan" not in names and any(ev.nan_or_inf_in_metrics for ev in evidences.values()):
        names.append("no_nan")  # any level: a step with NaN/Inf losses is never a pass
    ran = any(ev.max_step is not None for ev in evidences.values())
    for always in ("update_nonzero", "rollout_matches_trainer"):
        if always not in names and ran:  # any level: a run that trained nothing, or trained another model
            names.append(always)
    return [builders[name]() for name in names if name in builders]
