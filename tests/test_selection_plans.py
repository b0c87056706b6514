"""Plans a maintainer would make: the changed model runs, every level has a cell or a reason, and the
plan made from the API (`--changed-files --diff`) agrees with the one made from a clone (`--repo`).

The matrix is checked against a real Bridge tree: megatron-bridge's sdist from PyPI (`tools/test.sh` puts it
in .cache/sdist), read in place.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.enrich import with_architectures
from verl_e2e.plan.registry import SHARED, architectures_by_file, registrations
from verl_e2e.plan.select import select
from verl_e2e.plan.surface import shipped
from verl_e2e.report.comment import Context, overall, render

from .conftest import ROOT

M = "src/megatron/bridge/models"
SDIST = ROOT / ".cache" / "sdist" / "megatron_bridge-0.6.2.tar.gz"


def _sdist_registrations() -> dict[str, str]:
    if not SDIST.is_file():
        if os.environ.get("VERL_E2E_REQUIRE_ENGINE") == "1":
            pytest.fail(f"{SDIST} is missing; `tools/test.sh --setup sdist` downloads it")
        pytest.skip(f"{SDIST} is missing: `tools/test.sh --setup sdist` downloads it")
    found: dict[str, str] = {}
    with tarfile.open(SDIST) as tar:
        for member in tar.getmembers():
            if "/src/megatron/bridge/models/" in member.name and member.name.endswith(".py") and member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                for arch in registrations(data.read()):
                    found[arch] = member.name.split("/", 1)[1]
    return found


def test_every_registered_architecture_has_a_family_or_a_reason(matrix: Matrix) -> None:
    registered = _sdist_registrations()
    assert len(registered) > 40  # the tree was read, not an empty directory
    claimed = {a: f.name for f in matrix.families.values() for a in f.architectures}
    missing = sorted(a for a in registered if a not in claimed and a not in matrix.unsupported)
    assert not missing, f"registered in megatron-bridge 0.6.2, run by no family: {missing}"


def test_every_claimed_architecture_is_registered_somewhere(matrix: Matrix) -> None:
    """A family's architecture is registered in the sdist or in the (newer) tree of the shipped index."""
    known = set(_sdist_registrations()) | {a for archs in shipped().architectures.values() for a in archs}
    for fam in matrix.families.values():
        for arch in fam.architectures:
            assert arch in known, f"families.{fam.name}: {arch} is registered by no Bridge tree we know"
    for arch in matrix.unsupported:
        assert arch in known


def _plan_families(matrix: Matrix, path: str) -> tuple[tuple[int, ...], list[str]]:
    files = with_architectures([ChangedFile(path)], shipped())
    sel = select(matrix, files, surface=shipped())
    return sel.levels, [matrix.families[f].model.model for f in sel.families]


@pytest.mark.parametrize(
    ("path", "model"),
    [
        (f"{M}/qwen/qwen3_bridge.py", "Qwen/Qwen3-0.6B"),  # not Qwen2.5, which the directory ran before
        (f"{M}/deepseek/deepseek_v3_bridge.py", "deepseek-ai/DeepSeek-V3"),
        (f"{M}/exaone/exaone45/exaone45_bridge.py", "LGAI-EXAONE/EXAONE-4.5-33B"),  # the VLM, not EXAONE 4.0
        (f"{M}/ernie/ernie_45_bridge.py", "baidu/ERNIE-4.5-21B-A3B-PT"),  # only the MoE bridge is registered
        (f"{M}/llama_nemotron/llama_nemotron_bridge.py", "nvidia/Llama-3_3-Nemotron-Super-49B-v1_5"),
    ],
)
def test_the_model_that_runs_is_the_one_that_changed(matrix: Matrix, path: str, model: str) -> None:
    _levels, models = _plan_families(matrix, path)
    assert models == [model]


def test_a_change_no_family_can_run_is_selected_with_a_reason_not_passed(matrix: Matrix) -> None:
    """Kimi K3 has no known checkpoint: its levels are selected, have no cell, and the report says so."""
    from verl_e2e.plan.cells import expand, uncovered

    files = with_architectures([ChangedFile(f"{M}/kimi/kimi_k3_provider.py")], shipped())
    sel = select(matrix, files, surface=shipped())
    assert 0 in sel.levels and "kimi" not in sel.families  # not Moonlight or Kimi K2 instead
    assert not [c for c in expand(matrix, sel) if c.family.startswith("kimi")]
    why = uncovered(matrix, sel)
    assert "KimiK3ForConditionalGeneration" in why[0][0]
    ctx = Context(uncovered={str(k): v for k, v in why.items()})
    assert overall([], ctx) == "Blocked"
    text = render([], ctx)
    assert "Not covered" in text and "no verl run needed" not in text


