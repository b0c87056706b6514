#!/usr/bin/env python3
"""Install verl-e2e's caller workflows into a Megatron-Bridge checkout, pinned to a full commit SHA.

    python tools/install_callers.py --bridge ../Megatron-Bridge --sha <40-hex verl-e2e commit> \\
        [--repository verl-e2e/verl-e2e]

Writes .github/workflows/verl-e2e-{pr,comment,dispatch,publish}.yml into the Bridge checkout from
.github/callers/, with `uses:` pointing at this repository's reusable workflow at that SHA (a tag
could be moved; a SHA cannot). Re-running with another SHA updates the files in place.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def render(text: str, repository: str, sha: str) -> str:
    return text.replace("__VERL_E2E_REPOSITORY__", repository).replace("__VERL_E2E_SHA__", sha)


def install(bridge: Path, repository: str, sha: str) -> list[Path]:
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise SystemExit(f"--sha {sha}: expected a full 40-character commit SHA (tags and branches can move)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
        raise SystemExit(f"--repository {repository}: expected owner/name")
    if not (bridge / "src" / "megatron" / "bridge").is_dir():
        raise SystemExit(f"--bridge {bridge}: not a Megatron-Bridge checkout (no src/megatron/bridge)")
    target = bridge / ".github" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for template in sorted((ROOT / ".github" / "callers").glob("*.yml")):
        out = target / template.name
        out.write_text(render(template.read_text(), repository, sha))
        written.append(out)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge", type=Path, required=True)
    ap.add_argument("--sha", required=True, help="the verl-e2e commit the callers pin")
    ap.add_argument("--repository", default="verl-e2e/verl-e2e")
    args = ap.parse_args()
    for path in install(args.bridge, args.repository, args.sha):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
