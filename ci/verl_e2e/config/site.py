"""A site's settings: one table, validated once, remembered by the installer.

A Megatron-Bridge repository that installs verl-e2e sets these once (`tools/install_callers.py`,
which writes them into the caller workflows and remembers them in `.github/verl-e2e-site.json`, so
a re-run keeps what it is not told to change, and a typo is refused before anything is written).
README's "Site settings" table lists them; a test keeps it in step with this one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import UsageError

LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# a repository or organisation variable, written in: the workflow reads it when it runs
VARIABLE = re.compile(r"\$\{\{ *vars\.[A-Za-z_][A-Za-z0-9_]{0,99} *\}\}")
SECRET_REF = re.compile(r"\$\{\{ *secrets\.([A-Za-z_][A-Za-z0-9_]{0,99}) *\}\}")
# settings a site may keep in a variable (`${{ vars.NAME }}`), as Bridge keeps its runner labels
FROM_VARIABLE = frozenset(
    {"runners", "image_runner", "warmup_runner", "image", "image_repository", "base_image", "cache_root", "gpu_budget"}
)
SECRET = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")
SHA = re.compile(r"[0-9a-f]{40}")
IMAGE_REPOSITORY = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+")
# a Docker reference: [registry[:port]/]path[:tag][@sha256:digest]
WORKFLOW_FLAGS = frozenset(
    {"--bridge", "--out", "--image", "--cache", "--cache-layout", "--cell-id", "--backend", "--verl", "--matrix"}
)
IMAGE = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_.-]{1,128})?(@sha256:[0-9a-f]{64})?")


@dataclass(frozen=True)
class Setting:
    key: str  # the installer's placeholder name and the remembered file's key
    flag: str
    default: str
    help: str


SETTINGS = (
    Setting("runners", "--runners", "",
            'GPU runner labels per GPU count, JSON: {"1": [...], "2": [...], "4": [...], "8": [...]}'),
    Setting("image_runner", "--image-runner", '["self-hosted", "linux", "x64", "docker"]',
            "labels of the runner that builds the image (JSON list; needs a Docker engine)"),
    Setting("image", "--image", "", "a fixed image instead of building or reusing one"),
    Setting("image_repository", "--image-repository", "",
            "registry repository the image is pushed to and pulled from (how it reaches the GPU hosts)"),
    Setting("base_image", "--base-image", "",
            "the image build's base instead of matrix.yaml's, e.g. a registry mirror's copy of it"),
    Setting("registry_secret", "--registry-secret", "VERL_E2E_REGISTRY_TOKEN",
            "name of the secret holding the registry token (passed to the workflow as registry_token)"),
    Setting("cache_root", "--cache-root", "/var/cache/verl-e2e",
            "the GPU runners' cache of models and datasets"),
    Setting("cache_layout", "--cache-layout", "verl-e2e",
            "verl-e2e, or verl-ci for the layout verl's/Bridge's CI runners already have"),
    Setting("hf_token_secret", "--hf-token-secret", "HF_TOKEN",
            "name of the secret with a Hugging Face token, for the cache warm-up of gated models"),
    Setting("warmup_runner", "--warmup-runner", '["self-hosted", "linux", "x64", "gpu-1"]',
            "labels of the runner whose cache the scheduled warm-up fills (JSON list)"),
    Setting("run_cell_args", "--run-cell-args", "",
            "extra `verl-e2e run-cell` flags, e.g. --ulimit memlock=default"),
    Setting("verl_ref", "--verl-ref", "", "the site's verl pin (full SHA), not matrix.yaml's"),
    Setting("base_runs", "--base-runs", "cache",
            "a failed cell on the merge base: off, cache or auto (run it once)"),
    Setting("same_repo_prs", "--same-repo-prs", "false",
            "pull_request events from the repository's own branches run cells too (forks never do)"),
    Setting("gpu_budget", "--gpu-budget", "",
            "GPU-minutes an automatic plan may spend per push (0: no limit; default matrix.yaml's, 240)"),
)  # fmt: skip
BY_KEY = {s.key: s for s in SETTINGS}


def labels(value: str, what: str) -> list[str]:
    """A JSON list of runner labels that picks GPU machines, not any self-hosted runner."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, list) or not parsed or not all(isinstance(x, str) and LABEL.fullmatch(x) for x in parsed):
        raise UsageError(f'{what} {value[:80]!r}: expected a JSON list of runner labels, e.g. ["self-hosted", "gpu-2"]')
    if set(parsed) <= {"self-hosted", "linux", "x64", "X64", "Linux"}:
        raise UsageError(
            f"{what} {value[:80]!r}: these labels match every self-hosted runner; add the label only the "
            'intended machines have, e.g. ["self-hosted", "gpu-2"]'
        )
    return parsed


