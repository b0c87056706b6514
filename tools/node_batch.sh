#!/usr/bin/env bash
# A batch of cells on a GPU node that can only be reached through small transfers (a lent machine that takes
# a few tens of MiB per call and is given back after a short idle time): the wheel set and sources travel as
# parts of one tar, the batch runs detached, and a poll returns what is there as one tgz.
#
#   tools/node_batch.sh split BUNDLE_DIR PARTS_DIR [MIB]     (here) tar BUNDLE_DIR (wheels/, src/*.tgz,
#                                                            make-tiny-assets.py) into MIB-sized parts + SHA256
#                                                            (src/ may add the Mamba sdists and build wheels:
#                                                            `start` then runs tools/build_mamba.sh after set-up,
#                                                            beside the other cells; the Mamba families' cells
#                                                            run once it is done)
#   tools/node_batch.sh start PARTS_DIR WORK ENTRIES_FILE [FAMILY...]
#                                                            (node) join and check the parts, set WORK up with
#                                                            tools/offline_node.sh, build FAMILY's tiny models
#                                                            (all where none is named), run ENTRIES_FILE's
#                                                            LABEL:MUTATION:CELL[...] lines with
#                                                            tools/parallel_runs.sh; start it with setsid
#   tools/node_batch.sh commits VERL_TGZ BRIDGE_TGZ          the full SHAs the tarballs stand for (verl-<short>.tgz,
#                                                            ...-with-megatron-lm-<short>.tgz), from matrix.yaml's
#                                                            compatibility record: `start` uses them where
#                                                            VERL_COMMIT or MEGATRON_LM_COMMIT is unset
#   tools/node_batch.sh launch PARTS_DIR WORK ENTRIES_FILE [FAMILY...]
#                                                            (node) `start` detached (setsid), from a copy of this
#                                                            checkout in WORK/repo (the lent machine's checkout is
#                                                            replaced by each call), returning at once
#   tools/node_batch.sh check ENTRIES_FILE [FAMILY...]      (here, before the transfer; `launch` runs it too) each
#                                                            entry's fields and family, and each FAMILY, against
#                                                            matrix.yaml: one line per problem, exit 2
#   tools/node_batch.sh order ENTRIES_FILE                  the entries in the order `start` runs them: the Mamba
#                                                            families' (MAMBA_FAMILIES) last, after the build
#   tools/node_batch.sh wheels WORK OUT_DIR [MIB]           (node) the Mamba wheels tools/build_mamba.sh built, as
#                                                            MIB-sized parts (default 15) of one tar in OUT_DIR:
#                                                            joined into a bundle's src/, the next node installs
#                                                            them instead of compiling
#   tools/node_batch.sh poll WORK SECONDS OUT_DIR            (node) wait for the batch up to SECONDS, printing
#                                                            each finished cell's verdict, then pack the run
#                                                            dirs, logs and tiny-model report into OUT_DIR
#
# The parts, not the node, are the durable copy: a node given back loses /tmp and WORK, so `start` takes
# everything from PARTS_DIR and the checkout. WORK must lie outside /tmp for parallel cells (parallel_runs.sh).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
[ -n "$cmd" ] || { echo "node_batch.sh: expected split, start or poll (see the header)" >&2; exit 2; }
shift

split_bundle() {
  local bundle=${1:?BUNDLE_DIR} parts=${2:?PARTS_DIR} mib=${3:-26}
  if [ ! -d "$bundle/wheels" ] || [ ! -d "$bundle/src" ]; then
    echo "node_batch.sh split: $bundle needs wheels/ and src/; lay out the wheel set and the two tarballs there" >&2
    exit 2
  fi
  mkdir -p "$parts" && rm -f "$parts"/part-* "$parts/BUNDLE_SHA"
  tar cf - -C "$bundle" . | split -b "${mib}M" -d -a 2 - "$parts/part-"
  cat "$parts"/part-* | sha256sum | cut -c1-64 > "$parts/BUNDLE_SHA"
  echo "node_batch.sh: $(find "$parts" -name 'part-*' | wc -l) parts of ${mib} MiB in $parts"
}

