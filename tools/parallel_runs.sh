#!/usr/bin/env bash
# Several one-GPU cells at once on one node, each with its own Ray cluster, /tmp, scratch and Bridge tree
# (`tools/offline_node.sh setup` first). Each entry is LABEL:MUTATION:CELL[:HYDRA,HYDRA...[:FAMILY[:MODEL]]]:
#   MUTATION  `-` runs WORK/Megatron-Bridge as it is; a name from tools/mutate_bridge.py runs that
#             mutation committed in its own worktree (WORK/bridges/LABEL), planned from its diff
#   CELL      the cell id to run (its level comes from the id), on FAMILY/MODEL (default llama: SmolLM2)
#   HYDRA     extra overrides for that cell (comma-separated), e.g. actor_rollout_ref.actor.optim.lr=0.0
#   FAMILY    the family to plan (default $FAMILY); MODEL its checkpoint under the cache (default: the one
#             offline_node.sh run picks for that family, else $MODEL), e.g. l0-gemma:-:L0-lora-ddp-gemma::gemma
#
#   STAGGER=40 GPU_SHARE=0.1 MAX_PARALLEL=6 tools/parallel_runs.sh WORK l0:-:L0-lora-ddp-llama l5:-:L5-learning-signal-llama
#
# Cells start STAGGER seconds apart, each rollout takes GPU_SHARE of the GPU and KV_CACHE_BYTES of KV cache
# (fixed, so vLLM does not size it from a free-memory measurement the other cells disturb). Every cell's run dir
# is WORK/runs/LABEL and its console output WORK/log-LABEL.txt; the script waits for all of them and
# prints one line per cell: label, exit code, seconds. AGENT_WORKERS and REWARD_WORKERS (default 2 each)
# set verl's agent-loop and reward workers per cell, CELL_RAM_GIB the host RAM a cell is counted at.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: parallel_runs.sh WORK LABEL:MUTATION:CELL[:HYDRA,...] ...}
shift
[ $# -gt 0 ] || { echo "parallel_runs.sh: name at least one LABEL:MUTATION:CELL entry" >&2; exit 2; }
work=$(cd "$work" && pwd)
export PYTHONPATH="$repo/ci:$work/site${PYTHONPATH:+:$PYTHONPATH}"
export FAMILY=${FAMILY:-llama} MODEL=${MODEL:-}
stagger=${STAGGER:-40}
share=${GPU_SHARE:-0.1}
kv=${KV_CACHE_BYTES:-4294967296}  # 4 GiB of KV cache per cell (Level 5's 256 answers of 192 tokens need ~1 GiB on SmolLM2)
max=${MAX_PARALLEL:-6}  # cells running at once; the next one starts when one ends
base="$work/Megatron-Bridge"

# Host RAM bounds the cells too: every cell's Ray runs its own memory monitor, which kills a worker
# when the *node* passes 95 %, so one cell too many loses them all (on the H200, 16 cores and 128 GiB,
# nine SmolLM2 and tiny-model cells at once had six workers killed in the same second). A cell takes
# about CELL_RAM_GIB of RAM at its peak (Ray, the trainer with actor, reference and critic, vLLM's
# three processes, the reward workers); cells start only while that much is available per cell, measured
# when the script starts: run one parallel_runs.sh per node.
# 9 cells overran 128 GiB, and so did 7 (Ray's monitor read 119.7 of 125.85 GB: about 17 GiB each at peak)
cell_ram=${CELL_RAM_GIB:-20}
avail_gib=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo 2>/dev/null || echo 0)
if [ "${avail_gib:-0}" -gt 0 ]; then
  fits=$(( avail_gib / cell_ram )); [ "$fits" -ge 1 ] || fits=1
  if [ "$fits" -lt "$max" ]; then
    echo "parallel_runs.sh: $avail_gib GiB of RAM available, about $cell_ram GiB per cell (CELL_RAM_GIB): $fits at once instead of $max" >&2
    max=$fits
  fi
fi

