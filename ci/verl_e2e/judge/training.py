"""Did the run train anything, on the model the rollout engine ran? Three checks no level can skip.

A PPO step that completes proves the machinery, not the training: an adapter whose output is zeroed
gets no gradient, a step size that never reaches the optimizer leaves the weights where they were, and
a Megatron->HF export that swaps two tensors hands the rollout engine a different model, all without an
exception. So every cell is judged on

* `update_nonzero`: each optimizer that stepped got a gradient and moved its weights (the probe's
  `updates.json`, one record per optimizer step; verl's `actor/grad_norm` where there is no record);
* `rollout_matches_trainer`: the rollout engine's token log-probs agree with the trainer's own
  recomputation (verl's `rollout_corr/k3_kl`, a per-token KL estimate between the two), within what
  bf16 kernels explain; the limits are calibrated on real runs (docs/real-runs.md);
* `learning_signal` (Level 5): the batch reward's trend over the run, tested against the run's own
  step-to-step noise.

Pure: records in, a `Check` out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verl_e2e.judge.checktypes import SCORE_KEYS, Check
from verl_e2e.judge.evidence import Evidence

# rollout_corr/k3_kl above which the rollout engine is taken to run other weights than the trainer, and
# verl's training/rollout_actor_probs_pearson_corr below which the same conclusion holds. Calibration
# (docs/real-runs.md), per policy:
# * near-uniform (random tiny dense models, step-1 entropy 6.4-6.9 nats): clean KL 5.6e-4 to 7.5e-4 and
#   correlation 0.99995 or more (8 runs, 10 steps); a mapping that left two MLP weights at their initial values
#   gave KL 9.7e-3 and correlation 0.983. KL stays small on near-uniform probabilities whatever the
#   weights, so the scale-free correlation decides there: floor 0.995.
# * trained weights (SmolLM2-135M, entropy 1.9 falling to 0.04 as Level 5 learns): clean KL 6.1e-4 to
#   4.45e-3 and correlation down to 0.9872 (6 runs, 76 steps); the correlation of probabilities
#   concentrated near 0 and 1 falls as the policy sharpens, so it only bounds gross mismatches (0.95).
#   Two swapped export weights: KL 7.55, correlation 0.17. KL limit 1.5e-2, over 3x the clean maximum.
# * a tiny random MoE: KL to ~5e-3, correlation 0.956 (2 runs: routing flips between vLLM and
#   Megatron-Core); no MoE mismatch seen yet.
K3_KL_LIMIT = {"dense": 5e-3, "trained dense": 1.5e-2, "moe": 2.5e-2}
CORR_FLOOR = {"dense": 0.995, "trained dense": 0.95, "moe": 0.9}
# the first step's actor/entropy (nats) below which a dense policy is a trained one, not near-uniform
TRAINED_ENTROPY = 3.0
CORR_KEY = "training/rollout_actor_probs_pearson_corr"
# a failed check with no exception behind it names the failure class (the first one listed wins)
CHECK_CLASS = {
    "update_nonzero": "no_update",
    "rollout_matches_trainer": "rollout_weights",
    "learning_signal": "no_learning",
    "mtp_trained": "mtp_untrained",
}


def failed_in_order(checks: Sequence[Check]) -> list[Check]:
    """The failed checks, the training checks in CHECK_CLASS's order (a weight that never moved explains a
    flat reward, not the other way round), after any other failed check."""
    rank = {name: i for i, name in enumerate(CHECK_CLASS)}
    return sorted((c for c in checks if c.result == "Fail"), key=lambda c: rank.get(c.name, -1))


def failed_class(checks: Sequence[Check]) -> str:
    """The failure class a failed training check names when no exception does ("none" without one); a
    failed resume check (no resume from the save, or not from its weights) is a load failure."""
    failed = failed_in_order(checks)
    fallback = "checkpoint_load" if any(c.name == "resume" for c in failed) else "none"
    return next((CHECK_CLASS[c.name] for c in failed if c.name in CHECK_CLASS), fallback)


ADVICE = {
    "no_update": "nothing trained moved: check that gradients reach the adapters (their forward output and graph) "
    "and that the optimizer's step size reaches them (updates.json has every step's norms)",
    "rollout_weights": "the weights sent to the rollout differ from the trained ones: check the Megatron->HF export "
    "mappings this PR changed (names, split order, transposes) against the HF model",
    "no_learning": "the reward did not rise beyond its noise: compare with the merge base's Level 5 run; check "
    "the loss, optimizer and adapter code this PR changed",
    "mtp_untrained": "the MTP layers gave no finite loss: check that the provider still builds them "
    "(mtp_num_layers from the HF config) and that the bridge maps the HF checkpoint's MTP weights",
}
MIN_T = 2.0  # one-sided, about p < 0.03 at the 20+ points a Level 5 run logs
MIN_POINTS = 8


# ------------------------------------------------------------------------------------------- updates


@dataclass(frozen=True)
class Optimizer:
    """One optimizer's steps in one process (the probe's records, grouped)."""

    phase: str
    pid: int
    index: int
    kind: str
    steps: int
    elements: int
    lr: float
    grad: float  # the largest gradient norm over its steps
    moved: float  # the largest update norm (or count of changed tensors, when the weights were not copied)
    weight: float

    def label(self) -> str:
        return f"optimizer {self.index} ({self.kind}, {self.elements:,} trained elements) in phase {self.phase}"


def optimizers(updates: Mapping[str, Any] | None) -> list[Optimizer]:
    """The probe's step records (`updates.json`, untrusted) grouped per optimizer; bad records dropped."""
    groups: dict[tuple[str, int, int], list[Mapping[str, Any]]] = {}
    for rec in (updates or {}).get("steps") or []:
        if isinstance(rec, Mapping) and all(isinstance(rec.get(k), int) for k in ("pid", "optimizer", "step")):
            groups.setdefault((str(rec.get("phase", "")), rec["pid"], rec["optimizer"]), []).append(rec)
    out = []
    for (phase, pid, index), recs in sorted(groups.items()):
        moved = [_num(r.get("update_norm", r.get("changed_tensors"))) for r in recs]
        out.append(
            Optimizer(
                phase=phase,
                pid=pid,
                index=index,
                kind=str(recs[0].get("class", "optimizer"))[:40],
                steps=len(recs),
                elements=int(_num(recs[0].get("elements"))),
                lr=max(_num(r.get("lr")) for r in recs),
                grad=max(_num(r.get("grad_norm")) for r in recs),
                moved=max(moved),
                weight=max(_num(r.get("weight_norm")) for r in recs),
            )
        )
    return out


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def update_check(updates: Mapping[str, Any] | None, evidences: Mapping[str, Evidence]) -> Check:
    """Every optimizer that stepped got a gradient and moved its weights."""
    found = [o for o in optimizers(updates) if o.elements > 0]
    if found:
        frozen = [o for o in found if o.grad == 0.0]
        still = [o for o in found if o.grad > 0.0 and o.moved == 0.0]
        if frozen:
            o = frozen[0]
            return Check(
                "update_nonzero",
                "Fail",
                f"no gradient reached the trained weights: {o.label()} stepped {o.steps} time(s) with gradient norm 0",
            )
        if still:
            o = still[0]
            return Check(
                "update_nonzero",
                "Fail",
                f"the trained weights did not move: {o.label()} had gradients but {o.steps} step(s) changed "
                f"nothing (largest learning rate {o.lr:g})",
            )
        steps = sum(o.steps for o in found)
        largest = max((o.moved / o.weight for o in found if o.weight > 0), default=0.0)
        moved = f"largest relative update {largest:.2e}" if largest else "every one changed its weights"
        return Check("update_nonzero", "Pass", f"{len(found)} optimizer(s), {steps} step(s): gradients and {moved}")
    if any(ev.zero_grad_norm for ev in evidences.values()):
        return Check("update_nonzero", "Fail", "no gradient reached the trained weights: actor/grad_norm is 0")
    points = sum(len(ev.series.get("actor/grad_norm", [])) for ev in evidences.values())
    if points:
        return Check("update_nonzero", "Pass", f"actor/grad_norm nonzero over {points} step(s) (no optimizer records)")
    return Check("update_nonzero", "Skipped", "no optimizer step was recorded and no actor/grad_norm was logged")


