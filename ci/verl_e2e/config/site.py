"""A site's settings: one table, validated once, remembered by the installer.

A Megatron-Bridge repository that installs verl-e2e sets these once (`tools/install_callers.py`,
which writes them into the caller workflows and remembers them in `.github/verl-e2e-site.json`, so
a re-run keeps what it is not told to change, and a typo is refused before anything is written).
docs/workflows.md ("Site settings") lists them; a test keeps that table in step with this one.

Bridge keeps its runner names and registry in repository variables (`vars.DEFAULT_RUNNER_PREFIX`,
`vars.DEFAULT_CONTAINER_REGISTRY`), so most values may be, or may embed, `${{ vars.NAME }}`: the
workflow reads the variable when it runs. Such a value is checked with a stand-in for the variable
here, and the plan checks the runner labels again once GitHub has filled them in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verl_e2e.config.matrix import load_matrix
from verl_e2e.errors import UsageError

LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# a repository or organisation variable, embedded in a value or the whole of it
EXPRESSION = re.compile(r"\$\{\{ *vars\.([A-Za-z_][A-Za-z0-9_]{0,99}) *\}\}")
VARIABLE = re.compile(r"\$\{\{ *vars\.[A-Za-z_][A-Za-z0-9_]{0,99} *\}\}")
SECRET_REF = re.compile(r"\$\{\{ *secrets\.([A-Za-z_][A-Za-z0-9_]{0,99}) *\}\}")
# settings that may be, or embed, a `${{ vars.NAME }}` (as Bridge keeps its runner names and registry)
FROM_VARIABLE = frozenset(
    {"runners", "image_runner", "warmup_runner", "image", "image_repository", "base_image", "registry",
     "cache_root", "gpu_budget"}
)  # fmt: skip
SECRET = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")
SHA = re.compile(r"[0-9a-f]{40}")
REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
REGISTRY = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*")
IMAGE_REPOSITORY = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+")
# a Docker reference: [registry[:port]/]path[:tag][@sha256:digest]
IMAGE = re.compile(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_.-]{1,128})?(@sha256:[0-9a-f]{64})?")
WORKFLOW_FLAGS = frozenset(
    {"--bridge", "--out", "--image", "--cache", "--cache-layout", "--cell-id", "--backend", "--verl", "--matrix"}
)
GENERIC = frozenset({"self-hosted", "linux", "x64", "X64", "Linux"})
GPUS = "{gpus}"  # in a --runners pattern: the GPU count of each runner
EMPTY = " is empty"  # what a caller passes for --runners when the variable holding them is unset
IMAGE_NAME = "verl-e2e"  # the image's name under --registry
RUNNERS_EXAMPLE = "--runners '${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}' or --runners '{\"2\": \"gpu-x2\", ...}'"


@dataclass(frozen=True)
class Setting:
    key: str  # the installer's placeholder name and the remembered file's key
    flag: str
    default: str
    help: str


SETTINGS = (
    Setting("runners", "--runners", "",
            "GPU runner labels per GPU count (required): a pattern with {gpus} such as "
            "'${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}', or JSON {\"2\": label or [labels], \"4\": ..., \"8\": ...}"),
    Setting("image_runner", "--image-runner", "",
            "the runner that builds the image (a label, a JSON list, may embed ${{ vars.NAME }}; needs a Docker "
            "engine; default: the smallest GPU runner)"),
    Setting("image", "--image", "", "a fixed image instead of building or reusing one"),
    Setting("registry", "--registry", "",
            "the container registry, e.g. '${{ vars.DEFAULT_CONTAINER_REGISTRY }}'; the image is pushed to "
            "REGISTRY/verl-e2e unless --image-repository says otherwise"),
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
    Setting("warmup_runner", "--warmup-runner", "",
            "the runner whose cache the weekly warm-up fills (a label or a JSON list; default: the smallest GPU "
            "runner)"),
    Setting("run_cell_args", "--run-cell-args", "",
            "extra `verl-e2e run-cell` flags, e.g. --ulimit memlock=default"),
    Setting("verl_ref", "--verl-ref", "", "the site's verl pin (full SHA), not matrix.yaml's"),
    Setting("base_runs", "--base-runs", "cache",
            "a failed cell on the merge base: off, cache or auto (run it once)"),
    Setting("same_repo_prs", "--same-repo-prs", "false",
            "pull_request events from the repository's own branches run cells too (forks never do)"),
    Setting("gpu_budget", "--gpu-budget", "",
            "GPU-minutes an automatic plan may spend per push (0: no limit; default matrix.yaml's, 240)"),
    Setting("replace_weekly", "--replace-weekly", "false",
            "install the scheduled full run and remove Bridge's verl-e2e-weekly.yml, which it replaces "
            "(without it no scheduled run is installed)"),
)  # fmt: skip
BY_KEY = {s.key: s for s in SETTINGS}
BOOLEAN = frozenset({"same_repo_prs", "replace_weekly"})
REQUIRED = {"runners": f"the GPU runners' labels, e.g. {RUNNERS_EXAMPLE}"}


def variables(value: str) -> list[str]:
    """The repository variables a value reads (`${{ vars.NAME }}`), in order."""
    return EXPRESSION.findall(value)


def _stand_in(value: str, what: str) -> str:
    """The value with each variable replaced by a stand-in, to check its shape; any other expression
    (`${{ github.event... }}`: text a PR author controls) is refused."""
    plain = EXPRESSION.sub("stand-in", value)
    if "${{" in plain:
        raise UsageError(f"{what} {value[:80]!r}: only repository variables may be read here (${{{{ vars.NAME }}}})")
    return plain


def labels(value: str, what: str) -> list[str]:
    """A runner's labels: a JSON list, or one label (plain or a JSON string); each may embed variables.

    A whole `${{ vars.NAME }}` is one label read from the variable, the way Bridge's workflows read
    `vars.DEFAULT_RUNNER_PREFIX` into `runs-on:`."""
    parsed: Any = value
    if value.startswith(("[", '"')):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
    parsed = [parsed] if isinstance(parsed, str) else parsed
    if not isinstance(parsed, list) or not parsed or not all(isinstance(x, str) for x in parsed):
        raise UsageError(
            f'{what} {value[:80]!r}: expected a runner label or a JSON list, e.g. ["self-hosted", "gpu-2"]'
        )
    for label in parsed:
        plain = _stand_in(label, what)
        if not LABEL.fullmatch(plain):
            raise UsageError(f"{what} {label[:80]!r}: not a runner label (letters, digits, _ . : -)")
        if plain[0] in "-." or plain[-1] in "-." or "--" in plain:
            raise UsageError(
                f"{what} {label[:80]!r}: a runner label with an empty part; was a repository variable empty "
                "when the workflow ran? Set it, or re-run the installer with the labels"
            )
    if set(parsed) <= GENERIC:
        raise UsageError(
            f"{what} {value[:80]!r}: these labels match every self-hosted runner; add the label only the "
            'intended machines have, e.g. ["self-hosted", "gpu-2"]'
        )
    return parsed


def gpu_counts() -> list[int]:
    """The GPU counts the shipped matrix's cells ask for (scheduled layouts included)."""
    return sorted({v.gpus for lvl in load_matrix().levels.values() for v in lvl.variants})


