"""A cell whose model is on disk runs with the Hugging Face hub switched off on every backend: the
container backend always sets it, and the driver now sets it for the local and Slurm backends too, so
no Ray worker of a cell on a machine without internet waits on a hub lookup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
from prepare import prepare_model  # noqa: E402 - the driver's preparation (standard library only)
from records import Recorder  # noqa: E402

CELL = {"phases": [{"name": "run"}], "dummy_config": None}


@pytest.fixture(autouse=True)
def _no_hub_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)


def test_a_cached_model_switches_the_hub_off(tmp_path: Path) -> None:
    model = tmp_path / "models" / "local" / "tiny"
    model.mkdir(parents=True)
    rec = Recorder(tmp_path, CELL)
    assert prepare_model(CELL, {"MODEL_PATH": str(model), "MODEL_ID": "local/tiny"}, tmp_path, rec) is None
    assert rec.overrides == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_a_model_the_wrapper_must_fetch_keeps_the_hub(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, CELL)
    prepare_model(CELL, {"MODEL_PATH": str(tmp_path / "absent"), "MODEL_ID": "org/x"}, tmp_path, rec)
    assert "HF_HUB_OFFLINE" not in rec.overrides
    assert "not in the cache" in rec.provenance["steps"][-1]["detail"]


def test_a_value_the_caller_set_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    rec = Recorder(tmp_path, CELL)
    env = {"MODEL_PATH": str(tmp_path), "MODEL_ID": "local/x", "TRANSFORMERS_OFFLINE": "0"}
    prepare_model(CELL, env, tmp_path, rec)
    assert rec.overrides == {}


@pytest.mark.parametrize(("key", "where"), [("HF_HUB_OFFLINE", "env"), ("TRANSFORMERS_OFFLINE", "process")])
def test_an_absent_model_with_the_hub_off_stops_before_verl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, where: str
) -> None:
    # the twentieth batch (2026-12-06): 19 cells whose tiny model was never built ran verl for 25-100 s
    # each and stopped on "the configuration was rejected at `critic.model`", a message that names no model
    env = {"MODEL_PATH": str(tmp_path / "models" / "tiny" / "glm"), "MODEL_ID": "tiny/glm"}
    if where == "env":
        env[key] = "1"
    else:
        monkeypatch.setenv(key, "1")
    rec = Recorder(tmp_path, CELL)
    problem = prepare_model(CELL, env, tmp_path, rec)
    assert problem is not None
    assert problem.startswith(f"model tiny/glm is not at {tmp_path}/models/tiny/glm and the hub is off ({key}=1)")
    assert "tools/make_tiny_model.py" in problem
