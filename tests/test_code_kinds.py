"""Levels 1 and 5 from what the changed code does, not from what its class or folder is called; log
messages and config classes no cell builds select nothing; shared code only some architectures use
runs on one of them. Each case is a small change of the kind Bridge PRs make."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import users
from verl_e2e.plan.bodies import owners
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.plan.enrich import with_ast_scopes, with_diff
from verl_e2e.plan.fields import ChangedDefault
from verl_e2e.plan.quiet import log_only_change
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.select import select
from verl_e2e.plan.surface import shipped
from verl_e2e.plan.targets import Targets

PEFT = "src/megatron/bridge/peft/lora_layers.py"
CONFIG = "src/megatron/bridge/training/config.py"
PROBES = Path(__file__).parent / "fixtures" / "selection-probes" / "probes.json"
# written later by someone who had not read the planner, before any plan was made (a held-out set)
HELD_OUT = PROBES.with_name("probes-2.json")
HELD_OUT_3 = PROBES.with_name("probes-3.json")
MODEL_BRIDGE = "src/megatron/bridge/models/conversion/model_bridge.py"


def _change(path: str, *lines: str, scopes: tuple[str, ...] = (), status: str = "M") -> ChangedFile:
    added = tuple(n for n, line in enumerate(lines, 10) if line.startswith("+"))
    return ChangedFile(
        path, status, diff_lines=tuple(line[1:] for line in lines), scopes=scopes, module_level=False, added_at=added
    )


def _rules(matrix: Matrix, file: ChangedFile, level: int) -> set[str]:
    return {r.rule for r in select(matrix, [file]).reasons.get(level, ())}


def test_an_adapter_class_name_or_a_peft_path_selects_neither_level1_nor_level5(matrix: Matrix) -> None:
    file = _change(PEFT, "-        self.rank = rank", "+        self.rank = int(rank)", scopes=("LoRALinearAdapter",))
    assert select(matrix, [file]).levels == (0,)


def test_what_the_save_path_holds_selects_level1(matrix: Matrix) -> None:
    file = _change(
        PEFT, "+        state = self.adapter.sharded_state_dict(prefix)", scopes=("LoRALinear", "sharded_state_dict")
    )
    assert "aspect:saved-state" in _rules(matrix, file, 1)


def test_an_adapters_forward_selects_level5_and_only_there(matrix: Matrix) -> None:
    forward = _change(PEFT, "+        out = base + self.adapter(x).to(base.dtype)", scopes=("LoRALinear", "forward"))
    assert "aspect:adapter-step" in _rules(matrix, forward, 5)
    setup = _change(PEFT, "+        out = base + self.adapter(x).to(base.dtype)", scopes=("LoRALinear", "__init__"))
    assert 5 not in select(matrix, [setup]).levels


def test_a_numerics_default_set_selects_level5_a_check_or_a_new_file_does_not(matrix: Matrix) -> None:
    provider = "src/megatron/bridge/models/gpt_provider.py"
    changed = _change(
        provider, "-    cross_entropy_loss_fusion: bool = True", "+    cross_entropy_loss_fusion: bool = False"
    )
    assert "aspect:numerics-defaults" in _rules(matrix, changed, 5)
    ddp = _change("src/megatron/bridge/training/utils/config_utils.py", '+        "grad_reduce_in_fp32": True,')
    assert "aspect:numerics-defaults" in _rules(matrix, ddp, 5)
    check = _change(provider, "+        assert not self.gradient_accumulation_fusion, 'needs TE'")
    removed = _change(provider, "-    attention_softmax_in_fp32: bool = False")
    copied = _change(provider, "+    cross_entropy_loss_fusion: bool = True", status="A")
    assert all("aspect:numerics-defaults" not in _rules(matrix, f, 5) for f in (check, removed, copied))


def test_writing_adapter_weights_outside_the_optimizer_selects_level5(matrix: Matrix) -> None:
    file = _change(PEFT, "+            torch.distributed.broadcast(p, src=0, group=self.ep_group)", scopes=("sync",))
    assert "aspect:adapter-weights" in _rules(matrix, file, 5)


LOG_DIFF = """diff --git a/src/megatron/bridge/models/conversion/model_bridge.py b/src/megatron/bridge/models/conversion/model_bridge.py
--- a/src/megatron/bridge/models/conversion/model_bridge.py
+++ b/src/megatron/bridge/models/conversion/model_bridge.py
@@ -620,6 +620,6 @@ class MegatronModelBridge:
             if rope_type not in (None, "default"):
                 logger.warning(
-                    f"Unsupported {rope_type=} for MLA model; "
+                    f"Unsupported rope_type {rope_type!r} for an MLA model; "
                     "defaulting to no scaling."
                 )