def runners(value: str) -> dict[int, list[str]]:
    """GPU count -> labels, from JSON {"2": "label" or [...], ...} or a pattern with {gpus}.

    The plan calls this with the value GitHub filled in; the installer with the value as written."""
    _stand_in(value, "--runners")
    if value.endswith(EMPTY):
        raise UsageError(f"--runners: {value}; set it (Settings -> Secrets and variables -> Actions -> Variables)")
    if GPUS in value and not value.lstrip().startswith("{"):
        return {n: labels(json.dumps(value.replace(GPUS, str(n))), f"--runners {n}") for n in gpu_counts()}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        if isinstance(parsed, str) or (parsed is None and not value.lstrip().startswith("{")):
            raise UsageError(
                f"--runners {value[:80]!r}: one label cannot serve every GPU count; give a pattern with {GPUS} "
                f"or one label per GPU count: {RUNNERS_EXAMPLE}"
            )
        raise UsageError(f'--runners {value[:80]!r}: expected JSON such as {{"2": ["self-hosted", "gpu-2"]}}')
    out: dict[int, list[str]] = {}
    for count, labs in parsed.items():
        if not str(count).isdigit() or int(count) < 1:
            raise UsageError(f"--runners: {count!r} is not a GPU count; keys are 1, 2, 4, 8, ...")
        out[int(count)] = labels(json.dumps(labs), f"--runners {count}")
    return dict(sorted(out.items()))


