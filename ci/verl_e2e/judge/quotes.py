"""What a verdict quotes from the run: key lines, the limitations it carries, the command, the exception.

Pure helpers of `verdict.judge`, from the phases' records and evidence.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.rundir import PhaseRun
from verl_e2e.plan.cells import Cell


def key_lines(evidences: Mapping[str, Evidence], phases: Sequence[PhaseRun]) -> list[str]:
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


def detected_limitations(
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


def reproduce(phases: Sequence[PhaseRun]) -> str | None:
    """Shell lines that rerun the phases as they ran: working dir, the variables the cell set, args."""
    lines = []
    for phase in phases:
        if not phase.command:
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(phase.env.items()))
        prefix = f"cd {shlex.quote(phase.cwd)} && " if phase.cwd else ""
        lines.append(f"{prefix}{'env ' + env + ' ' if env else ''}{phase.command}")
    return " ; ".join(lines) or None


def first_exception(evidences: Mapping[str, Evidence], phase: str | None) -> str | None:
    ev = evidences.get(phase) if phase else next((e for e in evidences.values() if e.exception), None)
    if ev is None or ev.exception is None:
        return None
    return f"{ev.exception['type']}: {ev.exception['message'][:200]}".rstrip(": ")
