"""Architectures no transformers release defines, for tools/make_tiny_model.py: the classes Bridge registers.

Why: some checkpoints (Ling's `BailingMoeV2ForCausalLM`) ship their own configuration and modeling code and
name it in config.json's `auto_map`. Bridge carries a copy of that code and registers it with transformers'
Auto classes when its bridge module is imported, so on a node with Bridge the tiny model can be built from
that copy. It is written as the release is: config.json names the configuration file in `auto_map` and the
file sits beside the weights, so a process that reads the checkpoint without importing Bridge first
(verl's trainer, vLLM's engine) loads the config with `trust_remote_code`, as it loads the release's.

transformers is imported inside the functions, so the module loads without it (the pure parts are tested
without torch).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shell:
    """A release whose own code is a thin shell over a transformers architecture: its weights are that
    architecture's (plus what `MTP_NAMING` adds), its configuration file subclasses that architecture's
    config under its own `model_type`, and its config.json names the file in `auto_map`."""

    base: str  # the architecture that builds the weights
    model_type: str
    config_file: str  # the file the release's auto_map names
    config_class: str
    config_source: str = ""  # what that file holds: the release's class restated (empty: the base's, renamed)
    base_package: str = ""  # Bridge's models/<package>/ that registers the base (empty: transformers has it)


# XiaomiMiMo's MiMo-7B: Qwen2 with `num_nextn_predict_layers` MTP layers under `model.mtp_layers.N` (the
# release's configuration_mimo.py subclasses Qwen2Config with that one field; Bridge's MimoBridge extends
# Qwen2Bridge and maps those layers; vLLM's MiMoForCausalLM skips them when it loads)
_MIMO_CONFIG = """from transformers.models.qwen2.configuration_qwen2 import Qwen2Config


class MiMoConfig(Qwen2Config):
    model_type = "mimo"

    def __init__(self, *args, num_nextn_predict_layers=0, **kwargs):
        self.num_nextn_predict_layers = num_nextn_predict_layers
        super().__init__(*args, **kwargs)
"""
SHELLS = {
    "MiMoForCausalLM": Shell("Qwen2ForCausalLM", "mimo", "configuration_mimo.py", "MiMoConfig", _MIMO_CONFIG),
    # Sarvam's sarvam-30b: vLLM 0.24's SarvamMoEForCausalLM is its BailingMoeForCausalLM unchanged, and Bridge's
    # SarvamMoEBridge maps the same names as its Ling bridge and reads only keys Ling's configuration has. The
    # release's own configuration file is not available offline, so Ling's (Bridge's copy) stands in for it
    # under Sarvam's names.
    "SarvamMoEForCausalLM": Shell(
        "BailingMoeV2ForCausalLM",
        "sarvam_moe",
        "configuration_sarvam_moe.py",
        "SarvamMoEConfig",
        base_package="bailing",
    ),
}


def renamed_config(source: str, old_class: str, shell: Shell) -> str:
    """A base configuration file under the shell's class name and model type. Raises ValueError when the
    file does not define the class and model type where a rename can find them."""
    old_type = re.search(r'^\s+model_type\s*=\s*"([^"]+)"', source, re.M)
    if f"class {old_class}(" not in source or old_type is None:
        raise ValueError(f"the base configuration does not define {old_class} with a model_type to rename")
    out = re.sub(rf"\b{old_class}\b", shell.config_class, source)
    return out.replace(f'"{old_type.group(1)}"', f'"{shell.model_type}"')


def write_shell(architecture: str, out: Path, config_class: Any = None) -> list[str]:
    """Make a checkpoint built with the shell's base architecture the release's: its model type and
    architecture in config.json, its configuration file beside it, named in `auto_map`."""
    shell = SHELLS[architecture]
    source, note = shell.config_source, "the release's configuration restated"
    if not source:
        path = Path(inspect.getfile(config_class))
        source, note = renamed_config(path.read_text(), config_class.__name__, shell), f"{path.name} renamed"
        _must_load_alone(path.name, source)
    (out / shell.config_file).write_text(source)
    entry = f"{Path(shell.config_file).stem}.{shell.config_class}"
    _update_config(out, model_type=shell.model_type, architectures=[architecture], auto_map={"AutoConfig": entry})
    return [
        f"remote code: {shell.base} weights as {architecture} (model_type {shell.model_type!r}), auto_map -> {entry}"
        f" ({note})"
    ]


# what a configuration file may import and still be loaded on its own by transformers' dynamic modules:
# the standard library and transformers itself (Bridge's modeling files import Bridge, so they stay out)
_ALONE = ("transformers", "typing", "typing_extensions", "__future__", "copy", "math", "dataclasses", "enum")


def import_bridge_package(package: str) -> str | None:
    """Import Bridge's models/<package>/, whose bridge registers the checkpoint's classes with transformers;
    the failure as one line, or None."""
    try:
        importlib.import_module(f"megatron.bridge.models.{package}")
    except Exception as exc:  # any import failure is a row of the report, not the end of the build
        lines = [ln for ln in str(exc).splitlines() if ln.strip()]
        return f"importing megatron.bridge.models.{package}: {type(exc).__name__}: {lines[-1] if lines else ''}"
    return None


def registered(architecture: str) -> tuple[Any, Any]:
    """(model class, config class) registered at run time with a transformers Auto model class under the
    architecture's name; (None, None) when nothing registered it."""
    import transformers  # noqa: PLC0415

    for auto_name in ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel"):
        auto = getattr(transformers, auto_name, None)
        extra = getattr(getattr(auto, "_model_mapping", None), "_extra_content", {}) or {}
        for config_class, model_class in extra.items():
            if getattr(model_class, "__name__", "") == architecture:
                return model_class, config_class
    return None, None


