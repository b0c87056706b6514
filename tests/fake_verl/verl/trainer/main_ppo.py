"""Test double for `python3 -m verl.trainer.main_ppo` (verl's PPO trainer needs GPUs and vLLM).

Reads the Hydra overrides the wrapper passes, looks up megatron.bridge the way verl does (so the
import probe reports the path), prints verl's console formats (from `verl_formats`, a copy of
tests/verl_log.py placed beside this file) and writes verl's checkpoint layout:
`<default_local_dir>/global_step_N/{actor,critic}/{model,optimizer,extra,huggingface}`, `data.pt`
and `latest_checkpointed_iteration.txt`, resuming from the tracker with `trainer.resume_mode=auto`.

FAKE_VERL_MODE tells it how to behave: pass (default), crash (a worker exception after the first step),
setup-fail (ROCR_VISIBLE_DEVICES, before the model is built), hang, exit137, nan, wrong-bridge (look
Bridge up in site-packages first, as an environment that shadows the checkout would).
"""

import importlib.util
import os
import signal
import sys
import sysconfig
import time
from pathlib import Path

from verl.trainer import verl_formats as F


def overrides(argv):
    out = {}
    for arg in argv:
        if "=" in arg and not arg.startswith("--"):
            key, value = arg.split("=", 1)
            out[key.lstrip("+")] = value.strip("'\"")
    return out


def say(text):
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def save(root, step):
    step_dir = root / f"global_step_{step}"
    for role in ("actor", "critic"):
        for part in ("model", "optimizer", "extra", "huggingface"):
            (step_dir / role / part).mkdir(parents=True, exist_ok=True)
        (step_dir / role / "transformer_config.json").write_text("{}")
    (step_dir / "data.pt").write_bytes(b"\0" * 16)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    say(f"{F.TASK}local_global_step_folder: {step_dir}")
    say(f"{F.WORKER}Saving HF model checkpoint to {step_dir}/actor/huggingface with bridge")
    say(f"{F.WORKER}Checkpoint save completed for {step_dir}/actor")


def main():
    cfg = overrides(sys.argv[1:])
    mode = os.environ.get("FAKE_VERL_MODE", "pass")
    if mode == "wrong-bridge":
        sys.path.insert(0, sysconfig.get_paths()["purelib"])
    importlib.util.find_spec("megatron.bridge")  # verl imports Bridge here; the probe reports from where

    for key in ("data.train_files", "data.val_files"):
        if not Path(cfg.get(key, "")).is_file():
            say(
                F.worker_traceback(
                    "FileNotFoundError",
                    f"Unable to find '{cfg.get(key)}'",
                    frames=("run",),
                    actor_method="run",
                )
            )
            return 1
    if mode == "gcs-once":  # Ray's head unreachable on the first attempt only (a transient cause)
        marker = Path(cfg.get("trainer.default_local_dir", "checkpoints")).parent / "gcs-failed-once"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("1")
            say("[2026-12-01 10:00:00,000 W 1 1] gcs_client.cc:186: Failed to get cluster ID from GCS server: TimedOut")
            say(
                F.worker_traceback(
                    "RuntimeError",
                    "Failed to connect to GCS at address 127.0.0.1:6379",
                    frames=("run",),
                    actor_method="run",
                )
            )
            return 1
    if mode == "plant-links":  # what hostile PR code could do: links in the run dir to the host's files
        run_dir = Path(os.environ.get("FAKE_VERL_RUN_DIR", "/run/verl-e2e"))
        (run_dir / "bridge-tests.log").symlink_to(os.environ["FAKE_VERL_STOLEN"])
        (run_dir / "evidence.json").symlink_to(os.environ["FAKE_VERL_TARGET"])
        (run_dir / "verdict.json").write_text('{"result": "Pass"}')
    if mode == "setup-fail":
        say(
            F.worker_traceback(
                "ValueError",
                "Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES is set.",
                frames=("__init__",),
                actor_method="__init__",
            )
        )
        return 1

    root = Path(
        cfg.get("trainer.default_local_dir", "checkpoints/verl-test/" + cfg.get("trainer.experiment_name", "run"))
    )
    total = int(cfg.get("trainer.total_training_steps", "1"))
    save_freq = int(cfg.get("trainer.save_freq", "-1"))
    start = 0
    tracker = root / "latest_checkpointed_iteration.txt"
    if cfg.get("trainer.resume_mode") == "auto" and tracker.is_file():
        start = int(tracker.read_text().strip())
        say(f"{F.TASK}Found checkpoint: %s {root}/global_step_{start}")
        say(f"{F.TASK}Load from checkpoint folder: {root}/global_step_{start}")
        say(f"{F.TASK}Setting global step to {start}")
        say(f"{F.WORKER}[Rank 0] Loaded sharded model checkpoint from {root}/global_step_{start}/actor/model")
    else:
        say(f"{F.TASK}Checkpoint tracker file does not exist: {tracker}")
        say(f"{F.TASK}Training from scratch")
    say(F.progress(start, total))
    for step in range(start + 1, total + 1):
        loss = "nan" if mode == "nan" else 0.01
        say(F.metrics(step, loss=loss, score=0.3 + 0.02 * step))
        say(F.progress(step, total))
        if save_freq > 0 and (step % save_freq == 0 or step == total):
            save(root, step)
        if mode == "crash":
            say(
                F.worker_traceback(
                    "RuntimeError",
                    "CUDA error: an illegal memory access was encountered",
                    frames=("update_actor",),
                    actor_method="actor_rollout_update_actor",
                )
            )
            return 1
        if mode == "hang":
            say(f"{F.TASK}waiting for the rollout workers")
            time.sleep(10**6)
        if mode == "exit137":
            say("Killed")
            os.kill(os.getpid(), signal.SIGKILL)
    say(f"{F.TASK}(\"Final validation metrics: {{'val-core/openai/gsm8k/acc/mean@1': \"")
    say(f"{F.TASK} '0.5}}')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
