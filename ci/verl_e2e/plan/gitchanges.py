"""A Bridge checkout diffed against the merge base: the changed files with everything `plan --repo` knows.

The merge base, not the base branch's tip, is what the PR changed. Besides the paths this yields the
full unified diff (changed lines and hunk scopes), both sides of every changed Python file (cosmetic
changes, exact enclosing functions) and the head's model files (the PR's own bridge registrations).
All blobs come through one `git cat-file --batch` process.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

from verl_e2e.errors import UsageError
from verl_e2e.plan import callsites, gated, importbreak, runtime, users
from verl_e2e.plan.changes import ChangedFile, is_cosmetic_python_change, parse_name_status
from verl_e2e.plan.diffs import FileDiff, parse_unified_diff
from verl_e2e.plan.enrich import with_architectures, with_ast_scopes, with_diff
from verl_e2e.plan.quiet import log_only_change
from verl_e2e.plan.registry import SHARED
from verl_e2e.plan.renames import mentions, renamed_definition, unused, where_named
from verl_e2e.plan.surface import MODELS, shipped


def _all_quoted(f: ChangedFile) -> bool:
    """A modified Python file whose every changed code line holds a string literal."""
    code = [t for t in f.diff_lines or () if t.strip() and not t.lstrip().startswith("#")]
    return f.status == "M" and f.path.endswith(".py") and bool(code) and all(("'" in t or '"' in t) for t in code)


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


def resolve_commit(repo_path: str, rev: str) -> str:
    """The full SHA `rev` names in the checkout (the base as given, to tell whether it is the merge base)."""
    return _resolve(Path(repo_path), rev, "--base").strip()


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
    text = _git(repo, "diff", "-M", "--no-color", "--no-ext-diff", merge_base, head_sha, what="git diff")
    diffs = parse_unified_diff(text)
    py = [f for f in files if f.path.endswith(".py")]
    specs = [f"{merge_base}:{f.old_path or f.path}" for f in py if f.status != "A"]
    specs += [f"{head_sha}:{f.path}" for f in py if f.status != "D"]
    blobs = _blobs(repo, specs)
    old = {f.old_path or f.path: blobs.get(f"{merge_base}:{f.old_path or f.path}") or b"" for f in py}
    new = {f.path: blobs.get(f"{head_sha}:{f.path}") or b"" for f in py}
    small = {f.path for f in py if (d := diffs.get(f.path)) is not None and _may_rename(d.removed, d.added)}
    cosmetic = {
        f.path
        for f in py
        if f.status == "M"
        and is_cosmetic_python_change(old.get(f.path) or None, new.get(f.path) or None, renames=f.path in small)
    }
    verl_reads = set(shipped().verl_attributes)
    for f in py:  # a definition renamed where nothing names either name (renames.py)
        kept = f.status != "M" or f.path in cosmetic or f.path not in small
        renamed = None if kept else renamed_definition(old.get(f.path), new.get(f.path))
        if renamed is not None and unused(repo, merge_base, renamed, verl_reads):
            cosmetic.add(f.path)
    files = [
        replace(
            f,
            cosmetic=f.path in cosmetic,
            named_before=_named_before(repo, merge_base, f),
            unnamed_module=_unnamed_module(repo, merge_base, f),
        )
        for f in files
    ]
    files = with_ast_scopes(with_diff(files, diffs), diffs, old, new)
    files = [  # the trees confirm what the hunks' text suggests (a logging call that opens above a hunk is missed),
        # and decide where every changed line holds a string (a progress call's text, which the text cannot tell)
        replace(f, log_only=not f.cosmetic and log_only_change(old.get(f.path), new.get(f.path)))
        if f.log_only or _all_quoted(f)
        else f
        for f in files
    ]
    files = _with_callers(repo, merge_base, files)
    files = [_import_break(repo, head_sha, f, new.get(f.path), diffs) for f in files]
    wanted = any(f.path.startswith(MODELS) or f.symbols for f in files)
    models = _head_models(repo, head_sha) if wanted else None
    if models:
        files = [_serves(f, new.get(f.path), models) if f.symbols else f for f in files]
    return with_architectures(files, shipped(), models), merge_base, head_sha


def _serves(file: ChangedFile, source: bytes | None, models: dict[str, bytes]) -> ChangedFile:
    """Which architectures' model files alone use the changed code (users.py): never for a name verl
    itself reads off Bridge objects, and a use in the same file counts only in code a recorded cell ran."""
    verl_reads = set(shipped().verl_attributes)  # a method verl calls itself runs whatever model it trains
    names = tuple(dict.fromkeys(n.split(".", 1)[0] if n.rsplit(".", 1)[-1] in verl_reads else n for n in file.symbols))
    recorded = [r.functions[file.path] for r in runtime.shipped() if file.path in r.functions]
    ran = frozenset().union(*recorded) if recorded else None
    return replace(file, serves=users.architectures(file.path, names, source, models, ran))


def _import_break(
    repo: Path, head: str, file: ChangedFile, source: bytes | None, diffs: dict[str, FileDiff]
) -> ChangedFile:
    """The head tree's answer to whether the changed module still imports (importbreak.py)."""
    d = diffs.get(file.path)
    if d is None or file.status == "D" or file.cosmetic or not file.path.startswith("src/"):
        return file
    read = lambda p: _blobs(repo, [f"{head}:{p}"]).get(f"{head}:{p}")  # noqa: E731
    return replace(file, import_break=importbreak.why(file.path, source, d.added_at, read))