# -------------------------------------------------------------------------------------------- rollout


def rollout_check(evidences: Mapping[str, Evidence], moe: bool = False) -> Check:
    """The rollout engine ran the weights the trainer has (per-token KL between their log-probs)."""
    kind = "moe" if moe else ("trained dense" if _trained(evidences) else "dense")
    limit = K3_KL_LIMIT[kind]
    points = [(phase, s, v) for phase, ev in evidences.items() for s, v in ev.series.get("rollout_corr/k3_kl", [])]
    finite = [(p, s, v) for p, s, v in points if math.isfinite(v)]
    if not finite:
        return Check(
            "rollout_matches_trainer", "Skipped", "verl logged no rollout-vs-trainer figures (rollout_corr/k3_kl)"
        )
    phase, step, worst = max(finite, key=lambda x: x[2])
    corr = [v for ev in evidences.values() for _, v in ev.series.get(CORR_KEY, []) if math.isfinite(v)]
    extra = f", log-prob correlation down to {min(corr):.4f}" if corr else ""
    if worst > limit:
        return Check(
            "rollout_matches_trainer",
            "Fail",
            f"the rollout engine ran other weights than the trainer: rollout-vs-trainer KL {worst:.3g} at step "
            f"{int(step)} ({phase}), above the {limit:g} numerics allow for a {kind} model{extra}",
        )
    if corr and min(corr) < CORR_FLOOR[kind]:
        return Check(
            "rollout_matches_trainer",
            "Fail",
            f"the rollout engine ran other weights than the trainer: rollout-vs-trainer log-prob correlation "
            f"{min(corr):.4f}, below the {CORR_FLOOR[kind]:g} numerics allow for a {kind} model "
            f"(KL at most {worst:.2g})",
        )
    return Check(
        "rollout_matches_trainer",
        "Pass",
        f"rollout-vs-trainer KL at most {worst:.2g} over {len(finite)} step(s) (limit {limit:g}, {kind}){extra}",
    )


