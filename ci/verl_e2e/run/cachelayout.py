"""Where a runner keeps models, datasets and the HF home under its cache root: two layouts.

`verl-e2e` is this tool's own (models/, datasets/gsm8k-raw, hf/). `verl-ci` is the layout verl's and
Bridge's own CI runners already have under $HOME (models/<org>/<name>, models/hf_data/gsm8k for the
raw dataset, .cache/huggingface), so a runner that serves their CI works unchanged: `--cache-root
$HOME --cache-layout verl-ci`. The container always sees the same paths (/cache/models,
/cache/datasets, /cache/hf); only the host side and the raw dataset's name differ.

Of the HF home only its `hub/` is ever mounted: a `token` file (or `stored_tokens`) that `hf auth
login` left beside it must never be readable by PR code, whose logs may be public.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from verl_e2e.errors import UsageError


@dataclass(frozen=True)
class Layout:
    models: str
    datasets: str
    hf_home: str
    gsm8k_raw: str  # the raw openai/gsm8k copy, under `datasets`


LAYOUTS = {
    "verl-e2e": Layout(models="models", datasets="datasets", hf_home="hf", gsm8k_raw="gsm8k-raw"),
    "verl-ci": Layout(models="models", datasets="models/hf_data", hf_home=".cache/huggingface", gsm8k_raw="gsm8k"),
}


def layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise UsageError(f"--cache-layout {name}: expected one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


def host_paths(root: Path, name: str) -> dict[str, Path]:
    """models / datasets / hf_home on the host, for the container's cache mounts."""
    lay = layout(name)
    return {"models": root / lay.models, "datasets": root / lay.datasets, "hf_home": root / lay.hf_home}


def cell_env(name: str, container_datasets: str) -> dict[str, str]:
    """What the cell needs to know of the layout: where the raw GSM8K copy is, as the container sees it."""
    return {"VERL_E2E_GSM8K_RAW": f"{container_datasets}/{layout(name).gsm8k_raw}"}


def cache_mounts(cache: Mapping[str, Path], container_paths: Mapping[str, str]) -> list[tuple[str, str]]:
    """(host, container) read-only mounts of the caches; of the HF home only `hub/`, never its tokens."""
    out = []
    for name, path in sorted(cache.items()):
        target = container_paths.get(name)
        if target:
            hub = name == "hf_home"
            out.append((str(path / "hub" if hub else path), f"{target}/hub" if hub else target))
    return out
