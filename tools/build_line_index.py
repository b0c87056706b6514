#!/usr/bin/env python3
"""Write the recorded Bridge commit's line index (ci/verl_e2e/data/lines.json), which `plan --diff` reads
to name the function a change sits in.

    python tools/build_line_index.py --repo /path/to/Megatron-Bridge.git [--commit SHA] [--out FILE]

Why: a unified diff alone names only the unindented def or class above each hunk (`class AutoBridge`), not
the method the changed lines are in, so a plan made from the API without a clone cannot tell an HF import
fix from an export change, nor compare the change with the functions real cells ran. The line records
come from one Bridge commit (surface.json's `bridge_commit`); for every Python file verl can reach there,
and every file a record names, this index keeps a short hash of each line's stripped text and the span of
every def and class (first line with decorators, last line, qualified name). A hunk whose old side is the
same text at some offset in that commit is located there, and its lines get the functions around them
(plan/recorded.py). The index holds hashes and names, never Bridge's text.

Exit status: 0 written, 2 bad input (no such repository or commit).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "ci/verl_e2e/data"
HASH_HEX = 6  # 24 bits a line: a hunk is located by several lines at once, so a rare clash is harmless


def line_hash(text: str) -> str:
    """The hash plan/recorded.py compares: of the line without its indentation and trailing space."""
    return hashlib.blake2b(text.strip().encode(), digest_size=HASH_HEX // 2).hexdigest()


def spans(source: str) -> list[list[Any]] | None:
    """[first line incl. decorators, last line, qualified name] of every def/class, sorted; None: no parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out: list[list[Any]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                name = f"{prefix}{child.name}"
                out.append([start, child.end_lineno or child.lineno, name])
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(out)


def _git(repo: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"build_line_index: git {' '.join(args[:2])} failed in {repo}: {done.stderr.strip()[:200]}")
    return done.stdout


def wanted_paths() -> list[str]:
    """The files verl can reach at the recorded commit, and every file a shipped record names."""
    surface = json.loads((DATA / "surface.json").read_text())
    runtime = json.loads((DATA / "runtime.json").read_text())
    paths = set(surface["reachable"])
    for cell in runtime["cells"]:
        paths.update(cell.get("blobs", {}))
    return sorted(p for p in paths if p.endswith(".py"))


def build(repo: str, commit: str) -> dict[str, Any]:
    listed = {
        line.split("\t", 1)[1]: line.split()[2]
        for line in _git(repo, "ls-tree", "-r", commit, "--", "src").splitlines()
        if "\t" in line
    }
    files: dict[str, Any] = {}
    for path in wanted_paths():
        if path not in listed:
            continue
        source = _git(repo, "cat-file", "blob", listed[path])
        found = spans(source)
        if found is None:
            continue
        files[path] = {
            "blob": listed[path],
            "hashes": "".join(line_hash(t) for t in source.split("\n")),
            "spans": found,
        }
    return {"schema_version": 1, "bridge_commit": commit, "hash_hex": HASH_HEX, "files": files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, help="a Megatron-Bridge git dir holding the recorded commit")
    ap.add_argument("--commit", help="default: surface.json's bridge_commit")
    ap.add_argument("--out", type=Path, default=DATA / "lines.json")
    args = ap.parse_args(argv)
    commit = args.commit or json.loads((DATA / "surface.json").read_text())["bridge_commit"]
    if not Path(args.repo).exists():
        print(
            f"build_line_index: no repository at {args.repo}; pass a Megatron-Bridge clone's git dir", file=sys.stderr
        )
        return 2
    index = build(args.repo, commit)
    args.out.write_text(json.dumps(index, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"build_line_index: {len(index['files'])} files of {commit[:7]} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