def check(key: str, value: str) -> str:
    """Validate one setting's value; returns it (a secret written `${{ secrets.NAME }}` as its NAME).

    A value that is or embeds `${{ vars.NAME }}` is accepted where FROM_VARIABLE allows it: the
    variable's content is only known when the workflow runs, where the plan checks runner labels
    and the budget again."""
    if key in FROM_VARIABLE and VARIABLE.fullmatch(value) and key not in ("image_runner", "warmup_runner"):
        return value
    named = SECRET_REF.fullmatch(value)
    if key in ("registry_secret", "hf_token_secret") and named:
        value = named.group(1)
    flag = BY_KEY[key].flag
    secret = key in ("registry_secret", "hf_token_secret")
    if key not in FROM_VARIABLE and not secret and "${{" in value:
        raise UsageError(f"{flag} {value[:80]!r}: this setting cannot come from a variable or expression")
    if key in ("image_runner", "warmup_runner") and value:
        labels(value, flag)
    elif key == "runners" and value:
        counts = runners(value)
        fits(counts)
    elif secret and not SECRET.fullmatch(value):
        raise UsageError(f"{flag} {value!r}: expected a secret name such as HF_TOKEN, or ${{{{ secrets.HF_TOKEN }}}}")
    elif key == "verl_ref" and value:
        commit(value, "--verl-ref")
    elif key in ("cache_layout", "base_runs", "same_repo_prs", "replace_weekly"):
        choice(key, value)
    elif key == "run_cell_args" and value:
        run_cell_args(value)
    elif key == "gpu_budget" and value and not value.isdigit():
        raise UsageError(f"--gpu-budget {value[:80]!r}: expected whole GPU-minutes (e.g. 240; 0: no limit)")
    elif key in SHAPES and value:
        shape(key, value)
    return value


CHOICES = {"cache_layout": ("verl-e2e", "verl-ci"), "base_runs": ("off", "cache", "auto"),
           "same_repo_prs": ("true", "false"), "replace_weekly": ("true", "false")}  # fmt: skip
SHAPES = {
    "image": (IMAGE, "an image reference, e.g. ghcr.io/org/verl-e2e:TAG"),
    "base_image": (IMAGE, "an image reference, e.g. mirror.example.com/verlai/verl:TAG"),
    "image_repository": (IMAGE_REPOSITORY, "a registry repository, e.g. ghcr.io/org/verl-e2e"),
    "registry": (REGISTRY, "a registry such as ghcr.io/org or '${{ vars.DEFAULT_CONTAINER_REGISTRY }}'"),
    "cache_root": (re.compile(r"/[^\n]*"), "an absolute path, e.g. /var/cache/verl-e2e"),
}


def choice(key: str, value: str) -> None:
    allowed = CHOICES[key]
    if value not in allowed:
        raise UsageError(f"{BY_KEY[key].flag} {value!r}: expected {', '.join(allowed[:-1])} or {allowed[-1]}")


