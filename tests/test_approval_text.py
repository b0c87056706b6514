"""No text the bot writes offers a ready-to-paste approval with a commit SHA in it.

An approval (`/verl-e2e sha=...`, copy-pr-bot's `/ok to test ...`) means "I reviewed this commit".
The fork notice used to be rewritten on every push with `/verl-e2e sha=<current head>`: one click
approved the newest commit, which nobody had read. Approvals must carry the SHA the maintainer
copied from the commit they reviewed, so every renderer shows a placeholder instead. Checked two
ways: every renderer's output for a known head, and every f-string in the package's source.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from verl_e2e.config.matrix import load_matrix
from verl_e2e.github.gate import Context as GateContext
from verl_e2e.github.gate import GateRefused, decide
from verl_e2e.github.trigger import CommandError, parse_command
from verl_e2e.plan.build import PlanRequest, make_plan
from verl_e2e.plan.contract import render_text
from verl_e2e.report.comment import Context, check_run, render
from verl_e2e.report.fullsummary import render_full
from verl_e2e.report.notices import fork_notice, refusal

from .test_publish import verdict

PKG = Path(__file__).resolve().parents[1] / "ci" / "verl_e2e"
HEAD = "0123456789abcdef0123456789abcdef01234567"
APPROVAL_WITH_SHA = re.compile(r"(?:/verl-e2e|/ok to test)[^`\n]*?\b[0-9a-f]{7,40}\b")


def _bot_texts() -> dict[str, str]:
    """What each renderer says with HEAD as the PR's newest commit."""
    ctx = Context(
        repo="NVIDIA-NeMo/Megatron-Bridge",
        pr=7,
        sha=HEAD,
        merge_base="f" * 40,
        skipped={"3": "optional"},
        deferred=[{"id": "L5-learning-signal-qwen", "gpu_minutes": 120, "request": "/verl-e2e level=5 family=qwen"}],
    )
    cells = [verdict("L0-lora-ddp-qwen", "Pass"), verdict("L1-save-resume-qwen", "Fail", 1)]
    texts = {
        "fork notice": fork_notice(HEAD),
        "comment": render(cells, ctx),
        "job summary": render_full(cells, ctx),
        "check run": str(check_run(cells, ctx)["output"]),
        "plan text": render_text(
            make_plan(PlanRequest(command="plan", example="new-provider"), load_matrix()), load_matrix()
        ),
    }
    for body in ("/verl-e2e level=9", "/verl-e2e bogus", f"/verl-e2e sha={HEAD[:12]}", "/verl-e2e level=1 level=2"):
        with pytest.raises(CommandError) as refused:
            parse_command(body)
        texts[f"refusal of {body!r}"] = refusal(str(refused.value))
    return texts


@pytest.mark.parametrize("name", sorted(_bot_texts()))
def test_no_renderer_offers_an_approval_with_a_sha(name: str) -> None:
    text = _bot_texts()[name]
    assert not APPROVAL_WITH_SHA.findall(text), (name, APPROVAL_WITH_SHA.findall(text))


def test_the_fork_notice_asks_for_the_reviewed_commit_and_offers_none() -> None:
    notice = fork_notice(HEAD)
    assert HEAD not in notice and "`/verl-e2e sha=<the full SHA of the commit you reviewed>`" in notice
    assert "not from this comment" in notice
    assert fork_notice(HEAD) != fork_notice("9" * 40)  # it still says which push it saw (12 characters)
    assert "9" * 13 not in fork_notice("9" * 40)


def test_the_gate_refusing_a_fork_names_no_sha() -> None:
    gate = GateContext.from_env(
        {"EVENT_NAME": "pull_request", "REPOSITORY": "o/r", "BRIDGE_REPOSITORY": "o/r", "SHA": HEAD}
        | {"HEAD_SHA": HEAD, "PR_HEAD_REPOSITORY": "someone/fork"}
    )
    with pytest.raises(GateRefused) as refused:
        decide(gate)
    assert "fork" in str(refused.value) and not APPROVAL_WITH_SHA.findall(str(refused.value))


def _formatted_approvals(tree: ast.AST) -> list[str]:
    """f-strings that put a computed value right after `sha=` or `ok to test ` of an approval."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.JoinedStr):
            continue
        text = "".join(
            str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"  # type: ignore[attr-defined]
            for v in node.values
        )
        if re.search(r"(?:/verl-e2e|\{COMMAND\}|ok to test)[^`\n]*?(?:sha=|ok to test )\{", text):
            found.append(text)
    return found


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_no_source_formats_a_sha_into_an_approval(path: Path) -> None:
    assert not _formatted_approvals(ast.parse(path.read_text(encoding="utf-8"))), path


def test_the_source_check_catches_the_old_notice() -> None:
    old = "f\"`/verl-e2e sha={sha}`\"\nf\"(`/ok to test {pr['head']['sha']}` or `{COMMAND} sha={head}`)\""
    assert len(_formatted_approvals(ast.parse(old))) == 2