"""


def test_a_log_message_selects_nothing_and_says_why(matrix: Matrix) -> None:
    diffs = parse_unified_diff(LOG_DIFF)
    (file,) = with_diff([ChangedFile(p) for p in diffs], diffs)
    assert file.log_only
    sel = select(matrix, [file])
    assert sel.levels == () and "only log messages changed" in sel.off_surface[file.path]
    code = LOG_DIFF.replace("@@ -620,6 +620,6 @@", "@@ -620,6 +620,7 @@") + "+            rope_type = None\n"
    diffs = parse_unified_diff(code)
    assert not with_diff([ChangedFile(p) for p in diffs], diffs)[0].log_only


def test_the_trees_tell_a_log_change_from_code() -> None:
    old = b"def f(x):\n    logger.info('a %s', x)\n    return x\n"
    assert log_only_change(old, b"def f(x):\n    logger.debug('b %s', x)\n    return x\n")
    assert log_only_change(old, b"def f(x):\n    return x\n")
    assert not log_only_change(old, b"def f(x):\n    logger.info('a %s', x)\n    return x + 1\n")


def test_text_shown_by_name_is_a_log_change_and_a_key_is_not() -> None:
    """A progress bar's description reads like a message; the same string as a weight name is code."""
    old = b'def f(p):\n    description = f"Loading from {p}"\n    return run(p, desc="Loading", key="a.weight")\n'
    assert log_only_change(old, old.replace(b"Loading from", b"Importing HF weights from"))
    assert log_only_change(old, old.replace(b'desc="Loading"', b'desc="Importing"'))
    assert not log_only_change(old, old.replace(b'key="a.weight"', b'key="b.weight"'))
    keyed = b'def f(sd):\n    prefix = "decoder.layers."\n    return {prefix + k: v for k, v in sd.items()}\n'
    assert not log_only_change(keyed, keyed.replace(b"decoder.layers.", b"model.layers."))  # a key prefix


def test_an_errors_message_is_text_and_its_type_and_condition_are_code() -> None:
    old = b'def f(w):\n    if not w:\n        raise RuntimeError("No adapter weights were found.")\n    return w\n'
    assert log_only_change(old, old.replace(b"No adapter weights were found.", b"save found no adapter weights."))
    assert not log_only_change(old, old.replace(b"RuntimeError", b"ValueError"))
    assert not log_only_change(old, old.replace(b"if not w:", b"if w is None:"))


def test_an_asserts_message_is_text_and_its_test_is_code() -> None:
    old = b'def f(m, k):\n    assert m is not None, (\n        f"Expected mapping for {k} but none found"\n    )\n    return m\n'
    assert log_only_change(old, old.replace(b"Expected mapping for {k} but none found", b"No mapping for {k}"))
    assert not log_only_change(old, old.replace(b"m is not None", b"m is None"))
    assert not log_only_change(old, old.replace(b'f"Expected', b'k or f"Expected'))  # the message computes


EXPORT = "src/megatron/bridge/models/conversion/model_bridge.py"


def test_export_code_every_level0_step_ran_gets_no_level1_from_its_path_or_words(matrix: Matrix) -> None:
    """The rollout's weight sync runs the export at every Level 0 step (and Level 0 checks the rollout
    got the trained weights): Level 1 adds only what runs at save and resume."""
    file = ChangedFile(EXPORT, diff_lines=("        hf_weights = megatron_to_hf(task)",), module_level=False,
                       functions=("MegatronModelBridge.stream_weights_megatron_to_hf",))  # fmt: skip
    every_step = Ran(0, "lora-ddp", "qwen", "", "", {EXPORT: frozenset(file.functions or ())})
    assert 1 not in select(matrix, [file], ran=[every_step]).levels
    nested = replace(file, functions=("_local_name_to_global._update_expert_number",))  # an EP-only helper
    around = Ran(0, "lora-ddp", "qwen", "", "", {EXPORT: frozenset({"_local_name_to_global"})})
    assert 1 not in select(matrix, [nested], ran=[around]).levels  # Level 0 runs the export around it
    save_only = Ran(1, "save-resume", "qwen", "", "", {EXPORT: frozenset(file.functions or ())})
    levels = select(matrix, [file], ran=[save_only]).reasons.get(1, ())
    assert {"hf-export", "aspect:hf-weight-transfer"} <= {r.rule for r in levels}


