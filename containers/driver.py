#!/usr/bin/env python3
"""verl-e2e cell driver: runs one cell the way the verl e2e skill prescribes, and records every step.

Runs inside the verl image (or directly on a machine that has verl, with `--backend local`). Standard
library only, because the image's Python is not ours. Steps, each recorded in the run dir:

  1. both repos' commit and dirty files                       -> provenance.json "repos"
  2. PYTHONPATH: Bridge src/ and its Megatron-LM (--megatron-lm), then verl, plus the import probe
  3. where the driver imports megatron.bridge from (`--import-check full`: also a Ray task of its
     own); verl's own Ray workers report theirs through the probe; a path outside the mounted
     checkout stops the cell (Blocked); then megatron.bridge and every Bridge module verl imports
     are imported for real (not with `location`), next to the first phase (importcheck.py): an
     error raised in Bridge's code stops the phase and the cell (Fail)
  4. the environment preflight (preflight.py): Blocked on what verl cannot run without, overrides
     and limitations for what it can avoid                   -> provenance.json "environment"
  5. focused Bridge tests, when the cell asks for them         -> bridge-tests.json
  6. GSM8K parquet from the (read-only) cache, or made for this cell under its work dir
  7. reward model from the cache, or `reward.reward_model.enable=False` recorded as a limitation
  8. dummy-model config from the cached checkpoint config, when the cell uses one
  9. what an earlier phase of this cell left running is stopped (only the cell's own processes, found
     by a token in their environment: never another cell's Ray), stale checkpoints removed (kept
     between the cell's phases), then each phase through verl's wrapper with the cell's env and Hydra
     args plus the Ray runtime_env PYTHONPATH override and a Ray cluster of its own; output teed into
     <phase>.log                                                  -> phases.json, checkpoints.json

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
import traceback
from pathlib import Path

import functions
import hostlock
import importcheck
import preflight
from milestones import Milestones
from phaselog import STATE, Stuck, run_logged
from prepare import bridge_tests, prepare_data, prepare_model, remote_code_modules
from records import Recorder, checkpoint_listing, git_state, log, write_json

PROBE_DIR = Path(__file__).resolve().parent / "probe"
WRAPPER = "tests/special_e2e/run_ppo_trainer_megatron.sh"
CELL_TOKEN = "VERL_E2E_CELL_TOKEN"  # every process a cell starts inherits it: how the cell finds its own


def stop_own_processes(token: str, grace: float = 10.0) -> int:
    """End every process whose environment carries this cell's token: what the cell started, its Ray
    cluster included (Ray's processes inherit the environment of the driver that started them).

    `ray stop --force` would end every Ray process on the machine, other cells' and the user's own
    clusters too; a cell only ever stops what it started. Returns how many outlived SIGKILL (0 normally).
    """
    marker = f"{CELL_TOKEN}={token}".encode()
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in found:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except OSError:
                pass
        deadline = time.time() + grace
        while alive and time.time() < deadline and sig == signal.SIGTERM:
            alive = [pid for pid in alive if _alive(pid)]
            time.sleep(0.5)
        found = alive
        if not found:
            break
    return len(found)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().split(") ", 1)[-1][:1] not in ("Z", "X")
    except OSError:
        return False


def translate(value: str, mapping: list[tuple[str, str]], *then: list[tuple[str, str]]) -> str:
    """A path by the first pair of `mapping` it falls under, then by each later mapping in turn (the
    cell's container paths -> this machine's, then a cache dir -> the copy the driver made of it)."""
    for src, dst in mapping:
        if value == src or value.startswith(src.rstrip("/") + "/"):
            value = dst + value[len(src.rstrip("/")) :]
            break
    return translate(value, *then) if then else value


def translate_arg(arg: str, mapping: list[tuple[str, str]], *then: list[tuple[str, str]]) -> str:
    """A Hydra `key=value` whose value is a cache path (Level 5's reward function) -> this machine's path."""
    key, sep, value = arg.partition("=")
    return key + sep + translate(value, mapping, *then) if sep else arg


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
        choices=("fast", "full", "location"),
        default="fast",
        help="fast: resolve the driver's import, judge Ray workers from verl's own processes; "
        "full: also import megatron.bridge in the driver and in a Ray task; location: resolve only",
    )
    ap.add_argument(
        "--megatron-lm",
        default="submodule",
        help="Megatron-Core to use: submodule (Bridge's 3rdparty/Megatron-LM), installed (the "
        "environment's megatron-core), or a Megatron-LM tree's path",
    )
    ap.add_argument(
        "--preflight",
        choices=("auto", "off"),
        default="auto",
        help="auto: look up the environment and add the overrides that avoid what it lacks",
    )
    ap.add_argument("--bridge-tests", choices=("auto", "skip"), default="auto")
    ap.add_argument(
        "--final-ray-stop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="end the processes the cell started (its Ray cluster) after the last phase; never another's",
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


def megatron_lm(bridge: Path, choice: str) -> Path | None:
    """The Megatron-LM tree to put on PYTHONPATH (None: the environment's own megatron-core)."""
    if choice == "installed":
        return None
    return bridge / "3rdparty" / "Megatron-LM" if choice == "submodule" else Path(choice).resolve()


def pinned_megatron_lm(bridge: Path) -> str | None:
    """The Megatron-LM commit the Bridge checkout pins (its submodule's gitlink), if it is a git tree."""
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(bridge), "ls-tree", "HEAD", "3rdparty/Megatron-LM"],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = proc.stdout.split()
    return fields[2] if proc.returncode == 0 and len(fields) >= 3 and fields[1] == "commit" else None


def make_pythonpath(rec: Recorder, bridge: Path, verl: Path, mlm: Path | None) -> str:
    started = time.time()
    parts = [str(PROBE_DIR), str(bridge / "src"), *([str(mlm)] if mlm else []), str(verl)]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    pythonpath = ":".join(parts)
    rec.provenance["pythonpath"] = pythonpath
    rec.provenance["megatron_lm"] = str(mlm) if mlm else "installed"
    rec.provenance["megatron_lm_commit"] = pinned_megatron_lm(bridge)  # what the PR pins, whichever ran
    rec.step("pythonpath", "ok", pythonpath, started)
    return pythonpath


def check_environment(
    rec: Recorder, cell: dict, pythonpath: str, model_path: str | None
) -> tuple[list[str], int | None]:
    """The preflight: (Hydra overrides to add, exit code if the cell must stop)."""
    started = time.time()
    engine = cell["phases"][0]["env"].get("ENGINE", "vllm")
    info = preflight.lookup(pythonpath, engine)
    needs = preflight.model_needs(model_path)
    overrides, limitations, notes, blocking = preflight.decide(info, preflight.checkpoints(cell), needs)
    env, env_limitations, env_notes = preflight.environment(info)
    rec.overrides.update(env)  # every phase's environment (run_phases)
    limitations, notes = limitations + env_limitations, notes + env_notes
    rec.provenance["environment"] = {
        "found": info.get("found", {}),
        "megatron_core": info.get("megatron_core"),
        "python": info.get("python"),
        "overrides": overrides,
        "notes": notes,
    }
    if blocking:
        rec.step("preflight", "failed", blocking, started)
        return [], rec.fail("preflight", "setup", blocking)
    rec.provenance["limitations"] += limitations
    rec.step("preflight", "ok", "; ".join(notes) or "nothing missing", started)
    return overrides, None


def run_phases(
    args: argparse.Namespace,
    cell: dict,
    rec: Recorder,
    env0: dict,
    extra: list[str],
    pythonpath: str,
    imports: importcheck.ModuleImports | None = None,
) -> None:
    ckpt_root = args.work / "checkpoints"
    # the cell's paths -> this machine's, then a cache dir the driver made a copy of -> the copy (a task made
    # for the cell: its reward path; the first pair won when the two were one list, H100, 2026-12-05)
    mapping: list[tuple[str, str]] = [(a, b) for a, _, b in (m.partition("=") for m in args.map)]
    listing: dict = {}
    for index, phase in enumerate(cell["phases"]):
        env = dict(env0)
        env.update({k: translate(v, mapping, rec.arg_paths) for k, v in phase["env"].items()})
        env.update(rec.overrides)
        trace = args.out / "trace" / phase["name"]  # every process of the phase records its Bridge functions
        env.update(VERL_E2E_TRACE_DIR=str(trace), VERL_E2E_TRACE_ROOT=str(args.bridge.resolve()))
        stop_own_processes(rec.token)  # what an earlier phase of this cell left behind
        cmd = [
            "bash",
            WRAPPER,
            *(translate_arg(a, mapping, rec.arg_paths) for a in phase["args"]),
            *extra,
            f"trainer.default_local_dir={ckpt_root}",
            # a Ray cluster of the cell's own, never one that happens to run on the machine
            "++ray_kwargs.ray_init.address=local",
            # no cell reads Ray's dashboard; its process and its agents cost the launch a few seconds
            "++ray_kwargs.ray_init.include_dashboard=False",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.PYTHONPATH={pythonpath}",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_E2E_TRACE_DIR={trace}",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.VERL_E2E_TRACE_ROOT={args.bridge.resolve()}",
        ]
        rec.provenance["commands"].append(" ".join(cmd))
        set_here = {k: env[k] for k in sorted({*phase["env"], *rec.overrides, "PYTHONPATH"}) if k in env}
        rec.phases[index].update(status="running", command=" ".join(cmd), env=set_here, cwd=str(args.verl))
        rec.save()
        log(f"phase {phase['name']}: {' '.join(cmd)}")
        started = time.time()
        marks = Milestones()
        code, status, tail = run_logged(
            cmd,
            cwd=args.verl.resolve(),
            env=env,
            log_path=args.out / f"{phase['name']}.log",
            prefix=f"[{phase['name']}] ",
            timeout=args.phase_timeout or cell["timeout_minutes"] * 60,
            marks=marks,
            stuck=Stuck(checks=(imports.due,) if imports is not None else ()),
        )
        rec.phases[index].update(
            status=status,
            exit_code=code,
            duration_s=round(time.time() - started, 3),
            log_tail=tail[-10:],
            milestones=marks.seen,
        )
        try:
            count = functions.merge(args.out / "trace", args.out / "bridge-functions.json", args.bridge.resolve())
            log(f"phase {phase['name']}: {count} Bridge function(s) ran so far (bridge-functions.json)")
            steps = functions.merge_updates(args.out / "trace", args.out / "updates.json")
            log(f"phase {phase['name']}: {steps} optimizer step(s) recorded so far (updates.json)")
        except OSError as exc:
            log(f"phase {phase['name']}: the function records could not be merged: {exc}")
        listing[phase["name"]] = checkpoint_listing(ckpt_root)
        write_json(args.out / "checkpoints.json", listing)
        rec.save()
        log(f"phase {phase['name']}: {status} (exit {code}) in {time.time() - started:.1f}s")
        if status != "ok":
            break


def main(argv: list[str] | None = None) -> int:
    """Run the cell; a crash of the driver itself is recorded, so the verdict says so (not a Skip)."""
    args = parse_args(argv)
    try:
        return run_cell(args)
    except Exception as exc:
        traceback.print_exc()
        rec = Recorder.reopen(args.out)
        return rec.fail("driver", "harness", f"the cell driver crashed: {type(exc).__name__}: {exc}")


def run_cell(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
    cell = json.loads(args.cell.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(args.out, cell)
    bridge, verl = args.bridge.resolve(), args.verl.resolve()

    record_repos(rec, bridge, verl)
    pythonpath = make_pythonpath(rec, bridge, verl, megatron_lm(bridge, args.megatron_lm))
    stopped = importcheck.verify_location(rec, bridge, pythonpath, args.import_check, {CELL_TOKEN: rec.token})
    if stopped is not None:
        return stopped
    imports = importcheck.start_module_imports(rec, bridge, pythonpath, args.import_check)
    code = _prepare_and_run(args, cell, rec, bridge, verl, pythonpath, imports)
    stopped = imports.finish() if imports is not None else None  # a Bridge module that failed names the cell
    return code if stopped is None else stopped


def _prepare_and_run(
    args: argparse.Namespace,
    cell: dict,
    rec: Recorder,
    bridge: Path,
    verl: Path,
    pythonpath: str,
    imports: importcheck.ModuleImports | None,
) -> int:
    """Preflight, data, model, then the phases under the host lock (the exit code)."""
    extra: list[str] = []
    mapping = [tuple(m.split("=", 1)) for m in args.map]
    first_env = {k: translate(v, mapping) for k, v in cell["phases"][0]["env"].items()}
    if args.preflight == "auto":
        extra, stopped = check_environment(rec, cell, pythonpath, first_env.get("MODEL_PATH"))
        if stopped is not None:
            return stopped
    base_env = dict(os.environ, PYTHONPATH=pythonpath, RAY_USAGE_STATS_ENABLED="0")
    base_env.pop("RAY_ADDRESS", None)  # the cell starts its own cluster (see run_phases)
    base_env[CELL_TOKEN] = rec.token
    if "bridge_tests" in cell.get("checks", []) and args.bridge_tests == "auto":
        bridge_tests(cell, bridge, base_env, args.out, rec, timeout=1800)

    args.work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["rm", "-rf", str(args.work / "checkpoints")], check=False)  # stale, from an unrelated run
    for prep in (
        lambda: prepare_data(first_env, verl, rec, base_env, args.work),
        lambda: prepare_model(cell, first_env, args.work, rec),
    ):
        problem = prep()
        if problem:
            return rec.fail("data/model", "setup", problem)
    if modules := remote_code_modules(cell, args.work, rec):
        pythonpath = base_env["PYTHONPATH"] = f"{pythonpath}:{modules}"
    rm = first_env.get("RM_MODEL_PATH")
    if not rm or not Path(rm).is_dir():
        extra.append("reward.reward_model.enable=False")
        rec.provenance["limitations"].append(
            "reward model disabled (reward.reward_model.enable=False): not in the cache"
        )
    rec.save()

    started = time.time()
    with hostlock.held(log) as waited:
        if waited >= 1:
            rec.step("host-lock", "ok", f"waited {waited:.0f} s for another verl run sharing /tmp", started)
        run_phases(args, cell, rec, base_env, extra, pythonpath, imports)
    if args.final_ray_stop:
        stop_own_processes(rec.token)
    return 0 if all(p["status"] == "ok" for p in rec.phases) else 1


def _on_term(signum: int, frame: object) -> None:  # noqa: ARG001
    STATE["cancelled"] = True
    proc = STATE["proc"]
    if proc is None:
        raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
