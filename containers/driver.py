#!/usr/bin/env python3
"""verl-e2e cell driver: runs one cell the way the verl e2e skill prescribes, and records every step.

Runs inside the verl image (or directly on a machine that has verl, with `--backend local`). Standard
library only, because the image's Python is not ours. Steps, each recorded in the run dir:

  1. both repos' commit and dirty files                       -> provenance.json "repos"
  2. PYTHONPATH: Bridge src/ and 3rdparty/Megatron-LM first, then verl, plus the import probe
  3. where the driver and a Ray worker (a real Ray task with runtime_env PYTHONPATH) import
     megatron.bridge from; a path outside the mounted checkout stops the cell (Blocked)
  4. focused Bridge tests, when the cell asks for them         -> bridge-tests.json
  5. GSM8K parquet from the cache, made by verl's preprocessing when missing
  6. reward model from the cache, or `reward.reward_model.enable=False` recorded as a limitation
  7. dummy-model config from the cached checkpoint config, when the cell uses one
  8. `ray stop --force`, stale checkpoints removed (kept between the cell's phases)
  9. each phase through verl's wrapper with the cell's env and Hydra args plus the Ray runtime_env
     PYTHONPATH override; output teed into <phase>.log       -> phases.json, checkpoints.json

A failure before step 9 is written as provenance.json "setup_failure" and stops the cell. SIGTERM
(docker stop, a cancelled job) kills the running phase's process group and records it as cancelled.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROBE_DIR = Path(__file__).resolve().parent / "probe"
WRAPPER = "tests/special_e2e/run_ppo_trainer_megatron.sh"
RECORD = "verl-e2e: bridge import ({where}): {path}"
TAIL = 30

_state = {"proc": None, "cancelled": False}


def log(msg: str) -> None:
    print(f"verl-e2e: {msg}", flush=True)


def write_json(path: Path, data: object) -> None:
    """Atomic write; a failure (a full disk) is reported and the cell goes on (the host reports it too)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        log(f"cannot write {path.name}: {exc.strerror or exc}")


class Recorder:
    """provenance.json and phases.json, rewritten after every change so a killed run still has them."""

    def __init__(self, out: Path, cell: dict) -> None:
        self.out = out
        self.provenance: dict = {"steps": [], "limitations": [], "commands": []}
        self.overrides: dict = {}  # env values the driver decided (dummy model paths)
        self.phases = [{"name": p["name"], "log": f"{p['name']}.log", "status": "not_run"} for p in cell["phases"]]
        self.save()

    def save(self) -> None:
        write_json(self.out / "provenance.json", self.provenance)
        write_json(self.out / "phases.json", self.phases)

    def step(self, name: str, status: str, detail: str, started: float) -> None:
        self.provenance["steps"].append(
            {"name": name, "status": status, "detail": detail, "duration_s": round(time.time() - started, 3)}
        )
        log(f"{name}: {status} - {detail}")
        self.save()

    def fail(self, step: str, klass: str, reason: str) -> int:
        self.provenance["setup_failure"] = {"step": step, "class": klass, "reason": reason}
        self.save()
        log(f"stopping: {reason}")
        return 3


# ------------------------------------------------------------------------------------------ repos


def git_state(path: Path) -> dict:
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-c", "safe.directory=*", "--no-optional-locks", "-C", str(path), *args],
            capture_output=True,
            text=True,
            check=False,
        )

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        baked = (
            os.environ.get("VERL_E2E_VERL_COMMIT")
            if path == Path(os.environ.get("VERL_REPO", "/nonexistent"))
            else None
        )
        if baked:  # verl baked into the image from `git archive`: the commit is in the image's env
            return {
                "path": str(path),
                "commit": baked[:12],
                "full_commit": baked,
                "dirty": [],
                "source": "image",
            }
        return {"path": str(path), "commit": "not a git checkout", "dirty": []}
    status = git("status", "--porcelain", "--untracked-files=no")
    dirty = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    return {
        "path": str(path),
        "commit": head.stdout.strip()[:12],
        "full_commit": head.stdout.strip(),
        "dirty": dirty,
    }