CONFIG_SOURCE = b"""
VERSION = (0, 7, 0)
NAME = ".".join(map(str, VERSION))


class LoggerConfig:
    skip_train_metrics_log: bool = False
    '''docs'''

    def finalize(self):
        return None
"""


def test_which_classes_a_change_only_sets_values_of() -> None:
    assert owners(CONFIG_SOURCE, [7, 8]) == {"LoggerConfig"}
    assert owners(CONFIG_SOURCE, [2]) == {""}
    assert owners(CONFIG_SOURCE, [3]) is None  # a value computed by a call runs code at import
    assert owners(CONFIG_SOURCE, [11]) is None  # a method's body


def _record(*qualnames: str, path: str = CONFIG) -> Ran:
    return Ran(0, "lora-ddp", "qwen", "", "", {path: frozenset({"<module>", *qualnames})})


def test_a_config_class_no_cell_builds_selects_nothing(matrix: Matrix) -> None:
    file = ChangedFile(CONFIG, diff_lines=("    x: bool = True",), module_level=False, functions=("LoggerConfig",),
                       definitions=("LoggerConfig",))  # fmt: skip
    imported = select(matrix, [file], ran=[_record("LoggerConfig")])
    assert imported.levels == () and "none builds LoggerConfig" in imported.off_surface[CONFIG]
    built = select(matrix, [file], ran=[_record("LoggerConfig", "LoggerConfig.finalize")])
    assert built.levels == (0,)


def test_a_method_of_a_config_class_no_cell_builds_selects_nothing(matrix: Matrix) -> None:
    """Bridge's own scheduler config: verl imports the module and never builds the class."""
    file = ChangedFile(CONFIG, diff_lines=("        if self.max_steps < 1:",), module_level=False,
                       functions=("SchedulerConfig.finalize",))  # fmt: skip
    unbuilt = select(matrix, [file], ran=[_record("SchedulerConfig", "LoggerConfig.finalize")])
    assert unbuilt.levels == () and "none builds SchedulerConfig" in unbuilt.off_surface[CONFIG]
    built = select(matrix, [file], ran=[_record("SchedulerConfig", "SchedulerConfig.finalize")])
    assert built.levels == (0,)


def test_the_body_of_a_config_class_no_cell_builds_is_no_evidence_for_a_change_beside_it(matrix: Matrix) -> None:
    """A new field and the methods that read it (dev PR #3364's kind: `MixedPrecisionConfig`): the class
    body ran when verl imported the module; no cell built the class, so no recorded run selects a level."""
    field = ChangedDefault(CONFIG, 40, "MixedPrecisionConfig", "fp4_param_gather", "False")
    file = ChangedFile(CONFIG, diff_lines=("    fp4_param_gather: bool = False", "        if self.fp4_param_gather:"),
                       module_level=False, functions=("MixedPrecisionConfig", "MixedPrecisionConfig.finalize"),
                       defaults=(field,))  # fmt: skip
    imported = select(matrix, [file], ran=[_record("MixedPrecisionConfig", "LoggerConfig.finalize")])
    assert all(r.rule != "executed" for rs in imported.reasons.values() for r in rs), imported.reasons
    built = select(matrix, [file], ran=[_record("MixedPrecisionConfig", "MixedPrecisionConfig.__post_init__")])
    assert any(r.rule == "executed" for r in built.reasons.get(0, []))
    called = replace(file, defaults=(replace(field, value="os.environ.get('FP4', False)"),))  # runs at import
    imported = select(matrix, [called], ran=[_record("MixedPrecisionConfig", "LoggerConfig.finalize")])
    assert any(r.rule == "executed" for r in imported.reasons.get(0, []))
    # a dataclass field with a named factory (dev PR #863's `field(default_factory=dict)`) stores the factory
    # at import; it runs where the class is built, which no cell does
    factory = replace(file, defaults=(replace(field, value="field(default_factory=dict)"),))
    imported = select(matrix, [factory], ran=[_record("MixedPrecisionConfig", "LoggerConfig.finalize")])
    assert all(r.rule != "executed" for rs in imported.reasons.values() for r in rs), imported.reasons
    computed = replace(file, defaults=(replace(field, value="field(default=compute_default())"),))
    imported = select(matrix, [computed], ran=[_record("MixedPrecisionConfig", "LoggerConfig.finalize")])
    assert any(r.rule == "executed" for r in imported.reasons.get(0, []))


