"""The tiny builder's remote-code path (tools/tiny_remote.py): architectures no transformers release defines,
built from the classes Bridge registers, and written with the configuration file and `auto_map` a release
ships. The pure parts read Bridge's own files in place; the build needs torch and transformers (the GPU
node has both) and skips without them."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import ROOT, SHARED, engine_missing

sys.path.insert(0, str(ROOT / "tools"))
import make_tiny_model as mtm
import tiny_keys
import tiny_remote

from .test_tiny_models import tiny_tokenizer

TARBALL = SHARED / "gpu" / "src" / "megatron-bridge-067f987-with-megatron-lm-2a75ac1.tgz"
MODELS = "Megatron-Bridge/src/megatron/bridge/models/"


def _bridge_file(name: str) -> str:
    """models/<name> of Bridge 067f987, read from the team's tarball in place."""
    if not TARBALL.is_file():  # a skip here, a failure where CI promises the shared data
        engine_missing(f"{TARBALL} is not here (the team's shared Bridge tarball, read in place)")
    with tarfile.open(TARBALL) as tar:
        member = tar.extractfile(MODELS + name)
        assert member is not None
        return member.read().decode()


def test_bridges_bailing_configuration_loads_alone_and_its_modeling_does_not() -> None:
    assert tiny_remote.standalone_imports(_bridge_file("bailing/configuration_bailing_moe_v2.py")) == []
    foreign = tiny_remote.standalone_imports(_bridge_file("bailing/modeling_bailing_moe_v2.py"))
    assert "megatron.bridge.models.bailing.configuration_bailing_moe_v2" in foreign
    assert "torch" in foreign


def test_imports_that_a_checkpoint_directory_cannot_hold() -> None:
    source = "import os\nfrom typing import Any\nfrom transformers import PretrainedConfig\nimport numpy as np\n"
    assert tiny_remote.standalone_imports(source) == ["numpy"]
    assert tiny_remote.standalone_imports("from .sibling import X\n") == []  # relative: copied beside it


def test_remote_code_families_carry_their_bridge_package() -> None:
    families = tiny_keys.load_families(yaml.safe_load((ROOT / "matrix.yaml").read_text()))
    assert families["bailing"].remote_code and families["bailing"].package == "bailing"
    assert families["step37"].package == "stepfun"  # matrix `dir`
    assert not families["qwen"].remote_code


def test_an_unknown_bridge_package_is_a_report_row() -> None:
    cls, config_class, why = tiny_remote.remote_classes("no_such_package_here", "NoSuchForCausalLM")
    assert cls is None and config_class is None
    assert why.startswith("importing megatron.bridge.models.no_such_package_here: ModuleNotFoundError")


# --- a real build: torch and transformers -----------------------------------------------------------------

# Stands in for a Bridge package that registers a checkpoint's own classes on import (as
# models/bailing/bailing_moe2_bridge.py does): a Llama-shaped model under a model type transformers does not
# know, its configuration in a file of its own that imports transformers only.
FAKE_CONFIG = """
from transformers import LlamaConfig


class TinyRemoteConfig(LlamaConfig):
    model_type = "tiny_remote_test"
"""
FAKE_PACKAGE = """
from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

from .configuration_tiny_remote import TinyRemoteConfig


class TinyRemoteForCausalLM(LlamaForCausalLM):
    config_class = TinyRemoteConfig


AutoConfig.register("tiny_remote_test", TinyRemoteConfig, exist_ok=True)
AutoModelForCausalLM.register(TinyRemoteConfig, TinyRemoteForCausalLM, exist_ok=True)
"""


