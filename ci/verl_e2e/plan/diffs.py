"""Unified diffs (as `git diff`, `git show` or GitHub's API print them) -> what each file's change touches.

A changed line alone says too little: `-U0` shows `return x` but not that it sits in `finalize()`. Each
file therefore keeps, besides its added and removed lines, the *scopes* the change sits in: the function
context git prints after `@@ ... @@`, and every `def`/`class` line a hunk shows above its first change.
`plan --repo` adds the exact enclosing functions from the ASTs of both sides (`scopes.py`); `plan --diff`
works from this text alone, so the plan job can run from the API without a clone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from verl_e2e.errors import UsageError
from verl_e2e.plan import moves
from verl_e2e.plan.anchors import Anchors
from verl_e2e.plan.branches import Branch
from verl_e2e.plan.fields import Assigned, TextScopes
from verl_e2e.plan.hunks import Found, HunkSides
from verl_e2e.plan.importlines import ImportLines
from verl_e2e.plan.methods import ClassParts
from verl_e2e.plan.prose import GoneDefinitions, Prose
from verl_e2e.plan.recorded import Sides

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")
_DEF = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)")
_OTHER_HEADERS = (
    "--- ", "+++ ", "index ", "similarity ", "dissimilarity ", "old mode", "new mode",
    "rename to ", "copy to ", "Binary files ",
)  # fmt: skip
_GIT_HEADER = re.compile(r"^diff --git (\S+) (\S+)$")
_INDEX = re.compile(r"^index ([0-9a-f]{7,40})\.\.[0-9a-f]{7,40}")


@dataclass
class FileDiff:
    """One file's part of a diff. Line numbers are the new side's for added, the old side's for removed."""

    path: str
    old_path: str | None = None
    status: str = "M"
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    added_at: list[int] = field(default_factory=list)
    removed_at: list[int] = field(default_factory=list)
    scopes: dict[str, None] = field(default_factory=dict)  # ordered set of enclosing def/class names
    module_level: bool = False  # a hunk changed lines that no def/class context encloses
    # assignments at module level or in a class body, as the hunks' text shows them (fields.from_text)
    assigned: list[Assigned] = field(default_factory=list)
    unassigned: list[Assigned] = field(default_factory=list)
    found: Found = field(default_factory=Found)  # layout conditions and logging calls the hunks show
    old_blob: str | None = None  # the base file's git blob id (abbreviated as the `index` line gives it)
    anchors: Anchors = field(default_factory=Anchors)  # base lines that stand for the change (anchors.py)
    sides: Sides = field(default_factory=Sides)  # the hunks' text on both sides (recorded.py locates it)
    raw: list[str] = field(default_factory=list)  # a deleted or added file's whole text (moves.py)
    classes: ClassParts = field(default_factory=ClassParts)  # class body or unnamed method (methods.py)
    imports: ImportLines = field(default_factory=lambda: ImportLines(""))  # changed import lines (importlines.py)

    @property
    def branches(self) -> list[Branch]:
        return self.found.branches

    @property
    def log_only(self) -> bool:
        return bool(self.lines) and not self.found.beyond_logging and self.status == "M"

    @property
    def lines(self) -> tuple[str, ...]:
        return (*self.removed, *self.added)

    def status_line(self) -> str:
        if self.status in "RC" and self.old_path:
            return f"{self.status}\t{self.old_path}\t{self.path}"
        return f"{self.status}\t{self.path}"


def _top_level(text: str) -> bool:
    """Unindented code that is not the rest of a bracketed line above (a signature's closing `) -> T:`)."""
    return bool(text) and not text[0].isspace() and not text.startswith((")", "]", "}", "#"))


def _strip_prefix(name: str, prefix: str) -> str:
    name = name.strip().split("\t", 1)[0]
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name[len(prefix) :] if name.startswith(prefix) else name


