#!/usr/bin/env bash
# Issue 13's live acceptance on the GPU machine, after install_te.sh (TE on PYTHONPATH): every
# layout of te_counts.py under `fp8audit run --probe all` with microbatch markers (TE's own counter,
# the te-call probe, the Python hook and the CUPTI probe in one trace, backward after and inside
# the autocast), the same with NVTE_UNFUSED_FP8_UPDATE=1 (only the Python hook can count), the
# default probe choice without markers (auto: no CUPTI on a TE job), and te_profile.py
# (torch.profiler for two microbatches) alone and under `fp8audit run`. Then probes_compare.py
# prints the table and writes OUT/rows.jsonl; its exit status is this script's (1: a row
# disagrees). About 3 minutes.
# Usage: run_probes_live.sh BUILD_DIR OUT
set -uo pipefail
build=$(realpath "$1")
out=$2
here=$(dirname "$(realpath "$0")")
fp8audit=$build/bin/fp8audit
dump=$build/bin/agent_trace_events
mkdir -p "$out"
: >"$out/runs.jsonl"
export PYTHONWARNINGS=ignore
run() {  # NAME [fp8audit run flags...] -- SCRIPT [ARGS...]
  local name=$1 flags=()
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  local start=$SECONDS
  "$fp8audit" run --out "$out/$name" --max-rows 0 ${flags[@]+"${flags[@]}"} -- python3 "$@" \
    >"$out/$name.jsonl" 2>"$out/$name.err"
  local rc=$?
  "$dump" "$out/$name"/*.fp8trace >"$out/$name.events.jsonl"
  "$fp8audit" report "$out/$name" --format json -o "$out/$name.report.json" 2>/dev/null
  echo "{\"run\": \"$name\", \"exit\": $rc, \"seconds\": $((SECONDS - start))}" | tee -a "$out/runs.jsonl"
}
run all_after --probe all -- "$here/te_counts.py" --markers
run all_inside --probe all -- "$here/te_counts.py" --markers --backward inside
export NVTE_UNFUSED_FP8_UPDATE=1
run unfused --probe all -- "$here/te_counts.py" --markers
unset NVTE_UNFUSED_FP8_UPDATE
run auto -- "$here/te_counts.py"
python3 "$here/te_profile.py" >"$out/profile_plain.jsonl" 2>"$out/profile_plain.err"
echo "{\"run\": \"profile_plain\", \"exit\": $?}" | tee -a "$out/runs.jsonl"
run profile -- "$here/te_profile.py"
python3 "$here/probes_compare.py" "$out" --fp8audit "$fp8audit" --jsonl "$out/rows.jsonl"