# verl names the socket its trainer sends weights to the rollout through after the Ray job id
# (/tmp/rl-colocate-zmq-<job id>-replica-0-rank-0.sock), and every cell's own Ray cluster numbers its
# jobs from 01000000: two cells at once bind the same path, and one cell's rollout gets the other's
# weights (seen on the H200: a SmolLM2 cell was sent the tiny Qwen2's 256-wide tensors). So each cell
# gets a private /tmp: a mount namespace with WORK/tmp/LABEL bound on /tmp, which needs WORK and this
# repository outside /tmp and `unshare` (root, or user namespaces). Where that cannot be had, one at a time.
isolate_with=()
if [ "$max" -gt 1 ]; then
  case "$work/:$repo/" in
    /tmp/*|*:/tmp/*) ;;
    *) for way in "--mount" "--user --map-root-user --mount"; do
         # shellcheck disable=SC2086  # the options are words
         if unshare $way --propagation private true 2>/dev/null; then
           read -r -a isolate_with <<< "unshare $way --propagation private"; break
         fi
       done ;;
  esac
  if [ ${#isolate_with[@]} -eq 0 ]; then
    echo "parallel_runs.sh: cells cannot get a private /tmp here (WORK or the repository under /tmp, or no unshare); running one at a time" >&2
    max=1
  fi
fi
python3 "$repo/tools/mutate_bridge.py" "$base" --reset  # marks the unmodified commit (branch verl-e2e-base)
mkdir -p "$work/bridges" "$work/runs"

prepare_tree() {  # LABEL MUTATION -> the Bridge tree this entry runs
  local label=$1 mutation=$2 tree="$work/bridges/$1"
  if [ "$mutation" = - ]; then echo "$base"; return; fi
  git -C "$base" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
  git -C "$base" worktree add --detach -q "$tree" verl-e2e-base >&2
  python3 "$repo/tools/mutate_bridge.py" "$tree" "$mutation" > "$work/diff-$label.txt" || return 1
  echo "$tree"
}

declare -A pids started
started0=$(date +%s)
for entry in "$@"; do
  IFS=: read -r label mutation cell hydra family model <<< "$entry"
  if [ -z "$family" ]; then family=$FAMILY model=$MODEL; fi  # an empty MODEL: offline_node.sh's pick for the family
  if [ -z "$label" ] || [ -z "$mutation" ] || [ -z "$cell" ]; then
    echo "parallel_runs.sh: $entry: expected LABEL:MUTATION:CELL[:HYDRA,...]" >&2; exit 2
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$max" ]; do wait -n; done
  tree=$(prepare_tree "$label" "$mutation") || { echo "parallel_runs.sh: $label: mutation $mutation failed" >&2; continue; }
  # each cell's rollout takes its share of the GPU and a fixed KV cache: vLLM 0.24 sizes the cache by
  # profiling the GPU's free memory, which fails ("Error in memory profiling ... other processes release
  # GPU memory") or finds no room when another cell frees or takes memory meanwhile; a fixed
  # kv_cache_memory_bytes skips that measurement. REWARD_WORKERS reward workers and AGENT_WORKERS
  # agent-loop workers instead of eight each (host memory: each is a Ray actor process that imports verl and torch;
  # verl's own fully-async example runs two agent-loop workers).
  extra=(--hydra "actor_rollout_ref.rollout.gpu_memory_utilization=$share"
         --hydra "++actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=$kv" --hydra "reward.num_workers=${REWARD_WORKERS:-2}"
         --hydra "actor_rollout_ref.rollout.agent.num_workers=${AGENT_WORKERS:-2}")
  IFS=, read -r -a overrides <<< "${hydra:-}"
  for o in "${overrides[@]}"; do [ -n "$o" ] && extra+=(--hydra "$o"); done
  plan_base=()
  [ "$mutation" != - ] && plan_base=(VERL_E2E_PLAN_BASE=verl-e2e-base)
  rm -rf "$work/runs/$label"
  rm -f "$work/exit-$label"
  isolate=()
  if [ ${#isolate_with[@]} -gt 0 ]; then
    mkdir -p "$work/tmp/$label"
    # shellcheck disable=SC2016  # $0 and $@ belong to the inner shell
    isolate=("${isolate_with[@]}" bash -c 'mount --bind "$0" /tmp && exec "$@"' "$work/tmp/$label")
  fi
  (
    "${isolate[@]}" env "${plan_base[@]}" BRIDGE="$tree" FAMILY="$family" MODEL="$model" "$repo/tools/offline_node.sh" run "$work" "$cell" \
      --out "$work/runs/$label" "${extra[@]}" > "$work/log-$label.txt" 2>&1
    echo "$? $(( $(date +%s) - started0 ))" > "$work/exit-$label"
  ) &
  pids[$label]=$!
  started[$label]=$(date +%s)
  echo "parallel_runs: started $label ($cell, ${mutation/#-/unmodified}) pid ${pids[$label]}"
  sleep "$stagger"
done
wait
for label in "${!pids[@]}"; do
  read -r code ended < "$work/exit-$label" || { code="?"; ended="?"; }
  echo "parallel_runs: $label exit $code (started $(( started[$label] - started0 )) s in, ended $ended s in)"
done