def _trained(evidences: Mapping[str, Evidence]) -> bool:
    """The policy was a trained one at its first step (low entropy), not a random model's near-uniform one."""
    first = [
        min(series, key=lambda p: p[0])[1] for ev in evidences.values() if (series := ev.series.get("actor/entropy"))
    ]
    return bool(first) and all(math.isfinite(v) and v < TRAINED_ENTROPY for v in first)


# ------------------------------------------------------------------------------------ learning signal


@dataclass(frozen=True)
class Trend:
    """A least-squares line through (step, value) and how it compares to the scatter around it."""

    points: int
    start: float  # the fitted value at the first step: the run's own baseline
    end: float  # the fitted value at the last step
    slope: float
    noise: float  # residual standard deviation: the step-to-step noise
    t: float  # slope over its standard error

    @classmethod
    def fit(cls, series: Sequence[Sequence[float]]) -> Trend:
        xs = [float(p[0]) for p in series]
        ys = [float(p[1]) for p in series]
        n = len(xs)
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
        resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys, strict=True)]
        noise = math.sqrt(sum(r * r for r in resid) / (n - 2)) if n > 2 else 0.0
        se = noise / math.sqrt(sxx) if sxx and noise else 0.0
        t = slope / se if se else (math.inf if slope > 0 else 0.0)
        return cls(n, my + slope * (xs[0] - mx), my + slope * (xs[-1] - mx), slope, noise, t)


