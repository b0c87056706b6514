"""Changes that only define values: class-level fields and plain module-level assignments.

Importing a module runs its class statements, so a recorded cell "ran" every class body of every
module verl imports; that says nothing about whether it built the class. A change that only sets a
config class's fields (a logger config's default, a dataset config's path) runs in a cell only if
that cell built the class, which the records show as one of its methods having run. This module
says which classes (or the module itself) a change's lines define values of; `select` asks the
records whether any cell built them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence

from verl_e2e.config.aspects import code_lines
from verl_e2e.plan import pyparse
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.fields import Assigned
from verl_e2e.plan.runtime import Ran
from verl_e2e.plan.surface import MODELS

_VALUES = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Pass)


def _plain(value: ast.expr | None) -> bool:
    """A module-level value computed without calling anything (a call could fail at import)."""
    return value is None or not any(isinstance(n, (ast.Call, ast.Await, ast.Lambda)) for n in ast.walk(value))


def _owner(body: Sequence[ast.stmt], line: int, owner: str) -> str | None:
    """The class (or "" for the module) whose value `line` defines; None when the line does more."""
    for st in body:
        first = min([st.lineno, *(d.lineno for d in getattr(st, "decorator_list", []))])
        if not first <= line <= (st.end_lineno or st.lineno):
            continue
        if isinstance(st, ast.ClassDef) and line > st.lineno and line >= st.body[0].lineno:
            return _owner(st.body, line, f"{owner}.{st.name}" if owner else st.name)
        docstring = isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)
        if docstring or (isinstance(st, _VALUES) and (owner or _plain(getattr(st, "value", None)))):
            return owner
        return None
    return owner  # between statements: a blank or comment line


def owners(source: bytes | None, lines: Iterable[int]) -> set[str] | None:
    """The classes ("" for the module) whose values `lines` define, or None when a line is code."""
    tree = pyparse.tree(source) if source is not None else None
    if tree is None:
        return None
    found: set[str] = set()
    for line in lines:
        owner = _owner(tree.body, line, "")
        if owner is None:
            return None
        found.add(owner)
    return found


def owners_from_text(lines: Sequence[str], assigned: Sequence[Assigned]) -> set[str] | None:
    """The same from a diff's text: every changed code line is a field or module value it recognised
    (fields.TextScopes), a module value set without a call."""
    if not assigned or len(code_lines(lines)) != len(assigned):
        return None
    if any(not owner and "(" in value for _, owner, _, value, _ in assigned):
        return None
    return {owner for _, owner, _, _, _ in assigned}


def unbuilt(file: ChangedFile, ignored: bool, ran: Sequence[Ran]) -> str | None:
    """Why no cell runs a change that only sets class fields (or, in an ignored file, module values)
    of a module the recorded cells import but whose classes none of them built; None otherwise.
    Model code is built per family and only some families are recorded: it is never judged so."""
    methods = _unbuilt_config_methods(file, ran)
    if methods is not None:
        return methods
    owners = file.definitions
    if not owners or file.path.startswith(MODELS) or ("" in owners and not ignored):
        return None
    recorded = {q for r in ran for p in file.paths for q in r.functions.get(p, ())}
    classes = [c for c in owners if c]
    if not recorded or any(q.startswith(f"{c}.") for c in classes for q in recorded):
        return None
    named = ", ".join(classes[:3]) + (" ..." if len(classes) > 3 else "")
    what = f"values of {named} (class fields)" if classes else "module-level values"
    built = "those classes" if len(classes) > 1 else named or "anything from it"
    return (
        f"the change only sets {what}; the recorded cells import this module but none builds {built} "
        "(none ran one of its methods), so no cell runs the change"
    )


_CONFIGS = ("Config", "ConfigContainer")
# a dataclass field of a plain default or a named factory: `field()` runs at import and stores them; the
# factory runs only where the class is built
_FIELD = re.compile(r"\s*(?:dataclasses\.)?field\(\s*(?:default_factory\s*=\s*[\w.]+|default\s*=\s*[^()]*)\s*\)\s*")


def _unnamed_config_methods(file: ChangedFile, ran: Sequence[Ran]) -> set[str] | None:
    """From a diff alone (methods.py): the classes whose unnamed methods (and, for config classes, whose
    fields) every changed line sits in, when every def a hunk names is one no recorded cell ran in this
    file under any class (a `finalize` some config built by a cell has may be the one). A config class's
    fields and methods both wait for someone to build it: a settings class of Bridge's own loop whose
    default and setup a PR changes together (`CommOverlapConfig`'s bootstrap backend) runs in no cell."""
    if file.diff_lines is None or not file.unnamed_methods:
        return None
    with_fields = set(file.unnamed_methods) - set(file.methods_only)
    if any(not c.endswith(_CONFIGS) for c in with_fields):
        return None  # a field or class line of another class changed too: bodies.owners decides that
    classes = set(file.unnamed_methods) | {
        s for s in file.scopes if s.endswith(_CONFIGS) and s not in file.methods_only
    }
    recorded = {q for r in ran for p in file.paths for q in r.functions.get(p, ())}
    named = {s for s in file.scopes if s not in classes}
    if any(q == n or q.endswith(f".{n}") for q in recorded for n in named):
        return None
    return classes


def _unbuilt_config_methods(file: ChangedFile, ran: Sequence[Ran]) -> str | None:
    """The same for a change inside methods of config classes (`...Config`) none of the recorded cells
    built (none ran one of their methods): Bridge's own training-loop settings, which verl imports with
    the module and never constructs. With exact scopes (`plan --repo`), or from a diff where git's hunk
    header names the class and the lines sit in its methods (`_unnamed_config_methods`); only for config classes:
    a helper class some layout builds (TP > 1) has no recorded method either, yet runs there."""
    if file.module_level or file.path.startswith(MODELS):
        return None
    if not file.functions:
        classes = _unnamed_config_methods(file, ran)
        if classes is None:
            return None
    elif any("." not in f for f in file.functions):
        return None
    else:
        classes = {f.split(".", 1)[0] for f in file.functions}
    if not classes or not all(c.endswith(_CONFIGS) for c in classes):
        return None
    recorded = {q for r in ran for p in file.paths for q in r.functions.get(p, ())}
    if not recorded or any(q.startswith(f"{c}.") for c in classes for q in recorded):
        return None
    named = ", ".join(sorted(classes)[:3]) + (" ..." if len(classes) > 3 else "")
    return (
        f"the change is inside methods of {named}; the recorded cells import this module but none builds "
        f"{'those classes' if len(classes) > 1 else named} (none ran one of its methods), so no cell runs the change"
    )


def unbuilt_config_body(qualname: str, file: ChangedFile, ran: Sequence[Ran]) -> bool:
    """A recorded run of a settings class's body (`MixedPrecisionConfig`) is the import that defined the
    class, not a cell that built it. Where the change sets that class's fields to plain values (a new field
    and the method that reads it) and no recorded cell ran one of its methods, verl imports Bridge's own
    training-loop settings and never constructs them: the body's run proves nothing about the change.
    A body change of another kind runs at import and stays evidence; model code is built per family (only
    some are recorded), so it is not judged so."""
    if "." in qualname or not qualname.endswith(_CONFIGS) or file.path.startswith(MODELS):
        return False
    fields = [d for d in file.defaults if d.owner == qualname]
    if not fields or any(d.value is not None and "(" in d.value and not _FIELD.fullmatch(d.value) for d in fields):
        return False  # what the body's change does is not known to be a plain value: it ran at import
    return not any(q.startswith(f"{qualname}.") for r in ran for p in file.paths for q in r.functions.get(p, ()))
