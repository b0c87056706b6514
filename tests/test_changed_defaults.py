"""A changed default as the likely cause: the plan records the class-level defaults, dataclass fields and
module-level values a PR sets (from both ASTs with `plan --repo`, from the diff's text with `plan --diff`),
the run dir carries them (`changes.json` `defaults`), and a failure raised outside the PR's lines on a
path that reads one names that line in the headline and sends the first follow-up there. The end-to-end
tests go through the real plan stage (a git repository, `make_plan`, the plan JSON, `plan_changes`) and
the real judge, with verl 1dda039's traceback of Bridge's weight import at model build."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict
from verl_e2e.plan import fields
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.contract import render_json
from verl_e2e.plan.diffs import parse_unified_diff
from verl_e2e.run.runinputs import plan_changes

from . import bridge_traces as T
from .rundirs import cell_for, write_run_dir

PROVIDER_PATH = "src/megatron/bridge/models/gpt_provider.py"
BRIDGE_PATH = "src/megatron/bridge/models/conversion/model_bridge.py"
PROVIDER = '''\
"""GPT model provider: the Megatron-Core GPT model a Bridge builds, configured by dataclass fields."""

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

from megatron.bridge.models.model_provider import ModelProviderMixin
from megatron.bridge.models.transformer_config import TransformerConfig

logger = logging.getLogger(__name__)
__all__ = ["GPTModelProvider"]


@dataclass
class GPTModelProvider(TransformerConfig, ModelProviderMixin[MCoreGPTModel]):
    """Configuration and provider for Megatron Core GPT models."""

    fp16_lm_cross_entropy: bool = False
    parallel_output: bool = True
    share_embeddings_and_output_weights: bool = True
    make_vocab_size_divisible_by: int = 128
    position_embedding_type: str = "learned_absolute"
    rotary_base: int = 10000
    rotary_percent: float = 1.0
    seq_len_interpolation_factor: Optional[float] = None
    seq_length: int = 1024
    kv_channels: Optional[int] = None
    attention_softmax_in_fp32: bool = False
    vocab_size: Optional[int] = None
    extra_fields: dict = field(default_factory=dict)

    def provide(self, pre_process=None, post_process=None, vp_stage=None):
        """Build the model; every field above is read here or in TransformerConfig.__post_init__."""
        padded = self.vocab_size
        return self.build(padded)
'''
KV_CHANNELS = "    kv_channels: Optional[int] = None\n"
BRIDGE_MODULE = '''\
"""Model bridges: HF <-> Megatron conversion (a short stand-in with the real class layout)."""

SHAPE_CHECK = True


class MegatronModelBridge:
    """Base class of every model bridge."""

    CONFIG_MAPPING = [("num_attention_heads", "num_attention_heads"), ("head_dim", "kv_channels")]

    def load_weights_hf_to_megatron(self, hf_pretrained, megatron_model):
        """Copy every mapped HF tensor into its Megatron parameter."""
        for task in self.tasks(hf_pretrained, megatron_model):
            task.copy()
        return megatron_model
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _pr(tmp_path: Path, before: dict[str, str], after: dict[str, str]) -> Path:
    """A Bridge-shaped repository with a merge base and the PR's head on branch `pr`."""
    repo = tmp_path / "bridge"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    for files, message in ((before, "base"), (after, "pr")):
        if message == "pr":
            _git(repo, "checkout", "-q", "-b", "pr")
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", message)
    return repo


def _plan_context(matrix: Matrix, repo: Path, mode: str, tmp_path: Path) -> Path:
    """The plan JSON as the plan job writes it, from the checkout (`--repo`) or from the diff (`--diff`)."""
    if mode == "repo":
        req = PlanRequest(repo=str(repo), base="main", head="pr")
    else:
        diff = tmp_path / "pr.diff"
        diff.write_text(_git(repo, "diff", "main", "pr"))
        req = PlanRequest(diff=str(diff), levels=[0])
    out = tmp_path / "plan.json"
    out.write_text(render_json(make_plan(req, matrix)))
    return out


