"""A change that stops a module from importing fails every cell that imports it: the cheapest recorded
cell that does says so (Level 0 for what `import megatron.bridge` pulls in), a family's Level 4 adds nothing (probes-25 and -27: an imported name the module lacks, a
dataclass field without a default after defaulted ones, a list default). Read from the head tree."""

from __future__ import annotations

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.importbreak import why
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select

UTILS = "src/megatron/bridge/utils/common_utils.py"
AUDIO = "src/megatron/bridge/models/qwen_audio/modeling_qwen2_audio.py"
TREE = {
    UTILS: b"def hook_hf_module_setattr_for_tp_grad_sync(m):\n    return m\n\nCONST = 1\n",
    "src/megatron/bridge/utils/__init__.py": b"",
    "src/megatron/bridge/utils/lazy.py": b"def __getattr__(name):\n    return name\n",
}


def _read(path: str) -> bytes | None:
    return TREE.get(path)


def _module(imported: str) -> bytes:
    return (
        f"import torch\n\nfrom megatron.bridge.utils.common_utils import {imported}\n\n\nclass A:\n    pass\n".encode()
    )


def test_an_import_of_a_name_the_module_lacks_breaks_every_cell() -> None:
    said = why(AUDIO, _module("hook_hf_module_setattr_for_tp_sync"), [3], _read)
    assert said is not None and "hook_hf_module_setattr_for_tp_sync" in said and UTILS in said
    assert why(AUDIO, _module("hook_hf_module_setattr_for_tp_grad_sync"), [3], _read) is None
    assert why(AUDIO, _module("CONST"), [3], _read) is None


def test_a_submodule_a_getattr_module_or_an_unchanged_line_is_not_a_break() -> None:
    sub = b"from megatron.bridge.utils import common_utils\n"
    assert why(AUDIO, sub, [1], _read) is None
    lazy = b"from megatron.bridge.utils.lazy import anything\n"
    assert why(AUDIO, lazy, [1], _read) is None
    assert why(AUDIO, _module("missing_name"), [7], _read) is None  # the changed line is elsewhere
    outside = b"from transformers import NoSuchThing\n"
    assert why(AUDIO, outside, [1], _read) is None  # not Bridge's: its version decides


def test_a_guarded_import_is_left_alone() -> None:
    guarded = (
        b"try:\n    from megatron.bridge.utils.common_utils import missing\nexcept ImportError:\n    missing = None\n"
    )
    assert why(AUDIO, guarded, [2], _read) is None


def test_dataclass_field_order_and_list_defaults_break_at_class_definition() -> None:
    head = "from dataclasses import dataclass, field\n\n\n@dataclass\nclass P:\n    a: int = 1\n"
    assert "without a default" in (why(AUDIO, (head + "    b: bool\n").encode(), [7], _read) or "")
    assert "list, dict or set default" in (why(AUDIO, (head + "    b: list = [1]\n").encode(), [7], _read) or "")
    assert why(AUDIO, (head + "    b: list = field(default_factory=list)\n").encode(), [7], _read) is None
    kw = head.replace("@dataclass", "@dataclass(kw_only=True)") + "    b: bool\n"
    assert why(AUDIO, kw.encode(), [7], _read) is None
    kw_list = head.replace("@dataclass", "@dataclass(kw_only=True)") + "    b: list[int] = [0]\n"
    assert "list, dict or set default" in (why(AUDIO, kw_list.encode(), [7], _read) or "")  # probes-28
    assert why(AUDIO, b"class P:\n    a: int = 1\n    b: bool\n", [3], _read) is None  # not a dataclass
    no_default = head.replace("a: int = 1", "a: int = field(init=False)") + "    b: bool\n"
    assert why(AUDIO, no_default.encode(), [7], _read) is None  # field() without a default is none
    kw_field = head + "    b: bool = field(kw_only=True)\n    c: int = 2\n    d: bool\n"
    assert "`d` without a default" in (why(AUDIO, kw_field.encode(), [9], _read) or "")


def test_a_file_that_no_longer_parses_breaks_every_cell() -> None:
    assert "no longer parses" in (why(AUDIO, b"def f(:\n    pass\n", [1], _read) or "")


CKPT = "src/megatron/bridge/training/checkpointing.py"


def _broken(path: str) -> ChangedFile:
    return ChangedFile(path, diff_lines=("-x", "+y"), import_break=f"{path}: no longer parses")


def test_the_break_selects_the_cheapest_cell_that_imports_the_module(matrix: Matrix) -> None:
    """probes-28: verl imports Bridge's checkpointing only when it saves or resumes LoRA weights, so a
    module that no longer imports there fails Level 1 first, not Level 0; what every cell imports fails
    Level 0; with no record of the module Level 0 still says so."""
    ran = [
        Ran(1, "save-resume", "qwen", "b", "v", {CKPT: frozenset({"<module>"}), UTILS: frozenset({"<module>"})}),
        Ran(0, "lora-ddp", "qwen", "b", "v", {UTILS: frozenset({"<module>"})}),
        Ran(0, "lora-ddp", "qwen3_moe", "b", "v", {UTILS: frozenset({"<module>"})}),
    ]
    assert tuple(select(matrix, [_broken(CKPT)], ran=ran).levels) == (0, 1)  # Level 1 implies its base
    assert tuple(select(matrix, [_broken(UTILS)], ran=ran).levels) == (0,)
    assert tuple(select(matrix, [_broken("src/megatron/bridge/training/new_thing.py")], ran=ran).levels) == (0,)


BRIDGE_BASE = b"""\
class MegatronModelBridge:
    @classmethod
    def register_bridge(cls, *, source, target, provider=None, model_type=None):
        return lambda c: c
"""
MAPPING_SOURCE = (
    b'class AutoMapping:\n    _MODULE_TYPE_REGISTRY = {"column": set(), "row": set(), "replicated": set()}\n'
)
CALLS_TREE = {
    "src/megatron/bridge/models/conversion/model_bridge.py": BRIDGE_BASE,
    "src/megatron/bridge/models/conversion/param_mapping.py": MAPPING_SOURCE,
}
FAMILY = "src/megatron/bridge/models/stepfun/step35_bridge.py"
HEAD = (
    "from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge\n"
    "from megatron.bridge.models.conversion.param_mapping import AutoMapping\n\n"
)


def test_a_module_level_call_a_bridge_function_refuses_breaks_the_import() -> None:
    """probes-29 and -31: `provider_cls=` for `provider=` in a bridge's registration decorator (TypeError),
    and a split kind AutoMapping has no key for (`"row_parallel"`, ValueError), both when the module is
    imported; the right keyword and kind, or a function taking **kwargs, import."""
    read = CALLS_TREE.get
    renamed = (
        HEAD + "@MegatronModelBridge.register_bridge(\n    source='S',\n    provider_cls=P,\n)\nclass B:\n    pass\n"
    )
    assert "provider_cls" in (why(FAMILY, renamed.encode(), [6], read) or "")
    assert why(FAMILY, renamed.replace("provider_cls", "provider").encode(), [6], read) is None
    kind = HEAD + 'AutoMapping.register_module_type("TERowParallelLinearLayerNorm", "row_parallel")\n'
    assert "row_parallel" in (why(FAMILY, kind.encode(), [4], read) or "")
    assert why(FAMILY, kind.replace("row_parallel", "row").encode(), [4], read) is None
    loose = {**CALLS_TREE, "src/megatron/bridge/models/conversion/model_bridge.py": BRIDGE_BASE.replace(
        b"model_type=None", b"**kwargs")}  # fmt: skip
    assert why(FAMILY, renamed.encode(), [6], loose.get) is None
