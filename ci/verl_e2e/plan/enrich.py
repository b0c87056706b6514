"""Changed files + what is known about them -> the ChangedFiles the selector reads.

Three sources, one result: a name-status listing (paths only), a unified diff (`--diff`: the changed
lines and the scopes they sit in), and a Bridge checkout (`--repo`: exact scopes from both ASTs and the
architectures each model file serves, read from the PR's own registrations). Whatever is missing falls
back to the shipped surface index, so a plan made from the API and one made from a clone agree.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from verl_e2e.config.aspects import code_lines
from verl_e2e.plan import additions, bodies, conditions, fields, flows, kindconds, pyparse, recorded, users
from verl_e2e.plan.anchors import whole_statements
from verl_e2e.plan.branches import from_source
from verl_e2e.plan.changes import ChangedFile
from verl_e2e.plan.diffs import FileDiff
from verl_e2e.plan.registry import SHARED, architectures_by_file, loose_registrations
from verl_e2e.plan.scopes import enclosing, innermost, outside_defs, parses, scope_names
from verl_e2e.plan.surface import MODELS, Surface


def files_from_diff(diffs: Mapping[str, FileDiff]) -> list[ChangedFile]:
    """The changed files a diff names (for `--diff` without `--changed-files`)."""
    return [ChangedFile(path=d.path, status=d.status, old_path=d.old_path) for d in diffs.values()]


def _comment_only(diff: FileDiff) -> bool:
    return diff.path.endswith(".py") and bool(diff.lines) and not code_lines(diff.lines)


def _sorted(owners: set[str] | None) -> tuple[str, ...] | None:
    return None if owners is None else tuple(sorted(owners))


def _both(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    return None if a is None or b is None else a | b


def with_diff(files: Sequence[ChangedFile], diffs: Mapping[str, FileDiff]) -> list[ChangedFile]:
    """Attach each file's changed lines and scopes; a file the diff leaves out (a lockfile) stays unknown."""
    out = []
    listed = {f.path for f in files}
    moved = {d.old_path: d for d in diffs.values() if d.status == "R" and d.old_path and d.path in listed}
    for f in files:
        if f.status == "D" and f.path in moved:
            continue  # a deletion the diff pairs with an addition: one renamed file (moves.py)
        d = diffs.get(f.path) or (diffs.get(f.old_path) if f.old_path else None)
        if d is None:
            out.append(f)
            continue
        renamed = f.status == "A" and d.status == "R"
        out.append(
            replace(
                f,
                status="R" if renamed else f.status,
                old_path=d.old_path if renamed else f.old_path,
                diff_lines=d.lines,
                added_at=tuple(d.added_at),
                old_blob=d.old_blob,
                base_lines=d.anchors.base_lines(),
                scopes=tuple(dict.fromkeys((*f.scopes, *d.scopes))),
                cosmetic=f.cosmetic or _comment_only(d),
                log_only=d.path.endswith(".py") and d.log_only,
                definitions=_sorted(bodies.owners_from_text(d.lines, [*d.assigned, *d.unassigned])),
                module_level=d.module_level
                or d.imports.loud
                or d.classes.module_code
                or d.status in "AD"
                or not d.scopes,
                bridge_imports=d.imports.bridge_modules(),
                methods_only=d.classes.methods_only(),
                unnamed_methods=d.classes.unnamed_methods(),
                defaults=fields.from_text(d.path, d.assigned, d.unassigned) if d.path.endswith(".py") else (),
                branches=tuple(d.branches),
                new_definitions=d.found.additions.definitions if d.status == "M" and d.path.endswith(".py") else None,
            )
        )
        out[-1] = _located(out[-1], d)
    return out


def _located(f: ChangedFile, d: FileDiff) -> ChangedFile:
    """A modified Python file whose hunks are found in the recorded commit's text gets the defs around its
    change from there (recorded.py), as a checkout's ASTs would give them; otherwise it stays as is."""
    if f.status != "M" or not f.path.endswith(".py"):
        return f
    found = recorded.locate(f.old_path or f.path, d.sides, f.base_lines, d.imports.quiet_lines())
    if found is None:
        return f
    module = found.outside_defs or d.imports.loud or d.classes.module_code
    return replace(f, functions=found.functions, scopes=found.scopes, module_level=module)


