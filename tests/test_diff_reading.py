"""What diff mode reads as a change: docstring prose, module-level definitions removed whole and files
moved without rename detection are not code that changed, so no aspect schedules a level for them;
everything the hunks cannot vouch for stays code."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.diffs import parse_unified_diff

from .unified_diffs import one_hunk

PROVIDER = "src/megatron/bridge/models/gpt_provider.py"


def _plan(matrix: Matrix, tmp_path: Path, diff: str, files: list[str]) -> dict[int, set[str]]:
    (tmp_path / "d.diff").write_text(diff, encoding="utf-8")
    (tmp_path / "f.txt").write_text("\n".join(files) + "\n", encoding="utf-8")
    plan = make_plan(PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix)
    return {lv: {r.rule for r in rs} for lv, rs in plan.selection.reasons.items()}


def _hunk(path: str, header: str, old_start: int, lines: list[str]) -> str:
    return one_hunk(path, header, lines, old_start)


DOCSTRING = [
    " @dataclass",
    " class GPTProviderAlias(GPTModelProvider):",
    '-    """An alias."""',
    '+    """Deprecated alias.',
    "+",
    "+    Kept for backward compatibility; it will be removed.",
    '+    """',
    " ",
    "     def __post_init__(self) -> None:",
]


def test_a_docstring_that_says_backward_schedules_no_learning_signal(matrix: Matrix, tmp_path: Path) -> None:
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "", 40, DOCSTRING), [f"M\t{PROVIDER}"])
    assert 5 not in levels, levels


def test_the_same_word_in_code_does(matrix: Matrix, tmp_path: Path) -> None:
    code = [*DOCSTRING[:-2], "+    def hook(self, loss):", "+        loss.backward()", " "]
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "", 40, code), [f"M\t{PROVIDER}"])
    assert "aspect:learning-numerics" in levels.get(5, set()), levels


def test_a_hunk_that_starts_inside_a_docstring_keeps_its_lines_as_code() -> None:
    """Only a closing quote shows: nothing tells it from an opening, so the lines after it stay code."""
    lines = ["     Args: the model.", '     """', "-    loss.backward()", "+    loss.backward(retain_graph=True)"]
    (diff,) = parse_unified_diff(_hunk(PROVIDER, "def step(model):", 10, lines)).values()
    assert diff.added == ["    loss.backward(retain_graph=True)"] and diff.removed == ["    loss.backward()"]


def test_docstring_lines_become_comments_and_code_after_it_stays() -> None:
    (diff,) = parse_unified_diff(_hunk(PROVIDER, "", 40, [*DOCSTRING, "+        self.x = 1"])).values()
    assert diff.added[:4] == [
        '# """Deprecated alias.',
        "# ",
        "# Kept for backward compatibility; it will be removed.",
        '# """',
    ]
    assert diff.added[-1] == "        self.x = 1"


GONE = [
    "         return 1",
    " ",
    " ",
    "-def is_tensor_parallel(param) -> bool:",
    '-    """Whether the parameter is split across TP ranks."""',
    '-    return hasattr(param, "tensor_model_parallel") and param.tensor_model_parallel',
    "-",
    "-",
    " # dispatch",
    " def get_model_bridge(arch):",
]


def test_a_module_function_removed_whole_is_no_parallel_change(matrix: Matrix, tmp_path: Path) -> None:
    (diff,) = parse_unified_diff(_hunk(PROVIDER, "class X:", 100, GONE)).values()
    assert diff.removed[0] == "del is_tensor_parallel" and diff.removed[2].startswith("# return")
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "class X:", 100, GONE), [f"M\t{PROVIDER}"])
    assert 2 not in levels, levels
    assert levels.get(0), "the removal itself is still a change Level 0 runs"