def learning_signal(evidences: Mapping[str, Evidence], baseline: Evidence | None = None) -> Check:
    """The reward rose over the run by more than its own noise explains (and, given one, kept up with a
    known-good baseline run); validation before and after is reported beside it."""
    ev = next(iter(evidences.values()), None)
    if ev is None:
        return Check("learning_signal", "Fail", "no log")
    if any(e.nan_or_inf_in_metrics for e in evidences.values()):
        broken = [m for e in evidences.values() for m in e.nan_metrics]
        return Check("learning_signal", "Fail", "no learning signal: NaN/Inf in " + ", ".join(broken[:3]))
    if any(e.zero_grad_norm for e in evidences.values()):
        return Check("learning_signal", "Fail", "no learning signal: actor/grad_norm stuck at 0")
    key = next((k for k in SCORE_KEYS if len(ev.series.get(k, [])) >= MIN_POINTS), None)
    if key is None and not any(e.step_lines for e in evidences.values()):  # never stepped: its verdict says why
        return Check("learning_signal", "Skipped", "no training step was logged, so there is no reward to follow")
    if key is None:
        return Check("learning_signal", "Fail", f"fewer than {MIN_POINTS} steps of reward/score metrics were logged")
    trend = Trend.fit(sorted(ev.series[key]))
    notes = [
        f"{key} {trend.start:.3f} -> {trend.end:.3f} over {trend.points} steps (baseline: the run's own fitted "
        f"start; slope {trend.slope:+.4f}/step, t={trend.t:.1f} against step-to-step noise {trend.noise:.3f})"
    ]
    ok = trend.t >= MIN_T and trend.slope > 0
    val = _validation(ev)
    if val:
        notes.append(val)
    if baseline is not None and len(baseline.series.get(key, [])) >= MIN_POINTS:
        base = Trend.fit(sorted(baseline.series[key]))
        tolerance = 2 * max(base.noise, trend.noise) / math.sqrt(max(1, trend.points // 3))
        notes.append(f"baseline run ends at {base.end:.3f} (tolerance {tolerance:.3f})")
        ok = ok and trend.end >= base.end - tolerance
    verdict = "learning-signal passed" if ok else f"no learning signal (needs t >= {MIN_T:g})"
    return Check("learning_signal", "Pass" if ok else "Fail", f"{verdict}: " + "; ".join(notes))


def _validation(ev: Evidence) -> str | None:
    first, last = ev.initial_validation, ev.final_validation
    if not first or not last:
        return None
    common = sorted(k for k in set(first) & set(last) if "reward" in k or "score" in k or "acc" in k)
    if not common:
        return None
    k = common[0]
    return f"validation {k} {first[k]:.3f} -> {last[k]:.3f}"


# -------------------------------------------------------------------------------------------- MTP


MTP_KEY = "actor/mtp_losses/"


def mtp_check(evidences: Mapping[str, Evidence]) -> Check:
    """Level 4's MTP cell trained its multi-token-prediction layers: verl logs `actor/mtp_losses/mtp_N_loss`
    for each MTP layer when they join the loss. Without this a provider that stops building them (or a
    bridge that drops their weights) would pass the cell on the main loss alone."""
    points = [(k, v) for ev in evidences.values() for k, pts in ev.series.items() if k.startswith(MTP_KEY)
              for _, v in pts]  # fmt: skip
    if not points:
        return Check("mtp_trained", "Fail", f"verl logged no {MTP_KEY}* metric: the MTP layers were not trained")
    bad = [k for k, v in points if not (math.isfinite(v) and v > 0)]
    if bad:
        return Check("mtp_trained", "Fail", f"MTP loss not finite and positive ({bad[0]}) in {len(bad)} point(s)")
    layers = sorted({k.removeprefix(MTP_KEY) for k, _ in points})
    return Check("mtp_trained", "Pass", f"MTP loss over {len(points)} point(s): {', '.join(layers)}")