def shape(key: str, value: str) -> None:
    pattern, expected = SHAPES[key]
    plain = _stand_in(value, BY_KEY[key].flag)
    if key == "cache_root" and value.startswith("${{"):
        plain = "/" + plain  # a variable holding the absolute root, e.g. vars.DEFAULT_TEST_DATA_PATH
    if not pattern.fullmatch(plain) or ".." in plain.split("/"):
        raise UsageError(f"{BY_KEY[key].flag} {value[:80]!r}: expected {expected}")


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


def repository(value: str) -> str:
    if not REPOSITORY.fullmatch(value):
        raise UsageError(f"--repository {value[:80]!r}: expected OWNER/NAME of the GitHub repository hosting verl-e2e")
    return value


def merge(remembered: dict[str, Any], given: dict[str, str | None]) -> dict[str, str]:
    """Defaults < what the last install remembered < what this run was given; every value checked."""
    return resolve(remembered, given)[0]


def resolve(remembered: dict[str, Any], given: dict[str, str | None]) -> tuple[dict[str, str], dict[str, str]]:
    """(values, where each came from: "flag", "remembered" or "default"); every value checked."""
    values = {s.key: s.default for s in SETTINGS}
    sources = dict.fromkeys(values, "default")
    for key, value in remembered.items():
        if key in BY_KEY:
            values[key], sources[key] = str(value), "remembered"
    for key, value in given.items():
        if value is not None:
            values[key], sources[key] = value, "flag"
    return {k: check(k, v) for k, v in values.items()}, sources


def require(values: dict[str, str], also: tuple[str, ...] = ()) -> None:
    """Every required setting that is missing, in one line: what it is and how to pass it."""
    missing = [*also, *(f"{BY_KEY[k].flag} ({why})" for k, why in REQUIRED.items() if not values[k])]
    if missing:
        raise UsageError(f"missing {' and '.join(missing)}; nothing was written")


def derive(values: dict[str, str], sources: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Fill what follows from other settings: the image and warm-up runners (the smallest GPU runner)
    and the image repository (REGISTRY/verl-e2e)."""
    values, sources = dict(values), dict(sources)
    for key in ("image_runner", "warmup_runner"):
        if values[key]:
            continue
        if VARIABLE.fullmatch(values["runners"]):
            raise UsageError(
                f"missing {BY_KEY[key].flag}: --runners comes whole from a variable, so the smallest GPU runner is "
                f"not known here; pass {BY_KEY[key].flag} LABEL (a label, a JSON list, or '${{{{ vars.NAME }}}}')"
            )
        smallest = next(iter(runners(values["runners"]).values()))
        values[key], sources[key] = json.dumps(smallest), "derived from --runners (the smallest GPU runner)"
    if not values["image_repository"] and values["registry"]:
        values["image_repository"] = f"{values['registry'].rstrip('/')}/{IMAGE_NAME}"
        sources["image_repository"] = f"derived from --registry ({sources['registry']})"
    return values, sources


def workflow_values(values: dict[str, str]) -> dict[str, str]:
    """Each setting as the caller workflows take it: runner labels as JSON (per GPU count, lists)."""
    out = dict(values)
    for key in ("image_runner", "warmup_runner"):
        out[key] = json.dumps(labels(values[key], BY_KEY[key].flag))
    whole = EXPRESSION.fullmatch(values["runners"])
    if whole:  # an unset variable would leave the plan matrix.yaml's labels: say so instead
        out["runners"] = f"${{{{ vars.{whole.group(1)} || 'the repository variable {whole.group(1)}{EMPTY}' }}}}"
    elif values["runners"]:
        out["runners"] = json.dumps({str(n): labs for n, labs in runners(values["runners"]).items()})
    return out


def changes(before: dict[str, Any], after: dict[str, str]) -> list[str]:
    """What an install changes against the remembered settings, one line per setting."""
    return [
        f"{key}: {str(before.get(key, BY_KEY[key].default))!r} -> {after[key]!r}"
        for key in after
        if key in BY_KEY and str(before.get(key, BY_KEY[key].default)) != after[key]
    ]