CONTAINER_DIFF = "\n".join(
    [
        "diff --git a/src/megatron/bridge/training/config.py b/src/megatron/bridge/training/config.py",
        "--- a/src/megatron/bridge/training/config.py",
        "+++ b/src/megatron/bridge/training/config.py",
        "@@ -1551,11 +1551,6 @@ class ConfigContainer(Container):",
        '                 "Megatron-FSDP requires the distributed optimizer."',
        "             )",
        " ",
        "-        if self.ddp.gradient_accumulation_fusion:",
        "-            raise ValueError(",
        '-                "gradient_accumulation_fusion is not supported with this setting."',
        "-            )",
        "-",
        "         if self.optimizer.use_precision_aware_optimizer:",
        "             assert self.ddp.use_distributed_optimizer",
        " ",
        "",
    ]
)


@pytest.mark.parametrize(
    ("ran", "unbuilt"),
    [
        ({"ConfigContainer", "DistributedDataParallelConfig.finalize"}, True),
        ({"ConfigContainer", "ConfigContainer.validate"}, False),  # a cell built it: any method may be this one
    ],
)
def test_a_diff_inside_an_unnamed_method_of_a_config_class_no_cell_builds_selects_nothing(
    matrix: Matrix, ran: set[str], unbuilt: bool
) -> None:
    """From a diff alone git's hunk header names the class, not the method (a long `validate`); the lines
    sit in one of its methods, and no recorded cell ran any method of ConfigContainer (dev PR #1551's kind)."""
    (file,) = with_diff([ChangedFile(CONFIG)], parse_unified_diff(CONTAINER_DIFF))
    assert file.functions is None and file.unnamed_methods == ("ConfigContainer",)
    sel = select(matrix, [file], ran=[_record(*ran)])
    assert (sel.levels == ()) is unbuilt, sel.reasons
    if unbuilt:
        assert "none builds ConfigContainer" in sel.off_surface[CONFIG]


OVERLAP = "src/megatron/bridge/training/comm_overlap.py"
# a default and the setup that reads it, changed together (dev PR #1395's kind): a field line and lines deep in
# a method git's hunk headers do not name, both under the class
FIELD_AND_METHOD_DIFF = "\n".join(
    [
        f"diff --git a/{OVERLAP} b/{OVERLAP}",
        f"--- a/{OVERLAP}",
        f"+++ b/{OVERLAP}",
        "@@ -380,5 +380,5 @@ class CommOverlapConfig:",
        "     tp_comm_overlap: bool = False",
        "     tp_comm_overlap_cfg: Optional[TPOverlapCfg] = None",
        "     tp_comm_bootstrap_backend: Optional[str] = None",
        "-    tp_comm_bootstrap_backend: Optional[str] = None",
        '+    tp_comm_bootstrap_backend: Optional[str] = "nccl"',
        "     overlap_p2p_comm: Optional[bool] = None",
        "@@ -415,5 +415,3 @@ class CommOverlapConfig:",
        "         if not self.tp_comm_overlap:",
        "             self.user_comm_overlap_cfg.tp_comm_overlap = False",
        "-            self.tp_comm_overlap_cfg = None",
        "-            self.tp_comm_bootstrap_backend = None",
        "         return self.user_comm_overlap_cfg",
    ]
)


@pytest.mark.parametrize(
    ("ran", "unbuilt"),
    [
        ({"CommOverlapConfig", "LoggerConfig.finalize"}, True),
        ({"CommOverlapConfig", "CommOverlapConfig.setup"}, False),  # a cell built it
    ],
)
def test_fields_and_methods_of_a_config_class_no_cell_builds_select_nothing(
    matrix: Matrix, ran: set[str], unbuilt: bool
) -> None:
    (file,) = with_diff([ChangedFile(OVERLAP)], parse_unified_diff(FIELD_AND_METHOD_DIFF))
    assert file.unnamed_methods == ("CommOverlapConfig",) and file.methods_only == ()
    sel = select(matrix, [file], ran=[_record(*ran, path=OVERLAP)])
    assert (sel.levels == ()) is unbuilt, sel.reasons
    if unbuilt:
        assert "none builds CommOverlapConfig" in sel.off_surface[OVERLAP]


