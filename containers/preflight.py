"""What the cell's environment has, before a 5-minute verl run finds out the hard way.

Standard library only (runs with the image's Python, next to driver.py). Two jobs:

* **Import checks.** `fast` (the default) resolves where the driver would load `megatron.bridge`
  from without importing it; Ray workers are checked by the import probe inside verl's own worker
  processes (their `verl-e2e: bridge import (ray-worker pid N)` lines are judged from the log), so
  no separate Ray cluster is started only to look. `full` also imports Bridge in the driver and in
  a Ray task of its own (the older, slower check: ~50 s with torch and Transformer Engine).
* **Environment preflight.** One subprocess looks up (never imports) the modules verl's Megatron
  path needs and the optional ones whose absence verl only discovers late: APEX's fused
  weight-gradient kernel (`gradient_accumulation_fusion`), flash-attn (verl's Megatron config asks
  for `attention_backend: flash`), nvtx (the wrapper always sets `global_profiler.tool=nsys`). A
  missing required module stops the cell as Blocked; a missing optional one turns into the Hydra
  override that avoids it, recorded as a limitation so the report says what the run did not cover.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

RECORD = "verl-e2e: bridge import ({where}): {path}"
ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")

# module -> why the run cannot go on without it
REQUIRED = {
    "torch": "PyTorch",
    "ray": "Ray (verl's controller)",
    "megatron.core": "Megatron-Core (Bridge's 3rdparty/Megatron-LM or an installed megatron-core)",
    "transformer_engine": "Transformer Engine (Megatron-Core's layers)",
    "hydra": "hydra-core (verl's configuration)",
}
ROLLOUT = {"vllm": "vLLM", "sglang": "SGLang"}
# needed only by cells that save or resume: Bridge's training/checkpointing.py imports modelopt at
# module level, and verl's Megatron checkpoint manager imports that module to filter PEFT state
CHECKPOINTING = {"modelopt": "nvidia-modelopt (Bridge's checkpointing imports it)"}
# needed only by models with Mamba (SSM) layers: Megatron-Core's Mamba mixer raises when it is built
# without it, about three minutes into a cell (tiny mamba, falcon_h1, nemotronh and hybrid on the H200)
MAMBA = {"mamba_ssm": "mamba-ssm (Megatron-Core's Mamba layers)"}
MAMBA_TYPES = frozenset(
    {"mamba", "mamba2", "nemotron_h", "falcon_h1", "jamba", "bamba", "granitemoehybrid", "zamba", "zamba2"}
)
# needed only by models with Gated DeltaNet (linear attention) layers: Megatron-Core's gated delta net
# raises an ImportError at build without flash-linear-attention's kernels (Qwen3-Next, Qwen3.5)
FLA = {"fla": "flash-linear-attention (Megatron-Core's Gated DeltaNet layers)"}
FLA_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})
# module -> (what is missing, overrides that avoid it, limitation recorded)
OPTIONAL = {
    "fused_weight_gradient_mlp_cuda": (
        "APEX's fused_weight_gradient_mlp_cuda",
        [f"++{r}.megatron.override_transformer_config.gradient_accumulation_fusion=False" for r in ROLES],
        "gradient_accumulation_fusion off (the environment has no APEX CUDA extension)",
    ),
    "flash_attn": (
        "flash-attn",
        [f"++{r}.megatron.override_transformer_config.attention_backend=auto" for r in ROLES],
        "attention_backend=auto instead of verl's flash (no flash-attn); Transformer Engine picks the backend",
    ),
    "nvtx": (
        "nvtx",
        ["global_profiler.tool=null"],
        "profiler off (global_profiler.tool=null): nvtx is not installed",
    ),
}

# the same for what only some models need: need -> (module whose absence matters, overrides, limitation).
# vLLM 0.24 runs a Gated DeltaNet model's prefill through FlashInfer's JIT-compiled kernel on Hopper unless
# told otherwise (qwen_gdn_linear_attn._resolve_gdn_prefill_backend); without FlashInfer (or without nvcc
# to compile it) the rollout server fails at its first prefill, so such a node uses FLA's Triton kernels,
# which the model's Megatron side needs anyway (qwen3_next and qwen35_vl on the H200, 2026-12-04)
MODEL_OPTIONAL = {
    "fla": (
        "flashinfer",
        ["++actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.gdn_prefill_backend=triton"],
        "vLLM's Gated DeltaNet prefill on FLA's Triton kernels (gdn_prefill_backend=triton): flashinfer is "
        "not installed",
    ),
}

# module -> (what is missing, environment that avoids it, limitation recorded): vLLM's model runner
# (V2, the default for some architectures such as Llama) imports FlashInfer for its sampler unless
# told not to, and an environment without FlashInfer then fails at engine start-up
OPTIONAL_ENV = {
    "flashinfer": (
        "FlashInfer",
        {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
        "vLLM samples without FlashInfer (VLLM_USE_FLASHINFER_SAMPLER=0): flashinfer is not installed",
    ),
}

LOOKUP_SNIPPET = r"""
import importlib.util, json, sys, glob, os, re
names = json.loads(sys.argv[1])
found = {}
for name in names:
    try:
        spec = importlib.util.find_spec(name)
        found[name] = spec.origin if spec is not None and spec.origin else ("namespace" if spec else None)
    except Exception as exc:
        found[name] = None
