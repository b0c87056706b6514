"""Line-level reading of verl's console: Ray prefixes, colours, numbers, and what is not log text.

verl prints its whole resolved configuration (pprint of a dict, hundreds of lines of `'key': value`)
and Hydra echoes every override when a job fails (`Error executing job with overrides: [...]`).
Those lines mention `checkpoint`, `load`, `oom`, `nccl` and most other words a failure signature
looks for, so they are recognised here and never read as evidence of a failure.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_RAY_PREFIX = re.compile(
    r"(?:\x1b\[[0-9;]*m)?\((?:[A-Za-z_][\w.]*(?: pid=\d+)?(?:, ip=[\w.:-]+)?|pid=\d+(?:, ip=[\w.:-]+)?"
    r"|autoscaler[^)]*)\)(?:\x1b\[[0-9;]*m)? ?"
)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_NUMBER = re.compile(r"^(?:np\.float\d*\(|tensor\()?(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf))\)?$", re.I)
# pprint of the config: `{'actor_rollout_ref': {...`, `  'checkpoint': {'_target_': ...`, `  'a': 1,`,
# continuation lines of a wrapped value (`  'dist_checkpointing_path': '/x',`) and closing braces.
_DUMP = re.compile(r"""^\s*(?:[{\[(]+\s*)?(?:'[^'\n]{1,200}'|"[^"\n]{1,200}")\s*:\s|^\s*[}\])]+,?\s*$""")
_OVERRIDES = "Error executing job with overrides:"


def clean_line(raw: str) -> str:
    """Strip Ray's actor prefix, ANSI codes and the `[repeated Nx across cluster]` suffix."""
    line = raw.strip("\r\n")
    if line.startswith(("(", "\x1b")):
        m = _RAY_PREFIX.match(line)
        if m:
            line = line[m.end() :]
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.endswith("cluster]"):
        line = _REPEATED.sub("", line)
    return line


def parse_number(text: str) -> float | None:
    """verl's metric values: `0.123`, `2e-06`, `nan`, `-inf`, `np.float64(0.55)`."""
    m = _NUMBER.match(text.strip())
    return float(m.group(1)) if m else None


def is_dump(line: str) -> bool:
    """A line of a config dump, a pprint or Hydra's override list: never evidence of a failure."""
    return _OVERRIDES in line or _DUMP.match(line) is not None


SINGLE = re.compile(r"Can't find (\S+) in hf_keys")
MANY = re.compile(r"Can't find the following HF parameters in hf_keys: \[([^\]]*)\]")
QUOTED = re.compile(r"'([^']+)'")


def skipped_in(line: str) -> list[str]:
    """The HF names a Bridge warning line says were not found ([] for any other line)."""
    many = MANY.search(line)
    if many:
        return QUOTED.findall(many.group(1))
    single = SINGLE.search(line)
    return [single.group(1)] if single else []
