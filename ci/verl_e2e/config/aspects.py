"""Aspects: what the touched code is about (MoE, MTP, vision, quantization, parallel layout, state, numerics).

Path rules say *where* a change is; aspects say *what* it touches, so a PEFT change that broadcasts
shared-expert adapters across EP ranks gets the expert-parallel and parallelism levels although its path
says only "peft". Each aspect in matrix.yaml is a regular expression searched in a file's changed lines
and in the names of the functions/classes the change sits in (`diffs.py`, `scopes.py`), for files on
verl's surface only. Matching identifiers, not prose: comment lines are left out, so a docstring that
mentions "pipeline" selects nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from verl_e2e.config.globs import PathSet
from verl_e2e.errors import ConfigError

try:  # google-re2 (a core dependency): a DFA, so ten aspects over a 2 MB diff cost milliseconds, not seconds
    import re2 as _re2
except ImportError:  # pragma: no cover - the pure-Python engine gives the same answers, slower
    _re2 = None


def _compile(pattern: str) -> Any:
    """RE2 where the pattern allows it (no backreferences, no lookaround), else Python's engine."""
    re.compile(pattern)  # the error message users see names Python's syntax, which RE2 accepts a subset of
    if _re2 is not None:
        try:
            return _re2.compile(pattern)
        except Exception:
            pass
    return re.compile(pattern)


# the code verl runs to build, convert and adapt the model (Bridge's training package is its own loop)
DEFAULT_PATHS = ["src/megatron/bridge/models/**", "src/megatron/bridge/peft/**", "src/megatron/bridge/utils/**"]
KINDS = ("all", "moe", "vlm", "mtp", "quant", "custom")
_STRING = _compile(r"""\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'""")
# an import names a module; what the change does with it is on the lines that use it
_IMPORT = re.compile(r"^\s*(from\s+[\w.]+\s+)?import\s")
_COMMENT = re.compile(r"^\s*(#|\"\"\"|'''|\*|//)")
# a name declared with a type and no value (`tensor_model_parallel_size: int` in a TypedDict, a parameter on a
# line of its own): it sets nothing; what reads or passes the value is on other lines
_DECLARES = re.compile(r"^\s*[A-Za-z_]\w*\s*:\s*[^=\s:][^=]*?,?\s*$")


@dataclass(frozen=True)
class Aspect:
    """One aspect: its pattern, the levels it selects and the variant kind those levels run."""

    name: str
    why: str
    pattern: Any  # a compiled RE2 (or `re`) pattern: search() -> match with group/start/end
    levels: frozenset[int]
    kind: str = "all"  # which variants of the selected levels apply: "all" or one of KINDS
    paths: PathSet | None = None  # limit to these files (default: every file on verl's surface)
    strings: bool = True  # False: string literals are blanked before matching (names in tables, messages)
    architecture: str | None = None  # a kind only some families have: shared code runs on that kind's family
    lines: str = "all"  # "added": only the lines added to a file that existed
    unless_ran_at: int | None = None  # not when a recorded cell of this level ran every changed function
    when_ran: bool = False  # only where a recorded cell ran the changed code
    declarations: bool = True  # False: a line that only declares a typed name (no value) is not read


def build_aspects(nodes: Sequence[Mapping[str, Any]], where: str) -> tuple[Aspect, ...]:
    """matrix.yaml `aspects:` -> Aspects (the schema has checked types; the patterns compile here)."""
    out = []
    for i, node in enumerate(nodes):
        try:
            pattern = _compile(node["pattern"])
        except re.error as exc:
            raise ConfigError(f"{where}[{i}].pattern: not a regular expression ({exc}); fix the pattern") from None
        paths = PathSet.parse(node.get("paths", DEFAULT_PATHS), f"{where}[{i}].paths")
        levels, kind = frozenset(node["levels"]), node.get("kind", "all")
        strings, arch = node.get("strings", True), node.get("architecture")
        lines, ran_at = node.get("lines", "all"), node.get("unless_ran_at")
        flags = bool(node.get("when_ran", False)), bool(node.get("declarations", True))
        out.append(
            Aspect(node["name"], node["why"], pattern, levels, kind, paths, strings, arch, lines, ran_at, *flags)
        )
    return tuple(out)