def test_a_kind_the_family_has_no_model_for_is_a_stated_reason(matrix: Matrix) -> None:
    """An MTP change in a directory whose fallback model has no MTP layers is reported, not dropped."""
    from verl_e2e.plan.cells import uncovered

    files = [ChangedFile(f"{M}/hybrid/hybrid_provider.py", diff_lines=("    mtp_num_layers: int = 1",))]
    sel = select(matrix, files, surface=shipped())
    assert 4 in sel.levels
    assert any("MTP" in why for why in uncovered(matrix, sel)[4])


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


PEFT_BEFORE = """\
class ParallelLinearAdapter:
    def __init__(self, dim):
        self.dim = dim

    def forward(self, x):
        return x


def _sync_adapters(model):
    for module in model.modules():
        module.reset()


def create_peft(model):
    _sync_adapters(model)
"""
# (`create_peft` is what verl calls by name: the changed helper is reached through it; a helper only a
# function nothing calls reaches would run in no cell, callsites.py)

PEFT_AFTER = PEFT_BEFORE.replace(
    "        module.reset()",
    "        module.reset()\n        for p in module.shared_expert_adapter.parameters():\n"
    "            torch.distributed.broadcast(p, src=0, group=module.ep_group)",
)


@pytest.fixture
def peft_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "bridge"
    target = repo / "src/megatron/bridge/peft/utils.py"
    target.parent.mkdir(parents=True)
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    target.write_text(PEFT_BEFORE)
    (repo / "pyproject.toml").write_text('dependencies = ["nvidia-modelopt==0.45"]\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    target.write_text(PEFT_AFTER)
    (repo / "pyproject.toml").write_text('dependencies = ["nvidia-modelopt==0.47"]\n')
    _git(repo, "commit", "-qam", "change")
    return repo


def test_the_api_plan_and_the_clone_plan_agree(subproc, peft_repo: Path, tmp_path: Path) -> None:
    files, diff = tmp_path / "files.txt", tmp_path / "change.diff"
    files.write_text(_git(peft_repo, "diff", "--name-status", "HEAD~1", "HEAD"))
    diff.write_text(_git(peft_repo, "diff", "HEAD~1", "HEAD"))
    api = subproc("plan", "--changed-files", str(files), "--diff", str(diff), "--format", "json")
    diff_only = subproc("plan", "--diff", str(diff), "--format", "json")
    clone = subproc("plan", "--repo", str(peft_repo), "--base", "HEAD~1", "--format", "json")
    plans = [json.loads(r.out) for r in (api, diff_only, clone)]
    assert all(r.code == 0 for r in (api, diff_only, clone)), [r.err for r in (api, diff_only, clone)]
    assert plans[0]["levels"] == plans[1]["levels"] == plans[2]["levels"]
    # a PEFT change that broadcasts shared-expert adapters over the EP group: EP, MoE, and the learning
    # signal (it writes adapter weights outside the optimizer); nothing on the save path, so no Level 1
    assert plans[0]["levels"] == [0, 2, 4, 5]
    assert {r["rule"] for r in plans[0]["reasons"]["5"]} == {"aspect:adapter-weights"}
    rules_l2 = {r["rule"] for r in plans[0]["reasons"]["2"]}
    assert "aspect:expert-parallel" in rules_l2
    assert {r["rule"] for r in plans[0]["reasons"]["4"]} >= {"modelopt-dependency"}  # the ModelOpt pin moved
    assert any(c["variant"] == "qat" for c in plans[0]["cells"])


def test_plan_text_names_escalations_and_the_term_that_fired(subproc, peft_repo: Path) -> None:
    text = subproc("plan", "--repo", str(peft_repo), "--base", "HEAD~1").out
    assert "escalation modelopt-dependency" in text and "escalation python-dependencies" in text
    assert "no rule or aspect matched" not in text  # pyproject.toml went through an escalation
    assert "`ep_group` in the changed lines" in text


def test_a_change_only_in_code_verl_never_calls_is_off_surface(matrix: Matrix) -> None:
    path = "src/megatron/bridge/training/utils/train_utils.py"
    f = ChangedFile(path, diff_lines=("    log_string += ' lr: %.3E |' % learning_rate",), scopes=("training_log",))
    sel = select(matrix, [replace_module_level(f)], surface=shipped())
    assert sel.levels == () and "training_log" in sel.off_surface[path]
    assert "which no Bridge function verl" in sel.off_surface[path]
    reached = ChangedFile(path, diff_lines=("    model.freeze()",), scopes=("freeze_moe_router",))
    assert select(matrix, [replace_module_level(reached)], surface=shipped()).levels == (0,)


def replace_module_level(f: ChangedFile) -> ChangedFile:
    from dataclasses import replace

    return replace(f, module_level=False)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--diff", "/nonexistent.diff"], "--diff /nonexistent.diff: cannot read it"),
        (["--diff", "{bad}"], "no 'diff --git a/PATH b/PATH' header found"),
        (["--diff", "{bad}", "--repo", "."], "--diff and --repo both given"),
    ],
)
def test_bad_diff_input_is_one_clear_line(subproc, tmp_path: Path, args: list[str], expect: str) -> None:
    bad = tmp_path / "bad.diff"
    bad.write_text("M\tsrc/megatron/bridge/peft/lora.py\n")
    result = subproc("plan", *[a.replace("{bad}", str(bad)) for a in args])
    assert result.code == 2 and expect in result.err and len(result.err.strip().splitlines()) == 1


