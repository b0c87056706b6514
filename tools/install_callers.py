#!/usr/bin/env python3
"""Install verl-e2e's caller workflows into a Megatron-Bridge checkout, pinned to a full commit SHA.

    python tools/install_callers.py --bridge ../Megatron-Bridge --sha <40-hex verl-e2e commit> \\
        [--repository verl-e2e/verl-e2e]

Writes .github/workflows/verl-e2e-{pr,comment,dispatch,publish}.yml into the Bridge checkout from
.github/callers/, with `uses:` pointing at this repository's reusable workflow at that SHA (a tag
could be moved; a SHA cannot), and this site's settings (image, registry, runner labels of the image
job, cache root, extra run-cell flags) written in. Re-running updates the files in place.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


SITE_DEFAULTS = {
    "image": "",
    "image_repository": "",
    "image_runner": '["self-hosted", "linux", "x64", "docker"]',
    "cache_root": "/var/cache/verl-e2e",
    "run_cell_args": "",
    "same_repo_prs": "false",
    "verl_ref": "",
    "base_runs": "cache",
}


def render(text: str, repository: str, sha: str, site: dict[str, str] | None = None) -> str:
    """Fill the placeholders; site values become quoted YAML scalars (JSON strings are valid YAML)."""
    text = text.replace("__VERL_E2E_REPOSITORY__", repository).replace("__VERL_E2E_SHA__", sha)
    values = SITE_DEFAULTS | (site or {})
    text = text.replace("__VERL_E2E_SAME_REPO_PRS_BOOL__", "true" if values["same_repo_prs"] == "true" else "false")
    for key, value in (SITE_DEFAULTS | (site or {})).items():
        text = text.replace(f"__VERL_E2E_{key.upper()}__", json.dumps(value))
    return text


def install(bridge: Path, repository: str, sha: str, site: dict[str, str] | None = None) -> list[Path]:
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise SystemExit(f"--sha {sha}: expected a full 40-character commit SHA (tags and branches can move)")
    verl_ref = (site or {}).get("verl_ref", "")
    if verl_ref and not re.fullmatch(r"[0-9a-f]{40}", verl_ref):
        raise SystemExit(f"--verl-ref {verl_ref}: expected a full 40-character verl commit SHA (or leave it out)")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
        raise SystemExit(f"--repository {repository}: expected owner/name")
    if not (bridge / "src" / "megatron" / "bridge").is_dir():
        raise SystemExit(f"--bridge {bridge}: not a Megatron-Bridge checkout (no src/megatron/bridge)")
    target = bridge / ".github" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for template in sorted((ROOT / ".github" / "callers").glob("*.yml")):
        out = target / template.name
        out.write_text(render(template.read_text(), repository, sha, site))
        written.append(out)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge", type=Path, required=True)
    ap.add_argument("--sha", required=True, help="the verl-e2e commit the callers pin")
    ap.add_argument("--repository", default="verl-e2e/verl-e2e")
    ap.add_argument("--image", default="", help="a fixed image tag instead of building or reusing one")
    ap.add_argument("--image-repository", default="", help="registry repository, e.g. ghcr.io/org/verl-e2e")
    ap.add_argument("--image-runner", default=SITE_DEFAULTS["image_runner"], help="JSON labels of the image job")
    ap.add_argument("--cache-root", default=SITE_DEFAULTS["cache_root"], help="the runners' model/data cache")
    ap.add_argument("--run-cell-args", default="", help="extra run-cell flags for this site")
    ap.add_argument("--verl-ref", default="", help="pin verl to this full SHA instead of matrix.yaml's")
    ap.add_argument(
        "--base-runs",
        choices=("off", "cache", "auto"),
        default="cache",
        help="a failed cell's result on the merge base: off, from the runners' cache, or auto (run it once)",
    )
    ap.add_argument(
        "--same-repo-prs",
        action="store_true",
        help="also run cells on pull_request from branches of the repository itself (forks never run)",
    )
    args = ap.parse_args()
    site = {
        "image": args.image,
        "image_repository": args.image_repository,
        "image_runner": args.image_runner,
        "cache_root": args.cache_root,
        "run_cell_args": args.run_cell_args,
        "same_repo_prs": "true" if args.same_repo_prs else "false",
        "verl_ref": args.verl_ref,
        "base_runs": args.base_runs,
    }
    for path in install(args.bridge, args.repository, args.sha, site):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