info = {"found": found, "python": sys.version.split()[0]}
core = found.get("megatron.core")
if core and core != "namespace":
    text = open(os.path.join(os.path.dirname(core), "package_info.py")).read() if os.path.exists(
        os.path.join(os.path.dirname(core), "package_info.py")) else ""
    parts = [re.search(k + r"\s*=\s*['\"]?(\w+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    info["megatron_core"] = {"path": os.path.dirname(core),
                             "version": ".".join(p.group(1) for p in parts) if all(parts) else None}
torch = found.get("torch")
if torch:
    site = os.path.dirname(os.path.dirname(torch))
    bundled = sorted(glob.glob(os.path.join(site, "nvidia", "cudnn", "lib", "libcudnn.so.*")))
    system = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libcudnn.so.*") + glob.glob("/usr/lib64/libcudnn.so.*"))
    info["cudnn"] = {"bundled": bundled[-1:], "system": system[-1:]}
print("VERL_E2E_PREFLIGHT " + json.dumps(info))
"""

IMPORT_SNIPPET = r"""
import importlib.util, json, sys, traceback
out = {"origin": None, "imported": None, "error": None}
spec = importlib.util.find_spec("megatron.bridge")
out["origin"] = spec.origin if spec else None
if __FULL__ and spec is not None:
    try:
        import megatron.bridge
        out["imported"] = megatron.bridge.__file__
    except BaseException as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        out["error"] = {"type": type(exc).__name__, "message": str(exc)[:500],
                        "in_bridge": any("/megatron/bridge/" in (f.filename or "") for f in tb),
                        "missing_module": getattr(exc, "name", None)}
print("VERL_E2E_IMPORT " + json.dumps(out))
"""

# The Bridge modules verl imports (found in verl's own source, so they follow the verl that runs), each
# imported for real in the driver before Ray starts: an import-time error in any of them is a Fail in
# seconds, with the frame it was raised in, instead of a worker death minutes into the run.
MODULES_SNIPPET = r"""
import importlib, json, sys, traceback
bridge_src = sys.argv[2]
out = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
        out[name] = None
    except BaseException as exc:
        frames = [{"file": f.filename, "line": f.lineno, "function": f.name}
                  for f in traceback.extract_tb(exc.__traceback__)]
        missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        out[name] = {"type": type(exc).__name__, "message": str(exc)[:500], "frames": frames[-12:],
                     "in_bridge": any(f["file"].startswith(bridge_src) for f in frames),
                     "missing_module": missing, "traceback": text[-6000:]}
print("VERL_E2E_MODULES " + json.dumps(out))
"""
BRIDGE_IMPORT = re.compile(r"^\s*(?:from\s+(megatron\.bridge[\w.]*)\s+import|import\s+(megatron\.bridge[\w.]*))", re.M)


def verl_bridge_modules(verl: str) -> list[str]:
    """Every `megatron.bridge...` module named by an import statement in verl's package, sorted."""
    names = {"megatron.bridge"}
    for path in sorted(Path(verl, "verl").rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "megatron.bridge" in text:
            names.update(a or b for a, b in BRIDGE_IMPORT.findall(text))
    return sorted(names)


def import_modules(pythonpath: str, modules: list[str], bridge_src: str, timeout: float) -> dict:
    """{module: None or the error it raised} from one fresh interpreter importing each in turn."""
    env = dict(os.environ, PYTHONPATH=pythonpath, RAY_USAGE_STATS_ENABLED="0")
    try:
        proc = _python(MODULES_SNIPPET, [json.dumps(modules), bridge_src], env, timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"importing verl's Bridge modules timed out after {timeout:.0f}s"}
    found = _tagged(proc.stdout, "VERL_E2E_MODULES")
    if found is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"the import of verl's Bridge modules did not finish: {' | '.join(tail) or 'no output'}"}
    return found


def blocking_import(results: dict) -> tuple[str, dict] | None:
    """The first import failure that is Bridge's own: (module, error). A module outside Bridge that is
    missing (modelopt for a save path, say) is the environment's, left to the preflight and the run."""
    for module, err in results.items():
        if not isinstance(err, dict):
            continue
        missing = err.get("missing_module") or ""
        third_party = (
            err.get("type") in ("ModuleNotFoundError", "ImportError")
            and missing
            and not missing.startswith("megatron.bridge")
        )
        if err.get("in_bridge") and not third_party:
            return module, err
    return None


RAY_SNIPPET = r"""
import json, ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
@ray.remote
def probe():
    __SNIPPET__
    return out
result = ray.get(probe.options(runtime_env={"env_vars": {"PYTHONPATH": __PYTHONPATH__}}).remote())
print("VERL_E2E_IMPORT " + json.dumps(result), flush=True)
import os
os._exit(0)  # no graceful shutdown (1-2 s): the driver's sweep of its cell token ends the cluster
"""


def _tagged(stdout: str, tag: str) -> dict | None:
    for line in stdout.splitlines():
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1 :])
    return None


