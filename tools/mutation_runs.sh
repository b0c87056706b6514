#!/usr/bin/env bash
# The real GPU runs behind tests/fixtures/real-runs: Level 0 on Bridge 067f987 as the default settings
# choose (its Bridge functions recorded), then each mutation of tools/mutate_bridge.py committed on the
# checkout, planned from the checkout (`plan --repo`, kept as plan-<name>.txt) and run in the cell it
# should fail. Needs `tools/offline_node.sh setup WORK ... MEGATRON_LM_COMMIT` first.
#
#   tools/mutation_runs.sh WORK [NAME...]     (default: baseline and every mutation)
#
# Besides the mutations: `baseline` (Level 0), `save-resume` (Level 1) and `moe` (Level 0 of the
# qwen3_moe family on the tiny Qwen3-MoE) run the unmodified checkout, recording what each executed.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: mutation_runs.sh WORK [NAME...]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(baseline lora-keyword provider-field save-filter)
bridge="$work/Megatron-Bridge"
export PYTHONPATH="$repo/ci:$work/site${PYTHONPATH:+:$PYTHONPATH}"

for name in "${names[@]}"; do
  started=$(date +%s)
  unset FAMILY MODEL
  if [ "$name" = baseline ] || [ "$name" = save-resume ] || [ "$name" = moe ]; then
    python3 "$repo/tools/mutate_bridge.py" "$bridge" --reset
    cell=L0-lora-ddp-qwen
    [ "$name" = save-resume ] && cell=L1-save-resume-qwen
    if [ "$name" = moe ]; then
      cell=L0-lora-ddp-qwen3_moe
      export FAMILY=qwen3_moe MODEL=local/tiny-qwen3-moe
    fi
    unset VERL_E2E_PLAN_BASE
  else
    python3 "$repo/tools/mutate_bridge.py" "$bridge" "$name" > "$work/diff-$name.txt"
    git -C "$bridge" show HEAD >> "$work/diff-$name.txt"
    cell=$(python3 "$repo/tools/mutate_bridge.py" --list | awk -v n="$name" '$1 == n {print $2}')
    # a mutation of MoE-only code runs on the tiny Qwen3-MoE
    [ "${cell%-qwen3_moe}" != "$cell" ] && export FAMILY=qwen3_moe MODEL=local/tiny-qwen3-moe
    python3 -m verl_e2e plan --repo "$bridge" --base verl-e2e-base --head HEAD > "$work/plan-$name.txt" 2>&1
    export VERL_E2E_PLAN_BASE=verl-e2e-base
  fi
  echo "mutation_runs: $name -> $cell"
  "$repo/tools/offline_node.sh" run "$work" "$cell" --out "$work/runs/$name-$cell" > "$work/log-$name.txt" 2>&1
  echo "mutation_runs: $name: exit $? in $(( $(date +%s) - started )) s"
done
python3 "$repo/tools/mutate_bridge.py" "$bridge" --reset
