"""The verl image: a tag derived from its inputs, then reuse, pull or build (docker SDK).

The tag is a hash of everything that goes into the image: the Dockerfile, the base image reference,
the verl commit and the extra dependencies (pip specs and any wheels handed in). A Bridge pull request
changes none of these, so it never builds: the runner finds the tag locally, or pulls it from the
registry that a previous build pushed to.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from verl_e2e import __version__
from verl_e2e.errors import UsageError, VerlE2EError
from verl_e2e.resources import containers_dir

DEFAULT_EXTRA_PIP = "nvidia-modelopt[torch]"


class ImageError(VerlE2EError):
    """The image could not be found, pulled or built."""

    exit_code = 1


@dataclass(frozen=True)
class ImageInputs:
    base: str
    verl: Path
    verl_commit: str  # full SHA, or a content hash when the verl tree is not a git checkout
    extra_pip: str = DEFAULT_EXTRA_PIP
    wheels: Path | None = None
    repository: str = "verl-e2e"

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update((containers_dir() / "Dockerfile").read_bytes())
        for part in (self.base, self.verl_commit, " ".join(self.extra_pip.split())):
            h.update(b"\0" + part.encode())
        for wheel in sorted(self.wheels.glob("*")) if self.wheels else []:
            h.update(b"\0" + wheel.name.encode() + hashlib.sha256(wheel.read_bytes()).digest())
        return h.hexdigest()

    @property
    def tag(self) -> str:
        return f"{self.repository}:{self.digest()[:16]}"


@dataclass(frozen=True)
class ImageResult:
    tag: str
    image_id: str
    how: Literal["present", "pulled", "built"]
    pushed: bool = False


def verl_commit(verl: Path) -> str:
    """The verl checkout's HEAD, or a hash of its files when it is not a git checkout."""
    if not (verl / "verl").is_dir() and not (verl / "tests").is_dir():
        raise UsageError(f"--verl {verl}: not a verl checkout (no verl/ package); pass a clone of verl-project/verl")
    proc = subprocess.run(["git", "-C", str(verl), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return proc.stdout.strip()
    h = hashlib.sha256()
    for path in sorted(p for p in verl.rglob("*") if p.is_file() and ".git" not in p.parts):
        h.update(str(path.relative_to(verl)).encode() + b"\0" + path.read_bytes())
    return "tree-" + h.hexdigest()[:32]


@contextmanager
def build_context(inputs: ImageInputs) -> Iterator[Path]:
    """A temporary build context: the Dockerfile, verl's source at its commit, the wheels."""
    with tempfile.TemporaryDirectory(prefix="verl-e2e-build-") as tmp:
        ctx = Path(tmp)
        shutil.copy(containers_dir() / "Dockerfile", ctx / "Dockerfile")
        (ctx / "wheels").mkdir()
        for wheel in sorted(inputs.wheels.glob("*.whl")) if inputs.wheels else []:
            shutil.copy(wheel, ctx / "wheels" / wheel.name)
        target = ctx / "verl"
        if inputs.verl_commit.startswith("tree-"):
            shutil.copytree(inputs.verl, target, ignore=shutil.ignore_patterns(".git"))
        else:
            archive = ctx / "verl.tar"
            subprocess.run(
                [
                    "git",
                    "-C",
                    str(inputs.verl),
                    "archive",
                    "--format=tar",
                    "-o",
                    str(archive),
                    inputs.verl_commit,
                ],
                check=True,
                capture_output=True,
            )
            target.mkdir()
            with tarfile.open(archive) as tar:
                tar.extractall(target, filter="data")
            archive.unlink()
        yield ctx


def _sdk_errors() -> Any:
    """The docker SDK's exceptions, imported when an image is handled (not by every CLI command)."""
    import docker.errors  # noqa: PLC0415

    return docker.errors


def _present(client: Any, tag: str) -> Any | None:
    try:
        return client.images.get(tag)
    except _sdk_errors().ImageNotFound:
        return None


DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pin_base(client: Any, base: str, *, pull: bool = True, say: Callable[[str], None] = print) -> str:
    """`name:tag` -> `name:tag@sha256:...`: the image is built from the exact bytes the tag names today,
    and the digest is in its labels (and so in every report), even when matrix.yaml names only a tag."""
    if DIGEST.search(base):
        return base
    try:
        found = client.images.get(base)
    except _sdk_errors().ImageNotFound:
        found = client.images.pull(base) if pull else None
    digests = [d for d in (found.attrs.get("RepoDigests") or [] if found is not None else []) if DIGEST.search(d)]
    if not digests:
        say(f"base {base}: a local image without a registry digest; recorded by its id")
        return base
    pinned = f"{base}@{digests[0].rsplit('@', 1)[1]}"
    say(f"base {base}: pinned to {pinned.rsplit('@', 1)[1][:19]}... (put the digest in matrix.yaml to fix it)")
    return pinned


def ensure_image(
    client: Any,
    inputs: ImageInputs,
    *,
    push: bool = False,
    pull: bool = True,
    say: Callable[[str], None] = print,
) -> ImageResult:
    """Use the image if present, else pull it, else build it; optionally push what was built."""
    tag = inputs.tag
    image = _present(client, tag)
    if image is not None:
        say(f"image {tag}: present locally, nothing to build")
        return ImageResult(tag, image.id, "present")
    if pull and "/" in inputs.repository:
        say(f"image {tag}: pulling")
        try:
            image = client.images.pull(tag)
            return ImageResult(tag, image.id, "pulled")
        except _sdk_errors().APIError as exc:
            say(f"image {tag}: not in the registry ({exc.explanation or exc}); building")
    base = pin_base(client, inputs.base, pull=pull, say=say)
    say(f"image {tag}: building FROM {base} with verl {inputs.verl_commit[:12]}")
    with build_context(inputs) as ctx:
        image_id = _build(client, ctx, tag, replace(inputs, base=base), say)
    pushed = False
    if push:
        _push(client, tag, say)
        pushed = True
    return ImageResult(tag, image_id, "built", pushed)


def _build(client: Any, ctx: Path, tag: str, inputs: ImageInputs, say: Callable[[str], None]) -> str:
    buildargs = {
        "BASE_IMAGE": inputs.base,
        "VERL_COMMIT": inputs.verl_commit,
        "VERL_E2E_VERSION": __version__,
        "EXTRA_PIP": inputs.extra_pip,
    }
    tail: list[str] = []
    image_id = None
    for event in client.api.build(
        path=str(ctx), tag=tag, buildargs=buildargs, rm=True, forcerm=True, decode=True, network_mode="host"
    ):
        if "stream" in event:
            for line in event["stream"].splitlines():
                if line.strip():
                    tail = [*tail, line][-12:]
                    say(f"  {line}")
        if "aux" in event and "ID" in event["aux"]:
            image_id = event["aux"]["ID"]
        if "error" in event:
            detail = " | ".join(tail[-4:])
            raise ImageError(
                f"building {tag} failed: {event['error'].strip()} (last output: {detail}); "
                f"check that the base image {inputs.base} exists and the extra dependencies install"
            )
    if image_id is None:
        image_id = client.images.get(tag).id
    return str(image_id)


def _push(client: Any, tag: str, say: Callable[[str], None]) -> None:
    repository, _, version = tag.rpartition(":")
    for event in client.images.push(repository, tag=version, stream=True, decode=True):
        if "error" in event:
            raise ImageError(f"pushing {tag} failed: {event['error']}; log in to the registry (docker login) first")
        if event.get("status") in ("Pushed", "Layer already exists") or "digest" in str(event.get("aux", "")):
            say(f"  {event.get('status', '')} {event.get('id', '')}".rstrip())


def pullable_ref(client: Any, tag: str) -> str:
    """`repository@sha256:...` for an image the registry knows by digest, else the tag itself."""
    repository = tag.rsplit(":", 1)[0]
    found = _present(client, tag)
    digests = (found.attrs.get("RepoDigests") or []) if found is not None else []
    ours = [d for d in digests if d.startswith(repository + "@") and DIGEST.search(d)]
    return ours[0] if ours else tag
