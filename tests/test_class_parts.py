"""A diff alone: a change under a class header is in the class body or in a method git did not name
(plan/methods.py), and only a record of that part of the class selects the change's level."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import runtime
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.diffs import parse_unified_diff

from .unified_diffs import one_hunk

DATASET = "src/megatron/bridge/data/datasets/utils.py"


def _hunk(path: str, header: str, lines: list[str], start: int = 385) -> str:
    return one_hunk(path, header, lines, start)


DEEP_IN_A_METHOD = [
    "             idx_fn = self._index_fn(fn)",
    "             with open(idx_fn, 'rb') as fh:",
    "-                data = pickle.load(fh)",
    "+                data = safe_pickle_load(fh)",
    "             return data",
]
FIELD_CONTINUATION = [
    "     tokenizer: Any = None",
    "     sizes: list[int] = field(",
    "-        default_factory=lambda: [1, 2],",
    "+        default_factory=lambda: [1, 2, 3],",
    "     )",
]
UNDER_A_SHOWN_DEF = [
    "     def build(self) -> None:",
    "         self.a = 1",
    "-        self.b = 2",
    "+        self.b = 3",
]


def _parts(lines: list[str], header: str = "class _TextMemMapDataset(Dataset):"):  # type: ignore[no-untyped-def]
    return parse_unified_diff(_hunk(DATASET, header, lines))[DATASET].classes


def test_a_deep_line_under_no_shown_def_is_in_a_method_git_did_not_name() -> None:
    parts = _parts(DEEP_IN_A_METHOD)
    assert parts.unnamed_methods() == ("_TextMemMapDataset",)
    assert parts.methods_only() == ("_TextMemMapDataset",)
    assert not parts.module_code


def test_a_multi_line_field_default_is_the_class_body() -> None:
    parts = _parts(FIELD_CONTINUATION)
    assert parts.unnamed_methods() == ()
    assert parts.methods_only() == ()


def test_a_line_under_a_def_the_hunk_shows_is_that_method_and_not_the_body() -> None:
    parts = _parts(UNDER_A_SHOWN_DEF)
    assert parts.unnamed_methods() == ()
    assert parts.methods_only() == ("_TextMemMapDataset",)


def test_an_unindented_line_after_the_class_is_module_code_and_a_new_class_line_its_body() -> None:
    parts = _parts(
        ["         return data", " ", " ", "+_CACHE: dict[str, int] = {}", " class Other:", "-    x = 1", "+    x = 2"]
    )
    assert parts.module_code
    assert parts.body_of == {"Other": None}
    parts = _parts(["         return data", " ", " ", "-class Other(Base):", "+class Other(NewBase):"])
    assert parts.body_of == {"Other": None} and not parts.module_code


def test_a_def_header_records_no_class() -> None:
    parts = _parts(DEEP_IN_A_METHOD, header="def build_index(path):")
    assert parts.headed == {} and parts.unnamed_methods() == ()


def test_only_a_record_of_a_method_matches_a_change_in_an_unnamed_one() -> None:
    body = runtime.Ran(0, "lora-ddp", "qwen", "b" * 40, "v" * 40, {DATASET: frozenset({"<module>", "Ds"})})
    method = runtime.Ran(1, "save-resume", "qwen", "b" * 40, "v" * 40, {DATASET: frozenset({"Ds", "Ds.load"})})
    named = {"methods_only": ("Ds",), "unnamed_methods": ("Ds",)}
    assert runtime.executed([body], DATASET, ("Ds",), False, **named) == []
    assert runtime.executed([body, method], DATASET, ("Ds",), False, **named) == [(method, "Ds.load")]
    # a change in the class body itself still matches the body that ran at import
    assert runtime.executed([body], DATASET, ("Ds",), False, unnamed_methods=("Ds",)) == [(body, "Ds")]


def _levels(matrix: Matrix, tmp_path: Path, diff: str, path: str) -> dict[int, set[str]]:
    (tmp_path / "d.diff").write_text(diff, encoding="utf-8")
    (tmp_path / "f.txt").write_text(f"M\t{path}\n", encoding="utf-8")
    plan = make_plan(PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix)
    return {lv: {r.rule for r in rs} for lv, rs in plan.selection.reasons.items()}


def test_a_fix_in_a_dataset_method_no_cell_ran_selects_nothing(matrix: Matrix, tmp_path: Path) -> None:
    """The shipped records ran `_TextMemMapDataset`'s class body (verl imports the module), none of its
    methods: a fix inside one is Bridge's own data path (read by name, the class body matched)."""
    diff = _hunk(DATASET, "class _TextMemMapDataset(Dataset):", DEEP_IN_A_METHOD)
    assert _levels(matrix, tmp_path, diff, DATASET) == {}


LORA_LAYERS = "src/megatron/bridge/peft/lora_layers.py"


def test_renaming_an_adapters_weight_is_a_change_of_its_saved_keys(matrix: Matrix, tmp_path: Path) -> None:
    rename = _hunk(
        LORA_LAYERS,
        "class TELinearAdapter(te.Linear):",
        [
            "         dtype = lora_dtype or obj.weight.dtype",
            " ",
            "-        obj.lora_a = nn.Linear(in_features, dim, bias=False, dtype=dtype, device=device)",
            "+        obj.linear_in = nn.Linear(in_features, dim, bias=False, dtype=dtype, device=device)",
        ],
        start=160,
    )
    assert "aspect:adapter-state-keys" in _levels(matrix, tmp_path, rename, LORA_LAYERS).get(1, set())
    use = rename.replace("obj.lora_a = nn.Linear(in_features", "x = obj.lora_a(in_features").replace(
        "obj.linear_in = nn.Linear(in_features", "x = obj.linear_in(in_features"
    )
    assert "aspect:adapter-state-keys" not in _levels(matrix, tmp_path, use, LORA_LAYERS).get(1, set())


COMMON = "src/megatron/bridge/utils/common_utils.py"
AFTER_THE_NAMED_DEF = [
    "     return module",
    " ",
    " ",
    "+def fix_export_transpose(gen):",
    "+    for name, tensor in gen:",
    "+        yield name, tensor.transpose(-2, -1)",
]


def test_a_function_added_after_the_one_the_header_names_is_not_in_it() -> None:
    """git names the last unindented def above the hunk; a new function after its end is not inside it
    (read as inside, `_grad_` in the header's name scheduled a learning-signal run for an export fix)."""
    header = "def hook_hf_module_setattr_for_tp_grad_sync(module: torch.nn.Module) -> torch.nn.Module:"
    scopes = parse_unified_diff(_hunk(COMMON, header, AFTER_THE_NAMED_DEF))[COMMON].scopes
    assert list(scopes) == ["fix_export_transpose"]


def test_a_change_inside_the_named_def_keeps_it_and_so_does_its_signatures_last_line() -> None:
    header = "def hook_hf_module_setattr_for_tp_grad_sync("
    inside = parse_unified_diff(_hunk(COMMON, header, ["     x = 1", "-    return module", "+    return None"]))
    assert list(inside[COMMON].scopes) == ["hook_hf_module_setattr_for_tp_grad_sync"]
    signature = parse_unified_diff(_hunk(COMMON, header, ["     module,", "-) -> torch.nn.Module:", "+) -> None:"]))
    assert list(signature[COMMON].scopes) == ["hook_hf_module_setattr_for_tp_grad_sync"]