def test_the_shipped_verl_imports_are_those_of_the_pinned_verl(matrix: Matrix, tmp_path: Path) -> None:
    """The index's list is what verl at the pinned commit imports (read from its source tarball)."""
    from verl_e2e.plan.surface import verl_imports

    from .test_verl_config import TARBALL

    if not TARBALL.is_file():
        pytest.fail(f"{TARBALL} is missing: the pinned verl source is part of the shared data")
    with tarfile.open(TARBALL) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("verl/") and m.name.endswith(".py")]
        tar.extractall(tmp_path, members=members, filter="data")
    index = shipped()
    assert matrix.defaults.verl_ref.startswith(index.verl_commit[:7]) or index.verl_commit == matrix.defaults.verl_ref
    assert verl_imports(tmp_path) == list(index.verl_imports)


def test_surface_rebuilds_from_a_real_bridge_tree(subproc, tmp_path: Path) -> None:
    _sdist_registrations()  # skips or fails with the reason when the sdist is missing
    with tarfile.open(SDIST) as tar:
        members = [m for m in tar.getmembers() if "/src/" in m.name]
        for m in members:
            m.name = m.name.split("/", 1)[1]
        tar.extractall(tmp_path / "bridge", members=members, filter="data")
    out = tmp_path / "surface.json"
    result = subproc("surface", "--bridge", str(tmp_path / "bridge"), "--out", str(out))
    assert result.code == 0, result.err
    data = json.loads(out.read_text())
    assert data["verl_imports"] == list(shipped().verl_imports)  # kept without --verl
    archs = data["architectures"]
    assert archs[f"{M}/qwen/qwen3_bridge.py"] == ["Qwen3ForCausalLM"]
    assert "src/megatron/bridge/training/utils/train_utils.py" in data["reachable"]
    assert any(p.startswith("src/megatron/bridge/recipes/") for p in data["unreachable"])
    unreached = set(data["unreached"]["src/megatron/bridge/training/utils/train_utils.py"])
    assert "training_log" in unreached and "make_value_model" not in unreached


def test_architectures_for_the_changed_files_alone_equal_the_whole_trees_answer() -> None:
    """A plan reads only the files that can import the changed ones (`only=`); on Bridge's real tree
    the answer for every model file is the one the whole tree gives."""
    _sdist_registrations()  # skips or fails with the reason when the sdist is missing
    with tarfile.open(SDIST) as tar:
        sources = {
            m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if "/src/megatron/bridge/models/" in m.name and m.name.endswith(".py") and m.isfile()
        }
    whole = architectures_by_file(sources)
    model_files = [p for p in sources if p.count("/") >= 5 and p.split("/")[4] not in SHARED]
    assert len(model_files) > 100
    for path in model_files:
        assert architectures_by_file(sources, only=[path]).get(path, []) == whole.get(path, []), path
