"""A failure inside a child process is judged by the child's own exception: vLLM inspects a model class
in a child and reports CalledProcessError, then "Error raised in subprocess:", then the child's traceback.
The log is our own run's (Ministral 3 on the H200, 2026-12-04, whose node lacked vLLM's mistral_common);
its verdict had named only the CalledProcessError, which says nothing a maintainer can act on."""

from __future__ import annotations

from pathlib import Path

from verl_e2e.judge.evidence import parse_bytes

LOG = Path(__file__).resolve().parent / "fixtures" / "logs" / "vllm-inspect-missing-module.log"


def test_the_childs_exception_is_the_cause() -> None:
    ev = parse_bytes(LOG.read_bytes())
    assert ev.exception == {"type": "ModuleNotFoundError", "message": "No module named 'mistral_common'"}
    assert ev.failure_class == "setup"  # a module missing on the node: the environment's, not the PR's


def test_without_the_childs_report_the_called_process_error_stays() -> None:
    lines = LOG.read_bytes().split(b"\n")
    cut = next(i for i, line in enumerate(lines) if b"The above exception was the direct cause" in line)
    ev = parse_bytes(b"\n".join(lines[:cut]))
    assert ev.exception is not None and ev.exception["type"] == "CalledProcessError"