def code_lines(lines: Iterable[str]) -> list[str]:
    """Changed lines without comment-only lines and without the text of trailing comments."""
    out = []
    for line in lines:
        if not line.strip() or _COMMENT.match(line):
            continue
        out.append(line.split("  #", 1)[0])
    return out


@dataclass(frozen=True)
class Hit:
    aspect: Aspect
    term: str  # the first text the pattern matched, quoted in the plan
    where: str  # what follows "in the" in a reason: "changed lines" or "name of SCOPE, which encloses the change"
    scope: str = ""  # the enclosing scope whose name matched ("" for a match in the changed lines)


class _Sets:
    """The aspects' patterns as RE2 sets: one pass over a file's code (and one over its scope names)
    says which aspects match, so only those are searched again for the term to quote."""

    def __init__(self, aspects: Sequence[Aspect]) -> None:
        self.code, self.bare, self.names = _re2.Set.SearchSet(), _re2.Set.SearchSet(), _re2.Set.SearchSet()
        for aspect in aspects:
            source = aspect.pattern.pattern
            (self.code if aspect.strings else self.bare).Add(source)
            self.names.Add(source)
        for each in (self.code, self.bare, self.names):
            each.Compile()
        self.by_text = {True: [a for a in aspects if a.strings], False: [a for a in aspects if not a.strings]}


_SETS: dict[int, tuple[Sequence[Aspect], _Sets | None]] = {}


def _sets(aspects: Sequence[Aspect]) -> _Sets | None:
    """RE2 sets for these aspects (kept while the matrix lives), or None where RE2 cannot take them."""
    cached = _SETS.get(id(aspects))
    if cached is not None and cached[0] is aspects:
        return cached[1]
    sets = None
    if _re2 is not None and all(isinstance(a.pattern, _re2._Regexp) for a in aspects):
        try:
            sets = _Sets(aspects)
        except Exception:  # a pattern RE2 compiled alone but not in a set: search one by one
            sets = None
    _SETS[id(aspects)] = (aspects, sets)
    return sets


def _candidates(aspects: Sequence[Aspect], code: str, bare: str, names: str) -> set[int]:
    """Ids of the aspects whose pattern can match this file (all of them without RE2 sets)."""
    sets = _sets(aspects)
    if sets is None:
        return {id(a) for a in aspects}
    found: set[int] = set()
    for text, group, pool in ((code, sets.code, True), (bare, sets.bare, False)):
        found |= {id(sets.by_text[pool][i]) for i in group.Match(text) or ()}
    found |= {id(aspects[i]) for i in sets.names.Match(names) or ()}
    return found