def _judged(matrix: Matrix, tmp_path: Path, plan: Path, log: str) -> Verdict:
    """The cell run as `run-cell` leaves it: its log, and the plan's changes as changes.json."""
    cell = cell_for(matrix, 0)
    run = write_run_dir(tmp_path / "run", cell, {"run": log}, statuses={"run": "failed"})
    changes = plan_changes(plan)
    assert changes is not None
    (run / "changes.json").write_text(json.dumps(changes))
    return judge_run_dir(run)


# ------------------------------------------------------------------------------------------ the plan


def test_the_ast_reading_keeps_class_fields_and_module_values_outside_functions() -> None:
    new = (
        PROVIDER.replace(KV_CHANNELS, "    kv_channels: Optional[int] = 128\n")
        .replace("    seq_length: int = 1024\n", "")
        .replace(
            "    vocab_size: Optional[int] = None\n", "    vocab_size: Optional[int] = None\n    qk_norm: bool = True\n"
        )
        .replace("padded = self.vocab_size", "padded = self.vocab_size or 0")
        .replace('__all__ = ["GPTModelProvider"]', '__all__ = ["GPTModelProvider", "X"]')
        .replace("rotary_base: int = 10000", "rotary_base: int = 10_000")
    )
    added = [i for i, line in enumerate(new.splitlines(), 1) if line not in PROVIDER.splitlines()]
    removed = [i for i, line in enumerate(PROVIDER.splitlines(), 1) if line not in new.splitlines()]
    found = fields.from_sources(PROVIDER_PATH, PROVIDER.encode(), new.encode(), added, removed)
    assert found is not None
    by_name = {d.qualname: d for d in found}
    assert set(by_name) == {
        "GPTModelProvider.kv_channels",
        "GPTModelProvider.qk_norm",
        "GPTModelProvider.seq_length",
    }  # not the function body, not __all__, not 10000 written as 10_000
    kv = by_name["GPTModelProvider.kv_channels"]
    assert (kv.value, kv.was, kv.bases) == ("128", "None", ("TransformerConfig", "ModelProviderMixin[MCoreGPTModel]"))
    assert new.splitlines()[kv.line - 1].strip().startswith("kv_channels")
    assert by_name["GPTModelProvider.qk_norm"].was is None
    gone = by_name["GPTModelProvider.seq_length"]
    assert gone.removed and gone.was == "1024" and new.splitlines()[gone.line - 1].startswith("class GPTModelProvider")


def test_the_diff_alone_reads_the_same_field_from_gits_hunk_header(matrix: Matrix, tmp_path: Path) -> None:
    repo = _pr(
        tmp_path,
        {PROVIDER_PATH: PROVIDER},
        {PROVIDER_PATH: PROVIDER.replace(KV_CHANNELS, KV_CHANNELS.replace("None", "128"))},
    )
    text = _git(repo, "diff", "main", "pr")
    assert "@@ class GPTModelProvider(" in text  # git names the class above the hunk: the owner
    diff = parse_unified_diff(text)[PROVIDER_PATH]
    (found,) = fields.from_text(PROVIDER_PATH, diff.assigned, diff.unassigned)
    assert (found.owner, found.name, found.value, found.was) == ("GPTModelProvider", "kv_channels", "128", "None")
    assert found.bases == ("TransformerConfig", "ModelProviderMixin[MCoreGPTModel]")


def test_an_older_plan_without_the_record_reads_as_no_changed_defaults(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"context": {"changes": {"src/a.py": [[1, 2]]}}}))
    assert (plan_changes(plan) or {})["defaults"] == []


# ------------------------------------------------------------------------------- plan -> run -> judge


