#!/usr/bin/env bash
# Build causal-conv1d and mamba-ssm on an offline GPU node from their PyPI sdists, for Hopper (sm_90) only,
# and install them into the node's wheel site, for the families with Mamba layers (nemotronh, falcon_h1,
# mamba, hybrid: Megatron-Core's Mamba mixer takes mamba-ssm's Triton SSD kernels and, on its default
# memory-efficient path, causal-conv1d's CUDA functions).
#
#   tools/build_mamba.sh SRC SITE OUT
#
# SRC holds causal_conv1d-*.tar.gz, mamba_ssm-*.tar.gz (or the two wheels an earlier build made, which are
# installed instead of building) and the pure-Python wheels the builds and the import
# need: wheel, setuptools, packaging (build only, kept in OUT/buildsite) and einops (installed). Fetch them on
# a connected machine (PyPI's simple index lists the sdists; `pip download` of an sdist tries to build it):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform any -d SRC \
#     wheel==0.45.1 setuptools==80.9.0 packaging==25.0 einops==0.8.2
# SITE is the directory the node's cells put on PYTHONPATH (tools/offline_node.sh's WORK/site); OUT gets the
# build trees, the wheels and one log per package. Prints "MAMBA IMPORT OK" and "MAMBA SMOKE OK" (forward and
# backward through the three kernel entry points the mixer calls, tools/mamba_smoke.py) when it worked.
#
# Why from source: PyPI has sdists only, and their setup.py fetches a prebuilt wheel from GitHub first (no
# network here, so *_FORCE_BUILD skips that) and otherwise compiles for nine GPU architectures; one is
# enough for a one-kind node. Why not MAMBA_SKIP_CUDA_BUILD: `import mamba_ssm` imports its
# `selective_scan_cuda` extension unconditionally (mamba_ssm 2.3.2).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
src=${1:?usage: build_mamba.sh SRC SITE OUT} site=${2:?SITE} out=${3:?OUT}
arch=${MAMBA_CUDA_ARCH:-90}  # compute capability without the dot: 90 for H100 and H200
# wheels an earlier build made for this kind of node (`tools/node_batch.sh wheels` packs them): installed as
# they are, without nvcc or a compile (about 9 minutes on an H100 node with cells beside it)
prebuilt=("$src"/mamba_ssm-*-linux_x86_64.whl "$src"/causal_conv1d-*-linux_x86_64.whl)
if [ -f "${prebuilt[0]}" ] && [ -f "${prebuilt[1]}" ] && compgen -G "$src/einops-*.whl" >/dev/null; then
  echo "build_mamba: installing the wheels an earlier build made, no compile: ${prebuilt[*]##*/}"
  python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" "${prebuilt[@]}" "$src"/einops-*.whl ||
    { echo "build_mamba: the prebuilt wheels in $src did not install"; exit 1; }
  mkdir -p "$out"
  (cd "$out" && PYTHONPATH="$site" python3 -c "import mamba_ssm, causal_conv1d; print('MAMBA IMPORT OK', mamba_ssm.__version__)") ||
    exit 1
  PYTHONPATH="$site" python3 "$repo/tools/mamba_smoke.py" && echo "MAMBA SMOKE OK"
  exit
fi
for want in causal_conv1d-'*'.tar.gz mamba_ssm-'*'.tar.gz wheel-'*'.whl setuptools-'*'.whl packaging-'*'.whl einops-'*'.whl; do
  compgen -G "$src/$want" >/dev/null || { echo "build_mamba: $src lacks $want (see the header for where to get it)"; exit 1; }
done
mkdir -p "$out/build" "$out/wheels" "$out/buildsite"
t0=$SECONDS
python3 -m pip install -q --no-index --no-deps --target "$out/buildsite" "$src"/wheel-*.whl "$src"/setuptools-*.whl \
  "$src"/packaging-*.whl || { echo "build_mamba: the build wheels in $src did not install"; exit 1; }
export PYTHONPATH="$out/buildsite:$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
export CAUSAL_CONV1D_FORCE_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE TORCH_CUDA_ARCH_LIST="${arch:0:1}.${arch:1}"
export MAX_JOBS=${MAX_JOBS:-8} NVCC_THREADS=${NVCC_THREADS:-2}  # two builds at once on a 16-core node
command -v nvcc >/dev/null || { echo "build_mamba: no nvcc on PATH; the node image needs CUDA's compiler"; exit 1; }
nvcc --version | tail -1
pids=()
for sdist in "$src"/causal_conv1d-*.tar.gz "$src"/mamba_ssm-*.tar.gz; do
  name=$(basename "$sdist" .tar.gz)
  rm -rf "${out:?}/build/$name" && tar xzf "$sdist" -C "$out/build"
  python3 "$repo/tools/mamba_smoke.py" --patch "$out/build/$name/setup.py" "$arch" || exit 1
  (
    cd "$out/build/$name" &&
      python3 -m pip wheel -v --no-build-isolation --no-deps --no-index -w "$out/wheels" . > "$out/$name.log" 2>&1
    echo "build_mamba: $name rc=$? $((SECONDS - t0)) s"
  ) &
  pids+=($!)
done
wait "${pids[@]}"
python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" "$out"/wheels/*.whl "$src"/einops-*.whl \
  || { echo "build_mamba: no wheels to install; see $out/*.log"; tail -20 "$out"/*.log; exit 1; }
echo "build_mamba: installed in $((SECONDS - t0)) s"
(cd "$out" && PYTHONPATH="$site" python3 -c "import mamba_ssm, causal_conv1d; print('MAMBA IMPORT OK', mamba_ssm.__version__)") \
  || exit 1
PYTHONPATH="$site" python3 "$repo/tools/mamba_smoke.py" && echo "MAMBA SMOKE OK"