def find(
    aspects: Sequence[Aspect],
    path: str,
    lines: Iterable[str],
    scopes: Sequence[str],
    added: Sequence[str] | None = None,
    *,
    removed: Sequence[str] = (),
    declared: frozenset[str] = frozenset(),
) -> list[Hit]:
    """Every aspect whose pattern matches the file's changed code or the names of its enclosing scopes
    (`added`: the lines the change adds to a file that existed, for aspects that read only those;
    `removed`: the lines it takes away, which `rewritten` aspects compare them with; `declared`: the
    options the whole change declares None, which option aspects do not count where they are handed on).

    With RE2, one set match per text says which aspects can fire, and only those are searched for
    the term: a 3,000-file diff stays well under a second."""
    code = "\n".join(line for line in code_lines(lines) if not _IMPORT.match(line))
    bare = _STRING.sub('""', code)
    names = "\n".join(scopes)
    maybe = _candidates(aspects, code, bare, names)
    # a line the change removes and adds again, indentation and all, moved: the words on it changed nothing
    # (a function moved down its file); only the aspects that compare the two sides read it. Not a line
    # that opens a block: moved, `if self.tp_size == 1:` guards other code (a fix of ETP imports did that)
    moved = {x for x in set(removed) & set(added or ()) if not x.split("  #", 1)[0].rstrip().endswith(":")}
    if moved:
        code = "\n".join(line for line in code_lines(x for x in lines if x not in moved) if not _IMPORT.match(line))
        bare = _STRING.sub('""', code)
    hits = []
    for aspect in aspects:
        if id(aspect) not in maybe or (aspect.paths is not None and not aspect.paths.matches(path)):
            continue
        text = code if aspect.strings else bare
        if not aspect.declarations:
            text = "\n".join(line for line in text.split("\n") if not _DECLARES.match(line))
        if aspect.lines != "all":
            text = "\n".join(code_lines(x for x in added or () if x not in moved))
            text = text if aspect.strings else _STRING.sub('""', text)
        if aspect.lines in ("rewritten", "permuted"):
            compare = rewritten if aspect.lines == "rewritten" else permuted
            term = compare(aspect.pattern, code_lines(removed), code_lines(added or ()))
            if term is not None:
                hits.append(Hit(aspect, term, "changed lines"))
            continue
        m = _setting(aspect.pattern, text, declared) if aspect.lines == "added" else aspect.pattern.search(text)
        if m:
            hits.append(Hit(aspect, m.group(0), "changed lines"))
            continue
        m = aspect.pattern.search(names)
        if m:
            scope = names[names.rfind("\n", 0, m.start()) + 1 : (names.find("\n", m.end()) + 1 or len(names) + 1) - 1]
            hits.append(Hit(aspect, m.group(0), f"name of {scope}, which encloses the change", scope))
    return hits


# an option declared without a value (`logit_dtype: torch.dtype | None = None`, a new field off by default),
# and, where the change declares it so, the same option handed on (`logit_dtype=config.logit_dtype`,
# `"logit_dtype": provider.logit_dtype`): what every step computes stays as it was. Handing on an option
# the change does not declare None may pass a value the callee did not get before, so that still counts.
_NONE = re.compile(r"\b(\w+)(\s*:[^=\n]*=|\s*=|[\"']\s*:)\s*None(?![\w(\[]|\.\w|\s+(if|or|and)\b)")
_HANDED_ON = re.compile(r"\b(\w+)(\s*=|[\"']\s*:)\s*([\w.]+\.)?\1(?![\w(\[]|\.\w|\s+(if|or|and)\b)")


def declared_none(lines: Iterable[str]) -> frozenset[str]:
    """The options these added lines declare without a value (the whole change's: one file declares the
    field, others hand it on)."""
    return frozenset(n.group(1) for n in _NONE.finditer("\n".join(code_lines(lines))))


def _setting(pattern: Any, text: str, declared: frozenset[str] = frozenset()) -> Any:
    """The first match of an option aspect that sets a value: not an option declared None, nor one the
    change declares None and hands on."""
    nones = list(_NONE.finditer(text))
    declared |= {n.group(1) for n in nones}
    unset = [(u.start(), u.end()) for u in nones]
    unset += [(u.start(), u.end()) for u in _HANDED_ON.finditer(text) if u.group(1) in declared]
    for m in pattern.finditer(text):
        if not any(a <= m.start() < b for a, b in unset):
            return m
    return None