def standalone_imports(source: str) -> list[str]:
    """The top-level modules a file imports that transformers' dynamic loading could not find beside it:
    everything but the standard-library few and transformers (empty means the file loads on its own)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out += [n for n in names if n.split(".")[0] not in _ALONE and n.split(".")[0] not in sys.stdlib_module_names]
    return sorted(set(out))


def _must_load_alone(name: str, source: str) -> None:
    """Raise ValueError when a configuration file imports what a checkpoint directory cannot hold."""
    foreign = standalone_imports(source)
    if foreign:
        raise ValueError(f"{name} imports {', '.join(foreign)}: it cannot be loaded from the checkpoint alone")


def auto_map_entry(config_class: Any) -> tuple[Path, str]:
    """The file defining the config class and its `auto_map` entry (`<module file stem>.<class name>`)."""
    path = Path(inspect.getfile(config_class))
    return path, f"{path.stem}.{config_class.__name__}"


def write_auto_map(config_class: Any, out: Path) -> list[str]:
    """Copy the configuration file beside the checkpoint and name it in config.json's `auto_map`, as the
    release does. Raises ValueError when the file imports what a checkpoint directory cannot hold."""
    path, entry = auto_map_entry(config_class)
    _must_load_alone(path.name, path.read_text())
    shutil.copy2(path, out / path.name)
    _update_config(out, auto_map={"AutoConfig": entry})
    return [f"remote code: config.json auto_map AutoConfig -> {entry}, {path.name} copied from Bridge"]


def _update_config(out: Path, **fields: Any) -> None:
    """Set top-level keys of the checkpoint's config.json (save_pretrained wrote it from the base class)."""
    config_file = out / "config.json"
    doc = json.loads(config_file.read_text())
    doc.update(fields)
    config_file.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def remote_classes(package: str, architecture: str) -> tuple[Any, Any, str]:
    """(model class, config class, why not) for a family whose checkpoint ships its own code: a shell's
    base architecture from transformers, else the classes Bridge's package registers."""
    shell = SHELLS.get(architecture)
    if shell is not None and not shell.base_package:
        import transformers  # noqa: PLC0415

        cls = getattr(transformers, shell.base)
        return cls, cls.config_class, ""
    if shell is not None:
        package, architecture = shell.base_package, shell.base
    failed = import_bridge_package(package)
    if failed:
        return None, None, failed
    cls, config_class = registered(architecture)
    if cls is None:
        return (
            None,
            None,
            (
                f"{architecture} is not in transformers, and Bridge's models/{package}/ registers no class of that "
                "name (the tiny model needs the checkpoint's own modeling code)"
            ),
        )
    return cls, config_class, ""
