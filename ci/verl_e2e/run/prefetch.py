"""Runner cache warm-up: download every model, dummy-model config, the reward model and raw GSM8K once.

Cells run with the hub switched off (HF_HUB_OFFLINE=1), so Ray workers never race a download: what a
cell needs must be in the runner's cache first. Layout (the container sees it under
defaults.container_paths):

    <cache>/models/<org>/<name>/          full checkpoints (families without a dummy config)
    <cache>/models/<org>/<name>/config.json   only the config, for families run as dummy models
    <cache>/models/<reward model>/        the wrapper's reward model
    <cache>/datasets/gsm8k-raw/           openai/gsm8k, converted to parquet by verl's own
    (with --cache-layout verl-ci, the layout verl's own CI runners have: datasets/ is hf_data/ and
    the raw copy is hf_data/gsm8k, see cachelayout.py)
                                          preprocessing on the first cell (offline)
    <cache>/prefetch.json                 what is there and when it was fetched

Downloads use huggingface_hub (`pip install 'verl-e2e[prefetch]'`); a token for gated models is read
from the variable named by --token-env, on the host only (it never reaches a cell's container).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from verl_e2e.config.matrix import Matrix, ModelRef
from verl_e2e.errors import UsageError, VerlE2EError, did_you_mean
from verl_e2e.run.cachelayout import layout

WEIGHTS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.py", "*.tiktoken", "*.jinja"]
GSM8K = "openai/gsm8k"


class PrefetchError(VerlE2EError):
    exit_code = 1


@dataclass(frozen=True)
class Download:
    repo_id: str
    repo_type: str  # model | dataset
    local_dir: str
    allow_patterns: list[str]
    why: str


def _model(ref: ModelRef, models: Path, why: str) -> Download:
    patterns = ["config.json"] if ref.dummy is not None else WEIGHTS
    kind = "config only (dummy model)" if ref.dummy is not None else "checkpoint"
    return Download(ref.model, "model", str(models / ref.model), patterns, f"{why}: {kind}")


def plan_downloads(
    matrix: Matrix, families: Sequence[str], cache: Path, layout_name: str = "verl-e2e"
) -> list[Download]:
    """Every download the named families (all when empty) need, without duplicates, in the site's layout."""
    lay = layout(layout_name)
    for name in families:
        if name not in matrix.families:
            raise UsageError(f"prefetch: --family {name}: unknown family{did_you_mean(name, matrix.families)}")
    chosen = list(families) or list(matrix.families)
    out: dict[str, Download] = {}
    for name in chosen:
        family = matrix.families[name]
        for ref in (family.model, family.moe_model, family.mtp_model):
            if ref is None:
                continue
            d = _model(ref, cache / lay.models, f"family {name}")
            previous = out.get(d.repo_id)
            if previous is None or len(d.allow_patterns) > len(previous.allow_patterns):
                out[d.repo_id] = d  # a full checkpoint wins over a config-only download of the same repo
    if matrix.defaults.reward_model:
        rm = matrix.defaults.reward_model
        out[rm] = Download(rm, "model", str(cache / lay.models / rm), WEIGHTS, "the wrapper's reward model")
    out[GSM8K] = Download(
        GSM8K,
        "dataset",
        str(cache / lay.datasets / lay.gsm8k_raw),
        ["main/*", "*.json"],
        "GSM8K, made into parquet by verl's preprocessing on the first cell",
    )
    return list(out.values())


def _hub_fetch() -> Callable[..., Any]:
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415 - optional: only prefetch needs it
    except ImportError:
        raise UsageError("prefetch needs huggingface_hub on this host: pip install 'verl-e2e[prefetch]'") from None
    return snapshot_download


def run_downloads(
    downloads: Sequence[Download],
    cache: Path,
    *,
    token: str | None = None,
    fetch: Callable[..., Any] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Download in order, report progress, write <cache>/prefetch.json; every failure is listed at the end."""
    fetch = fetch or _hub_fetch()
    done, failed = [], []
    for i, d in enumerate(downloads, start=1):
        started = time.time()
        say(f"[{i}/{len(downloads)}] {d.repo_id} ({d.why})")
        try:
            fetch(
                d.repo_id,
                repo_type=d.repo_type,
                local_dir=d.local_dir,
                allow_patterns=d.allow_patterns,
                token=token,
            )
            done.append(asdict(d) | {"seconds": round(time.time() - started, 1)})
        except Exception as exc:
            message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            failed.append(asdict(d) | {"error": f"{type(exc).__name__}: {message}"})
            say(f"    failed: {type(exc).__name__}: {message}")
    manifest = {
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "done": done,
        "failed": failed,
    }
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "prefetch.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if failed:
        names = ", ".join(f["repo_id"] for f in failed)
        raise PrefetchError(
            f"prefetch: {len(failed)} of {len(downloads)} download(s) failed ({names}); see "
            f"{cache / 'prefetch.json'}; gated models need --token-env with a token that accepted their terms"
        )
    return manifest