def test_a_def_the_hunk_names_that_a_cell_ran_keeps_a_diff_planned(matrix: Matrix) -> None:
    """A `finalize` the hunk shows may be the DDP config's, which every cell built and ran."""
    named = CONTAINER_DIFF.replace(" \n-        if", " \n     def finalize(self):\n-        if")
    (file,) = with_diff(
        [ChangedFile(CONFIG)], parse_unified_diff(named.replace("-1551,11 +1551,6", "-1551,12 +1551,7"))
    )
    assert "finalize" in file.scopes
    sel = select(matrix, [file], ran=[_record("ConfigContainer", "DistributedDataParallelConfig.finalize")])
    assert sel.levels, sel.reasons


def test_a_helper_class_no_cell_built_is_not_judged_unbuilt(matrix: Matrix) -> None:
    """A class only some layout builds (TP > 1) has no recorded method either: it is not a config class, so
    "none builds it" is not the plan's reason. The recorded cells imported the module and ran none of the
    changed code, so the plan names the lines (a default Level 0 would not run them either)."""
    file = ChangedFile(CONFIG, diff_lines=("        return x",), module_level=False, functions=("TPGatherer.gather",))
    sel = select(matrix, [file], ran=[_record("TPGatherer", "LoggerConfig.finalize")])
    assert "none builds" not in sel.off_surface.get(CONFIG, "")
    assert "none ran the changed code (TPGatherer.gather)" in sel.off_surface[CONFIG]
    ran = select(matrix, [file], ran=[_record("TPGatherer", "TPGatherer.gather")])
    assert CONFIG not in ran.off_surface and ran.levels  # a cell that ran it keeps its level


def test_module_values_of_an_ignored_file_stay_ignored_though_the_module_ran(matrix: Matrix) -> None:
    version = "src/megatron/bridge/package_info.py"
    file = ChangedFile(version, diff_lines=("PATCH = 1",), module_level=True, functions=(), definitions=("",))
    sel = select(matrix, [file], ran=[_record(path=version)])
    assert sel.levels == () and version in sel.ignored["off-surface"]


MODELS = {
    "src/megatron/bridge/models/gemma/gemma_provider.py": b"from x import fast_gelu\nACT = fast_gelu\n",
    "src/megatron/bridge/models/gemma/gemma_bridge.py": b"@MegatronModelBridge.register_bridge(source='GemmaForCausalLM')\n"
    b"class GemmaBridge:\n    pass\nfrom megatron.bridge.models.gemma.gemma_provider import ACT\n",
    "src/megatron/bridge/models/qwen/qwen2_bridge.py": b"@MegatronModelBridge.register_bridge(source='Qwen2ForCausalLM')\n"
    b"class Qwen2Bridge:\n    act = 'silu'\n",
    "src/megatron/bridge/models/conversion/model_bridge.py": b"from y import ACTIVATION_FUNC_MAP\n",
}


def test_shared_code_only_some_architectures_name_runs_on_one_of_them(matrix: Matrix) -> None:
    path = "src/megatron/bridge/utils/activation_map.py"
    source = b'MAP = {\n    "gelu_pytorch_tanh": fast_gelu,  # alias\n}\n'
    words = users.symbols(source, [2])
    assert set(words) == {"gelu_pytorch_tanh", "fast_gelu"}  # the comment's words are not code
    serves = users.architectures(path, words, source, MODELS)
    assert serves == ("GemmaForCausalLM",)
    file = ChangedFile(path, diff_lines=('    "gelu_pytorch_tanh": F.gelu,',), serves=serves, symbols=words)
    assert Targets(matrix).targets(path, file, changed=False) == ["gemma"]
    assert users.architectures(path, ("ACTIVATION_FUNC_MAP",), source, MODELS) is None  # shared code uses it
    both = ChangedFile(path, serves=("GemmaForCausalLM", "Qwen2ForCausalLM"))
    assert Targets(matrix).users(both) is None  # the default family is among the users: it stays there


