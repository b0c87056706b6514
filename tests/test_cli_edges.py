"""The CLI's edges as a maintainer trying it meets them: paths, dry runs, the commit a run tests,
progress of slow commands, and help on every command."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import time
from pathlib import Path

import pytest

from verl_e2e.cli import paths
from verl_e2e.cli.main import _build_parser
from verl_e2e.cli.progress import Progress

MISSING = "/nonexistent/verl-e2e"
FILE = str(Path(__file__))  # a file where a directory is expected, or a parent that is not a directory

# Every path argument of every command, each given a path that cannot serve (inputs missing,
# outputs under a missing directory or under a file). The flag is named in the one line.
BAD_PATHS = [
    (("plan", "--example", "--out", f"{MISSING}/plan.json"), "plan --out"),
    (("plan", "--example", "--out", f"{FILE}/plan.json"), "plan --out"),
    (("plan", "--changed-files", MISSING), "--changed-files"),
    (("plan", "--diff", MISSING), "--diff"),
    (("plan", "--repo", MISSING, "--base", "main"), "--repo"),
    (("plan", "--example", "--matrix", MISSING), MISSING),
    (("validate", MISSING), MISSING),
    (("families", "--matrix", MISSING), MISSING),
    (("evidence", MISSING), MISSING),
    (("judge", MISSING), MISSING),
    (("judge", str(Path(__file__).parent), "--baseline", MISSING), "--baseline"),
    (("image", "--verl", MISSING, "--print-tag"), "--verl"),
    (("image", "--verl", "/tmp", "--wheels", MISSING, "--print-tag"), "image --wheels"),
    (("prefetch", "--cache", FILE, "--dry-run"), "prefetch --cache"),
    (("run", "--example", "--dry-run", "--bridge", MISSING), "run --bridge"),
    (("run", "--example", "--dry-run", "--bridge", "/tmp", "--out", FILE), "run --out"),
    (("run", "--example", "--dry-run", "--bridge", "/tmp", "--verl", MISSING), "run --verl"),
    (("run", "--example", "--dry-run", "--bridge", "/tmp", "--cache", FILE), "run --cache"),
    (("run-cell", FILE, "--bridge", MISSING, "--out", "/tmp/o"), "run-cell --bridge"),
    (("run-cell", MISSING, "--bridge", "/tmp", "--out", "/tmp/o"), MISSING),
    (("run-cell", FILE, "--bridge", "/tmp", "--out", f"{FILE}/o"), "run-cell --out"),
    (("base-run", FILE, "--cell-id", "c", "--like", MISSING, "--bridge", "/tmp", "--out", "/tmp/o"), "--like"),
    (("base-run", MISSING, "--cell-id", "c", "--like", "/tmp", "--bridge", "/tmp", "--out", "/tmp/o"), MISSING),
    (("surface", "--bridge", MISSING), "--bridge"),
    (("surface", "--bridge", "/tmp", "--verl", MISSING), "surface --verl"),
    (("surface", "--bridge", "/tmp", "--out", f"{MISSING}/surface.json"), "surface --out"),
    (("surface", "--runs", MISSING), MISSING),
    (("report", MISSING, "--no-comment", "--no-check"), MISSING),
    (("report", "/tmp", "--no-comment", "--no-check", "--summary", f"{MISSING}/s.md"), "report --summary"),
    (("report", "/tmp", "--no-comment", "--no-check", "--junit", f"{FILE}/junit.xml"), "report --junit"),
    (("report", "/tmp", "--no-comment", "--no-check", "--baseline", MISSING), "report --baseline"),
    (("trigger", "--event-name", "push", "--event", MISSING), MISSING),
    (("compare", MISSING, MISSING), MISSING),
    (("fork-notice", MISSING, "--head-sha", "0" * 40), MISSING),
]


@pytest.mark.parametrize(("argv", "named"), BAD_PATHS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_every_path_that_cannot_serve_is_one_line_and_exit_2(cli, argv: tuple[str, ...], named: str) -> None:
    result = cli(*argv)
    assert result.code == 2, (result.code, result.err[-2000:])
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert named in result.err, result.err


def _path_arguments() -> set[tuple[str, str]]:
    """(command, option) of every argument that names a file or directory."""
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = set()
    for name, command in sub.choices.items():
        for action in command._actions:
            pathish = action.type is Path or str(action.metavar) in {"FILE", "PATH", "DIR", "LOG", "RUN_DIR"}
            if pathish:
                found.add((name, action.option_strings[0] if action.option_strings else action.dest))
    return found


def test_every_path_argument_has_a_bad_path_case() -> None:
    covered = {(argv[0], arg) for argv, _ in BAD_PATHS for arg in argv if arg.startswith("--")}
    covered |= {(argv[0], "positional") for argv, _ in BAD_PATHS}
    missing = {(c, o) for c, o in _path_arguments() if (c, o) not in covered and (c, "positional") not in covered}
    assert not missing, f"add a BAD_PATHS case for {sorted(missing)}"


def test_an_output_path_is_checked_before_any_work(cli, tmp_path: Path) -> None:
    started = time.monotonic()
    result = cli("surface", "--bridge", str(tmp_path), "--out", f"{tmp_path}/no/such/dir/surface.json")
    assert result.code == 2 and "surface --out" in result.err and time.monotonic() - started < 5
    assert paths.problem(tmp_path / "new" / "deep", paths.Kind.WRITE_DIR) is None  # created on demand


def _git_repo(root: Path) -> tuple[Path, list[str]]:
    """A Bridge-like checkout with three commits; returns it and the commits, oldest first."""
    repo = root / "bridge"
    (repo / "src/megatron/bridge/peft").mkdir(parents=True)
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True, text=True)  # noqa: E731
    git("init", "-q", "-b", "main")
    git("config", "user.email", "ci@example.com")
    git("config", "user.name", "CI")
    commits = []
    for i in range(3):
        (repo / "src/megatron/bridge/peft/lora.py").write_text(f"rank = {i}\n")
        git("add", "-A")
        git("commit", "-qm", f"c{i}")
        commits.append(git("rev-parse", "HEAD").stdout.strip())
    return repo, commits


def test_run_refuses_a_bridge_that_is_not_the_planned_head(cli, tmp_path: Path) -> None:
    repo, (c0, c1, c2) = _git_repo(tmp_path)
    common = ("run", "--dry-run", "--repo", str(repo), "--base", c0, "--out", str(tmp_path / "runs"))
    other = cli(*common, "--head", c1, "--bridge", str(repo))  # the checkout is at c2
    assert other.code == 2 and other.err.count("\n") == 1, other.err
    assert f"the plan is for Bridge {c1[:12]} (--head), but --bridge {repo} is at {c2[:12]}" in other.err
    same = cli(*common, "--head", c2, "--bridge", str(repo))
    assert same.code == 0, same.err
    bare = tmp_path / "copy"
    bare.mkdir()
    not_git = cli(*common, "--head", c2, "--bridge", str(bare))
    assert not_git.code == 2 and "is not a git checkout" in not_git.err


def test_a_dry_run_checks_what_a_run_checks(cli) -> None:
    result = cli("run", "--example", "--dry-run", "--bridge", MISSING)
    assert result.code == 2 and f"run --bridge {MISSING}: no such directory" in result.err
    assert result.out == ""  # refused before printing a plan or commands


def test_progress_speaks_only_past_the_quiet_time() -> None:
    err = io.StringIO()
    progress = Progress(err, "verl-e2e test", quiet_for=0.2, every=0.2)
    with progress.step("fast"):
        pass
    assert err.getvalue() == ""
    with progress.step("slow"):
        time.sleep(0.5)
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("verl-e2e test: slow ... (") and lines[-1].startswith("verl-e2e test: slow: done in")
    with progress.step("announced", slow=True):
        pass
    assert err.getvalue().splitlines()[-2:][0] == "verl-e2e test: announced ..."


def _sdist_tree(root: Path, init: str = "") -> Path:
    """A Bridge tree as an unpacked sdist has it: src/megatron/bridge and no git history."""
    tree = root / "bridge" / "src" / "megatron" / "bridge"
    tree.mkdir(parents=True)
    (tree / "__init__.py").write_text(init)
    return root / "bridge"


def test_surface_says_what_it_is_doing(cli, tmp_path: Path) -> None:
    bridge = _sdist_tree(tmp_path, "from megatron.bridge.peft import lora\n")
    out = tmp_path / "surface.json"
    result = cli("surface", "--bridge", str(bridge), "--out", str(out))
    assert result.code == 0, result.err
    assert f"verl-e2e surface: reading every module of --bridge {tmp_path / 'bridge'}" in result.err
    assert "following verl's imports (a minute or so): done in" in result.err
    assert out.is_file() and "surface.json" in result.out


def test_fast_commands_keep_stderr_empty(cli) -> None:
    for argv in (("plan", "--example"), ("families",), ("validate",)):
        result = cli(*argv)
        assert result.code == 0 and result.err == "", (argv, result.err)


def test_every_command_has_help_and_a_description() -> None:
    parser = _build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    for name, command in sub.choices.items():
        assert (helps.get(name) or "").strip(), f"{name}: no help line in `verl-e2e --help`"
        assert (command.description or "").strip(), f"{name}: no description in `verl-e2e {name} --help`"
        for action in command._actions:
            if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                assert (action.help or "").strip() or action.choices, f"{name} {action.dest}: no help"


def test_surface_records_the_commit_an_sdist_tree_was_cut_from(cli, tmp_path: Path) -> None:
    bridge = _sdist_tree(tmp_path)
    out = tmp_path / "surface.json"
    result = cli("surface", "--bridge", str(bridge), "--out", str(out))
    assert result.code == 0 and "pass --bridge-commit SHA" in result.out
    assert json.loads(out.read_text())["bridge_commit"] == "unknown"
    result = cli("surface", "--bridge", str(bridge), "--bridge-commit", "067F987", "--out", str(out))
    assert result.code == 0, result.err
    assert json.loads(out.read_text())["bridge_commit"] == "067f987" and "--bridge-commit" not in result.out
    result = cli("surface", "--bridge", str(bridge), "--bridge-commit", "not-a-sha", "--out", str(out))
    assert result.code == 2 and "'not-a-sha' is not a commit id" in result.err


def test_surface_refuses_a_commit_a_checkout_is_not_at(cli, tmp_path: Path) -> None:
    repo, commits = _git_repo(tmp_path)
    out = tmp_path / "surface.json"
    result = cli("surface", "--bridge", str(repo), "--bridge-commit", "0" * 40, "--out", str(out))
    assert result.code == 2 and f"is a checkout at {commits[-1][:12]}" in result.err and not out.exists()
    result = cli("surface", "--bridge", str(repo), "--bridge-commit", commits[-1][:10], "--out", str(out))
    assert result.code == 0 and json.loads(out.read_text())["bridge_commit"] == commits[-1]
