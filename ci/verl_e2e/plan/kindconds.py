"""Conditions on a model's kind or a run's state: what the recorded cells (dense and MoE text models,
LoRA, TP = 1, one step) never met but a PR cell may (Level 4's MTP, vision, quantised and hybrid cells;
Level 5's many steps), and tests on the plain-data type or tensor rank of what a function was handed.
A line under one is not proven unrun by records that never took it (callsites.py, enrich.py). Pure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
# conditions the recorded cells (dense and MoE text models, LoRA, TP=1, one step) never met but a PR
# cell may: the model's kind (Level 4's MTP, vision, quantised and hybrid cells) and the state of a run
# (a cache hit, a later step: Level 5's many steps)
_UNRECORDED = re.compile(
    r"(?i)(mtp|vision|visual|image|video|audio|multimodal|quant|qat|modelopt|fp8|fp4|mamba|ssm|hybrid|gdn"
    r"|linear_att|gated_delta|custom|heterogeneous|vlm|language_model"
    r"|cache|cached|initiali[sz]ed|first|step|iteration|count|seen|warned|once|training)"
)
# ... and, for a changed line itself, the plain-data type of what a caller hands over (a tuple key from a
# checkpointing library), which another checkpoint format or library version changes where no setting
# does. Not a module's or a wrapper's class (which LoRA targets verl sets decide), and not for a call
# site: a helper called only on a type no cell met stays a helper no cell runs (a Mamba mixer's dimensions)
_HANDED_OVER = re.compile(r"\bisinstance\([^,()]+,\s*\(?\s*(tuple|list|dict|str|bytes|int|float)\b")
# the rank of a tensor handed over (a packed 3-D expert weight that only some models' adapters export): a
# model's kind in all but name, for a changed line and for a call site alike
_RANK = re.compile(r"(\.ndim\b|\.dim\(\))\s*(==|!=|>=|<=|>|<)\s*[2-9]")  # not a scalar check (`ndim == 0`)


def unrecorded_condition(tree: ast.Module, line: int, handed_over: bool = False) -> bool:
    """Whether a line runs under a condition on the model's kind or the run's state (see above), or with
    `handed_over`, on the type of what its function was given."""
    forms = (_UNRECORDED, _RANK, _HANDED_OVER) if handed_over else (_UNRECORDED, _RANK)
    return any(f.search(ast.unparse(test)) for test in _tests_above(tree.body, line) for f in forms)


def handed_over_condition(tree: ast.Module, line: int) -> bool:
    """Whether a line runs under a test on the plain-data type of what its function was given, or on the
    rank of a tensor it was given."""
    return any(f.search(ast.unparse(test)) for test in _tests_above(tree.body, line) for f in (_HANDED_OVER, _RANK))


def _tests_above(body: Sequence[ast.stmt], line: int) -> list[ast.expr]:
    """The tests a line runs under: of every `if`/`while` and conditional expression around it, and of
    the early-exit guards (`if not x: return`) before it in each block around it."""
    tests: list[ast.expr] = []
    for st in body:
        if st.lineno > line:
            break
        if (st.end_lineno or st.lineno) < line:
            if isinstance(st, ast.If) and st.body and isinstance(st.body[-1], _EXITS):
                tests.append(st.test)
            continue
        if isinstance(st, (ast.If, ast.While)):
            tests.append(st.test)
        tests += _conditional_tests(st, line)
        blocks = [getattr(st, f, None) for f in ("body", "orelse", "finalbody")]
        blocks += [h.body for h in getattr(st, "handlers", [])] + [c.body for c in getattr(st, "cases", [])]
        for block in blocks:
            if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno):
                tests += _tests_above(block, line)
        break
    return tests


def _conditional_tests(node: ast.AST, line: int) -> list[ast.expr]:
    """The tests of the conditional expressions around `line` in `node`: a walk that enters only the nodes
    whose lines hold it (a node's lines hold its children's), not the whole statement: a class of two
    thousand new lines is otherwise walked whole for each of its lines, at every depth (45 s for one PR)."""
    found: list[ast.expr] = []
    stack = [node]
    while stack:
        here = stack.pop()
        if isinstance(here, ast.IfExp) and here.lineno <= line <= (here.end_lineno or 0):
            found.append(here.test)
        for child in ast.iter_child_nodes(here):
            first = getattr(child, "lineno", None)
            if first is None or first <= line <= (getattr(child, "end_lineno", None) or first):
                stack.append(child)
    return found


_GETATTR = re.compile(r"""getattr\(([\w.]+),\s*['"](\w+)['"](?:,[^()]*)?\)""")


def holding_tests(tree: ast.Module, line: int) -> list[str]:
    """The tests whose true side holds `line` (an `if`/`while` body, a conditional expression's value
    side), as source with `getattr(x, "name", d)` read as `x.name`: the kinds of model a line runs only
    for (`if getattr(provider, "attention_output_gate", False):`). Not a guard or an `else`: a line that
    runs where a kind is absent is no code of that kind."""
    tests: list[ast.expr] = []
    body: Sequence[ast.stmt] = tree.body
    while (st := next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)) is not None:
        held = next((b for b in _blocks(st) if b[0].lineno <= line <= (b[-1].end_lineno or b[-1].lineno)), None)
        if held is None:  # the statement itself: its conditional expressions
            tests += [n.test for n in ast.walk(st) if isinstance(n, ast.IfExp) and _spans(n.body, line)]
            break
        if isinstance(st, (ast.If, ast.While)) and held is st.body:
            tests.append(st.test)
        body = held
    return [_GETATTR.sub(r"\1.\2", ast.unparse(t)) for t in tests]


def _blocks(st: ast.stmt) -> list[list[ast.stmt]]:
    found = [getattr(st, f, None) for f in ("body", "orelse", "finalbody")]
    found += [h.body for h in getattr(st, "handlers", [])] + [c.body for c in getattr(st, "cases", [])]
    return [b for b in found if isinstance(b, list) and b and isinstance(b[0], ast.stmt)]


def _spans(node: ast.expr, line: int) -> bool:
    return node.lineno <= line <= (node.end_lineno or node.lineno)