BASE = "src/megatron/bridge/models/conversion/model_bridge.py"
BASE_SOURCE = b"""class MegatronModelBridge:
    def model_config_kwargs(self, hf):
        return {"fusion": True}

    def build_model_config(self, hf):
        return self.model_config_kwargs(hf)

    def load_weights(self, hf):
        return self.map_weight(hf)

    def map_weight(self, hf):
        return hf
"""
BRIDGES = {
    "src/megatron/bridge/models/llama/llama_bridge.py": b"@MegatronModelBridge.register_bridge(source='LlamaForCausalLM')\n"
    b"class LlamaBridge(MegatronModelBridge):\n    def provider_kwargs(self, hf):\n"
    b"        return super().model_config_kwargs(hf)\n    def map_weight(self, hf):\n        return hf\n",
    "src/megatron/bridge/models/qwen/qwen2_bridge.py": b"@MegatronModelBridge.register_bridge(source='Qwen2ForCausalLM')\n"
    b"class Qwen2Bridge(MegatronModelBridge):\n    pass\n",
}


def test_a_base_class_method_only_one_bridge_reaches_serves_that_bridge() -> None:
    """Every bridge names the base class; only Llama's calls this method (through super()). Its one other
    caller, a builder path, counts only where a recorded cell ran it."""
    words = users.symbols(BASE_SOURCE, [3])
    assert words == ("MegatronModelBridge.model_config_kwargs",)
    ran = frozenset({"MegatronModelBridge", "MegatronModelBridge.load_weights", "MegatronModelBridge.map_weight"})
    assert users.architectures(BASE, words, BASE_SOURCE, BRIDGES, ran) == ("LlamaForCausalLM",)
    assert (
        users.architectures(BASE, words, BASE_SOURCE, BRIDGES, ran | {"MegatronModelBridge.build_model_config"}) is None
    )
    assert users.architectures(BASE, words, BASE_SOURCE, BRIDGES) is None  # no records: every use counts


def test_a_base_method_the_shared_path_calls_serves_every_model() -> None:
    """Llama overrides `map_weight`, but the base class's own load path (which cells ran) calls it for
    every other bridge: not Llama's alone."""
    words = users.symbols(BASE_SOURCE, [12])
    ran = frozenset({"MegatronModelBridge.load_weights", "MegatronModelBridge.map_weight"})
    assert users.architectures(BASE, words, BASE_SOURCE, BRIDGES, ran) is None


@pytest.mark.parametrize("probes", [PROBES, HELD_OUT, HELD_OUT_3], ids=["probes", "held-out", "held-out-3"])
def test_the_probe_set_is_real_small_changes_with_levels_written_down(probes: Path) -> None:
    data = json.loads(probes.read_text())
    kinds = {p["kind"] for p in data["probes"]}
    assert len(data["probes"]) >= 20 and len(kinds) >= 8
    for p in data["probes"]:
        assert set(p["must"]) <= set(p["allowed"]), p["id"]
        diffs = parse_unified_diff(p["diff"])
        changed = sum(len(d.lines) for d in diffs.values() if d.status != "A")
        new_files = [d for d in diffs.values() if d.status == "A"]
        assert diffs and (1 <= changed <= 6 or new_files), p["id"]  # one to three lines, each removed and added


def test_a_logits_dtype_default_is_a_numerics_default(matrix: Matrix) -> None:
    provider = "src/megatron/bridge/models/gpt_provider.py"
    changed = _change(
        provider, "-    logit_dtype: torch.dtype | None = None", "+    logit_dtype: torch.dtype | None = torch.float32"
    )
    assert "aspect:numerics-defaults" in _rules(matrix, changed, 5)


def test_how_adapter_weights_start_selects_level5(matrix: Matrix) -> None:
    init = _change(
        "src/megatron/bridge/peft/utils.py",
        "-            init_fn = init_method_const(0.0)",
        "+            init_fn = nn.init.zeros_",
        scopes=("ParallelLinearAdapter", "_get_init_fn"),
    )
    assert "aspect:adapter-weights" in _rules(matrix, init, 5)
    rank = _change(
        "src/megatron/bridge/peft/utils.py", "+        self.dim = int(dim)", scopes=("ParallelLinearAdapter",)
    )
    assert 5 not in select(matrix, [rank]).levels


def test_what_a_save_keeps_selects_level1(matrix: Matrix) -> None:
    keep = _change(
        "src/megatron/bridge/peft/base.py",
        "+                            self.params_to_save.add(module_name)",
        scopes=("PEFT", "set_params_to_save"),
    )
    assert "aspect:saved-state" in _rules(matrix, keep, 1)


