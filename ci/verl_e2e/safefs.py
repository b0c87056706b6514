"""The host's side of the trust boundary: files that came out of a cell are data, never paths to follow.

PR code runs inside the cell and can write anything into the directory it is given: symlinks to the
runner's secrets, hard links, FIFOs, a `verdict.json` of its own. So the container writes into a
scratch directory, and the host copies out of it only the files a run dir has (a fixed list of
names), only regular files with one link, opened with O_NOFOLLOW, size-capped, into a run dir the
host made. Every file the host writes goes through a new temporary name opened with
O_CREAT|O_EXCL|O_NOFOLLOW and is renamed into place, so a link planted under that name is never
written through.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

JSON_LIMIT = 64 << 20  # a record larger than this is not one the driver wrote
LOG_LIMIT = 4 << 30
CHUNK = 1 << 20
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class UnsafeFileError(Exception):
    """A file from a cell that is not a plain file of the expected kind (the message says why)."""


def write_text(path: Path, text: str) -> None:
    """Write atomically; never through a link or onto a file someone prepared under the temporary name."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        tmp.replace(path)  # rename replaces a planted link itself, it does not follow it
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def open_regular(path: Path, limit: int) -> int:
    """A read-only descriptor of `path` if it is a regular file with one link, not a link, within `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(f"{path.name} is a symbolic link") from None
        raise
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "not a regular file"
    elif info.st_nlink != 1:
        problem = f"a hard link ({info.st_nlink} links)"
    elif info.st_size > limit:
        problem = f"{info.st_size} bytes, over the {limit}-byte limit"
    if problem:
        os.close(fd)
        raise UnsafeFileError(f"{path.name} is {problem}")
    return fd


def read_text(path: Path, limit: int = JSON_LIMIT) -> str:
    fd = open_regular(path, limit)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(limit + 1).decode("utf-8", errors="replace")


def copy_out(scratch: Path, out: Path, names: Iterable[str]) -> list[str]:
    """Copy the named files from the cell's scratch dir into the host's run dir; returns the problems.

    A name that is missing is simply not copied (a run that stopped early); one that is unsafe is
    skipped and reported, so the verdict can say the run dir was tampered with.
    """
    problems = []
    for name in names:
        if "/" in name or name in ("", ".", ".."):
            problems.append(f"{name!r} is not a file name")
            continue
        src = scratch / name
        try:
            fd = open_regular(src, JSON_LIMIT if name.endswith(".json") else LOG_LIMIT)
        except FileNotFoundError:
            continue
        except (UnsafeFileError, OSError) as exc:
            problems.append(f"{name}: {exc}; not copied")
            continue
        tmp = out / f".{name}.{secrets.token_hex(6)}.tmp"
        dst = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644)
        with os.fdopen(fd, "rb") as source, os.fdopen(dst, "wb") as target:
            while chunk := source.read(CHUNK):
                target.write(chunk)
        tmp.replace(out / name)  # over the host's own placeholder (phases.json), never through a link
    return problems
