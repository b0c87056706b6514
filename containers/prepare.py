"""Cell preparation inside the image: focused Bridge tests, GSM8K data, dummy-model config.

Standard library only (runs with the image's Python, next to driver.py). Each function records
its step through the driver's Recorder and returns a problem sentence when the cell cannot go on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import arith_task
import image_task
from records import Recorder, write_json


def prepare_data(env: dict, verl: Path, rec: Recorder, base_env: dict, work: Path) -> str | None:
    """The cell's parquet from the (read-only) cache, or made for this cell alone under its work dir:
    GSM8K with verl's own preprocessing, Level 5's arithmetic with arith_task.py, Level 4's pictures with
    image_task.py."""
    train, val = Path(env["TRAIN_FILES"]), Path(env["VAL_FILES"])
    started = time.time()
    if train.is_file() and val.is_file():
        rec.step("data", "ok", f"{train.parent.name} parquet from the cache ({train.parent})", started)
        return None
    if train.parent.name in TASKS:
        return _make_task(train, val, rec, work, started)
    raw = Path(env.get("VERL_E2E_GSM8K_RAW") or train.parent.parent / "gsm8k-raw")  # the site's cache layout
    target = work / "data" / "gsm8k"
    cmd = [sys.executable, "examples/data_preprocess/gsm8k.py", "--local_save_dir", str(target)]
    if raw.is_dir():
        cmd += ["--local_dataset_path", str(raw)]
    rec.provenance["commands"].append(" ".join(cmd))
    proc = subprocess.run(cmd, cwd=verl, env=base_env, capture_output=True, text=True, check=False, timeout=1800)
    made_train, made_val = target / train.name, target / val.name
    if proc.returncode != 0 or not made_train.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        return f"GSM8K preprocessing failed ({' | '.join(tail) or 'no output'}); run `verl-e2e prefetch` on the runner"
    rec.overrides.update(TRAIN_FILES=str(made_train), VAL_FILES=str(made_val))
    source = " from the cached raw copy" if raw.is_dir() else ""
    rec.step("data", "ok", f"made GSM8K parquet for this cell with verl's preprocessing{source}", started)
    return None


TASKS = {"arith": arith_task.write, "images": image_task.write}  # the cache folder -> what writes it


def _make_task(train: Path, val: Path, rec: Recorder, work: Path, started: float) -> str | None:
    """A task of ours made for this cell; the reward function's cache path is mapped to the made copy."""
    name = train.parent.name
    target = work / "data" / name
    try:
        TASKS[name](target)
    except (OSError, ImportError, ValueError) as exc:
        return f"the {name} task could not be made ({exc}); run `tools/offline_node.sh setup` or prefetch"
    rec.overrides.update(TRAIN_FILES=str(target / train.name), VAL_FILES=str(target / val.name))
    rec.arg_paths.append((str(train.parent), str(target)))  # reward.custom_reward_function.path
    rec.step("data", "ok", f"made the {name} task for this cell ({target})", started)
    return None


def prepare_model(cell: dict, env: dict, work: Path, rec: Recorder) -> str | None:
    started = time.time()
    if cell.get("dummy_config") is None:
        path = Path(env.get("MODEL_PATH", ""))
        offline = [k for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if env.get(k, os.environ.get(k)) == "1"]
        if not path.is_dir() and offline:
            # nothing could fetch it: verl would stop 30-100 s later, on a config error that names no model
            return (
                f"model {env.get('MODEL_ID')} is not at {path} and the hub is off ({offline[0]}=1); put the "
                "checkpoint there (tools/make_tiny_model.py for a family's tiny model, `verl-e2e prefetch` on a "
                "runner) or run where the hub is reachable"
            )
        state = "from the cache" if path.is_dir() else "not in the cache (the wrapper will try to fetch it)"
        if path.is_dir():
            hub_off(env, rec)
        rec.step("model", "ok", f"{env.get('MODEL_ID')} {state}", started)
        return None
    base = Path(env.get("MODEL_PATH", "")) / "config.json"
    if not base.is_file():
        return f"dummy model needs {base} (the {env.get('MODEL_ID')} config); run `verl-e2e prefetch` on the runner"
    config = json.loads(base.read_text())
    _merge(config, cell["dummy_config"])
    target = work / "dummy-config.json"
    target.write_text(json.dumps(config, indent=2))
    rec.overrides["DUMMY_MODEL_CONFIG_PATH"] = str(target)
    rec.overrides["DUMMY_MODEL_PATH"] = str(work / "dummy-model")
    hub_off(env, rec)
    rec.step("model", "ok", f"dummy model: {env['MODEL_ID']} config shrunk by {cell['dummy_config']}", started)
    return None


def remote_code_modules(cell: dict, work: Path, rec: Recorder) -> str | None:
    """A cell whose checkpoint ships its own code: a modules cache of the cell's own, for every process's path.

    verl's trainer loads such a config (trust_remote_code) and ships it to its Ray workers by reference to
    the module transformers wrote (`transformers_modules.<...>`); a Ray worker never ran transformers'
    `init_hf_modules`, so it stopped on "No module named 'transformers_modules'" before any Bridge code ran
    (tiny BailingMoeV2, twentieth batch; vLLM's own workers add that path, verl 1dda039's do not). With the
    cache named (HF_MODULES_CACHE, writable, per cell) and on the workers' PYTHONPATH, each can import it."""
    args = (str(a) for phase in cell["phases"] for a in phase.get("args", []))
    if not any(a.endswith(".trust_remote_code=True") for a in args):
        return None
    modules = work / "hf-modules"
    modules.mkdir(parents=True, exist_ok=True)
    rec.overrides["HF_MODULES_CACHE"] = str(modules)
    rec.provenance["limitations"].append(
        "the checkpoint's own modules cache is on the Ray workers' path (HF_MODULES_CACHE): verl's workers do "
        "not add it, and without it they cannot unpickle a remote-code config"
    )
    return str(modules)


def hub_off(env: dict, rec: Recorder) -> None:
    """The model is on disk: switch the Hugging Face hub off for the phases (every Ray worker inherits
    it), as the container backend always does, so that no process of a cell on a machine without
    internet waits on a hub lookup that can only time out. A value the caller set is kept."""
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if key not in env and key not in os.environ:
            rec.overrides[key] = "1"


def _merge(into: dict, overrides: dict) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def bridge_tests(cell: dict, bridge: Path, env: dict, out: Path, rec: Recorder, timeout: float) -> None:
    started = time.time()
    paths = [t for t in cell.get("bridge_tests", []) if (bridge / t).exists()]
    if not paths:
        result = {
            "status": "skipped",
            "reason": "none of the focused Bridge tests exist in this checkout",
            "command": None,
        }
    else:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
        try:
            proc = subprocess.run(
                cmd, cwd=bridge, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
            summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
            status = "pass" if proc.returncode == 0 else ("skipped" if proc.returncode == 5 else "fail")
            result = {
                "status": status,
                "command": " ".join(cmd[1:]),
                "exit_code": proc.returncode,
                "summary": summary,
            }
            (out / "bridge-tests.log").write_text(proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired:
            result = {
                "status": "fail",
                "command": " ".join(cmd[1:]),
                "summary": f"timed out after {timeout:.0f}s",
            }
    write_json(out / "bridge-tests.json", result)
    rec.step("bridge-tests", result["status"], result.get("summary") or result.get("reason", ""), started)
