"""Cache warm-up: what gets downloaded, where, and how failures are reported.

The Hugging Face hub is unreachable here, so `fetch` is a stand-in for huggingface_hub.snapshot_download
that records its calls and writes the files a real download would leave.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.run.prefetch import PrefetchError, plan_downloads, run_downloads


def test_plan_covers_models_dummy_configs_reward_and_data(matrix: Matrix, tmp_path: Path) -> None:
    downloads = {d.repo_id: d for d in plan_downloads(matrix, [], tmp_path)}
    assert downloads["Qwen/Qwen2.5-0.5B"].allow_patterns[0] == "*.json"  # a real checkpoint
    assert downloads["deepseek-ai/DeepSeek-V2-Lite"].allow_patterns == ["config.json"]  # dummy: config only
    assert downloads["Skywork/Skywork-Reward-V2-Llama-3.2-1B"].local_dir.endswith(
        "models/Skywork/Skywork-Reward-V2-Llama-3.2-1B"
    )
    gsm8k = downloads["openai/gsm8k"]
    assert gsm8k.repo_type == "dataset" and gsm8k.local_dir == str(tmp_path / "datasets" / "gsm8k-raw")
    every_model = {f.model.model for f in matrix.families.values()} | {
        f.moe_model.model for f in matrix.families.values() if f.moe_model
    }
    assert every_model <= set(downloads)


def test_plan_paths_match_what_cells_read(matrix: Matrix, tmp_path: Path) -> None:
    """The cache layout and the cells' container paths agree once the cache is mounted."""
    from verl_e2e.plan.cells import expand
    from verl_e2e.plan.select import select

    cell = expand(matrix, select(matrix, [], requested=[0]))[0]
    env = cell.phases[0].env
    models = matrix.defaults.container_paths["models"]
    d = next(d for d in plan_downloads(matrix, ["qwen"], tmp_path) if d.repo_id == cell.model)
    assert env["MODEL_PATH"] == d.local_dir.replace(str(tmp_path / "models"), models)


def test_downloads_run_in_order_and_write_a_manifest(matrix: Matrix, tmp_path: Path) -> None:
    calls = []

    def fetch(repo_id: str, **kw: object) -> str:
        calls.append((repo_id, kw["repo_type"], kw["token"]))
        Path(str(kw["local_dir"])).mkdir(parents=True, exist_ok=True)
        (Path(str(kw["local_dir"])) / "config.json").write_text("{}")
        return str(kw["local_dir"])

    downloads = plan_downloads(matrix, ["llama"], tmp_path)
    manifest = run_downloads(downloads, tmp_path, token="t0k", fetch=fetch, say=print)
    assert [c[0] for c in calls] == [d.repo_id for d in downloads]
    assert all(c[2] == "t0k" for c in calls)
    assert json.loads((tmp_path / "prefetch.json").read_text())["done"] == manifest["done"]
    assert (tmp_path / "models/meta-llama/Llama-3.2-1B/config.json").is_file()


def test_failures_are_all_reported(matrix: Matrix, tmp_path: Path) -> None:
    def fetch(repo_id: str, **kw: object) -> str:
        if repo_id.startswith("meta-llama/"):
            raise PermissionError("401 Client Error: gated repo, access to model is restricted")
        return str(kw["local_dir"])

    with pytest.raises(PrefetchError, match=r"1 of 3 download\(s\) failed \(meta-llama/Llama-3.2-1B\).*--token-env"):
        run_downloads(plan_downloads(matrix, ["llama"], tmp_path), tmp_path, fetch=fetch, say=print)
    failed = json.loads((tmp_path / "prefetch.json").read_text())["failed"]
    assert failed[0]["error"].startswith("PermissionError: 401")


def test_unknown_family(matrix: Matrix, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="did you mean 'qwen'"):
        plan_downloads(matrix, ["qwne"], tmp_path)


def test_dry_run_cli(cli) -> None:
    result = cli("prefetch", "--dry-run", "--family", "olmoe", "--cache", "/srv/cache")
    assert result.code == 0
    assert "allenai/OLMoE-1B-7B-0125" in result.out and "/srv/cache/datasets/gsm8k-raw" in result.out
    missing = cli("prefetch", "--family", "olmoe", "--token-env", "NO_SUCH_VAR", "--cache", "/tmp/x")
    assert missing.code == 2 and "is not set" in missing.err
