"""The PR comment reads on one screen, and nothing it leaves out is lost.

Measured on the real run dirs in fixtures/real-runs/ (judged afresh): before this comment was
reshaped, cells 09 (Pass) and 10 (Fail) made a 9,233-character comment, each cell's ~2,000-character
command line and its nine limitations in it, the Megatron-Core note three times. The comment now
keeps the result line, one row per cell with the culprit in view, a short block per failing cell,
each limitation once; the job summary (`render_full`) keeps every cell in full.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e.config.compat import KNOWN
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict, render_text
from verl_e2e.report.comment import Context, check_run, render
from verl_e2e.report.fullsummary import render_full
from verl_e2e.report.sections import CORE

RUNS = Path(__file__).parent / "fixtures" / "real-runs"
ONE_SCREEN = 4_000
RUN_URL = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/actions/runs/12345678901"
CTX = Context(
    repo="NVIDIA-NeMo/Megatron-Bridge",
    pr=2345,
    sha="a84e83bdecf8" + "0" * 28,
    merge_base="5301decf8c8f" + "0" * 28,
    run_url=RUN_URL,
    artifacts_url=RUN_URL + "#artifacts",
    skipped={  # the example plan's four skipped levels: the longest reasons the rules give
        "1": "no changed path matched its rules (hf-import-export, param-mapping, checkpointing); aspect "
        "saved-state needs the diff to decide (plan with --diff or --repo)",
        "2": "no rule selects it; aspect expert-parallel, aspect parallel-layout needs the diff to decide "
        "(plan with --diff or --repo)",
        "3": "optional: runs only on request or when a changed path matches its rules (megatron-fsdp); aspect "
        "megatron-fsdp needs the diff to decide (plan with --diff or --repo)",
        "5": "no changed path matched its rules (peft, fused-kernels); aspect learning-numerics needs the diff to "
        "decide (plan with --diff or --repo)",
    },
)
LONG_CULPRIT = (
    "`MegatronParamMapping.resolve_hf_weight_names_for_grouped_experts` at "
    "`src/megatron/bridge/models/conversion/param_mapping/grouped_expert_weights_and_adapters_mapping.py:12345`"
)


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    out = {}
    for src in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        run = tmp_path_factory.mktemp("runs") / src.name
        shutil.copytree(src, run)
        for written in ("verdict.json", "evidence.json", "junit.xml"):
            (run / written).unlink(missing_ok=True)
        out[src.name[:2]] = judge_run_dir(run)
    return out


def _long_culprit(v: Verdict) -> Verdict:
    """Cell 10's failure, blamed on a deep conversion module with a long qualified name."""
    cause = v.headline.split(" (in a function this PR changed:")[0]
    return replace(v, headline=f"{cause} (in a function this PR changed: {LONG_CULPRIT})")


@pytest.mark.parametrize("pair", [("09", "10"), ("11", "13"), ("12", "13"), ("14", "15"), ("16", "17")])
def test_a_two_cell_comment_fits_one_screen(judged: dict[str, Verdict], pair: tuple[str, str]) -> None:
    """Two cells of one session's runs (one matrix, so one Megatron-Core note), Fail beside Pass or
    two Fails, with the example plan's four skipped levels and a real run's links."""
    body = render([judged[pair[0]], judged[pair[1]]], CTX)
    assert len(body) <= ONE_SCREEN, (len(body), body)


def test_a_fail_with_a_long_culprit_fits_and_shows_it_in_its_row(judged: dict[str, Verdict]) -> None:
    body = render([judged["09"], _long_culprit(judged["10"])], CTX)
    assert len(body) <= ONE_SCREEN, (len(body), body)
    row = next(line for line in body.splitlines() if line.startswith("|") and "❌ Fail" in line)
    assert "grouped_expert_weights_and_adapters_mapping.py:12345 in MegatronParamMapping.resolve_hf" in row
    assert "got an unexpected keyword argument 'dropout_pos'" in row  # the cause beside it


@pytest.mark.parametrize(
    ("run", "where"),
    [
        ("10", "`src/megatron/bridge/peft/lora.py:255 in transform` (in a function this PR changed)"),
        (
            "13",
            "`src/megatron/bridge/training/checkpointing.py:3356 in apply_peft_adapter_filter_to_state_dict` "
            "(a line this PR changed)",
        ),
        ("14", "`src/megatron/bridge/models/qwen/qwen2_bridge.py:53 in provider_bridge`"),
    ],
)
def test_the_culprit_is_in_the_table_row(judged: dict[str, Verdict], run: str, where: str) -> None:
    body = render([judged[run]], CTX)
    row = next(line for line in body.splitlines() if line.startswith("| `L"))
    assert where in row, row


def test_shared_notes_and_limitations_are_said_once(judged: dict[str, Verdict]) -> None:
    cells = [judged["09"], judged["10"], judged["11"]]
    body = render(cells, CTX)
    assert body.count("**Megatron-Core:**") == 1  # the known incompatibility and what ran instead, together
    for text in {x.removeprefix(KNOWN).removeprefix(CORE) for v in cells for x in v.limitations}:
        assert body.count(" ".join(text.split())) == 1, text
    assert body.index("megatron-core 0.19.2 installed in the environment") < body.index("| Cell |")


def test_commands_live_in_the_job_summary_and_the_comment_says_so(judged: dict[str, Verdict]) -> None:
    cells = [judged["09"], judged["10"]]
    body, summary = render(cells, CTX), render_full(cells, CTX)
    assert all(v.command and v.command not in body and v.command in summary for v in cells)
    assert "run_ppo_trainer_megatron.sh" not in body
    assert "with the command that reproduces it: the workflow run's job summary and the run dirs" in body


def test_every_fact_of_the_old_comment_is_in_the_comment_or_the_job_summary(judged: dict[str, Verdict]) -> None:
    """The old comment was the result line, the table and each cell's summary in the skill's format
    (`render_text`); each of its lines is still in one of the outputs, and the check run has it too."""
    cells = [judged["09"], judged["10"], judged["13"]]
    body, summary = render(cells, CTX), render_full(cells, CTX)
    check = check_run(cells, CTX)["output"]["summary"]
    facts = [line for v in cells for line in render_text(v).splitlines() if line.strip()]
    facts += [f"- Level {level} (`/verl-e2e level={level}`): `{why}`" for level, why in CTX.skipped.items()]
    missing = [f for f in facts if f not in body and f not in summary]
    assert not missing, missing
    assert not [f for f in facts if f not in check]
    assert body.splitlines()[1] == summary.splitlines()[0] == "## ❌ verl-e2e: Fail (3 cells: 1 pass, 2 fail)"


def test_the_job_summary_is_bounded_and_keeps_failures() -> None:
    from .test_publish import verdict

    cells = [verdict(f"L0-v-f{i}", "Pass") for i in range(400)] + [verdict("L1-save-resume-qwen", "Fail", 1)]
    summary = render_full(cells, CTX)
    assert len(summary.encode()) < 1024 * 1024  # GitHub's limit on one step's summary
    assert "<summary>❌ <code>L1-save-resume-qwen</code>: Fail</summary>" in summary