# --------------------------------------------------------------------------------------- imports

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
os._exit(0)  # no graceful shutdown (1-2 s): `ray stop --force` clears the cluster before the first phase
"""


def _import_result(stdout: str) -> dict | None:
    for line in stdout.splitlines():
        if line.startswith("VERL_E2E_IMPORT "):
            return json.loads(line[len("VERL_E2E_IMPORT ") :])
    return None


def check_imports(pythonpath: str, full: bool, timeout: float) -> tuple[dict, str | None]:
    """Where the driver and a Ray worker import megatron.bridge from. Returns (records, error)."""
    body = IMPORT_SNIPPET.replace("__FULL__", repr(full))
    indented = "\n    ".join(line for line in body.strip().splitlines() if not line.startswith("print("))
    ray_code = RAY_SNIPPET.replace("__SNIPPET__", indented).replace("__PYTHONPATH__", repr(pythonpath))
    env = dict(os.environ, PYTHONPATH=pythonpath, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    records: dict = {}
    for where, code in (("driver", body), ("ray_worker", ray_code)):
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return records, f"the {where} import check timed out after {timeout:.0f}s"
        result = _import_result(proc.stdout)
        if result is None:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return records, f"the {where} import check failed to run: {' | '.join(tail)}"
        records[where] = result
        print(RECORD.format(where=where.replace("_", "-"), path=result["origin"]), flush=True)
    return records, None


# ---------------------------------------------------------------------------------------- phases


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_logged(
    cmd: list[str], *, cwd: Path, env: dict, log_path: Path, prefix: str, timeout: float
) -> tuple[int | None, str, list[str]]:
    """Run cmd with output teed to log_path and stdout. Returns (exit code, status, log tail)."""
    tail: list[str] = []
    deadline = time.monotonic() + timeout
    with log_path.open("ab", buffering=0) as fh:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        _state["proc"] = proc
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        pending = b""
        status = None
        while True:
            if _state["cancelled"]:
                status = "cancelled"
                _kill_group(proc)
                break
            if time.monotonic() > deadline:
                status = "timeout"
                fh.write(f"\nverl-e2e: phase timed out after {timeout:.0f}s; stopping it\n".encode())
                _kill_group(proc)
                break
            chunk = proc.stdout.read(65536)
            if chunk:
                fh.write(chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    text = raw.decode("utf-8", errors="replace")
                    sys.stdout.write(f"{prefix}{text}\n")
                    tail = [*tail, text][-TAIL:]
                sys.stdout.flush()
                continue
            if proc.poll() is not None:
                rest = proc.stdout.read() or b""
                fh.write(rest)
                pending += rest
                break
            time.sleep(0.05)
        if pending:
            text = pending.decode("utf-8", errors="replace")
            sys.stdout.write(f"{prefix}{text}\n")
            tail = (tail + text.splitlines())[-TAIL:]
        code = proc.wait()
        _state["proc"] = None
    if status is None:
        status = "ok" if code == 0 else ("killed" if code in (137, -9) else "failed")
    return code, status, tail


def checkpoint_listing(root: Path) -> dict:
    steps, tracker, roles = [], None, set()
    if root.is_dir():
        for tracker_file in root.rglob("latest_checkpointed_iteration.txt"):
            try:
                tracker = int(tracker_file.read_text().strip())
            except ValueError:
                tracker = None
        for step_dir in root.rglob("global_step_*"):
            if step_dir.is_dir() and step_dir.name.split("_")[-1].isdigit():
                steps.append(int(step_dir.name.split("_")[-1]))
                roles.update(p.name for p in step_dir.iterdir() if p.is_dir())
    return {"steps": sorted(set(steps)), "tracker": tracker, "roles": sorted(roles)}


def ray_stop(env: dict) -> None:
    subprocess.run(["ray", "stop", "--force"], env=env, capture_output=True, check=False, timeout=60)


# ------------------------------------------------------------------------------------------ main


def translate(value: str, mapping: list[tuple[str, str]]) -> str:
    for src, dst in mapping:
        if value == src or value.startswith(src.rstrip("/") + "/"):
            return dst + value[len(src.rstrip("/")) :]
    return value


def prepare_data(env: dict, verl: Path, rec: Recorder, base_env: dict) -> str | None:
    train, val = Path(env["TRAIN_FILES"]), Path(env["VAL_FILES"])
    started = time.time()
    if train.is_file() and val.is_file():
        rec.step("data", "ok", f"GSM8K parquet from the cache ({train.parent})", started)
        return None
    raw = train.parent.parent / "gsm8k-raw"
    cmd = [sys.executable, "examples/data_preprocess/gsm8k.py", "--local_save_dir", str(train.parent)]
    if raw.is_dir():
        cmd += ["--local_dataset_path", str(raw)]
    rec.provenance["commands"].append(" ".join(cmd))
    proc = subprocess.run(cmd, cwd=verl, env=base_env, capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0 or not train.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-2:]
        return f"GSM8K preprocessing failed ({' | '.join(tail) or 'no output'}); run `verl-e2e prefetch` on the runner"
    rec.step(
        "data",
        "ok",
        f"made GSM8K parquet with verl's preprocessing{' from the cached raw copy' if raw.is_dir() else ''}",
        started,
    )
    return None


def prepare_model(cell: dict, env: dict, work: Path, rec: Recorder) -> str | None:
    started = time.time()
    if cell.get("dummy_config") is None:
        path = Path(env.get("MODEL_PATH", ""))
        state = "from the cache" if path.is_dir() else "not in the cache (the wrapper will try to fetch it)"
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
    rec.step("model", "ok", f"dummy model: {env['MODEL_ID']} config shrunk by {cell['dummy_config']}", started)
    return None


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Run one verl-e2e cell (in the verl image or on a verl machine).")
    ap.add_argument("--cell", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path, help="the run dir")
    ap.add_argument("--bridge", required=True, type=Path, help="the Megatron-Bridge checkout under test")
    ap.add_argument("--verl", required=True, type=Path, help="the verl checkout")
    ap.add_argument("--work", type=Path, default=Path("/tmp/verl-e2e-work"), help="scratch: checkpoints, dummy model")
    ap.add_argument("--phase-timeout", type=float, default=None, help="seconds per phase (default: the cell's)")
    ap.add_argument(
        "--import-check",
        choices=("full", "location"),
        default="full",
        help="full: also import megatron.bridge; location: only resolve where it would load from",
    )
    ap.add_argument("--bridge-tests", choices=("auto", "skip"), default="auto")
    ap.add_argument(
        "--final-ray-stop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run `ray stop --force` after the last phase (not needed when the container exits)",
    )
    ap.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="CELL_PATH=LOCAL_PATH",
        help="translate a cache path of the cell to this machine's (local backend)",
    )
    return ap.parse_args(argv)


def record_repos(rec: Recorder, bridge: Path, verl: Path) -> None:
    started = time.time()
    rec.provenance["repos"] = {"bridge": git_state(bridge), "verl": git_state(verl)}
    rec.provenance["bridge"] = dict(rec.provenance["repos"]["bridge"], src=str(bridge / "src"))
    rec.provenance["verl"] = rec.provenance["repos"]["verl"]
    rec.step(
        "repos",
        "ok",
        f"bridge {rec.provenance['bridge']['commit']}, verl {rec.provenance['verl']['commit']}",
        started,
    )


def make_pythonpath(rec: Recorder, bridge: Path, verl: Path) -> str:
    started = time.time()
    parts = [str(PROBE_DIR), str(bridge / "src"), str(bridge / "3rdparty" / "Megatron-LM"), str(verl)]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    pythonpath = ":".join(parts)
    rec.provenance["pythonpath"] = pythonpath
    rec.step("pythonpath", "ok", pythonpath, started)
    return pythonpath


def verify_imports(rec: Recorder, bridge: Path, pythonpath: str, full: bool) -> int | None:
    """Both import checks; a wrong path or a failed import stops the cell (returns the exit code)."""
    started = time.time()
    records, error = check_imports(pythonpath, full, timeout=300)
    rec.provenance["bridge_import"] = {k: v["origin"] for k, v in records.items()}
    rec.provenance["import_check"] = records
    if error:
        rec.step("imports", "failed", error, started)
        return rec.fail("imports", "setup", error)
    src = str(bridge / "src") + "/"
    wrong = {k: v["origin"] for k, v in records.items() if not str(v["origin"] or "").startswith(src)}
    if wrong:
        where, path = next(iter(wrong.items()))
        rec.step("imports", "failed", f"{where} resolves megatron.bridge to {path}", started)
        return rec.fail("imports", "setup", f"wrong Bridge: the {where} imports {path}, not {src}")
    for where, result in records.items():
        if result.get("error"):
            err = result["error"]
            reason = f"`import megatron.bridge` failed in the {where}: {err['type']}: {err['message']}"
            rec.step("imports", "failed", reason, started)
            return rec.fail("imports", "model_build" if err["in_bridge"] else "setup", reason)
    rec.step("imports", "ok", f"driver and Ray worker import {records['driver']['origin']}", started)
    return None


def run_phases(
    args: argparse.Namespace, cell: dict, rec: Recorder, env0: dict, extra: list[str], pythonpath: str
) -> None:
    ckpt_root = args.work / "checkpoints"
    mapping = [tuple(m.split("=", 1)) for m in args.map]
    listing: dict = {}
    for index, phase in enumerate(cell["phases"]):
        env = dict(env0)
        env.update({k: translate(v, mapping) for k, v in phase["env"].items()})
        env.update(rec.overrides)
        ray_stop(env)
        cmd = [
            "bash",
            WRAPPER,
            *phase["args"],
            *extra,
            f"trainer.default_local_dir={ckpt_root}",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH={pythonpath}",
        ]
        rec.provenance["commands"].append(" ".join(cmd))
        rec.phases[index].update(status="running", command=" ".join(cmd))
        rec.save()
        log(f"phase {phase['name']}: {' '.join(cmd)}")
        started = time.time()
        code, status, tail = run_logged(
            cmd,
            cwd=args.verl.resolve(),
            env=env,
            log_path=args.out / f"{phase['name']}.log",
            prefix=f"[{phase['name']}] ",
            timeout=args.phase_timeout or cell["timeout_minutes"] * 60,
        )
        rec.phases[index].update(
            status=status, exit_code=code, duration_s=round(time.time() - started, 3), log_tail=tail[-10:]
        )
        listing[phase["name"]] = checkpoint_listing(ckpt_root)
        write_json(args.out / "checkpoints.json", listing)
        rec.save()
        log(f"phase {phase['name']}: {status} (exit {code}) in {time.time() - started:.1f}s")
        if status != "ok":
            break


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    cell = json.loads(args.cell.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, cell)
    bridge, verl = args.bridge.resolve(), args.verl.resolve()

    record_repos(rec, bridge, verl)
    pythonpath = make_pythonpath(rec, bridge, verl)
    stopped = verify_imports(rec, bridge, pythonpath, args.import_check == "full")
    if stopped is not None:
        return stopped
    base_env = dict(os.environ, PYTHONPATH=pythonpath, RAY_USAGE_STATS_ENABLED="0")
    if "bridge_tests" in cell.get("checks", []) and args.bridge_tests == "auto":
        bridge_tests(cell, bridge, base_env, args.out, rec, timeout=1800)

    args.work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rm", "-rf", str(args.work / "checkpoints")], check=False)  # stale, from an unrelated run
    mapping = [tuple(m.split("=", 1)) for m in args.map]
    first_env = {k: translate(v, mapping) for k, v in cell["phases"][0]["env"].items()}
    for prep in (
        lambda: prepare_data(first_env, verl, rec, base_env),
        lambda: prepare_model(cell, first_env, args.work, rec),
    ):
        problem = prep()
        if problem:
            return rec.fail("data/model", "setup", problem)
    extra: list[str] = []
    rm = first_env.get("RM_MODEL_PATH")
    if not rm or not Path(rm).is_dir():
        extra.append("reward.reward_model.enable=False")
        rec.provenance["limitations"].append(
            "reward model disabled (reward.reward_model.enable=False): not in the cache"
        )
    rec.save()

    run_phases(args, cell, rec, base_env, extra, pythonpath)
    if args.final_ray_stop:
        ray_stop(base_env)
    return 0 if all(p["status"] == "ok" for p in rec.phases) else 1


def _on_term(signum: int, frame: object) -> None:  # noqa: ARG001
    _state["cancelled"] = True
    proc = _state["proc"]
    if proc is None:
        raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