def test_a_function_whose_body_stays_in_part_is_a_change(matrix: Matrix, tmp_path: Path) -> None:
    kept = [*GONE[:6], "     return None", *GONE[6:]]  # a body line stays: the definition did not go
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "class X:", 100, kept), [f"M\t{PROVIDER}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels


def test_a_removed_method_is_a_change(matrix: Matrix, tmp_path: Path) -> None:
    """The base class's method now runs in its place: a behaviour change, read as one."""
    method = [
        " class P(GPTModelProvider):",
        "-    def finalize(self) -> None:",
        "-        self.tp_size = 2",
        " ",
        " x = 1",
    ]
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "", 100, method), [f"M\t{PROVIDER}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels


def test_an_import_is_not_what_the_change_does_with_it(matrix: Matrix, tmp_path: Path) -> None:
    """A new import of `parallel_state` changes no layout; a line that calls it does."""
    imported = [" import torch", "+from megatron.core import parallel_state", " ", " x = 1"]
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "", 10, imported), [f"M\t{PROVIDER}"])
    assert 2 not in levels, levels
    used = [*imported[:2], "+TP = parallel_state.get_tensor_model_parallel_world_size()", *imported[2:]]
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "", 10, used), [f"M\t{PROVIDER}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels


OLD = "src/megatron/bridge/models/mamba/nemotron_h_bridge.py"
NEW = "src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py"
BODY = [
    "import torch",
    "",
    "from megatron.bridge.models.mamba.provider import MambaProvider",
    "",
    "",
    "class NemotronHBridge:",
    '    """Nemotron-H: hybrid Mamba and attention."""',
    "",
    "    def provider_bridge(self, hf):",
    "        return MambaProvider(",
    "            num_query_groups=hf.num_key_value_heads,",
    "            tensor_model_parallel_size=1,",
    "            sequence_parallel=False,",
    "        )",
    "",
    "    def mapping_registry(self):",
    "        return [self.state_dict_key(n) for n in range(4)]",
]


def _whole(path: str, lines: list[str], added: bool) -> str:
    sign, mode, side = ("+", "new file mode 100644", f"@@ -0,0 +1,{len(lines)} @@") if added else (
        "-", "deleted file mode 100644", f"@@ -1,{len(lines)} +0,0 @@")  # fmt: skip
    ends = ("--- /dev/null", f"+++ b/{path}") if added else (f"--- a/{path}", "+++ /dev/null")
    return "\n".join([f"diff --git a/{path} b/{path}", mode, *ends, side, *(sign + x for x in lines)]) + "\n"


def test_a_moved_file_is_read_as_the_lines_the_move_changed(matrix: Matrix, tmp_path: Path) -> None:
    moved = [*BODY[:2], "from megatron.bridge.models.nemotronh.provider import MambaProvider", *BODY[3:]]
    diff = _whole(OLD, BODY, added=False) + _whole(NEW, moved, added=True)
    (renamed,) = parse_unified_diff(diff).values()
    assert (renamed.path, renamed.status, renamed.old_path) == (NEW, "R", OLD)
    assert renamed.added == [moved[2]] and renamed.removed == [BODY[2]]
    levels = _plan(matrix, tmp_path, diff, [f"D\t{OLD}", f"A\t{NEW}"])
    assert not {1, 2} & set(levels), levels


def test_an_added_file_unlike_the_deleted_one_stays_new(matrix: Matrix, tmp_path: Path) -> None:
    other = [
        "import os",
        "",
        "def tp_rank():",
        "    return int(os.environ['RANK'])",
        *(f"X{i} = {i}" for i in range(30)),
    ]
    files = parse_unified_diff(_whole(OLD, BODY, added=False) + _whole(NEW, other, added=True))
    assert {p: f.status for p, f in files.items()} == {OLD: "D", NEW: "A"}


GLM = "src/megatron/bridge/models/glm/glm5_provider.py"
AUX = ["from dataclasses import dataclass", "", "", "@dataclass", "class Glm5Provider(GLMMoEProvider):"]
AUX += ["    moe_aux_loss_coeff: float = 1e-3", "    moe_z_loss_coeff: float | None = None"]


def test_a_new_models_loss_settings_schedule_no_learning_signal(matrix: Matrix, tmp_path: Path) -> None:
    """A file added to a family's directory: Levels 0 and 4 build the new model; nothing trained before
    computes differently, so its aux-loss coefficient is no Level 5."""
    levels = _plan(matrix, tmp_path, _whole(GLM, AUX, added=True), [f"A\t{GLM}"])
    assert levels.get(0) and 5 not in levels, levels


def test_the_same_setting_changed_in_a_model_that_trains_today_is(matrix: Matrix, tmp_path: Path) -> None:
    """The router's z-loss applies under verl's settings (the aux-loss coefficient does not: verl's
    balancing type is `none`, overrides.py)."""
    path = "src/megatron/bridge/models/glm/glm45_provider.py"
    lines = [
        " class GLM45Provider(GPTModelProvider):",
        "-    moe_z_loss_coeff: float | None = None",
        "+    moe_z_loss_coeff: float | None = 1e-3",
    ]
    levels = _plan(matrix, tmp_path, _hunk(path, "", 30, lines), [f"M\t{path}"])
    assert "aspect:learning-numerics" in levels.get(5, set()), levels


def test_pipeline_split_options_and_a_mapping_s_split_kind_are_parallel_layout(matrix: Matrix, tmp_path: Path) -> None:
    """Both leave a TP = PP = 1 cell as it was: counting the embedding in the pipeline split moves layers
    only between stages, and a row split of a tensor one rank holds whole is the tensor itself."""
    split = [
        " class GPTModelProvider(TransformerConfig):",
        "-    account_for_embedding_in_pipeline_split: bool = False",
        "+    account_for_embedding_in_pipeline_split: bool = True",
        "     account_for_loss_in_pipeline_split: bool = False",
    ]
    levels = _plan(matrix, tmp_path, _hunk(PROVIDER, "class GPTModelProvider:", 200, split), [f"M\t{PROVIDER}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels
    mapping = "src/megatron/bridge/models/conversion/param_mapping.py"
    kind = ["             # All other parameters (weight, bias) are column-parallel", '-            return "column"',
            '+            return "row"', " "]  # fmt: skip
    levels = _plan(matrix, tmp_path, _hunk(mapping, "class AutoMapping:", 1500, kind), [f"M\t{mapping}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels


def test_how_a_mapping_detects_a_fused_layernorm_linear_is_parallel_layout(matrix: Matrix, tmp_path: Path) -> None:
    """A TE linear with its layernorm fused holds column-split weights and replicated norm weights; a
    test that no longer recognises it splits the norm weight too, which only TP > 1 notices (probes-17)."""
    mapping = "src/megatron/bridge/models/conversion/param_mapping.py"
    test = [
        "-        is_layernorm_column_parallel = self._FUSED_LAYER_NORM_COLUMN_PARALLEL_SUBSTRING in module_type",
        "+        is_layernorm_column_parallel = module_type.startswith(self._FUSED_LAYER_NORM_COLUMN_PARALLEL_SUBSTRING)",
        "         if is_layernorm_column_parallel:",
    ]
    levels = _plan(matrix, tmp_path, _hunk(mapping, "class AutoMapping:", 1494, test), [f"M\t{mapping}"])
    assert "aspect:parallel-layout" in levels.get(2, set()), levels
