#!/usr/bin/env bash
# Run verl-e2e cells for real on a GPU node without network (an air-gapped workstation, a Slurm
# allocation): install a wheel set offline, lay out verl and Bridge as git trees, make a tiny local
# model and GSM8K-shaped data, then `verl-e2e run-cell --backend local` for Level 0 and Level 1.
#
#   tools/offline_node.sh setup WORK WHEELS_DIR VERL_TGZ BRIDGE_TGZ MAKE_ASSETS_PY
#   tools/offline_node.sh run WORK CELL_ID [extra run-cell flags...]
#
# WORK gets site/ (the wheels, put on PYTHONPATH), verl/, Megatron-Bridge/ (3rdparty/Megatron-LM
# inside), cache/ (models/local/tiny-qwen2, datasets/gsm8k) and runs/<CELL_ID>/ (the run dirs).
# Every setting the node needs is a run-cell flag below, nothing is edited by hand.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:?usage: offline_node.sh setup|run WORK ...}
work=${2:?WORK directory}
mkdir -p "$work"
work=$(cd "$work" && pwd)
export PYTHONPATH="$repo/ci:$work/site${PYTHONPATH:+:$PYTHONPATH}"

commit_tree() {  # the driver records both trees' commits: make each a one-commit git repo
  git -C "$1" init -q && git -C "$1" add -A &&
    git -C "$1" -c user.name=verl-e2e -c user.email=verl-e2e@localhost commit -qm "$2"
}

setup() {
  local wheels=$1 verl_tgz=$2 bridge_tgz=$3 make_assets=$4
  python3 -m pip install --quiet --no-index --no-deps --target "$work/site" "$wheels"/*.whl
  rm -rf "$work/verl" "$work/Megatron-Bridge" "$work/unpack"
  mkdir -p "$work/verl" "$work/unpack"
  tar xzf "$verl_tgz" -C "$work/verl"
  tar xzf "$bridge_tgz" -C "$work/unpack"
  mv "$work/unpack/Megatron-Bridge" "$work/Megatron-Bridge"
  mkdir -p "$work/Megatron-Bridge/3rdparty"
  mv "$work/unpack/Megatron-LM" "$work/Megatron-Bridge/3rdparty/Megatron-LM"
  rm -rf "$work/unpack"
  commit_tree "$work/verl" "verl from $(basename "$verl_tgz")"
  commit_tree "$work/Megatron-Bridge" "Megatron-Bridge from $(basename "$bridge_tgz")"
  python3 "$make_assets" "$work/assets"
  mkdir -p "$work/cache/models/local" "$work/cache/datasets/gsm8k"
  rm -rf "$work/cache/models/local/tiny-qwen2"
  cp -r "$work/assets/tiny/qwen2" "$work/cache/models/local/tiny-qwen2"
  cp "$work/assets/data/"*.parquet "$work/cache/datasets/gsm8k/"
  echo "offline_node: set up in $work"
}

run() {
  local cell=$1
  shift
  local level=${cell#L}
  level=${level%%-*}
  python3 -m verl_e2e plan --levels "$level" --family qwen --model local/tiny-qwen2 \
    --out "$work/plan-L$level.json" --format text >/dev/null
  # --num-gpus 1 --gpus 0: one GPU, named (the plan's cells ask for 2); --megatron-lm installed: the
  # wheel set's megatron-core, since verl 1dda039 fails against Bridge's pinned submodule (TypeError in
  # unwrap_model); data.dataloader_num_workers=0 for small hosts. The preflight adds what the node lacks.
  python3 -m verl_e2e run-cell "$work/plan-L$level.json" --cell-id "$cell" --backend local \
    --bridge "$work/Megatron-Bridge" --verl "$work/verl" --cache "$work/cache" --out "$work/runs/$cell" \
    --no-bridge-tests --num-gpus 1 --gpus 0 --megatron-lm installed \
    --hydra data.dataloader_num_workers=0 "$@"
}

case $cmd in
  setup) shift 2; setup "$@" ;;
  run) shift 2; run "$@" ;;
  *) echo "offline_node.sh: unknown command $cmd; expected setup or run" >&2; exit 2 ;;
esac