def test_hf_import_code_alone_gets_no_level1_from_its_path(matrix: Matrix) -> None:
    lines = ("-        x = converted.reshape(-1)", "+        x = converted.flatten()")
    known = replace(_change(MODEL_BRIDGE, *lines), functions=("MegatronModelBridge.load_weights_hf_to_megatron",))
    levels = select(matrix, [known]).levels
    assert 0 in levels and 1 not in levels
    export = replace(known, functions=("MegatronModelBridge.stream_weights_megatron_to_hf",))
    assert "hf-export" in _rules(matrix, export, 1)
    # a diff alone names the def above a hunk, not the one a line is in: the path rule still fires
    guessed = _change(MODEL_BRIDGE, *lines, scopes=("MegatronModelBridge", "load_weights_hf_to_megatron"))
    assert "hf-export" in _rules(matrix, guessed, 1)


RENAME_DIFF = """diff --git a/src/megatron/bridge/peft/utils.py b/src/megatron/bridge/peft/utils.py
--- a/src/megatron/bridge/peft/utils.py
+++ b/src/megatron/bridge/peft/utils.py
@@ -4,3 +4,3 @@ def load_peft_adapter_checkpoint(path):
\x20
-def _apply(peft, model):
+def _apply_and_mark(peft, model):
     return peft(model)
"""


def test_with_both_trees_the_hunk_header_is_no_scope() -> None:
    old = b"def load_peft_adapter_checkpoint(path):\n    return path\n\n\ndef _apply(peft, model):\n    return peft(model)\n"
    new = old.replace(b"def _apply(", b"def _apply_and_mark(")
    diffs = parse_unified_diff(RENAME_DIFF)
    (path,) = diffs
    header_only = with_diff([ChangedFile(path)], diffs)
    # a diff alone drops the header's guess too: the change starts an unindented def (methods.py's rule)
    assert "load_peft_adapter_checkpoint" not in header_only[0].scopes
    (exact,) = with_ast_scopes(header_only, diffs, {path: old}, {path: new})
    assert "load_peft_adapter_checkpoint" not in exact.scopes
    assert {"_apply", "_apply_and_mark"} <= set(exact.scopes)


RECOMPUTE = "src/megatron/bridge/peft/recompute.py"


def test_a_patch_a_disabled_option_never_installs_gets_no_learning_signal(matrix: Matrix) -> None:
    """The installer ran in every recorded step, the patched forward it installs never did (verl turns
    recompute off): its gradient words are no Level 5, and the plan says the lines ran nowhere."""
    inner = "maybe_enable_recompute_inputs_grad._patch.patched_forward"
    file = ChangedFile(RECOMPUTE, diff_lines=("-    x = x.detach().requires_grad_(True)", "+    x = x.requires_grad_(True)"),
                       added_at=(98,), module_level=False, functions=(inner,), scopes=("patched_forward",))  # fmt: skip
    installer = Ran(0, "lora-ddp", "qwen", "", "", {RECOMPUTE: frozenset({"maybe_enable_recompute_inputs_grad"})})
    sel = select(matrix, [file], ran=[installer])
    assert 5 not in sel.levels
    assert any(
        n.startswith(f"changed lines no recorded cell ran: {RECOMPUTE}:98 (inside {inner}") for n in sel.unexecuted
    )
    ran_too = Ran(0, "lora-ddp", "qwen", "", "", {RECOMPUTE: frozenset({"maybe_enable_recompute_inputs_grad", inner})})
    assert 5 in select(matrix, [file], ran=[ran_too]).levels
    unknown = Ran(0, "lora-ddp", "qwen", "", "", {RECOMPUTE: frozenset({"other_function"})})
    assert 5 in select(matrix, [file], ran=[unknown]).levels  # nothing around it ran: new or unrecorded code


def test_code_verl_imports_but_never_calls_is_named_as_lines_no_cell_executes(matrix: Matrix) -> None:
    """LoRA+'s optimizer overrides: verl builds its optimizer itself and never asks Bridge for them."""
    path = "src/megatron/bridge/peft/lora.py"
    file = ChangedFile(path, diff_lines=("+    ratio = max(lora_plus_ratio, 1.0)",),
                       added_at=(69,), module_level=False, scopes=("get_lora_plus_config_overrides",))  # fmt: skip
    sel = select(matrix, [file], surface=shipped(), ran=[])
    assert sel.levels == ()
    assert any(
        n.startswith(f"changed lines no cell executes: {path}:69 (not on verl's surface") for n in sel.unexecuted
    )


