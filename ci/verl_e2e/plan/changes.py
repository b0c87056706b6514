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
    # the tests whose true side holds a changed line (kindconds.holding_tests): the kinds of model it runs for
    conditions: tuple[str, ...] = ()
    # statements after a changed assignment that read its value (flows.py): where the value goes
    flows: tuple[str, ...] = ()
    # every changed line only sets values of these classes ("" the module): bodies.py; None: it does more
    definitions: tuple[str, ...] | None = None
    # shared code: the top-level names and words it touches (users.py), and the architectures of the only
    # model files that use them (None: shared code uses them, or they were not looked up)
    symbols: tuple[str, ...] = ()
    serves: tuple[str, ...] | None = None
    # every changed line adds these new top-level functions or classes to an existing module (additions.py)
    new_definitions: tuple[str, ...] | None = None
    # every place Bridge calls the changed definition from, none of which a cell takes (callsites.py):
    # (path, line, function, "untaken", "gated", "layout" or "unreached"); None where one may run or it was
    # not looked up
    callers: tuple[tuple[str, int, str, str], ...] | None = None
    # the layout branches those calls sit under (how "layout"): where the change runs, for the layout rules
    caller_branches: tuple[Branch, ...] = ()
    # (path, line, cells): the recorded cells that ran a layout call's function and not the call
    caller_skipped: tuple[tuple[str, int, tuple[str, ...]], ...] = ()
    # an added module whose name the base tree already mentions (a guarded import waiting for it): --repo
    named_before: bool = False
    # an existing module no other Bridge source names and verl does not import: nothing loads it: --repo
    unnamed_module: bool = False
    # a changed line runs under a condition on the model's kind or the run's state (callsites.py): --repo
    unrecorded_conditions: bool = False
    # ... one on the plain-data type of what a caller hands over (`isinstance(replica_id, int)`): --repo
    typed_conditions: bool = False
    # why the module no longer imports at head (importbreak.py): the cells that import it fail there: --repo
    import_break: str | None = None
    # the Bridge modules the change's added import lines bring in ("?M.name": a name that may be one), which
    # importlines.settle checks against the modules the recorded cells imported
    bridge_imports: tuple[str, ...] = ()

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


def stripped_dump(tree: ast.AST) -> str:
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


_DYNAMIC = frozenset({"locals", "vars", "eval", "exec"})  # a function that reads its names as text


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp)


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of a function's own scope: not those of a nested function, class or comprehension."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [*function.body]
    while todo:
        node = todo.pop(0)
        out.append(node)
        if not isinstance(node, (*_SCOPES, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The names a function binds in its own scope (not its parameters, which callers may pass by
    keyword, nor those declared global or nonlocal), in the order a walk meets them; [] where it
    calls locals() or the like."""
    kept: set[str] = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    bound: dict[str, None] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id in _DYNAMIC:
            return []
    for node in _own_nodes(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            kept.update(node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound[node.id] = None
    return [n for n in bound if n not in kept]


def _canonical_locals(tree: ast.AST) -> ast.AST:
    """Each function's own variables renamed by order of appearance (`_l0_0`, `_l0_1`, ...), in its
    whole body (a nested function reads them as closures): a variable renamed consistently inside a
    function computes the same thing. A global becoming a local or two variables merged still differ
    (the global's name is kept), and so does a variable of a comprehension or lambda renamed."""
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for k, node in enumerate(functions):  # a nested function's own names get its own prefix
        names = {n: f"_l{k}_{i}" for i, n in enumerate(_local_names(node))}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in names:
                inner.id = names[inner.id]
    return tree


def is_cosmetic_python_change(old: bytes | None, new: bytes | None, renames: bool = True) -> bool:
    """True when two versions of a Python file differ only in comments, docstrings, layout, function
    type hints or (with `renames`: a small change, where a rename is what it may be) the names of a
    function's own variables."""
    if old is None or new is None:
        return False
    try:
        before, after = ast.parse(old), ast.parse(new)
        if stripped_dump(before) == stripped_dump(after):
            return True
        return renames and stripped_dump(_canonical_locals(before)) == stripped_dump(_canonical_locals(after))
    except (SyntaxError, ValueError):
        return False


def is_pin(path: str) -> bool:
    """A path that pins what a cell runs: the Megatron-LM submodule or a dependency file."""
    name = path.rsplit("/", 1)[-1]
    return path == "3rdparty/Megatron-LM" or (
        "/" not in path and (name in ("pyproject.toml", "uv.lock", "setup.py") or name.startswith("requirements"))
    )
