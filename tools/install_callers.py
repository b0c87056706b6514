#!/usr/bin/env python3
"""Install verl-e2e's caller workflows into a Megatron-Bridge checkout, pinned to a full commit SHA.

    python tools/install_callers.py --bridge ../Megatron-Bridge --repository OWNER/verl-e2e --sha <40-hex commit> \\
        --runners '${{ vars.RUNNER_PREFIX }}-gpu-x{gpus}' [--registry '${{ vars.DEFAULT_CONTAINER_REGISTRY }}'] \\
        [--replace-weekly] [... every setting: docs/workflows.md, "Site settings"]

The callers point `uses:` at the reusable workflow of --repository at --sha (a tag could be moved; a
SHA cannot), with this site's settings written in, each generated file opening with the Apache-2.0
licence header Bridge's copyright check looks for. The settings given are remembered in the Bridge
checkout's .github/verl-e2e-site.json: a re-run keeps every setting it is not given (--reset forgets
them). Each value is checked before anything is written (one clear line, exit 2), and the run ends
with every setting and where it came from (flag, variable, remembered, derived, default).

The site file is part of Bridge's tree, so a pull request can edit it: a repository or image read from
it that differs from what the installed callers use is refused unless --accept-site-file says so.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci"))  # the checkout's own verl_e2e: the settings table lives there
from verl_e2e.config import site  # noqa: E402
from verl_e2e.config.site import BY_KEY, SETTINGS  # noqa: E402
from verl_e2e.errors import UsageError  # noqa: E402

CALLERS = ROOT / ".github" / "callers"
REMEMBERED = Path(".github") / "verl-e2e-site.json"
WORKFLOWS = Path(".github") / "workflows"
SCHEDULED = "verl-e2e-scheduled.yml"
WEEKLY = "verl-e2e-weekly.yml"  # Bridge's hand-made weekly verl job, which the scheduled run replaces
# what decides which code and which image run on the GPU runners: never taken silently from the site file
GUARDED = ("repository", "image", "image_repository", "base_image")
COPYRIGHT = re.compile(r"^# Copyright \(c\) (\d{4}(?:-\d{4})?), NVIDIA CORPORATION", re.M)
HEADER = """\
# Copyright (c) {year}, NVIDIA CORPORATION.  All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# Installed by verl-e2e's tools/install_callers.py from {repository}@{sha}; re-run it to change a setting.
"""


def templates() -> list[Path]:
    return sorted(CALLERS.glob("*.yml"))


def what_it_writes() -> str:
    """The help's account of the files, counted from the templates themselves."""
    names = [p.name for p in templates()]
    always = [n for n in names if n != SCHEDULED]
    return (
        f"Writes {len(always)} caller workflows into the Bridge checkout's .github/workflows/ "
        f"({', '.join(always)}); with --replace-weekly also {SCHEDULED} in place of {WEEKLY} "
        f"({len(names)} in all); and the settings it was given into {REMEMBERED}."
    )


def render(text: str, repository: str, sha: str, values: dict[str, str]) -> str:
    """Fill the placeholders: the pinned repository and SHA, then every site setting."""
    text = text.replace("__VERL_E2E_REPOSITORY__", repository).replace("__VERL_E2E_SHA__", sha)
    text = text.replace("__VERL_E2E_SAME_REPO_PRS_BOOL__", "true" if values["same_repo_prs"] == "true" else "false")
    for key in ("registry_secret", "hf_token_secret"):  # secret names are checked identifiers, not values
        text = text.replace(f"__VERL_E2E_{key.upper()}_NAME__", values[key])
    for key, value in site.workflow_values(values).items():
        text = text.replace(f"__VERL_E2E_{key.upper()}__", json.dumps(value))  # a quoted YAML scalar
    return text


def header(existing: Path, repository: str, sha: str) -> str:
    """Bridge's licence header; a file that already has one keeps its year (a re-install changes no line)."""
    found = COPYRIGHT.search(existing.read_text()) if existing.is_file() else None
    year = found.group(1) if found else str(datetime.date.today().year)
    return HEADER.format(year=year, repository=repository, sha=sha)


