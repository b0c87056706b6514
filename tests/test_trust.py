"""The host trusts nothing that comes out of a cell: links, special files, paths and text are data."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from verl_e2e import safefs
from verl_e2e.config.matrix import Matrix
from verl_e2e.errors import UsageError
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.rundir import load_run_dir
from verl_e2e.report.comment import Context, render
from verl_e2e.run.runcell import fresh_run_dir

from . import verl_log as V
from .rundirs import cell_for, write_run_dir

SECRET = '{"auths": {"ghcr.io": {"auth": "c2VjcmV0"}}}'


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "host" / "config.json"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def test_copy_out_takes_only_plain_named_files(tmp_path: Path, secret: Path) -> None:
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    (scratch / "phases.json").write_text("[]")
    (scratch / "run.log").symlink_to(secret)
    os.link(secret, scratch / "provenance.json")
    os.mkfifo(scratch / "checkpoints.json")
    (scratch / "verdict.json").write_text('{"result": "Pass"}')  # not a name the cell may hand back
    problems = safefs.copy_out(scratch, out, ["phases.json", "run.log", "provenance.json", "checkpoints.json"])
    assert sorted(p.name for p in out.iterdir()) == ["phases.json"]
    assert any("run.log" in p and "symbolic link" in p for p in problems)
    assert any("provenance.json" in p and "hard link" in p for p in problems)
    assert any("checkpoints.json" in p and "not a regular file" in p for p in problems)


def test_host_writes_replace_a_planted_link_without_following_it(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "verdict.json").symlink_to(secret)
    safefs.write_text(tmp_path / "verdict.json", "{}")
    assert secret.read_text() == SECRET and not (tmp_path / "verdict.json").is_symlink()


def test_a_linked_log_is_neither_read_nor_judged(tmp_path: Path, matrix: Matrix, secret: Path) -> None:
    run = write_run_dir(tmp_path / "run", cell_for(matrix, 0), {"run": V.run(1)})
    (run / "run.log").unlink()
    (run / "run.log").symlink_to(secret)
    v = judge_run_dir(run)
    assert v.result != "Pass"
    for name in ("evidence.json", "verdict.json", "junit.xml"):
        assert "c2VjcmV0" not in (run / name).read_text()


def test_phase_records_name_only_the_cells_phases_and_plain_log_files(tmp_path: Path, matrix: Matrix) -> None:
    run = write_run_dir(tmp_path / "run", cell_for(matrix, 0), {"run": V.run(1)})
    phases = json.loads((run / "phases.json").read_text())
    phases[0]["log"] = "../../../etc/passwd"
    phases.append({"name": "../../x", "log": "/etc/shadow", "status": "ok"})
    (run / "phases.json").write_text(json.dumps(phases))
    loaded = load_run_dir(run)
    assert [(p.name, p.log) for p in loaded.phases] == [("run", "run.log")]
    assert any("does not have" in p for p in loaded.problems)


def test_a_previous_run_dir_is_replaced_and_anything_else_refused(tmp_path: Path, secret: Path) -> None:
    old = tmp_path / "runs" / "L0"
    old.mkdir(parents=True)
    (old / "cell.json").write_text("{}")
    (old / "stolen").symlink_to(secret.parent)
    fresh_run_dir(old)
    assert list(old.iterdir()) == [] and secret.read_text() == SECRET
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty and not a run dir"):
        fresh_run_dir(other)


def test_values_from_run_dirs_never_render_as_markdown(tmp_path: Path, matrix: Matrix) -> None:
    hostile = "x | <img src=x onerror=alert(1)> @everyone [click](https://evil.example) `"
    cell = replace(cell_for(matrix, 0), id="L0`</code><img src=x onerror=alert(1)>@everyone")
    failing = V.run(1)[:-300] + V.worker_traceback("RuntimeError", hostile)
    run = write_run_dir(tmp_path / "run", cell, {"run": failing}, statuses={"run": "failed"})
    verdict = judge_run_dir(run)
    body = render([verdict], Context(job_failures=[hostile]))
    # rendered as GitHub would: log text sits only in code spans (no HTML, link or mention renders there)
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(body.split("<details>")[0])
    inline = [t for t in tokens if t.type == "inline"]
    assert any("evil.example" in t.content for t in inline)
    for token in inline:
        for child in token.children or []:
            assert child.type not in ("html_inline", "link_open", "image"), (child.type, token.content[:120])
            if child.type == "text":
                assert "<img" not in child.content and "@everyone" not in child.content, child.content
    summary = next(line for line in body.splitlines() if line.startswith("<details>"))
    assert summary.count("<code>") == 1 and "</code><img" not in summary and "@everyone" not in summary