def rewritten(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """The first match of `pattern` in an added line whose expression the change rewrote: the text the
    match opens (a call's arguments, a subscript) overlaps what differs from the most similar removed
    line. `torch.cat((q, k, v))` that only gains `.contiguous()` after it is not a rewritten concatenation;
    `torch.cat([up, gate])` from `torch.cat([gate, up])` is. An added line like no removed one is new."""
    for line in added:
        old = max(removed, key=lambda r: SequenceMatcher(None, r, line).ratio(), default="")
        matcher = SequenceMatcher(None, old, line)
        spans = [(j1, j2) for op, _, _, j1, j2 in matcher.get_opcodes() if op != "equal"]
        if matcher.ratio() < 0.5:
            spans = [(0, len(line))]
        for m in pattern.finditer(line):
            reach = _reach(line, m.start(), m.end())
            if any((a < reach and b > m.start()) or (a == b and m.start() <= a <= reach) for a, b in spans):
                return str(m.group(0))
    return None


_TOKEN = re.compile(r"\w+|[^\w\s]")
_CHOICE = re.compile(r"\b(if|else|or|and)\b")
# a statement that adds to a sequence: moved among its siblings, it reorders what the sequence holds
_COLLECTS = re.compile(r"\.(append|extend|insert)\(|^\s*yield\b")
# a call's positional argument on a line of its own that is an item of a container keyed by a string
# (`hf["k"],`): moved, it trades places with a sibling item of the same container, one kind, often one shape
_KEYED_ARGUMENT = re.compile(r"""^\s*[\w.]+\[\s*["'][\w.]+["']\s*\],\s*$""")


def permuted(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """What a change swaps: a moved statement that adds to a sequence (`append(k)` taken from
    before `append(v)` and put after it; git shows the same line removed and added), or an added line
    holding a removed line's tokens in another order (`{"k_proj": v_out, "v_proj": k_out}`), where the
    pattern matches. A swap of same-shaped operands raises nothing. A changed or added token is no swap,
    and neither is one on a line that chooses (`a if c else b`, `x or y`: which branch runs is for the
    layout and record rules, and a fallback order matters only where both exist) nor one of a call's
    arguments (`load(pre_trained, model)`, `cls(out, in)`: the callee's contract, which fails loudly
    where the two differ in kind), bar a keyed item of one container moved among a call's argument lines
    (`hf["k"],` put after `hf["v"],`: two items of one dict, which a QKV mapping takes in that order)."""
    for line in set(removed) & set(added):
        if (_COLLECTS.search(line) or _KEYED_ARGUMENT.match(line)) and pattern.search(line):
            return f"`{line.strip()}` moved"
    crossed = _across_branch(pattern, removed, added) or _returns_exchanged(pattern, removed, added)
    if crossed is not None:
        return crossed
    olds: dict[tuple[str, ...], list[list[str]]] = {}
    for line in removed:
        tokens = _TOKEN.findall(line)
        olds.setdefault(tuple(sorted(tokens)), []).append(tokens)
    for line in added:
        tokens = _TOKEN.findall(line)
        if _CHOICE.search(line):
            continue
        for old in olds.get(tuple(sorted(tokens)), []):
            at = [i for i, (a, b) in enumerate(zip(old, tokens, strict=True)) if a != b]
            if at and not _in_call(tokens, at[0]) and pattern.search(line):
                return f"{old[at[0]]} and {tokens[at[0]]} swapped"
    return _crossed(pattern, removed, added) or _unpacked_reversed(pattern, removed, added)


_BRANCH = re.compile(r"^\s*(elif\b|else\s*:|if\b)")
_STORES = re.compile(r"^\s*(return\b|yield\b|[\w.]+(\[[^\]]*\])?\s*=[^=])")


def _across_branch(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """A statement that stores a value moved to the other side of a branch header (`x = gate` taken
    from under `if is_gate:` and put under `elif is_up:`): which branch stores which value changed,
    while git shows both lines unchanged. Blocks moved whole keep each header above its body."""
    moved = set(removed) & set(added)
    heads = [line for line in moved if _BRANCH.match(line)]
    for line in moved:
        if not _STORES.match(line) or _BRANCH.match(line) or not pattern.search(line):
            continue
        for head in heads:
            if (removed.index(line) < removed.index(head)) != (added.index(line) < added.index(head)):
                return f"`{line.strip()}` moved across `{head.strip()}`"
    return None


_HEADER = re.compile(r"^\s*(def|class|async\s+def)\b|^\s*@")
_UNPACK = re.compile(r"^\s*(\w+)\s*,\s*(\w+)\s*=\s*(\S.*?)\s*$")


def _returns_exchanged(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """Two `return` statements that traded places while their `def` lines stayed (the bodies of
    `_is_gate` and `_is_up` exchanged): each function now answers for the other. A method moved whole
    moves its header too and is no swap; two returns of one block cannot trade places meaningfully."""
    moved = set(removed) & set(added)
    if any(_HEADER.match(line) for line in moved):
        return None
    returns = [line for line in moved if line.lstrip().startswith("return ") and pattern.search(line)]
    returns.sort(key=removed.index)
    for i, first in enumerate(returns):
        for second in returns[i + 1 :]:
            if added.index(first) > added.index(second):
                return f"`{first.strip()}` and `{second.strip()}` returned in each other's place"
    return None


def _unpacked_reversed(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """A removed expression now unpacked into two names that come back in the other order
    (`return torch.chunk(w, 2)` into `up, gate = torch.chunk(w, 2)` and `return gate, up`)."""
    for line in added:
        m = _UNPACK.match(line)
        if m is None or not any(m.group(3) in old for old in removed) or not pattern.search(line):
            continue
        first, second = m.group(1), m.group(2)
        backwards = re.compile(rf"\b{second}\s*,\s*{first}\b")
        if any(backwards.search(other) for other in added if other is not line):
            return f"{first} and {second} unpacked and given back swapped"
    return None


def _crossed(pattern: Any, removed: Sequence[str], added: Sequence[str]) -> str | None:
    """Two lines rewritten in place, each with one token changed, the one taking the other's
    (`"k": k,` / `"v": v,` into `"k": v,` / `"v": k,`): a swap across lines; or one line whose one
    changed token is its sibling's name (`v = v.view(...)` into `v = k.view(...)`)."""
    if len(removed) != len(added):
        return None
    changed: list[tuple[str, str]] = []
    for old_line, new_line in zip(removed, added, strict=True):
        old, new = _TOKEN.findall(old_line), _TOKEN.findall(new_line)
        if len(old) != len(new) or _CHOICE.search(new_line) or not pattern.search(new_line):
            continue
        at = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        if len(at) == 1 and not _in_call(new, at[0]):
            changed.append((old[at[0]], new[at[0]]))
    for a, b in changed:
        if a != b and (b, a) in changed:
            return f"{a} and {b} swapped across lines"
    return next((f"{b} put where {a} was" for a, b in changed if _siblings(a, b)), None)


# names of tensors that have one shape in a model's layers: K and V under grouped-query attention, gate and
# up of a gated MLP (Q is wider than K and V wherever heads are grouped: taken for one, it fails loudly)
_SIBLINGS = ({"k", "v"}, {"key", "value"}, {"gate", "up"}, {"w1", "w3"})


def _siblings(old: str, new: str) -> bool:
    """Whether a token was replaced by its sibling (`v.view(...)` by `k.view(...)`, `k_proj` by `v_proj`):
    a same-shaped tensor taken for another, which loads, exports and steps without an error."""
    was, now = old.lower().split("_"), new.lower().split("_")
    if len(was) != len(now):
        return False
    differ = [(a, b) for a, b in zip(was, now, strict=True) if a != b]
    return len(differ) == 1 and any(set(differ[0]) <= group for group in _SIBLINGS)


def _in_call(tokens: Sequence[str], at: int) -> bool:
    """Whether tokens[at] is an argument of a call: the innermost bracket open before it is `(` after a name."""
    depth = 0
    for i in range(at - 1, -1, -1):
        if tokens[i] in ")]}":
            depth += 1
        elif tokens[i] in "([{":
            if depth == 0:
                return tokens[i] == "(" and i > 0 and bool(re.match(r"\w", tokens[i - 1]))
            depth -= 1
    return False


def _reach(line: str, start: int, end: int) -> int:
    """Where the expression a match opens ends: past the bracket it leaves open, else the match's end."""
    depth = sum(1 if c in "([" else -1 if c in ")]" else 0 for c in line[start:end])
    pos = end
    while depth > 0 and pos < len(line):
        depth += 1 if line[pos] in "([" else -1 if line[pos] in ")]" else 0
        pos += 1
    return pos
