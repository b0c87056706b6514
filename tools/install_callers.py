#!/usr/bin/env python3
"""Install verl-e2e's caller workflows into a Megatron-Bridge checkout, pinned to a full commit SHA.

    python tools/install_callers.py --bridge ../Megatron-Bridge --sha <40-hex verl-e2e commit> \\
        [--repository verl-e2e/verl-e2e]

Writes .github/workflows/verl-e2e-{pr,comment,dispatch,publish}.yml into the Bridge checkout from
.github/callers/, with `uses:` pointing at this repository's reusable workflow at that SHA (a tag
could be moved; a SHA cannot), and this site's settings (image, registry, runner labels of the image
job, cache root and layout, secret names, extra run-cell flags) written in, and remembered in the
Bridge checkout's .github/verl-e2e-site.json: a re-run keeps every setting it is not given (--reset
forgets them). Each value is checked first (one clear line, exit 2); README's "Site settings" lists them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


sys.path.insert(0, str(ROOT / "ci"))  # the checkout's own verl_e2e: the settings table lives there
from verl_e2e.config.site import BY_KEY, SETTINGS, changes, commit, merge  # noqa: E402
from verl_e2e.errors import UsageError  # noqa: E402

SITE_DEFAULTS = {s.key: s.default for s in SETTINGS}
REMEMBERED = Path(".github") / "verl-e2e-site.json"


def render(text: str, repository: str, sha: str, site: dict[str, str] | None = None) -> str:
    """Fill the placeholders: the pinned repository and SHA, then every site setting."""
    text = text.replace("__VERL_E2E_REPOSITORY__", repository).replace("__VERL_E2E_SHA__", sha)
    values = SITE_DEFAULTS | (site or {})
    text = text.replace("__VERL_E2E_SAME_REPO_PRS_BOOL__", "true" if values["same_repo_prs"] == "true" else "false")
    for key in ("registry_secret", "hf_token_secret"):  # secret names are checked identifiers, not values
        text = text.replace(f"__VERL_E2E_{key.upper()}_NAME__", values[key])
    for key, value in values.items():
        text = text.replace(f"__VERL_E2E_{key.upper()}__", json.dumps(value))  # a quoted YAML scalar
    return text


def install(bridge: Path, repository: str, sha: str, site: dict[str, str] | None = None) -> list[Path]:
    commit(sha, "--sha")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repository):
        raise UsageError(f"--repository {repository}: expected owner/name")
    if not (bridge / "src" / "megatron" / "bridge").is_dir():
        raise UsageError(f"--bridge {bridge}: not a Megatron-Bridge checkout (no src/megatron/bridge)")
    values = merge({}, dict(site or {}))
    target = bridge / ".github" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for template in sorted((ROOT / ".github" / "callers").glob("*.yml")):
        out = target / template.name
        out.write_text(render(template.read_text(), repository, sha, values))
        written.append(out)
    remembered = bridge / REMEMBERED
    remembered.write_text(json.dumps({"repository": repository, "sha": sha, **values}, indent=2) + "\n")
    written.append(remembered)
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bridge", type=Path, required=True)
    ap.add_argument("--sha", required=True, help="the verl-e2e commit the callers pin")
    ap.add_argument("--repository", help="where verl-e2e lives (default: remembered, else verl-e2e/verl-e2e)")
    ap.add_argument("--reset", action="store_true", help="forget the remembered settings; use the defaults")
    for s in SETTINGS:
        if s.key == "same_repo_prs":
            ap.add_argument(s.flag, action=argparse.BooleanOptionalAction, default=None, help=s.help)
        else:
            ap.add_argument(s.flag, dest=s.key, default=None, help=f"{s.help} (default: {s.default or 'none'})")
    args = ap.parse_args()
    try:
        remembered = {} if args.reset else _remembered(args.bridge)
        given = {s.key: getattr(args, s.key) for s in SETTINGS}
        if given["same_repo_prs"] is not None:
            given["same_repo_prs"] = "true" if given["same_repo_prs"] else "false"
        site = merge(remembered, given)
        parse_run_cell_args(site["run_cell_args"])
        repository = args.repository or remembered.get("repository") or "verl-e2e/verl-e2e"
        for path in install(args.bridge, repository, args.sha, site):
            print(f"wrote {path}")
        for line in changes(remembered, site) if remembered else []:
            print(f"changed {line}")
    except UsageError as exc:
        print(f"install_callers: error: {exc}", file=sys.stderr)
        return 2
    kept = sorted(k for k in remembered if k in BY_KEY and given.get(k) is None and remembered[k] != SITE_DEFAULTS[k])
    if kept:
        print(f"kept from {args.bridge / REMEMBERED}: {', '.join(kept)} (--reset forgets them)")
    return 0


def parse_run_cell_args(value: str) -> None:
    """The site's extra flags through run-cell's own parser: an unknown option or a bad value is
    refused here, not on the GPU runner in the middle of a PR's run."""
    if not value:
        return
    try:  # run-cell's parser needs the package's dependencies; the rest of the installer does not
        from verl_e2e.cli.run_cmd import run_options  # noqa: PLC0415
    except ImportError as exc:
        raise UsageError(
            f"--run-cell-args: checking them needs verl-e2e's dependencies ({exc}); run the installer with the "
            "Python of a verl-e2e install (pip install -e .)"
        ) from None
    parser = argparse.ArgumentParser(prog="verl-e2e run-cell", add_help=False, exit_on_error=False)
    run_options(parser, dry_run_defaults=True)
    try:
        _, unknown = parser.parse_known_args(value.split())
    except argparse.ArgumentError as exc:
        raise UsageError(f"--run-cell-args {value[:80]!r}: {exc}; see `verl-e2e run-cell --help`") from None
    if unknown:
        raise UsageError(f"--run-cell-args: run-cell has no option {unknown[0]!r}; see `verl-e2e run-cell --help`")


def _remembered(bridge: Path) -> dict[str, str]:
    path = bridge / REMEMBERED
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise UsageError(f"{path}: not JSON; fix it or pass --reset") from None
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