def _fake_bridge_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the stand-in Bridge package (FAKE_PACKAGE) on the path; skip where the build cannot run."""
    pytest.importorskip("torch", reason="torch is not installed: the tiny-model builds run on the GPU node")
    pytest.importorskip("transformers", reason="transformers is not installed: the tiny-model builds need it")
    package = tmp_path / "site" / "megatron" / "bridge" / "models" / "tiny_remote"
    package.mkdir(parents=True)
    (package / "configuration_tiny_remote.py").write_text(textwrap.dedent(FAKE_CONFIG))
    (package / "__init__.py").write_text(textwrap.dedent(FAKE_PACKAGE))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def _build_one(tmp_path: Path, family: str, architecture: str) -> tuple[dict[str, Any], Path]:
    """Build one remote-code family of a one-family matrix: (its report row, its checkpoint directory)."""
    matrix = tmp_path / "matrix.yaml"
    fam = {"architectures": [architecture], "model": "x/y", "remote_code": "the checkpoint's own code"}
    matrix.write_text(yaml.safe_dump({"families": {family: fam}}))
    report = tmp_path / "report.json"
    argv = [str(tmp_path / "out"), "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")), "--matrix", str(matrix)]
    rc = mtm.main([*argv, "--report", str(report)])
    row: dict[str, Any] = json.loads(report.read_text())["families"][0]
    assert rc == 0, row
    return row, tmp_path / "out" / family


def _load_in_a_fresh_process(out: Path, *fields: str) -> list[str]:
    """The config's class name and `fields`, read by a process that never imported the package: only the
    configuration file beside the weights can give it the class."""
    probe = (
        "import sys; from transformers import AutoConfig; c = AutoConfig.from_pretrained(sys.argv[1], "
        "trust_remote_code=True); print(type(c).__name__, *(getattr(c, f) for f in sys.argv[2:]))"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(out), *fields], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_registered_architecture_is_built_with_its_configuration_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_bridge_package(tmp_path, monkeypatch)
    _row, out = _build_one(tmp_path, "tiny_remote", "TinyRemoteForCausalLM")
    doc = json.loads((out / "config.json").read_text())
    assert doc["auto_map"] == {"AutoConfig": "configuration_tiny_remote.TinyRemoteConfig"}
    assert doc["architectures"] == ["TinyRemoteForCausalLM"] and doc["model_type"] == "tiny_remote_test"
    assert (out / "configuration_tiny_remote.py").read_text() == textwrap.dedent(FAKE_CONFIG)
    assert _load_in_a_fresh_process(out, "num_hidden_layers") == ["TinyRemoteConfig", str(doc["num_hidden_layers"])]


def test_a_shell_release_is_written_with_its_own_model_type_and_configuration_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}))
    notes = tiny_remote.write_shell("MiMoForCausalLM", tmp_path)
    doc = json.loads((tmp_path / "config.json").read_text())
    assert doc == {
        "model_type": "mimo",
        "architectures": ["MiMoForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_mimo.MiMoConfig"},
    }
    source = (tmp_path / "configuration_mimo.py").read_text()
    assert tiny_remote.standalone_imports(source) == []  # transformers' dynamic loader takes it alone
    assert notes and "Qwen2ForCausalLM weights as MiMoForCausalLM" in notes[0]


def test_a_tiny_mimo_has_every_mtp_weight_bridges_mimo_bridge_maps(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed: the tiny-model builds run on the GPU node")
    pytest.importorskip("transformers", reason="transformers is not installed: the tiny-model builds need it")
    import re

    from safetensors import safe_open

    argv = [str(tmp_path / "out"), "--tokenizer", str(tiny_tokenizer(tmp_path / "tok")), "--family", "mimo"]
    assert mtm.main([*argv, "--report", str(tmp_path / "report.json")]) == 0
    out = tmp_path / "out" / "mimo"
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        names = set(weights.keys())
    source = _bridge_file("mimo/mimo_bridge.py")
    mapped = {m.replace("*", "0") for m in re.findall(r"\"(model\.mtp_layers\.\*\.[^\"]+)\"", source)}
    assert len(mapped) >= 14 and mapped <= names, sorted(mapped - names)
    assert _load_in_a_fresh_process(out, "model_type", "num_nextn_predict_layers") == ["MiMoConfig", "mimo", "1"]


def test_the_kimi_record_holds_in_bridges_own_files() -> None:
    """matrix.yaml says no Kimi-K2 checkpoint reaches Bridge's Kimi bridge: the bridge takes only the name
    KimiK2ForCausalLM, the DeepSeek-V3 bridge takes the name Moonshot's checkpoints carry, and Bridge resolves
    a checkpoint's architecture through its auto_map first. If Bridge changes any of the three, the record
    (and the family's cells) must be looked at again."""
    kimi = _bridge_file("kimi/kimi_bridge.py")
    assert 'source="KimiK2ForCausalLM"' in kimi
    assert 'source="DeepseekV3ForCausalLM"' in _bridge_file("deepseek/deepseek_v3_bridge.py")
    auto = _bridge_file("conversion/auto_bridge.py")
    assert auto.index("get_causal_lm_class_name_via_auto_map(config=config)") < auto.index(
        "HF_ARCHITECTURE_ALIASES.get"
    )
    record = yaml.safe_load((ROOT / "matrix.yaml").read_text())["families"]["kimi"]["cannot_run"]
    assert "KimiK2ForCausalLM" in record["why"] and "deepseek_v3" in record["why"]


def test_sarvams_configuration_is_lings_under_sarvams_names() -> None:
    """The tiny Sarvam's configuration file is Bridge's copy of Ling's, renamed: it must still load alone from
    a checkpoint directory, and carry Sarvam's class and model type where transformers reads them."""
    shell = tiny_remote.SHELLS["SarvamMoEForCausalLM"]
    source = tiny_remote.renamed_config(
        _bridge_file("bailing/configuration_bailing_moe_v2.py"), "BailingMoeV2Config", shell
    )
    assert tiny_remote.standalone_imports(source) == []
    assert "class SarvamMoEConfig(" in source and 'model_type = "sarvam_moe"' in source
    assert "BailingMoeV2Config" not in source and '"bailing_moe_v2"' not in source
    with pytest.raises(ValueError, match="does not define NoSuchConfig"):
        tiny_remote.renamed_config(source, "NoSuchConfig", shell)


def test_a_shell_over_a_class_bridge_registers_is_built_with_the_base_configuration_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_bridge_package(tmp_path, monkeypatch)
    shell = tiny_remote.Shell(
        "TinyRemoteForCausalLM",
        "tiny_shell_test",
        "configuration_tiny_shell.py",
        "TinyShellConfig",
        base_package="tiny_remote",
    )
    monkeypatch.setitem(tiny_remote.SHELLS, "TinyShellForCausalLM", shell)
    row, out = _build_one(tmp_path, "tiny_shell", "TinyShellForCausalLM")
    doc = json.loads((out / "config.json").read_text())
    assert doc["auto_map"] == {"AutoConfig": "configuration_tiny_shell.TinyShellConfig"}
    assert doc["architectures"] == ["TinyShellForCausalLM"] and doc["model_type"] == "tiny_shell_test"
    assert "configuration_tiny_remote.py renamed" in " ".join(row["notes"])
    assert _load_in_a_fresh_process(out, "model_type") == ["TinyShellConfig", "tiny_shell_test"]
