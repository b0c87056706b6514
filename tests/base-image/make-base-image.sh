#!/usr/bin/env bash
# Build the local base image the container tests use in place of the official verl image, which no
# registry here can serve: Debian bookworm (debootstrap, minbase) with Python 3.11, git, a venv at
# /opt/py holding real Ray and pytest, and the megatron-bridge wheel installed in site-packages (the
# "installed Bridge" that a mounted checkout must win against). Wheels are downloaded on the host and
# installed offline in the chroot.
#   usage: make-base-image.sh TAG WHEEL_DIR
set -euo pipefail
tag=$1
wheels=$2
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag already present"
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "debootstrap bookworm into $root (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,git,procps bookworm "$root" >/dev/null
mkdir -p "$root/wheels"
cp "$wheels"/*.whl "$root/wheels/"
# A clean environment: the host's PIP_* settings must not leak into the chroot.
in_root() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 chroot "$root" "$@"; }
in_root /usr/bin/python3 -m venv /opt/py
in_root /opt/py/bin/pip install --quiet --no-index --find-links /wheels ray pytest
# megatron-bridge declares Python >= 3.12; here it is only files on sys.path, never imported for real.
in_root /opt/py/bin/pip install --quiet --no-index --no-deps --ignore-requires-python --find-links /wheels megatron-bridge
rm -rf "$root/wheels" "$root/var/cache/apt/archives/"*.deb
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/opt/py/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' - "$tag" >/dev/null
echo "built $tag"
