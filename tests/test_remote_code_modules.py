"""A remote-code cell's modules cache reaches every Ray worker (containers/prepare.py `remote_code_modules`).

The twentieth batch's tiny BailingMoeV2 stopped before any Bridge code ran: verl's trainer loaded the
config through its checkpoint's own file (trust_remote_code), transformers imported that file as
`transformers_modules.<dir>.configuration_bailing_moe_v2`, and the config, pickled by reference to that
module, reached a Ray worker that could not import it ("No module named 'transformers_modules'"). Here a
real local Ray cluster gets a config of such a module, once without and once with the cell's path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "containers"))
from prepare import remote_code_modules  # noqa: E402 - the driver's preparation (standard library only)
from records import Recorder  # noqa: E402

REMOTE = {"phases": [{"name": "run", "args": ["x=1", "actor_rollout_ref.model.trust_remote_code=True"]}]}
PLAIN = {"phases": [{"name": "run", "args": ["x=1", "actor_rollout_ref.model.trust_remote_code=False"]}]}

# what transformers' dynamic-module loader writes under HF_MODULES_CACHE for a local checkpoint with an
# `auto_map` (a package per checkpoint directory, the configuration file copied into it)
CONFIG_FILE = """
class TinyRemoteConfig:
    model_type = "tiny_remote_test"

    def __init__(self, layers):
        self.num_hidden_layers = layers
"""


def test_only_a_remote_code_cell_gets_a_modules_cache(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, PLAIN)
    assert remote_code_modules(PLAIN, tmp_path, rec) is None and "HF_MODULES_CACHE" not in rec.overrides
    rec = Recorder(tmp_path, REMOTE)
    modules = remote_code_modules(REMOTE, tmp_path, rec)
    assert modules == str(tmp_path / "hf-modules") and Path(modules).is_dir()
    assert rec.overrides["HF_MODULES_CACHE"] == modules
    assert any("HF_MODULES_CACHE" in line for line in rec.provenance["limitations"])


def test_a_ray_worker_unpickles_a_remote_code_config_only_with_the_cache_on_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ray = pytest.importorskip("ray")
    modules = Path(remote_code_modules(REMOTE, tmp_path, Recorder(tmp_path, REMOTE)) or "")
    package = modules / "transformers_modules" / "tiny_bailing"
    package.mkdir(parents=True)
    (modules / "transformers_modules" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "configuration_tiny_remote.py").write_text(CONFIG_FILE)
    monkeypatch.syspath_prepend(str(modules))  # what init_hf_modules does in the process that loads it
    from transformers_modules.tiny_bailing.configuration_tiny_remote import TinyRemoteConfig

    config = TinyRemoteConfig(2)

    @ray.remote(num_cpus=0)
    class Worker:  # as verl's WorkerDict: the config travels with the actor's creation
        def __init__(self, cfg: object) -> None:
            self.cfg = cfg

        def layers(self) -> int:
            return int(self.cfg.num_hidden_layers)  # type: ignore[attr-defined]

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        bare = Worker.remote(config)
        with pytest.raises(ray.exceptions.RayActorError) as stopped:
            ray.get(bare.layers.remote(), timeout=120)
        assert "No module named 'transformers_modules'" in str(stopped.value)
        pathed = Worker.options(runtime_env={"env_vars": {"PYTHONPATH": str(modules)}}).remote(config)
        assert ray.get(pathed.layers.remote(), timeout=120) == 2
    finally:
        ray.shutdown()