@pytest.mark.parametrize("mode", ["repo", "diff"])
@pytest.mark.parametrize(
    ("inner", "exception"),
    [((T.SHAPE_CHECK,), T.SHAPE_MISMATCH), (T.QKV_MERGE, T.VIEW_MISMATCH)],
    ids=["shape-check", "qkv-view"],
)
def test_a_provider_default_that_changes_weight_shapes_is_named_as_the_likely_cause(
    matrix: Matrix, tmp_path: Path, mode: str, inner: tuple[T.Frame, ...], exception: str
) -> None:
    """The observed miss: a provider default changed the attention weight shapes; Bridge's HF import
    failed building the model in code the PR never touched."""
    head = PROVIDER.replace(KV_CHANNELS, "    kv_channels: Optional[int] = 128\n")
    repo = _pr(tmp_path, {PROVIDER_PATH: PROVIDER}, {PROVIDER_PATH: head})
    plan = _plan_context(matrix, repo, mode, tmp_path)
    line = head.splitlines().index("    kv_channels: Optional[int] = 128") + 1
    v = _judged(matrix, tmp_path, plan, T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, *inner), exception))
    assert (v.result, v.failure_class) == ("Fail", "model_build"), v.headline
    named = f"likely cause: this PR changed `GPTModelProvider.kv_channels` default at `{PROVIDER_PATH}:{line}`"
    assert named in v.headline, v.headline
    assert v.headline.endswith("; not in code this PR changed)")  # the frame is still shown, as where it surfaced
    assert v.follow_ups[0].startswith(
        f"start at `{PROVIDER_PATH}:{line}`: this PR changed the `GPTModelProvider.kv_channels`"
    )
    assert "model build reads the provider's fields" in v.follow_ups[0]
    assert not any("mpu parallel sizes" in f or "rerun Level 1" in f for f in v.follow_ups)


def _changes(defaults: list[dict[str, Any]], lines: dict[str, list[list[int]]] | None = None) -> dict[str, Any]:
    return {
        "lines": lines or {d["path"]: [[d["line"], d["line"]]] for d in defaults},
        "functions": {},
        "defaults": defaults,
    }


def _judge_with(matrix: Matrix, tmp_path: Path, log: str, changes: dict[str, Any]) -> Verdict:
    cell = cell_for(matrix, 0)
    run = write_run_dir(tmp_path / "run", cell, {"run": log}, statuses={"run": "failed"})
    (run / "changes.json").write_text(json.dumps(changes))
    return judge_run_dir(run)


def test_a_class_default_read_by_a_method_on_the_failing_path_is_named(matrix: Matrix, tmp_path: Path) -> None:
    """Rule one: the failing frame runs inside the class whose class-level value the PR changed (here the
    base bridge's config mapping), whatever the failure's class."""
    changed = BRIDGE_MODULE.replace('("head_dim", "kv_channels")', '("head_dim", "kv_channel")')
    repo = _pr(tmp_path, {BRIDGE_PATH: BRIDGE_MODULE}, {BRIDGE_PATH: changed})
    plan = _plan_context(matrix, repo, "repo", tmp_path)
    (record,) = json.loads(plan.read_text())["context"]["changed_defaults"]
    assert (record["owner"], record["name"], record["span"]) == ("MegatronModelBridge", "CONFIG_MAPPING", [6, 15])
    record["span"] = [1000, 1400]  # the stand-in file is short: place the class where the real one has it
    log = T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK), T.SHAPE_MISMATCH)
    v = _judge_with(matrix, tmp_path, log, _changes([record]))
    assert "likely cause: this PR changed `MegatronModelBridge.CONFIG_MAPPING` default" in v.headline
    assert (
        "the failing path runs that class's code (src/megatron/bridge/models/conversion/model_bridge.py:1345"
        in (v.follow_ups[0])
    )


def test_a_module_value_read_in_its_module_is_named_also_in_a_training_step(matrix: Matrix, tmp_path: Path) -> None:
    record = {"path": "src/megatron/bridge/peft/utils.py", "line": 30, "owner": "", "name": "ADAPTER_SCALE",
              "value": "0.0", "was": "1.0", "removed": False, "bases": [], "span": None}  # fmt: skip
    frames = (
        (
            f"{T.VERL}/workers/actor/megatron_actor.py",
            "update_policy",
            600,
            "metrics = self.forward_backward_batch(data)",
        ),
        (f"{T.BRIDGE}/peft/utils.py", "forward", 212, "out = self.linear_out(hidden) * self.scale"),
    )
    v = _judge_with(
        matrix, tmp_path, T.build_log(frames, "ZeroDivisionError: float division by zero"), _changes([record])
    )
    assert v.failure_class == "runtime", v.headline
    assert (
        "likely cause: this PR changed module value `ADAPTER_SCALE` at `src/megatron/bridge/peft/utils.py:30`"
        in v.headline
    )
    assert "from `1.0` to `0.0`" in v.follow_ups[0]


