"""What a pull request changed: paths with their git status, and the diff lines when they are known.

Two sources feed the planner: a `git diff --name-status` listing (from a file, stdin or the GitHub API)
that carries paths only, and a local Bridge checkout diffed against the merge base, which also yields
the added/removed lines that rules with a `diff` condition look at. Python files whose change is only
in comments or docstrings are marked `cosmetic` (compared through their ASTs with docstrings removed,
as HF transformers' test fetcher does), so the planner can discount them.
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path

from verl_e2e.errors import UsageError

STATUS_LETTERS = frozenset("ACDMRTUXB")


@dataclass(frozen=True)
class ChangedFile:
    """One changed path. `old_path` is set for renames and copies; both paths count as changed."""

    path: str
    status: str = "M"
    old_path: str | None = None
    diff_lines: tuple[str, ...] | None = None  # added/removed lines; None when the diff is unknown
    cosmetic: bool = False  # only comments/docstrings changed (Python files, diff known)
    scopes: tuple[str, ...] = ()  # names of the defs/classes the change sits in (diffs.py, scopes.py)
    architectures: tuple[str, ...] | None = None  # HF architectures the file serves; None: not known
    module_level: bool = True  # the change may touch module-level code (unknown counts as yes)

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path,) if self.old_path is None else (self.old_path, self.path)


def _clean(path: str) -> str:
    path = path.strip()
    while path.startswith("./"):
        path = path[2:]
    return path


def parse_name_status(text: str, source: str = "changed files") -> list[ChangedFile]:
    """Parse `git diff --name-status` lines (`STATUS<TAB>PATH`, `R100<TAB>OLD<TAB>NEW`) or bare paths.

    Every malformed line is collected and reported together, so one run shows all of them.
    """
    files: list[ChangedFile] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "\t" not in line:
            files.append(ChangedFile(path=_clean(line)))
            continue
        fields = line.split("\t")
        status = fields[0].strip()
        letter = status[:1].upper()
        score_ok = status[1:].isdigit() or status[1:] == ""
        if letter not in STATUS_LETTERS or not score_ok:
            problems.append(f"line {number}: unknown status {status!r}")
            continue
        want = 3 if letter in "RC" else 2
        if len(fields) != want:
            problems.append(f"line {number}: status {letter} needs {want - 1} path(s), found {len(fields) - 1}")
            continue
        if not all(f.strip() for f in fields[1:]):
            problems.append(f"line {number}: empty path")
            continue
        if letter in "RC":
            files.append(ChangedFile(path=_clean(fields[2]), status=letter, old_path=_clean(fields[1])))
        else:
            files.append(ChangedFile(path=_clean(fields[1]), status=letter))
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise UsageError(
            f"{source}: {shown}; expected lines 'STATUS<TAB>PATH' as `git diff --name-status` prints them "
            "(e.g. 'M\\tsrc/x.py', 'R100\\told\\tnew') or bare paths; fix the listed lines"
        )
    return files


def read_changed_files(location: str, stdin_text: str | None = None) -> list[ChangedFile]:
    """Read a name-status listing from a path, or from stdin when `location` is '-'."""
    if location == "-":
        return parse_name_status(stdin_text or "", "stdin")
    path = Path(location)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(
            f"--changed-files {location}: cannot read it ({exc.strerror}); pass a file with "
            "`git diff --name-status` output, or '-' to read stdin"
        ) from None
    return parse_name_status(text, str(path))


# ---------------------------------------------------------------------------------------------- git


def _git(repo: Path, *args: str, what: str) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, errors="replace", check=False
        )
    except FileNotFoundError:
        raise UsageError("git is not installed; install git or pass --changed-files instead") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{what}: {detail}")
    return proc.stdout


def _resolve(repo: Path, rev: str, flag: str) -> str:
    return _git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{rev}^{{commit}}",
        what=f"{flag} {rev!r} is not a commit in {repo}; fetch it (git fetch origin {rev}) or pass a SHA",
    ).strip()


def _blobs(repo: Path, specs: list[str]) -> dict[str, bytes | None]:
    """Read many `rev:path` blobs through one `git cat-file --batch` process."""
    if not specs:
        return {}
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        input="".join(s + "\n" for s in specs).encode(),
        capture_output=True,
        check=False,
    )
    out, pos = proc.stdout, 0
    result: dict[str, bytes | None] = {}
    for spec in specs:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) == 3:
            size = int(header[2])
            result[spec] = out[pos : pos + size]
            pos += size + 1
        else:
            result[spec] = None
    return result


def _strip_docstrings(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def is_cosmetic_python_change(old: bytes | None, new: bytes | None) -> bool:
    """True when two versions of a Python file differ only in comments, docstrings or layout."""
    if old is None or new is None:
        return False
    try:
        return _strip_docstrings(ast.parse(old)) == _strip_docstrings(ast.parse(new))
    except (SyntaxError, ValueError):
        return False


def _diff_lines(repo: Path, base: str, head: str) -> dict[str, list[str]]:
    """Added/removed lines per (new) path from one `git diff -U0`."""
    text = _git(repo, "diff", "-U0", "--no-color", "--no-ext-diff", "-M", base, head, what="git diff")
    lines: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("+++ "):
            target = line[4:]
            if target != "/dev/null":  # a deletion keeps the old path's bucket from the `---` line
                current = lines.setdefault(target[2:] if target.startswith("b/") else target, [])
        elif line.startswith("--- "):
            source = line[4:]
            if source != "/dev/null":
                current = lines.setdefault(source[2:] if source.startswith("a/") else source, [])
        elif line[:1] in "+-" and not line.startswith(("+++", "---")):
            current.append(line[1:])
    return lines


def changes_from_git(repo_path: str, base: str, head: str) -> tuple[list[ChangedFile], str, str]:
    """Diff `head` against its merge base with `base`; return (files, merge_base, head_sha)."""
    repo = Path(repo_path)
    if not repo.is_dir():
        raise UsageError(f"--repo {repo_path}: no such directory; pass the path of a Megatron-Bridge checkout")
    _git(
        repo,
        "rev-parse",
        "--git-dir",
        what=f"--repo {repo_path} is not a git repository; pass a git checkout",
    )
    base_sha = _resolve(repo, base, "--base")
    head_sha = _resolve(repo, head, "--head")
    merge_base = _git(
        repo,
        "merge-base",
        base_sha,
        head_sha,
        what=f"--base {base} and --head {head} share no history; check both come from the same repository",
    ).strip()
    listing = _git(repo, "diff", "--name-status", "-M", "--no-color", merge_base, head_sha, what="git diff")
    files = parse_name_status(listing, "git diff")
    diff = _diff_lines(repo, merge_base, head_sha)
    py_modified = [f for f in files if f.status == "M" and f.path.endswith(".py")]
    specs = [f"{merge_base}:{f.path}" for f in py_modified] + [f"{head_sha}:{f.path}" for f in py_modified]
    blobs = _blobs(repo, specs)
    cosmetic = {
        f.path
        for f in py_modified
        if is_cosmetic_python_change(blobs.get(f"{merge_base}:{f.path}"), blobs.get(f"{head_sha}:{f.path}"))
    }
    enriched = [
        ChangedFile(
            path=f.path,
            status=f.status,
            old_path=f.old_path,
            diff_lines=tuple(diff.get(f.path, ())) + tuple(diff.get(f.old_path, ()) if f.old_path else ()),
            cosmetic=f.path in cosmetic,
        )
        for f in files
    ]
    return enriched, merge_base, head_sha
