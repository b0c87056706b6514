"""Changes no cell can tell apart: only log messages (their calls, levels or text, and text shown by
name: a progress bar's `description`, a `message`, the text given to a progress call, or the message of
an error raised or of an assert: its type and the condition that raises it stay compared).

A reworded warning or a log call moved to debug level changes what a person reads, not what a cell
builds, trains or saves, so it selects no level (it is reported, with the reason). With both sides
of the file (`plan --repo`) the test is exact: the two ASTs are equal once docstrings and logging
statements are left out. From a diff alone, every changed code line must belong to a logging call
the hunk shows (its first line or its arguments).
"""

from __future__ import annotations

import ast
import re

LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log", "info_once", "warning_once"}
)
_PRINTS = ("print", "print_rank_0", "print_rank_last", "log_single_rank", "warn_rank_0", "log_rank_0")
_LOG_LINE = re.compile(
    r"^\s*(?:(?:self\.)?_?(?:logger|log|logging|LOGGER|LOG|warnings)\.(?:" + "|".join(sorted(LOG_METHODS)) + r")"
    r"|" + "|".join(_PRINTS) + r")\("
)
_STRINGS = re.compile(r"""[rbfuRBFU]{0,2}("[^"\\]*(?:\\.[^"\\]*)*"|'[^'\\]*(?:\\.[^'\\]*)*')""")
SAID = (
    "only log messages changed (or an error's wording): no cell's outcome depends on a logging call, its "
    "level or its text, so no level runs for it"
)


def _is_log(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return False
    func = node.value.func
    if isinstance(func, ast.Name):
        return func.id in _PRINTS
    if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS:
        owner = func.value.attr if isinstance(func.value, ast.Attribute) else getattr(func.value, "id", "")
        return "log" in owner.lower() or owner == "warnings"
    return False


# names whose string only a person reads; not `prefix`, `label` or `text`, which name state-dict keys too
_SHOWN = re.compile(r"^(desc|description|message|msg|help)$")


def _shown_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


# calls that show progress: their string arguments are what the bar says (`_with_progress_tracking(tasks,
# "Converting to HuggingFace", show)`, rich's `progress.add_task("Loading", total=n)`, `track(it, "Saving")`)
_PROGRESS = re.compile(r"(?i)(progress|^add_task$|^track$)")


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _blank_shown(node: ast.AST) -> None:
    """Text a person reads (a progress bar's description, a message) set by name, or given to a progress
    call: blanked for comparing."""
    if isinstance(node, ast.Call) and _PROGRESS.search(_call_name(node)):
        node.args = [ast.Constant("") if _shown_text(a) else a for a in node.args]
    if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):  # an error's message, not its type
        node.exc.args = [ast.Constant("") if _shown_text(a) else a for a in node.exc.args]
    if isinstance(node, ast.Assert) and node.msg is not None and _shown_text(node.msg):  # not its test
        node.msg = ast.Constant("")
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        if _SHOWN.match(node.targets[0].id) and _shown_text(node.value):
            node.value = ast.Constant("")
    elif isinstance(node, ast.keyword) and node.arg is not None and _SHOWN.match(node.arg) and _shown_text(node.value):
        node.value = ast.Constant("")


def _stripped(source: bytes) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        _blank_shown(node)
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [s for s in body if not _is_log(s)]
            first = kept[0] if kept else None
            if (
                name == "body"
                and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                kept = kept[1:]
            setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
    return ast.dump(tree, include_attributes=False)


def log_only_change(old: bytes | None, new: bytes | None) -> bool:
    """Two versions of a Python file differ only in logging statements (and comments, docstrings)."""
    if old is None or new is None:
        return False
    try:
        return _stripped(old) == _stripped(new)
    except (SyntaxError, ValueError, RecursionError):
        return False


class LogCalls:
    """One side of a hunk, line by line: which lines belong to a logging call (its first line, or a
    line of its arguments before the parentheses close)."""

    def __init__(self) -> None:
        self.depth = 0  # open parentheses of the logging call being read

    def see(self, text: str) -> bool:
        if not text.strip() or text.lstrip().startswith("#"):
            return True
        inside = self.depth > 0 or bool(_LOG_LINE.match(text))
        if inside:
            bare = _STRINGS.sub('""', text.split("  #", 1)[0])
            self.depth = max(0, self.depth + bare.count("(") - bare.count(")"))
        return inside