@pytest.mark.parametrize(
    ("record", "frames", "exception"),
    [
        (  # a Config class, but not a model provider's (training config, outside models/)
            {"path": "src/megatron/bridge/training/config.py", "line": 88, "owner": "CheckpointConfig", "name": "save"},
            (*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK),
            T.SHAPE_MISMATCH,
        ),
        (  # another family's provider: the Qwen cell never builds a DeepSeek model
            {
                "path": "src/megatron/bridge/models/deepseek/deepseek_provider.py",
                "line": 40,
                "owner": "DeepSeekV3ModelProvider",
                "name": "q_lora_rank",
            },
            (*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK),
            T.SHAPE_MISMATCH,
        ),
        (  # an import cannot be caused by a default's value
            {"path": PROVIDER_PATH, "line": 25, "owner": "GPTModelProvider", "name": "kv_channels"},
            (*T.ENGINE_BUILD[:2], (f"{T.BRIDGE}/models/gpt_provider.py", "provide", 40, "from x import y")),
            "ImportError: cannot import name 'y' from 'x'",
        ),
        (  # a provider field, but the run failed in a training step: model build is not what read it
            {"path": PROVIDER_PATH, "line": 25, "owner": "GPTModelProvider", "name": "kv_channels"},
            ((f"{T.VERL}/workers/actor/megatron_actor.py", "update_policy", 600, "x"),),
            "KeyError: 'old_log_probs'",
        ),
    ],
    ids=["training-config", "other-family", "import-error", "training-step"],
)
def test_no_likely_cause_where_the_failing_path_does_not_read_the_default(
    matrix: Matrix, tmp_path: Path, record: dict[str, Any], frames: tuple[T.Frame, ...], exception: str
) -> None:
    full = record | {"value": "1", "was": "2", "removed": False, "bases": [], "span": None}
    v = _judge_with(matrix, tmp_path, T.build_log(frames, exception), _changes([full]))
    assert "likely cause" not in v.headline and not v.follow_ups[0].startswith("start at"), v.headline


def test_the_cells_own_familys_provider_is_named(matrix: Matrix, tmp_path: Path) -> None:
    record = {"path": "src/megatron/bridge/models/qwen/qwen_provider.py", "line": 31, "owner": "Qwen2ModelProvider",
              "name": "kv_channels", "value": "128", "was": "None", "removed": False,
              "bases": ["GPTModelProvider"], "span": [20, 60]}  # fmt: skip
    log = T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK), T.SHAPE_MISMATCH)
    v = _judge_with(matrix, tmp_path, log, _changes([record]))
    assert "likely cause: this PR changed `Qwen2ModelProvider.kv_channels` default" in v.headline, v.headline


def test_a_failing_frame_on_a_changed_line_still_says_so_first(matrix: Matrix, tmp_path: Path) -> None:
    record = {"path": PROVIDER_PATH, "line": 25, "owner": "GPTModelProvider", "name": "kv_channels",
              "value": "128", "was": "None", "removed": False, "bases": [], "span": None}  # fmt: skip
    lines = {BRIDGE_PATH: [[1345, 1345]], PROVIDER_PATH: [[25, 25]]}
    log = T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK), T.SHAPE_MISMATCH)
    v = _judge_with(matrix, tmp_path, log, _changes([record], lines))
    assert f"in code this PR changed: `{BRIDGE_PATH}:1345`" in v.headline and "likely cause" not in v.headline


def test_untrusted_records_are_checked_and_a_run_dir_without_them_is_read_as_before(
    matrix: Matrix, tmp_path: Path
) -> None:
    log = T.build_log((*T.ENGINE_BUILD, *T.LOAD_HF, T.SHAPE_CHECK), T.SHAPE_MISMATCH)
    junk = [{"path": 1, "line": "x"}, "text", {"path": PROVIDER_PATH, "owner": "A", "name": "b"}]
    v = _judge_with(matrix, tmp_path / "junk", log, {"lines": {}, "functions": {}, "defaults": junk})
    assert v.failure_class == "model_build" and "likely cause" not in v.headline
    old = _judge_with(matrix, tmp_path / "old", log, {"lines": {}, "functions": {}})
    assert old.headline.endswith(f"(at {BRIDGE_PATH}:1345 in load_weights_hf_to_megatron; not in code this PR changed)")