def test_an_import_of_another_modules_namesake_is_no_use_at_home() -> None:
    """probes-28: Bridge's `HeterogeneousTransformerConfig` sits beside Megatron's class of that name, which
    the file imports under an alias; only Llama-Nemotron's provider builds on Bridge's, so a change to it
    serves that architecture, not every model."""
    path = "src/megatron/bridge/models/transformer_config.py"
    source = (
        b"from megatron.core import (\n    HeterogeneousTransformerConfig as MCoreHeterogeneousTransformerConfig,\n)\n"
        b"\n\nclass HeterogeneousTransformerConfig(MCoreHeterogeneousTransformerConfig):\n"
        b"    def get_config_for_layer(self, n):\n        return n - 1\n"
    )
    models = {
        path: source,
        "src/megatron/bridge/models/llama_nemotron/llama_nemotron_bridge.py": b"from megatron.bridge.models."
        b"llama_nemotron.llama_nemotron_provider import P\n\n\n@MegatronModelBridge.register_bridge("
        b"source='DeciLMForCausalLM')\nclass LlamaNemotronBridge:\n    pass\n",
        "src/megatron/bridge/models/llama_nemotron/llama_nemotron_provider.py": b"from megatron.bridge.models."
        b"transformer_config import HeterogeneousTransformerConfig\n\n\nclass P(HeterogeneousTransformerConfig):\n    pass\n",
    }
    words = users.symbols(source, [8])
    assert users.architectures(path, words, source, models) == ("DeciLMForCausalLM",)


def test_a_base_class_runs_where_its_subclasses_do() -> None:
    """probes-30: no model file names `ChunkedMapping`, but the Mamba bridges build its subclass
    `MambaConv1dMapping`, defined beside it: a change to the base's method serves those bridges' models."""
    path = "src/megatron/bridge/models/conversion/param_mapping.py"
    source = (
        b"class ChunkedMapping:\n    def hf_to_megatron(self, w):\n        return w\n\n\n"
        b"class MambaConv1dMapping(ChunkedMapping):\n    pass\n\n\nclass Other:\n    pass\n"
    )
    models = {
        path: source,
        "src/megatron/bridge/models/falcon_h1/falconh1_bridge.py": b"@MegatronModelBridge.register_bridge("
        b"source='FalconH1ForCausalLM')\nclass B:\n    m = MambaConv1dMapping('a', 'b')\n",
    }
    assert users.subclasses(source, ("ChunkedMapping",)) == ("MambaConv1dMapping",)
    words = users.symbols(source, [3])
    assert users.architectures(path, words, source, models) == ("FalconH1ForCausalLM",)


TRAINING = "src/megatron/bridge/training/flex_dispatcher_backend.py"


@pytest.mark.parametrize(
    ("path", "ran", "level0"),
    [
        (TRAINING, {"apply_flex_dispatcher_backend"}, False),  # imported, the changed function never ran
        (TRAINING, {"apply_flex_dispatcher_backend", "validate_flex_dispatcher_backend"}, True),  # it ran
        ("src/megatron/bridge/models/gpt_provider.py", {"GPTModelProvider.provide"}, True),  # model code
    ],
)
def test_shared_code_cells_imported_but_never_ran_gets_no_default_level0(
    matrix: Matrix, path: str, ran: set[str], level0: bool
) -> None:
    """Code on verl's surface that no rule or aspect matches gets Level 0 by default, except where recorded
    cells imported the module and none ran the changed function: a Level 0 would run it no more than they
    did, so the plan names the lines instead (dev PR #1436's kind: a GPU check only recipes call)."""
    file = ChangedFile(path, diff_lines=("    return device_name in SUPPORTED",), module_level=False,
                       functions=("validate_flex_dispatcher_backend",), scopes=("validate_flex_dispatcher_backend",),
                       added_at=(40,))  # fmt: skip
    sel = select(matrix, [file], ran=[_record(*ran, path=path)])
    assert (0 in sel.levels) is level0, sel.reasons
    if not level0:
        assert "none ran the changed code (validate_flex_dispatcher_backend)" in sel.off_surface[path]
        assert any(f"{path}:40" in line for line in sel.unexecuted), sel.unexecuted
