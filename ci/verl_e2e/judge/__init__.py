"""Judge: a run dir's evidence -> Pass / Fail / Blocked, with the culprit and the limitations.

A log is read once in a streaming pass (`logtext`, `logstages`, `logmetrics`, `tracebacks`, in
parallel per phase by `parallel`) into `evidence`; `classify` names the failure class from matrix
signatures, `culprit` the frame and its owner, `blame` whether it is code the PR changed and which
Megatron-Core ran, `coverage` which changed functions the cell executed. `checks` turns the level's
list into checks, `quotes` picks key lines and limitations, and `verdict` decides, pure. `rundir`
reads the run dir defensively (nothing in it is trusted), `judging` is the I/O edge that writes
evidence.json, verdict.json and `junit` XML. Below run, so a cell is judged the same way whether
`run-cell` just finished it or `verl-e2e judge` re-reads it a year later.
"""

from verl_e2e.judge.evidence import Evidence
from verl_e2e.judge.judging import judge_run_dir
from verl_e2e.judge.verdict import Verdict, verdict_from_json

__all__ = ["Evidence", "Verdict", "judge_run_dir", "verdict_from_json"]