def _python(code: str, args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def check_imports(
    pythonpath: str, mode: str, timeout: float, extra_env: dict[str, str] | None = None
) -> tuple[dict, str | None]:
    """Where megatron.bridge loads from: (records per place, error). `mode`: fast | location | full.

    `extra_env` reaches every process started, the Ray cluster of the worker check included: the driver
    passes its cell token there, so its sweep of the cell's own processes ends that cluster too."""
    full = mode == "full"
    body = IMPORT_SNIPPET.replace("__FULL__", repr(full))
    env = dict(os.environ, PYTHONPATH=pythonpath, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    env.update(extra_env or {})
    places = [("driver", body)]
    if mode != "fast":
        indented = "\n    ".join(line for line in body.strip().splitlines() if not line.startswith("print("))
        ray_code = RAY_SNIPPET.replace("__SNIPPET__", indented).replace("__PYTHONPATH__", repr(pythonpath))
        places.append(("ray_worker", ray_code))
    records: dict = {}
    for where, code in places:
        try:
            proc = _python(code, [], env, timeout)
        except subprocess.TimeoutExpired:
            return records, f"the {where} import check timed out after {timeout:.0f}s"
        result = _tagged(proc.stdout, "VERL_E2E_IMPORT")
        if result is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return records, f"the {where} import check failed to run: {' | '.join(tail)}"
        records[where] = result
        print(RECORD.format(where=where.replace("_", "-"), path=result["origin"]), flush=True)
    return records, None


def lookup(pythonpath: str, engine: str, timeout: float = 120) -> dict:
    """The environment as found: module origins, Megatron-Core version, cuDNN copies."""
    names = [*REQUIRED, *ROLLOUT, *CHECKPOINTING, *MAMBA, *FLA, *OPTIONAL, *OPTIONAL_ENV]
    env = dict(os.environ, PYTHONPATH=pythonpath)
    try:
        proc = _python(LOOKUP_SNIPPET, [json.dumps(names)], env, timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the environment lookup timed out after {timeout:.0f}s"}
    info = _tagged(proc.stdout, "VERL_E2E_PREFLIGHT")
    if info is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        return {"error": f"the environment lookup failed: {' | '.join(tail) or 'no output'}"}
    info["engine"] = engine
    return info


def environment(info: dict) -> tuple[dict, list[str], list[str]]:
    """(environment variables, limitations, notes) for what the run can avoid through its environment."""
    if "error" in info or info.get("engine", "vllm") != "vllm":
        return {}, [], []
    found = info.get("found", {})
    env: dict = {}
    limitations, notes = [], []
    for name, (what, values, limitation) in OPTIONAL_ENV.items():
        if not found.get(name):
            env.update(values)
            limitations.append(limitation)
            notes.append(f"{what} missing: set {', '.join(f'{k}={v}' for k, v in values.items())}")
    return env, limitations, notes


def model_needs(model_path: str | None) -> dict:
    """Modules the cell's model needs beyond what every cell needs, from a local checkpoint's config.json
    (and its nested configs): mamba-ssm where it has Mamba layers, flash-linear-attention where it
    has Gated DeltaNet layers. Nothing for a hub id or no config."""
    try:
        config = json.loads((Path(model_path or "") / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    configs = [config, *(v for v in config.values() if isinstance(v, dict))] if isinstance(config, dict) else []
    needs: dict = {}
    for c in configs:
        if (
            c.get("model_type") in MAMBA_TYPES
            or "hybrid_override_pattern" in c
            or any(str(k).startswith("mamba_") for k in c)
        ):
            needs.update(MAMBA)
        if c.get("model_type") in FLA_TYPES or "linear_attention" in (c.get("layer_types") or []):
            needs.update(FLA)
    return needs


def checkpoints(cell: dict) -> bool:
    """Whether any phase of the cell saves or resumes a checkpoint."""
    for phase in cell.get("phases", []):
        env = phase.get("env", {})
        if env.get("RESUME_MODE", "disable") != "disable" or env.get("SAVE_FREQ", "-1") not in ("-1", "0", ""):
            return True
    return False


def decide(
    info: dict, checkpointing: bool = False, needs: dict | None = None
) -> tuple[list[str], list[str], list[str], str | None]:
    """(Hydra overrides, limitations, notes, blocking reason) from what `lookup` found (`needs`: what the
    cell's model needs besides, `model_needs`). Pure."""
    if "error" in info:
        return [], [], [info["error"]], None
    found = info.get("found", {})
    missing = [f"{why} (`{name}`)" for name, why in REQUIRED.items() if not found.get(name)]
    engine = info.get("engine", "vllm")
    if engine in ROLLOUT and not found.get(engine):
        missing.append(f"{ROLLOUT[engine]} (`{engine}`), the rollout engine the cell asks for")
    if checkpointing:
        missing += [
            f"{why} (`{name}`), for the cell's checkpoints"
            for name, why in CHECKPOINTING.items()
            if not found.get(name)
        ]
    missing += [f"{why} (`{name}`), for the cell's model" for name, why in (needs or {}).items() if not found.get(name)]
    if missing:
        return [], [], [], "the environment lacks " + ", ".join(missing) + "; install it in the image"
    overrides: list[str] = []
    limitations: list[str] = []
    notes: list[str] = []
    for name, (what, fixes, limitation) in OPTIONAL.items():
        if not found.get(name):
            overrides += fixes
            limitations.append(limitation)
            notes.append(f"{what} missing: added {', '.join(fixes)}")
    for need, (name, fixes, limitation) in MODEL_OPTIONAL.items():
        if need in (needs or {}) and engine == "vllm" and not found.get(name):
            overrides += fixes
            limitations.append(limitation)
            notes.append(f"{name} missing for the model's {need} layers: added {', '.join(fixes)}")
    cudnn = info.get("cudnn") or {}
    if cudnn.get("bundled") and cudnn.get("system"):
        b, s = (os.path.basename(cudnn[k][0]).removeprefix("libcudnn.so.") for k in ("bundled", "system"))
        if b != s:
            notes.append(
                f"two cuDNN copies: torch's {b} and the system's {s} ({cudnn['system'][0]}); Transformer "
                "Engine may load the system one, after which torch's cuDNN calls can fail"
            )
    core = info.get("megatron_core") or {}
    if core.get("version"):
        notes.append(f"Megatron-Core {core['version']} from {core['path']}")
    return overrides, limitations, notes, None