full_sha() {  # SHORT -> the 40-hex SHA matrix.yaml names that starts with it, or nothing
  [[ $1 =~ ^[0-9a-f]{7,40}$ ]] || return 0
  grep -oE "\b$1[0-9a-f]*\b" "$repo/matrix.yaml" | awk 'length($0) == 40' | head -1
}

commits() {
  # Without them the node's verl copy names no upstream commit and the Bridge tree pins no Megatron-LM, so
  # `--megatron-lm auto` cannot find matrix.yaml's compatibility record and every cell runs the submodule
  # verl 1dda039 cannot run with (seen on the H100, 2026-12-06: every cell failed in unwrap_model)
  local verl=${1:?VERL_TGZ} bridge=${2:?BRIDGE_TGZ} short
  short=$(basename "$verl" .tgz) && short=${short#verl-}
  echo "VERL_COMMIT=$(full_sha "$short")"
  short=$(basename "$bridge" .tgz) && short=${short##*-with-megatron-lm-}
  echo "MEGATRON_LM_COMMIT=$(full_sha "$short")"
}

# the families whose cells need the Mamba kernels (Mamba layers in their models)
MAMBA_FAMILIES=${MAMBA_FAMILIES:-"nemotronh falcon_h1 mamba hybrid"}

mamba_entries() {  # [-v]: the LABEL:MUTATION:CELL:HYDRA:FAMILY[:MODEL] lines on stdin whose FAMILY needs them (-v: the others)
  local keep=1 line family
  [ "${1:-}" = -v ] && keep=0
  while IFS= read -r line; do
    family=$(cut -d: -f5 <<< "$line")
    if [[ " $MAMBA_FAMILIES " == *" $family "* ]]; then [ $keep = 1 ] && echo "$line"; else [ $keep = 0 ] && echo "$line"; fi
  done
  return 0
}

matrix_families() {  # the family names matrix.yaml lists (its `families:` keys), one a line
  awk '/^families:/{f=1;next} f&&/^[^ #]/{f=0} f&&/^  [a-z0-9_]+:[[:space:]]*$/{sub(/:.*/,"");gsub(/ /,"");print}' \
    "$repo/matrix.yaml"
}

check_entries() {  # ENTRIES_FILE [FAMILY...]: each problem as one line on stderr, exit 2 if there is one
  local entries=${1:?ENTRIES_FILE} line n=0 bad=0 count=0 label mutation cell family known fam
  shift
  [ -f "$entries" ] || { echo "node_batch.sh: no entries file $entries" >&2; return 2; }
  known=" $(matrix_families | tr '\n' ' ') "
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    IFS=: read -r label mutation cell _ family _ <<< "$line"
    if [ -z "$label" ] || [ -z "$mutation" ] || [ -z "$cell" ] || [[ ! $label =~ ^[A-Za-z0-9_.-]+$ ]]; then
      echo "node_batch.sh: $entries:$n: expected LABEL:MUTATION:CELL[:HYDRA[:FAMILY[:MODEL]]] with a label of letters, digits, '.', '_' or '-'" >&2
      bad=1
    elif [ -n "$family" ] && [[ $known != *" $family "* ]]; then
      echo "node_batch.sh: $entries:$n: '$family' is no family of matrix.yaml (the fifth field is the family, the sixth the model)" >&2
      bad=1
    fi
    count=$((count + 1))
  done < "$entries"
  for fam in "$@"; do
    [[ $known == *" $fam "* ]] || { echo "node_batch.sh: '$fam' (a family to build) is no family of matrix.yaml" >&2; bad=1; }
  done
  [ $bad = 0 ] || return 2
  echo "node_batch.sh: $entries: $count entries, ${#} families to build: ok"
}

start_batch() {
  local parts=${1:?PARTS_DIR} work=${2:?WORK} entries=${3:?ENTRIES_FILE}
  shift 3
  local logs="$work/batch" unpacked="$work/bundle"
  mkdir -p "$logs"
  rm -f "$logs/done"
  {
    date -u
    if [ ! -d "$unpacked/wheels" ]; then
      local want got
      want=$(cat "$parts/BUNDLE_SHA") got=$(cat "$parts"/part-* | sha256sum | cut -c1-64)
      if [ "$want" != "$got" ]; then
        echo "node_batch.sh: the parts join to $got, expected $want: a part is missing or short; send it again"
        touch "$logs/done"
        exit 1
      fi
      mkdir -p "$unpacked" && cat "$parts"/part-* | tar xf - -C "$unpacked"
    fi
    local t0=$SECONDS verl bridge
    verl=$(find "$unpacked/src" -name 'verl-*.tgz' | head -1)
    bridge=$(find "$unpacked/src" -name 'megatron-bridge-*.tgz' | head -1)
    local line
    while read -r line; do
      [ -z "$(printenv "${line%%=*}")" ] && export "${line?}"
    done < <(commits "$verl" "$bridge")
    echo "node_batch: verl ${VERL_COMMIT:-unknown}, Megatron-LM pin ${MEGATRON_LM_COMMIT:-unknown}"
    if [ ! -d "$work/site" ]; then
      SKIP_TINY=1 bash "$repo/tools/offline_node.sh" setup "$work" "$unpacked/wheels" "$verl" "$bridge" \
        "$unpacked/make-tiny-assets.py" ${MEGATRON_LM_COMMIT:+"$MEGATRON_LM_COMMIT"}
      echo "SETUP rc=$? $((SECONDS - t0)) s"
    fi
    # the Mamba-layer families' kernels (tools/build_mamba.sh: from the bundle's sdists, or the wheels an
    # earlier node built), beside the tiny models and the other cells: the build takes minutes, and only
    # the Mamba families' cells wait for it (NODE_BUILD_MAMBA=0 leaves it out)
    local build=""
    if [ "${NODE_BUILD_MAMBA:-1}" != 0 ] && compgen -G "$unpacked/src/mamba_ssm-*" >/dev/null &&
      [ ! -e "$work/mamba/installed" ]; then
      (
        t0=$SECONDS
        if bash "$repo/tools/build_mamba.sh" "$unpacked/src" "$work/site" "$work/mamba" > "$logs/mamba.log" 2>&1; then
          mkdir -p "$work/mamba" && touch "$work/mamba/installed" && echo "MAMBA rc=0 $((SECONDS - t0)) s"
        else
          echo "MAMBA rc=1 $((SECONDS - t0)) s (the Mamba families' cells will stop in the preflight; see batch/mamba.log)"
        fi
      ) &
      build=$!
    fi
    t0=$SECONDS
    local only=()
    for fam in "$@"; do only+=(--family "$fam"); done
    PYTHONPATH="$repo/ci:$work/site:$work/Megatron-Bridge/src" python3 "$repo/tools/make_tiny_model.py" "$work/cache/models/tiny" \
      --tokenizer "$work/assets/tiny/qwen2" "${only[@]}" --report "$work/tiny-models.json" > "$logs/tiny.log" 2>&1
    local tiny_rc=$?
    echo "TINY rc=$tiny_rc $((SECONDS - t0)) s"
    if [ "$tiny_rc" = 2 ]; then  # bad input: no model was built, so every cell that needs one would stop
      echo "node_batch.sh: the tiny builder refused its arguments (batch/tiny.log); no cell started"
      touch "$logs/done"
      exit 2
    fi
    local plain=() mamba=()
    mapfile -t plain < <(grep -v '^\s*\(#\|$\)' "$entries" | mamba_entries -v)
    mapfile -t mamba < <(grep -v '^\s*\(#\|$\)' "$entries" | mamba_entries)
    # the two groups overlap: the Mamba cells start once the build is done, beside what is left of the
    # others (parallel_runs.sh counts the RAM the running cells hold when it starts, so the second group
    # takes only the slots that fit; MAMBA_PARALLEL caps it further)
    local others=""
    if [ ${#plain[@]} -gt 0 ]; then bash "$repo/tools/parallel_runs.sh" "$work" "${plain[@]}" & others=$!; fi
    if [ -n "$build" ]; then wait "$build"; fi
    if [ ${#mamba[@]} -gt 0 ]; then
      MAX_PARALLEL=${MAMBA_PARALLEL:-${MAX_PARALLEL:-6}} bash "$repo/tools/parallel_runs.sh" "$work" "${mamba[@]}"
    fi
    if [ -n "$others" ]; then wait "$others"; fi
    echo "BATCH DONE"
    date -u
  } > "$logs/batch.log" 2>&1
  touch "$logs/done"
}

launch_batch() {
  local parts=${1:?PARTS_DIR} work=${2:?WORK} entries=${3:?ENTRIES_FILE}
  shift 3
  [ -f "$entries" ] || { echo "node_batch.sh launch: no entries file $entries" >&2; exit 2; }
  check_entries "$entries" "$@" >/dev/null || exit 2  # before the node's time goes into a batch that cannot run
  mkdir -p "$work" && work=$(cd "$work" && pwd)
  rm -rf "$work/repo" && mkdir -p "$work/repo"
  local part
  for part in ci containers tools matrix.yaml pyproject.toml; do
    [ -e "$repo/$part" ] && cp -r "$repo/$part" "$work/repo/"
  done
  cp "$entries" "$work/entries"
  (setsid nohup bash "$work/repo/tools/node_batch.sh" start "$parts" "$work" "$work/entries" "$@" \
    > "$work/start.log" 2>&1 < /dev/null &)
  echo "node_batch.sh: started in $work from $work/repo; follow it with: tools/node_batch.sh poll $work SECONDS OUT_DIR"
}

pack_wheels() {
  local work=${1:?WORK} out=${2:?OUT_DIR} mib=${3:-15}
  if ! compgen -G "$work/mamba/wheels/*.whl" >/dev/null; then
    echo "node_batch.sh wheels: $work/mamba/wheels has no wheels; run tools/build_mamba.sh (node_batch.sh start) first" >&2
    exit 2
  fi
  mkdir -p "$out"
  tar cf - -C "$work/mamba/wheels" . | split -b "${mib}M" -d -a 1 - "$out/mamba-wheels.tar.part-"
  ls -l "$out"/mamba-wheels.tar.part-*
}

poll_batch() {
  local work=${1:?WORK} limit=${2:?SECONDS} out=${3:?OUT_DIR} t0=$SECONDS
  local logs="$work/batch"
  while [ $((SECONDS - t0)) -lt "$limit" ] && [ ! -e "$logs/done" ]; do
    sleep 20
    echo "--- $((SECONDS - t0)) s: $(tail -1 "$logs/batch.log" 2>/dev/null | cut -c1-160)"
  done
  [ -e "$logs/done" ] && echo "BATCH FINISHED"
  for verdict in "$work"/runs/*/verdict.json; do
    [ -e "$verdict" ] || continue
    python3 - "$verdict" <<'PY'
import json, sys
from pathlib import Path
v = json.loads(Path(sys.argv[1]).read_text())
print(Path(sys.argv[1]).parent.name, v.get("result"), v.get("failure_class"), v.get("duration_s"), (v.get("exception") or "")[:160])
PY
  done
  mkdir -p "$out"
  local what=()
  for p in runs tiny-models.json batch; do [ -e "$work/$p" ] && what+=("$p"); done
  for log in "$work"/log-*.txt; do [ -e "$log" ] && what+=("$(basename "$log")"); done
  tar czf "$out/batch-$(date -u +%H%M%S).tgz" -C "$work" "${what[@]}" && ls -l "$out"
}

case $cmd in
  split) split_bundle "$@" ;;
  start) start_batch "$@" ;;
  poll) poll_batch "$@" ;;
  commits) commits "$@" ;;
  wheels) pack_wheels "$@" ;;
  launch) launch_batch "$@" ;;
  check) check_entries "$@" || exit 2 ;;
  order) grep -v '^\s*\(#\|$\)' "${1:?ENTRIES_FILE}" | mamba_entries -v; grep -v '^\s*\(#\|$\)' "$1" | mamba_entries ;;
  *) echo "node_batch.sh: unknown command $cmd; expected split, start, launch, check, commits, order, wheels or poll" >&2; exit 2 ;;
esac