class _Reader:
    """A small state machine over the diff's lines; one FileDiff per `diff --git` (or `---`/`+++`) header."""

    def __init__(self) -> None:
        self.files: dict[str, FileDiff] = {}
        self.current: FileDiff | None = None
        self.old_no = self.new_no = 0
        self.old_left = self.new_left = 0  # lines the hunk header promised and the body has not shown yet
        self.seen_change = False
        self.hunk_scoped = False
        self.header_scope: str | None = None  # the def git's hunk header names, until the hunk leaves it
        self.text_scopes = TextScopes([])
        self.sides = HunkSides()
        self.prose = Prose()  # docstring lines, which no aspect or rule reads as code
        self.gone = GoneDefinitions()  # module-level definitions removed whole, which no aspect reads

    def start(self, old: str, new: str) -> None:
        self.end_hunk()
        self.current = FileDiff(path=new, old_path=old if old != new else None, status="M" if old == new else "R")
        self.current.imports = ImportLines(new)
        self.files[new] = self.current
        self.old_left = self.new_left = 0

    @property
    def in_hunk(self) -> bool:
        return self.old_left > 0 or self.new_left > 0

    def header(self, line: str) -> bool:
        cur = self.current
        if line.startswith("diff --git "):
            m = _GIT_HEADER.match(line)
            if m:
                self.start(_strip_prefix(m.group(1), "a/"), _strip_prefix(m.group(2), "b/"))
            return True
        if cur is None or self.in_hunk:
            return False
        if line.startswith("new file mode"):
            cur.status = "A"
        elif line.startswith("deleted file mode"):
            cur.status = "D"
        elif _INDEX.match(line):
            cur.old_blob = _INDEX.match(line).group(1)  # type: ignore[union-attr]
            return True
        elif line.startswith(("rename from ", "copy from ")):
            cur.old_path = line.split(" ", 2)[2].strip()
            cur.status = "R" if line.startswith("rename") else "C"
        else:
            return line.startswith(_OTHER_HEADERS)
        return True

    def end_hunk(self) -> None:
        if self.current is not None:
            self.sides.finish(self.current.found)
            self.current.anchors.finish()
            self.current.sides.finish()

    def hunk(self, m: re.Match[str]) -> None:
        assert self.current is not None
        self.end_hunk()
        self.old_no, self.new_no = int(m.group(1)), int(m.group(3))
        self.old_left = int(m.group(2)) if m.group(2) is not None else 1
        self.new_left = int(m.group(4)) if m.group(4) is not None else 1
        self.seen_change = False
        self.prose.reset()
        self.gone.reset()
        self.current.imports.hunk()
        self.text_scopes = TextScopes.of_header(m.group(5) or "")
        # git names the last unindented def or class above the hunk: a class leaves the method unknown
        header = _DEF.match(m.group(5) or "")
        func = "" if header is None else header.group(1)
        func += "." if header and (m.group(5) or "").lstrip().startswith("class") else ""
        self.sides = HunkSides(func)
        context = _DEF.match(m.group(5) or "")
        # git names the def above the hunk, which encloses the change only where no unindented code
        # comes first (a function added after the one named is not in it): decided at the first change
        self.header_scope = context.group(1) if context else None
        self.hunk_scoped = False
        self.current.classes.start(func[:-1] if func.endswith(".") else None)

    def body(self, line: str) -> None:
        cur = self.current
        assert cur is not None
        tag, text = line[:1], line[1:]
        self._assignment(tag, text)
        prose, imported = self._trackers(tag or " ", text) if tag in ("+", "-", " ") or line == "" else (False, False)
        kept = f"# {text.strip()}" if prose else text  # docstring prose is kept as a comment line
        if self.header_scope is not None and not prose and _top_level(text):
            self.header_scope = None  # the hunk is past the named def (or the change starts a new one)
        if tag in ("+", "-") and not self.seen_change and self.header_scope is not None:
            cur.scopes[self.header_scope] = None
            self.hunk_scoped = True
        if tag in ("+", "-") and cur.status in ("A", "D"):
            cur.raw.append(text)
        if tag == "+":
            cur.added.append(kept)
            cur.added_at.append(self.new_no)
            self.new_no += 1
            self.new_left -= 1
            self.seen_change = True
        elif tag == "-":
            cur.removed.append(kept)
            cur.removed_at.append(self.old_no)
            self.old_no += 1
            self.old_left -= 1
            self.seen_change = True
        elif tag == " " or line == "":
            if not self.seen_change:  # a def/class shown above the first change encloses it
                d = _DEF.match(text)
                if d:
                    cur.scopes[d.group(1)] = None
                    self.hunk_scoped = True
            self.old_no += 1
            self.new_no += 1
            self.old_left -= 1
            self.new_left -= 1
        else:  # "\ No newline at end of file" and the like
            return
        if tag in "+-" and not prose:
            d = _DEF.match(text)
            if d:
                cur.scopes[d.group(1)] = None
                self.hunk_scoped = True
            elif not self.hunk_scoped and text.strip() and not imported:
                cur.module_level = True  # (import lines: importlines.py says which are module code)

    def _trackers(self, tag: str, text: str) -> tuple[bool, bool]:
        """Feed one hunk line to the per-file trackers: (docstring prose, part of an import statement)."""
        cur = self.current
        assert cur is not None
        self.sides.add(tag, text, self.new_no if tag == "+" else self.old_no)
        cur.anchors.see(tag, text, self.old_no)
        cur.sides.see(tag, text, self.old_no, self.new_no)
        prose = self.prose.see(tag, text, self.old_no, self.new_no)
        imported = not prose and cur.imports.see(tag, text, self.new_no if tag == "+" else self.old_no)
        cur.classes.see(" " if imported else tag, text, prose)  # an import line is judged apart
        for n, i in enumerate(self.gone.see(tag, text, len(cur.removed))):
            name = _DEF.match(cur.removed[i]) if n == 0 else None  # the header stays a change: `del name`
            cur.removed[i] = f"del {name.group(1)}" if name else f"# {cur.removed[i].strip()}"
        return prose, imported

    def _assignment(self, tag: str, text: str) -> None:
        """Record a module- or class-level assignment on a changed line, then follow the class/def lines."""
        cur = self.current
        found = self.text_scopes.assignment(text) if tag in ("+", "-") and cur is not None else None
        if found is not None and cur is not None:
            where = (self.new_no if tag == "+" else self.old_no, *found)
            (cur.assigned if tag == "+" else cur.unassigned).append(where)
        self.text_scopes.see(text)


def parse_unified_diff(text: str) -> dict[str, FileDiff]:
    """Parse a unified diff into FileDiffs keyed by (new) path; commit headers before it are skipped."""
    reader = _Reader()
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not reader.in_hunk and reader.header(line):
            continue
        m = _HUNK.match(line)
        if reader.in_hunk:
            reader.body(line)
        elif m and reader.current is not None:
            reader.hunk(m)
    reader.end_hunk()
    moves.fold(reader.files, lambda f: (f.status, f.raw), parse_unified_diff)
    return reader.files


def read_diff(location: str) -> dict[str, FileDiff]:
    """Read and parse a diff file given by --diff; refuse one that holds no file headers."""
    try:
        text = Path(location).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(
            f"--diff {location}: cannot read it ({exc.strerror}); pass a unified diff as `git diff` or "
            "GitHub's API (Accept: application/vnd.github.diff) prints it"
        ) from None
    files = parse_unified_diff(text)
    if not files and text.strip():
        raise UsageError(
            f"--diff {location}: no 'diff --git a/PATH b/PATH' header found; pass a unified diff as "
            "`git diff` prints it (not a patch series or a name-status listing)"
        )
    return files