def _head_models(repo: Path, head: str) -> dict[str, bytes]:
    """Every Python file under models/ at head: the PR's own bridge registrations and imports."""
    listing = _git(repo, "ls-tree", "-r", "--name-only", head, "--", MODELS, what="git ls-tree")
    paths = [p for p in listing.splitlines() if p.endswith(".py")]
    blobs = _blobs(repo, [f"{head}:{p}" for p in paths])
    return {p: blobs[f"{head}:{p}"] or b"" for p in paths}


RENAME_LINES = 24  # changed lines up to which a file's change is also read as a rename (two more AST walks)
_NAME = re.compile(r"[A-Za-z_]\w*")


def _may_rename(removed: list[str], added: list[str]) -> bool:
    """A small change whose lines pair up, each pair alike but for its names: what a rename looks like."""
    if not removed or len(removed) != len(added) or len(removed) + len(added) > RENAME_LINES:
        return False
    return all(_alike(a.strip(), b.strip()) for a, b in zip(removed, added, strict=True))


def _alike(old: str, new: str) -> bool:
    """Two lines alike but for their names; a definition's header the diff reader took for a removal
    (`del name`, diffs.py) is alike any new header."""
    if old.startswith("del ") and new.startswith(("def ", "async def ", "class ")):
        return True
    return _NAME.sub("x", old) == _NAME.sub("x", new)


MAX_CALLER_LOOKUPS = 16  # files per plan whose callers are looked up (a git grep each): a big PR keeps its speed


def _with_callers(repo: Path, base: str, files: list[ChangedFile]) -> list[ChangedFile]:
    """Where Bridge calls each changed definition from, when no cell takes any of those calls."""
    eligible = [f for f in files if f.status == "M" and f.functions and not f.module_level and f.path.endswith(".py")]
    if not eligible or len(eligible) > MAX_CALLER_LOOKUPS:
        return files
    cache: dict[str, bytes | None] = {}

    def read(path: str) -> bytes | None:
        if path not in cache:
            cache[path] = _blobs(repo, [f"{base}:{path}"]).get(f"{base}:{path}")
        return cache[path]

    index = shipped()
    verl = {i.rsplit(":", 1)[-1] for i in index.verl_imports} | set(index.verl_attributes)
    gates = {(g.path, g.function) for g in gated.GATES}
    ran = runtime.shipped()
    out = []
    for f in files:
        found = callsites.callers(repo, base, f, read=read, ran=ran, gates=gates, verl=verl) if f in eligible else None
        out.append(f if found is None else _caller_record(f, found))
    return out


def _caller_record(file: ChangedFile, found: tuple[callsites.Caller, ...]) -> ChangedFile:
    """The file with its callers, and the layout branches those under a layout condition sit in."""
    listed = tuple((c.path, c.line, c.function, c.how) for c in found)
    skipped = tuple((c.path, c.line, c.skipped) for c in found if c.skipped)
    return replace(
        file, callers=listed, caller_branches=tuple(b for c in found for b in c.branches), caller_skipped=skipped
    )


def _named_before(repo: Path, base: str, file: ChangedFile) -> bool:
    """An added Bridge module whose name the base's sources already mention (a guarded import)."""
    if file.status != "A" or not file.path.startswith("src/megatron/bridge/") or not file.path.endswith(".py"):
        return False
    rest = file.path.removeprefix(MODELS)
    if rest != file.path and "/" in rest and rest.split("/", 1)[0] not in SHARED:
        return False  # a model directory's new file is its family's, whoever names it
    return mentions(repo, base, file.path.rsplit("/", 1)[-1].removesuffix(".py")) != 0


def _unnamed_module(repo: Path, base: str, file: ChangedFile) -> bool:
    """A changed module of a family's model directory (not a package's `__init__`) whose name no other
    source of Bridge holds at the base, and no module verl imports is: nothing imports it, statically or by
    a module path written as a string (Bridge's dynamic imports name the whole path), and the registry
    loads a family's bridges through its package's imports, so no cell loads it. Not shared code (peft/,
    training/, conversion/): a public module there may be what a user's or verl's config names, as
    `lora.type: canonical_lora` came to name peft/canonical_lora.py (dev c170, before Bridge named it)."""
    path = file.old_path or file.path
    rest = path.removeprefix(MODELS)
    if file.status == "A" or rest == path or "/" not in rest or rest.split("/", 1)[0] in SHARED:
        return False
    if not path.endswith(".py"):
        return False
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    if stem == "__init__" or any(m.split(":", 1)[0].rsplit(".", 1)[-1] == stem for m in shipped().verl_imports):
        return False
    found = where_named(repo, base, stem)
    return found is not None and all(p == path for p, _ in found)