def runners(value: str) -> dict[int, list[str]]:
    """{"2": [...], "4": [...]} -> {2: [...], 4: [...]} (GPU count -> labels)."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        raise UsageError(f'--runners {value[:80]!r}: expected JSON such as {{"2": ["self-hosted", "gpu-2"]}}')
    out: dict[int, list[str]] = {}
    for count, labs in parsed.items():
        if not str(count).isdigit() or int(count) < 1:
            raise UsageError(f"--runners: {count!r} is not a GPU count; keys are 1, 2, 4, 8, ...")
        out[int(count)] = labels(json.dumps(labs), f"--runners {count}")
    return dict(sorted(out.items()))


def check(key: str, value: str) -> str:
    """Validate one setting's value; returns it (a secret written `${{ secrets.NAME }}` as its NAME).

    A `${{ vars.NAME }}` value is accepted where FROM_VARIABLE allows it: the variable's content is
    only known when the workflow runs, where the plan checks runner labels and the budget again."""
    if key in FROM_VARIABLE and VARIABLE.fullmatch(value):
        return value
    named = SECRET_REF.fullmatch(value)
    if key in ("registry_secret", "hf_token_secret") and named:
        value = named.group(1)
    if key in ("image_runner", "warmup_runner"):
        labels(value, BY_KEY[key].flag)
    elif key == "runners" and value:
        fits(runners(value))
    elif key in ("registry_secret", "hf_token_secret") and not SECRET.fullmatch(value):
        raise UsageError(f"{BY_KEY[key].flag} {value!r}: expected a secret name such as VERL_E2E_REGISTRY_TOKEN")
    elif key == "verl_ref" and value:
        commit(value, "--verl-ref")
    elif key == "image_repository" and value and not IMAGE_REPOSITORY.fullmatch(value):
        raise UsageError(f"--image-repository {value!r}: expected a registry repository, e.g. ghcr.io/org/verl-e2e")
    elif key == "cache_layout" and value not in ("verl-e2e", "verl-ci"):
        raise UsageError(f"--cache-layout {value!r}: expected verl-e2e or verl-ci")
    elif key == "base_runs" and value not in ("off", "cache", "auto"):
        raise UsageError(f"--base-runs {value!r}: expected off, cache or auto")
    elif key == "same_repo_prs" and value not in ("true", "false"):
        raise UsageError(f"--same-repo-prs {value!r}: expected true or false")
    elif key == "image" and value and not IMAGE.fullmatch(value):
        raise UsageError(f"--image {value[:80]!r}: expected an image reference, e.g. ghcr.io/org/verl-e2e:TAG")
    elif key == "cache_root" and not (value.startswith("/") and "\n" not in value and ".." not in value.split("/")):
        raise UsageError(f"--cache-root {value[:80]!r}: expected an absolute path, e.g. /var/cache/verl-e2e")
    elif key == "run_cell_args" and value:
        run_cell_args(value)
    elif key == "gpu_budget" and value and not value.isdigit():
        raise UsageError(f"--gpu-budget {value[:80]!r}: expected whole GPU-minutes (e.g. 240; 0: no limit)")
    elif key == "base_image" and value and not IMAGE.fullmatch(value):
        raise UsageError(
            f"--base-image {value[:80]!r}: expected an image reference, e.g. mirror.example.com/verlai/verl:TAG"
        )
    return value


def fits(counts: dict[int, list[str]]) -> None:
    """Every variant of the shipped matrix needs a runner with at least its GPU count."""
    need = sorted({v.gpus for lvl in load_matrix().levels.values() for v in lvl.variants if not v.scheduled})
    missing = [n for n in need if n > max(counts)]
    if missing:
        raise UsageError(
            f"--runners: the largest runner has {max(counts)} GPU(s), but cells need {', '.join(map(str, missing))}; "
            f"add labels for {max(missing)} GPUs (cells run on the smallest runner with enough GPUs)"
        )


def run_cell_args(value: str) -> list[str]:
    """Extra run-cell flags: none that names what the workflow itself decides (the cell, Bridge, run
    dir, image, cache, backend). The installer also parses them with run-cell's own parser."""
    words = value.split()
    named = [w.split("=", 1)[0] for w in words if w.startswith("--")]
    taken = sorted(set(named) & WORKFLOW_FLAGS)
    if taken:
        raise UsageError(f"--run-cell-args: {', '.join(taken)} is set by the workflow itself; leave it out")
    if words and not words[0].startswith("--"):
        raise UsageError(f"--run-cell-args {value[:80]!r}: expected run-cell flags such as --ulimit memlock=default")
    return words


def commit(value: str, flag: str) -> str:
    if not SHA.fullmatch(value) or set(value) == {"0"}:
        raise UsageError(f"{flag} {value!r}: expected a full 40-character commit SHA (tags and branches can move)")
    return value


def merge(remembered: dict[str, Any], given: dict[str, str | None]) -> dict[str, str]:
    """Defaults < what the last install remembered < what this run was given; every value checked."""
    out = {s.key: s.default for s in SETTINGS}
    out |= {k: str(v) for k, v in remembered.items() if k in BY_KEY}
    out |= {k: v for k, v in given.items() if v is not None}
    return {k: check(k, v) for k, v in out.items()}


def changes(before: dict[str, Any], after: dict[str, str]) -> list[str]:
    """What an install changes against the remembered settings, one line per setting."""
    return [
        f"{key}: {str(before.get(key, BY_KEY[key].default))!r} -> {after[key]!r}"
        for key in after
        if key in BY_KEY and str(before.get(key, BY_KEY[key].default)) != after[key]
    ]
