"""A diff alone gets the functions a change sits in from the recorded commit's line index (plan/recorded.py),
as a checkout's ASTs would give them, and stays as the diff describes it where the text does not match.

The index here is written by tools/build_line_index.py's own functions from a small stand-in module shaped
like Bridge's export code (a class whose methods git's hunk header cannot name); the shipped index is checked
for the commit and format the planner expects. Last, a MoE family's file whose import lines alone changed (a
directory restructure) runs no Level 4 variant (plan/architecture.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan import enrich, recorded
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.diffs import parse_unified_diff

from .conftest import load_tool
from .unified_diffs import one_hunk

ROOT = Path(__file__).resolve().parents[1]
PATH = "src/megatron/bridge/models/conversion/model_bridge.py"

RECORDED = '''"""Stand-in for a Bridge conversion module."""

import torch


class ModelBridge:
    """Moves weights between HF and Megatron names."""

    def load_weights_hf_to_megatron(self, model, hf):
        for name, tensor in hf.items():
            target = self.lookup(name)
            target.copy_(tensor)
        return model

    def stream_weights_megatron_to_hf(self, model):
        for name, param in model.named_parameters():
            converted = self.convert(name, param)
            if converted is None:
                continue
            yield name, converted

    def convert(self, name, param):
        return param.detach()
'''


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    tool = load_tool("build_line_index")
    entry = {
        "blob": "0" * 40,
        "hashes": "".join(tool.line_hash(t) for t in RECORDED.split("\n")),
        "spans": tool.spans(RECORDED),
    }
    path = tmp_path / "lines.json"
    path.write_text(json.dumps({"schema_version": 1, "files": {PATH: entry}}))
    monkeypatch.setattr(recorded, "INDEX", path)
    recorded._index.cache_clear()
    recorded._file.cache_clear()
    yield path
    recorded._index.cache_clear()
    recorded._file.cache_clear()


def _diff(old_start: int, body: str) -> str:
    return one_hunk(PATH, "class ModelBridge:", body.strip("\n").split("\n"), old_start)


def _changed(diff: str) -> enrich.ChangedFile:
    diffs = parse_unified_diff(diff)
    (file,) = enrich.with_diff(enrich.files_from_diff(diffs), diffs)
    return file


# the export loop's `if converted is None` test rewritten, in a base where the file sits 5 lines lower
# than in the recorded commit (something above it grew): the hunk header names only the class
AFTER = """     def stream_weights_megatron_to_hf(self, model):
         for name, param in model.named_parameters():
             converted = self.convert(name, param)
-            if converted is None:
+            if converted is None or not name:
                 continue
             yield name, converted
"""


def test_a_hunk_found_in_the_recorded_text_at_an_offset_gets_its_method(index: Path) -> None:
    file = _changed(_diff(15 + 5, AFTER))
    assert file.functions == ("ModelBridge.stream_weights_megatron_to_hf",)
    assert file.scopes == ("ModelBridge", "stream_weights_megatron_to_hf")
    assert file.module_level is False


def test_a_pr_the_recorded_commit_already_holds_is_located_by_its_new_side(index: Path) -> None:
    """An older PR: its removed line is gone from the recorded text, its added line is there."""
    older = AFTER.replace("-            if converted is None:", "-            if not converted:").replace(
        "+            if converted is None or not name:", "+            if converted is None:"
    )
    file = _changed(_diff(15, older))
    assert file.functions == ("ModelBridge.stream_weights_megatron_to_hf",)


def test_a_hunk_whose_text_is_not_in_the_recorded_commit_keeps_the_diffs_own_reading(index: Path) -> None:
    other = """     def save(self, path):
         state = self.state()
-        torch.save(state, path)
+        torch.save(state, path, pickle_protocol=4)
         return path
"""
    file = _changed(_diff(40, other))
    assert file.functions is None and set(file.scopes) == {"save", "ModelBridge"}  # the hunk text's own names


def test_an_added_def_is_not_placed_by_the_old_sides_neighbour(index: Path) -> None:
    """A new method's lines belong to the new method, which the recorded text lacks: no location."""
    added = """         return param.detach()
+
+    def convert_bias(self, name, bias):
+        return bias.detach()
"""
    file = _changed(_diff(23, added))
    assert file.functions is None


def test_a_change_at_module_level_is_module_code(index: Path) -> None:
    blank = " "  # a blank context line, as git prints it
    header = "\n".join(
        [
            ' """Stand-in for a Bridge conversion module."""',
            blank,
            "-import torch",
            "+import torch  # noqa: F401",
            blank,
            blank,
            " class ModelBridge:",
        ]
    )
    file = _changed(_diff(1, header))
    assert file.functions == () and file.module_level is True


def test_the_shipped_index_is_of_the_commit_the_surface_and_records_describe() -> None:
    data = json.loads((ROOT / "ci/verl_e2e/data/lines.json").read_text())
    surface = json.loads((ROOT / "ci/verl_e2e/data/surface.json").read_text())
    assert data["bridge_commit"] == surface["bridge_commit"] and data["hash_hex"] == recorded.WIDTH
    for path, entry in data["files"].items():
        assert path.startswith("src/") and len(entry["hashes"]) % recorded.WIDTH == 0
        assert [s[0] for s in entry["spans"]] == sorted(s[0] for s in entry["spans"])
    assert "src/megatron/bridge/models/conversion/model_bridge.py" in data["files"]


NEMOTRON_H = "src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py"


def _plan_levels(matrix: Matrix, tmp_path: Path, lines: list[str], status: str = "M") -> dict[int, set[str]]:
    (tmp_path / "d.diff").write_text(one_hunk(NEMOTRON_H, "", lines, 15), encoding="utf-8")
    (tmp_path / "f.txt").write_text(f"{status}\t{NEMOTRON_H}\n", encoding="utf-8")
    plan = make_plan(PlanRequest(changed_files=str(tmp_path / "f.txt"), diff=str(tmp_path / "d.diff")), matrix)
    return {lv: {r.rule for r in rs} for lv, rs in plan.selection.reasons.items()}


def test_a_family_file_whose_imports_alone_changed_runs_no_architecture_variant(matrix: Matrix, tmp_path: Path) -> None:
    """A directory restructure rewrites a MoE family's imports: Level 0 imports and builds the model; the
    family's Level 4 variant would run the same MoE code as before."""
    moved = ["-from megatron.bridge.models.mamba.nemotron_h_provider import NemotronHModelProvider"]
    moved += ["+from megatron.bridge.models.nemotronh.nemotron_h_provider import NemotronHModelProvider"]
    levels = _plan_levels(matrix, tmp_path, moved)
    assert 0 in levels and "architecture" not in levels.get(4, set())
    code = ["         provider.moe_router_topk = hf_config.num_experts_per_tok"]
    code += ["-        provider.moe_grouped_gemm = True", "+        provider.moe_grouped_gemm = False"]
    assert "architecture" in _plan_levels(matrix, tmp_path, code).get(4, set())
