"""What a pull request changed: paths with their git status, and the diff lines when they are known.

Two sources feed the planner: a `git diff --name-status` listing (from a file, stdin or the GitHub API)
that carries paths only, and a local Bridge checkout diffed against the merge base, which also yields
the added/removed lines that rules with a `diff` condition look at. Python files whose change is only
in comments or docstrings are marked `cosmetic` (compared through their ASTs with docstrings removed,
as HF transformers' test fetcher does), so the planner can discount them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from verl_e2e.errors import UsageError
from verl_e2e.plan.branches import Branch
from verl_e2e.plan.fields import ChangedDefault

STATUS_LETTERS = frozenset("ACDMRTUXB")


@dataclass(frozen=True)
class ChangedFile:
    """One changed path. `old_path` is set for renames and copies; both paths count as changed."""

    path: str
    status: str = "M"
    old_path: str | None = None
    diff_lines: tuple[str, ...] | None = None  # added/removed lines; None when the diff is unknown
    cosmetic: bool = False  # only comments/docstrings changed (Python files, diff known)
    log_only: bool = False  # only logging calls (and comments, docstrings) changed: quiet.py
    scopes: tuple[str, ...] = ()  # names of the defs/classes the change sits in (diffs.py, scopes.py)
    architectures: tuple[str, ...] | None = None  # HF architectures the file serves; None: not known
    module_level: bool = True  # the change may touch module-level code (unknown counts as yes)
    added_at: tuple[int, ...] = ()  # new-side line numbers of the added lines (where a frame can point)
    # the base file's blob id and the base lines that stand for the change (anchors.py), to compare with
    # the lines recorded cells ran; None where the diff does not say
    old_blob: str | None = None
    base_lines: tuple[int, ...] | None = None
    # the innermost def/class of every changed line, qualified (`Cls.method`), from both ASTs; None when
    # no AST was read (a diff alone names scopes, not which one a line belongs to)
    functions: tuple[str, ...] | None = None
    # a diff alone (methods.py): classes a hunk header named whose body no changed line is in, and those
    # with a change in a method git did not name
    methods_only: tuple[str, ...] = ()
    unnamed_methods: tuple[str, ...] = ()
    # assignments outside any function the change sets (class defaults, dataclass fields, module values)
    defaults: tuple[ChangedDefault, ...] = ()
    # changed lines that run only under conditions on the parallel layout (branches.py)
    branches: tuple[Branch, ...] = ()
    # lines of the blocks whose `if`/`while` test the change rewrote (conditions.py): what it switches
    guarded: tuple[str, ...] = ()
    # every changed line only sets values of these classes ("" the module): bodies.py; None: it does more
    definitions: tuple[str, ...] | None = None
    # shared code: the top-level names and words it touches (users.py), and the architectures of the only
    # model files that use them (None: shared code uses them, or they were not looked up)
    symbols: tuple[str, ...] = ()
    serves: tuple[str, ...] | None = None

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


def _strip_docstrings(tree: ast.AST) -> str:
    """The AST without docstrings and without functions' argument and return annotations (Python never
    reads those at run time; a dataclass field's annotation, which defines the field, stays)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            node.annotation = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
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
    """True when two versions of a Python file differ only in comments, docstrings, layout or function
    type hints."""
    if old is None or new is None:
        return False
    try:
        return _strip_docstrings(ast.parse(old)) == _strip_docstrings(ast.parse(new))
    except (SyntaxError, ValueError):
        return False


def is_pin(path: str) -> bool:
    """A path that pins what a cell runs: the Megatron-LM submodule or a dependency file."""
    name = path.rsplit("/", 1)[-1]
    return path == "3rdparty/Megatron-LM" or (
        "/" not in path and (name in ("pyproject.toml", "uv.lock", "setup.py") or name.startswith("requirements"))
    )