def install(bridge: Path, repository: str, sha: str, values: dict[str, str]) -> list[str]:
    """Write the callers; returns one line per file written or removed."""
    target = bridge / WORKFLOWS
    target.mkdir(parents=True, exist_ok=True)
    done = []
    replace_weekly = values["replace_weekly"] == "true"
    for template in templates():
        out = target / template.name
        if template.name == SCHEDULED and not replace_weekly:
            if out.is_file() and "/.github/workflows/verl-e2e.yml@" in out.read_text():  # ours, from an earlier install
                out.unlink()
                done.append(f"removed {out} (the scheduled run needs --replace-weekly)")
            continue
        text = header(out, repository, sha) + render(template.read_text(), repository, sha, values)
        out.write_text(text)
        done.append(f"wrote {out}")
    weekly = target / WEEKLY
    if replace_weekly and weekly.is_file():
        weekly.unlink()
        done.append(
            f"removed {weekly} ({SCHEDULED} runs its layouts; the scripts in {target / 'verl_ci'} are no longer "
            "called by any workflow: remove them in the same pull request or keep them for runs by hand)"
        )
    return done


def remember(bridge: Path, repository: str, sha: str, values: dict[str, str], sources: dict[str, str]) -> str:
    """The settings this site chose (not defaults, not what is derived from them), with the licence."""
    chosen = {k: values[k] for k in BY_KEY if sources[k] in ("flag", "remembered")}
    year = str(datetime.date.today().year)
    path = bridge / REMEMBERED
    if path.is_file():
        found = re.search(r"Copyright \(c\) (\d{4}(?:-\d{4})?), NVIDIA", path.read_text())
        year = found.group(1) if found else year
    doc = {
        "copyright": f"Copyright (c) {year}, NVIDIA CORPORATION.  All rights reserved.",
        "license": "Licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0)",
        "about": "verl-e2e's site settings, written by its tools/install_callers.py; re-run it to change them",
        "repository": repository,
        "sha": sha,
        **chosen,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return f"wrote {path}"


def installed(bridge: Path) -> dict[str, str] | None:
    """What the installed PR caller uses now: verl-e2e's repository and the image settings."""
    path = bridge / WORKFLOWS / "verl-e2e-pr.yml"
    try:
        job = yaml.safe_load(path.read_text())["jobs"]["e2e"]
        uses, given = str(job["uses"]), dict(job.get("with") or {})
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
    return {"repository": uses.split("/.github/workflows/", maxsplit=1)[0]} | {
        k: str(given.get(k, "")) for k in GUARDED[1:]
    }


def guard(bridge: Path, chosen: dict[str, str], sources: dict[str, str]) -> None:
    """A repository or image read from the site file must be what the installed callers already use."""
    now = installed(bridge)
    for key in GUARDED:
        if "remembered" not in sources[key] or not chosen[key]:
            continue
        if now is not None and now[key] == chosen[key]:
            continue
        where = f"the installed callers use {now[key]!r}" if now else "no installed caller confirms it"
        flag = f"--{key.replace('_', '-')}" + (" or --registry" if sources[key].startswith("derived") else "")
        raise UsageError(
            f"{bridge / REMEMBERED} sets {key} to {chosen[key]!r}, but {where}: the file changed since the last "
            f"install (a pull request can edit it); pass {flag} to choose the value, or --accept-site-file to take "
            "the file's values"
        )


def summary(repository: tuple[str, str], sha: str, values: dict[str, str], sources: dict[str, str]) -> list[str]:
    """Every setting, its value and where it came from."""
    rows = [("repository", repository[0], repository[1]), ("sha", sha, "flag")]
    for s in SETTINGS:
        value, source = values[s.key], sources[s.key]
        read = site.variables(value)
        if read:
            source += "; variable " + ", ".join(f"vars.{v}" for v in read) + ", read when the workflow runs"
        rows.append((s.key, value or "(none)", source))
    width = max(len(r[0]) for r in rows)
    return ["settings (value: where it came from):"] + [f"  {k:<{width}}  {v}  [{src}]" for k, v, src in rows]


def weekly_note(bridge: Path, values: dict[str, str]) -> str | None:
    """Say what the scheduled run would cost and how to have it, where it is not installed."""
    if values["replace_weekly"] == "true":
        return None
    from verl_e2e.config.matrix import load_matrix, with_runners  # noqa: PLC0415
    from verl_e2e.plan import scheduled  # noqa: PLC0415
    from verl_e2e.plan.cells import gpu_minutes  # noqa: PLC0415

    matrix = load_matrix()
    if not site.VARIABLE.fullmatch(values["runners"]):
        matrix = with_runners(matrix, site.runners(values["runners"]))
    cells = scheduled.plan(matrix)[1]
    weekly = " and removes Bridge's " + WEEKLY if (bridge / WORKFLOWS / WEEKLY).is_file() else ""
    return (
        f"no scheduled run installed: --replace-weekly installs {SCHEDULED} ({len(cells)} cells, "
        f"{gpu_minutes(cells):,} GPU-minutes a week){weekly}"
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=f"{__doc__}\n{textwrap.fill(what_it_writes(), 104, break_on_hyphens=False)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--bridge", type=Path, required=True, help="the Megatron-Bridge checkout to install into")
    ap.add_argument("--sha", required=True, help="the verl-e2e commit the callers pin (full 40-character SHA)")
    ap.add_argument(
        "--repository",
        help="OWNER/NAME of the GitHub repository hosting verl-e2e, where --sha lives (required once; remembered)",
    )
    ap.add_argument("--reset", action="store_true", help="forget the remembered settings; use the defaults")
    ap.add_argument(
        "--accept-site-file",
        action="store_true",
        help=f"take a repository or image from {REMEMBERED} even where it differs from the installed callers",
    )
    for s in SETTINGS:
        if s.key in site.BOOLEAN:
            ap.add_argument(s.flag, dest=s.key, action=argparse.BooleanOptionalAction, default=None, help=s.help)
        else:
            said = "default" in s.help or "required" in s.help
            ap.add_argument(
                s.flag, dest=s.key, default=None, help=s.help if said else f"{s.help} (default: {s.default or 'none'})"
            )
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        site.commit(args.sha, "--sha")
        if not (args.bridge / "src" / "megatron" / "bridge").is_dir():
            raise UsageError(f"--bridge {args.bridge}: not a Megatron-Bridge checkout (no src/megatron/bridge)")
        remembered = {} if args.reset else _remembered(args.bridge)
        given: dict[str, str | None] = {s.key: getattr(args, s.key) for s in SETTINGS}
        for key in site.BOOLEAN:
            given[key] = None if given[key] is None else ("true" if given[key] else "false")
        values, sources = site.resolve(remembered, given)
        parse_run_cell_args(values["run_cell_args"])
        repository = _repository(args.repository, remembered)
        site.require(values, () if repository[0] else (
            "--repository OWNER/NAME (the GitHub repository hosting verl-e2e, whose commit --sha names)",))  # fmt: skip
        values, sources = site.derive(values, sources)
        if not args.accept_site_file:
            guard(args.bridge, {"repository": repository[0], **values}, {"repository": repository[1], **sources})
        lines = install(args.bridge, repository[0], args.sha, values)
        lines.append(remember(args.bridge, repository[0], args.sha, values, sources))
        note = weekly_note(args.bridge, values)
    except UsageError as exc:
        print(f"install_callers: error: {exc}", file=sys.stderr)
        return 2
    for line in lines + changed(remembered, repository, values, sources):
        print(line)
    print("\n".join(summary(repository, args.sha, values, sources)))
    if note:
        print(note)
    return 0


def changed(
    remembered: dict[str, str], repository: tuple[str, str], values: dict[str, str], sources: dict[str, str]
) -> list[str]:
    """What this run's flags changed against the remembered settings, one line each."""
    if not remembered:
        return []
    lines = [
        f"changed {c}" for c in site.changes(remembered, {k: v for k, v in values.items() if sources[k] == "flag"})
    ]
    if repository[1] == "flag" and remembered.get("repository", repository[0]) != repository[0]:
        lines.insert(0, f"changed repository: {remembered['repository']!r} -> {repository[0]!r}")
    return lines


def _repository(given: str | None, remembered: dict[str, str]) -> tuple[str, str]:
    if given:
        return site.repository(given), "flag"
    if remembered.get("repository"):
        return site.repository(remembered["repository"]), "remembered"
    return "", "default"


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
        data: Any = json.loads(path.read_text())
    except json.JSONDecodeError:
        raise UsageError(f"{path}: not JSON; fix it or pass --reset") from None
    keep = set(BY_KEY) | {"repository"}
    return {k: str(v) for k, v in data.items() if k in keep} if isinstance(data, dict) else {}


if __name__ == "__main__":
    sys.exit(main())