def with_ast_scopes(
    files: Sequence[ChangedFile], diffs: Mapping[str, FileDiff], old: Mapping[str, bytes], new: Mapping[str, bytes]
) -> list[ChangedFile]:
    """Add the exact enclosing defs/classes of every changed line (base AST for removed, head for added)."""
    out = []
    for f in files:
        d = diffs.get(f.path)
        if d is None or not f.path.endswith(".py"):
            out.append(f)
            continue
        before, after = old.get(f.old_path or f.path), new.get(f.path)
        quiet_added, quiet_removed = d.imports.quiet_lines()  # import lines that run nothing new
        names, outside = enclosing(before, d.removed_at), outside_defs(before, set(d.removed_at) - quiet_removed)
        names += enclosing(after, d.added_at)
        outside |= outside_defs(after, set(d.added_at) - quiet_added)
        # where both sides parse, the ASTs say exactly which defs hold the changed lines; a hunk header
        # names the def above the hunk, which may hold none of them (a rename below a loader is no load)
        exact_scopes = (not d.removed_at or parses(before)) and (not d.added_at or parses(after))
        scopes = tuple(dict.fromkeys((*(() if exact_scopes else f.scopes), *scope_names(names))))
        inner = tuple(dict.fromkeys((*innermost(before, d.removed_at), *innermost(after, d.added_at))))
        exact = fields.from_sources(f.path, before, after, d.added_at, d.removed_at)
        out.append(
            replace(
                f,
                scopes=scopes,
                functions=inner,
                module_level=outside or f.status in "AD",
                defaults=f.defaults if exact is None else exact,
                base_lines=whole_statements(before, f.base_lines),
                branches=(*from_source(before, d.removed_at, True), *from_source(after, d.added_at, False)),
                guarded=tuple(
                    dict.fromkeys(
                        (*conditions.guarded_lines(after, d.added_at), *conditions.guarded_lines(before, d.removed_at))
                    )
                ),
                flows=flows.flow_lines(after, d.added_at),
                definitions=_sorted(_both(bodies.owners(before, d.removed_at), bodies.owners(after, d.added_at))),
                symbols=users.symbols(after, d.added_at) + users.symbols(before, d.removed_at)
                if users.shared(f.path)
                else (),
                new_definitions=additions.still_new(f.new_definitions, before),
                unrecorded_conditions=_unrecorded(before, d.removed_at) or _unrecorded(after, d.added_at),
                typed_conditions=_typed(before, d.removed_at) or _typed(after, d.added_at),
                conditions=tuple(dict.fromkeys((*_holding(before, d.removed_at), *_holding(after, d.added_at)))),
            )
        )
    return out


def _unrecorded(source: bytes | None, lines: Sequence[int]) -> bool:
    tree = pyparse.tree(source) if source is not None and lines else None
    return tree is not None and any(kindconds.unrecorded_condition(tree, n, handed_over=True) for n in lines)


def _holding(source: bytes | None, lines: Sequence[int]) -> list[str]:
    tree = pyparse.tree(source) if source is not None and lines else None
    return [t for n in lines for t in kindconds.holding_tests(tree, n)] if tree is not None else []


def _typed(source: bytes | None, lines: Sequence[int]) -> bool:
    tree = pyparse.tree(source) if source is not None and lines else None
    return tree is not None and any(kindconds.handed_over_condition(tree, n) for n in lines)


def with_architectures(
    files: Sequence[ChangedFile],
    surface: Surface | None,
    head_models: Mapping[str, bytes] | None = None,
) -> list[ChangedFile]:
    """Attach the HF architectures each model file serves: from the PR's tree when given, else the index."""
    # shared model code (conversion, common, ...) runs the default family whatever it serves: its
    # architectures are never asked for, and everything imports it
    wanted = [p for f in files for p in f.paths if p.startswith(MODELS) and p.split("/")[4] not in SHARED]
    from_tree = architectures_by_file(head_models, only=wanted) if head_models and wanted else {}
    out = []
    for f in files:
        if not f.path.startswith(MODELS) or f.path.count("/") < 5:
            out.append(f)
            continue
        if head_models:
            archs = list(from_tree.get(f.path, ()))
        else:
            archs = loose_registrations(list(f.diff_lines or ())) if f.status == "A" else []
            if surface is not None:
                archs += [a for a in surface.architectures.get(f.path, ()) if a not in archs]
                if f.old_path:
                    archs += [a for a in surface.architectures.get(f.old_path, ()) if a not in archs]
        out.append(replace(f, architectures=tuple(archs)))
    return out


def changed_line_ranges(files: Sequence[ChangedFile]) -> dict[str, list[list[int]]]:
    """{path: [[first, last], ...]} of the added lines of each Python file (the judge's "in this PR's change")."""
    out: dict[str, list[list[int]]] = {}
    for f in files:
        if not f.path.endswith(".py") or not f.added_at:
            continue
        ranges: list[list[int]] = []
        for line in sorted(set(f.added_at)):
            if ranges and line == ranges[-1][1] + 1:
                ranges[-1][1] = line
            else:
                ranges.append([line, line])
        out[f.path] = ranges
    return out


# a quoted dotted name on an added line: a parameter or module name the change writes
NAME_LITERAL = re.compile(r"""["']([A-Za-z_][\w*]*(?:\.[\w*]+)+)["']""")
MAX_NAMES = 50


def changed_names(files: Sequence[ChangedFile]) -> dict[str, list[str]]:
    """{path: [dotted string literals on the added lines]} of each Python file: the names a change writes
    (a mapping's "model.layers.*.mlp.down_proj.weight"), so the judge can tell that a weight Bridge could
    not find in the checkpoint was named by this change."""
    out: dict[str, list[str]] = {}
    for f in files:
        if not f.path.endswith(".py") or not f.diff_lines or not f.added_at:
            continue
        added = f.diff_lines[len(f.diff_lines) - len(f.added_at) :]  # removed lines come first
        names = dict.fromkeys(n for line in added for n in NAME_LITERAL.findall(line))
        if names:
            out[f.path] = list(names)[:MAX_NAMES]
    return out


def changed_defaults(files: Sequence[ChangedFile]) -> list[dict[str, Any]]:
    """Every class-level default, dataclass field and module-level value the change sets, as the plan
    context records it (`changed_defaults`): the judge names one as the likely cause of a failure
    raised outside the PR's lines on a path that reads it."""
    return [d.to_json() for f in files for d in f.defaults]
