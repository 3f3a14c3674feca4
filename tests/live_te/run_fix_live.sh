#!/usr/bin/env bash
# Issue 14's live acceptance on the GPU machine, after install_te.sh (TE 2.20.2 on PYTHONPATH) and
# a build with the agent, the fp8audit executable and fp8audit_model:
#   cmake --build BUILD --target fp8audit fp8audit_agent fp8audit_model
#   tests/live_te/run_fix_live.sh BUILD OUT [all|correctness|cost]
# prints te_fix_compare.py's table (its exit status: 1 when a row disagrees). `correctness` runs
# the first part only, `cost` the timed part and the table (so a caller can run other GPU work
# beside the first part and nothing beside the second).
# Unpatched and patched runs of every layout against their no-checkpoint twins (8 microbatches x 2
# steps, verify mode), backward inside the autocast, state/scenarios on real TE, the agent on an
# unpatched run and on the unmodified script under `fp8audit run --fix-te` -- these five at once,
# small models sharing the GPU -- then, alone, the 28x7 decoder's time per microbatch patched vs
# unpatched in one process, and with two or more GPUs the same decoder on 2 ranks (torchrun, amax
# all-reduce over the world) with its all-reduces counted (te_fix_2rank.py).
set -uo pipefail
build=$(realpath "$1")
out=$2
phase=${3:-all}
here=$(dirname "$(realpath "$0")")
fix=$here/te_fix.py
mkdir -p "$out"
export FP8AUDIT_MODEL_LIB=$build/lib/libfp8audit_model.so PYTHONWARNINGS=ignore
step() { echo "== $*" >&2; }
fix_run() {  # NAME te_fix.py flags...
  local name=$1
  shift
  python3 "$fix" "$@" >"$out/$name.jsonl" 2>"$out/$name.err"
  echo "$name: te_fix exit $?"
}
if [[ $phase != cost ]]; then
  step "at once: layouts (backward after, inside), state/scenarios, the agent unpatched and --fix-te"
  fix_run fix_after --verify &
  fix_run fix_inside --verify --backward inside --microbatches 4 --steps 1 &
  fix_run fix_scenarios --scenarios --skip-layouts &
  agent() {  # name, extra fp8audit run flags...
    local name=$1
    shift
    "$build/bin/fp8audit" run "$@" --out "$out/$name" --max-rows 0 -- python3 "$fix" --markers \
      --mode unpatched --microbatches 4 --steps 1 >"$out/$name.jsonl" 2>"$out/$name.err"
    echo "$name: fp8audit run exit $?"
    "$build/bin/fp8audit" report "$out/$name" --format json -o "$out/$name.json"
  }
  agent agent_unpatched &
  agent agent_fix_te --fix-te &
  wait
fi
[[ $phase == correctness ]] && exit 0
step "timing (alone)"
fix_run timing --time --skip-layouts
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if ((gpus >= 2)); then
  step "2 ranks: the 28x7 decoder's amax all-reduces and time, patched vs unpatched"
  torchrun --standalone --nproc_per_node 2 "$here/te_fix_2rank.py" >"$out/2rank.jsonl" \
    2>"$out/2rank.err"
  echo "2rank: torchrun exit $?"
fi
extra=()
[[ -s "$out/2rank.jsonl" ]] && extra+=("$out/2rank.jsonl")
python3 "$here/te_fix_compare.py" "$out/fix_after.jsonl" "$out/fix_inside.jsonl" \
  "$out/fix_scenarios.jsonl" "$out/timing.jsonl" ${extra[@]+"${extra[@]}"} \
  --fp8audit "$build/bin/fp8audit" \
  --agent "$out/agent_unpatched.jsonl=$out/agent_unpatched.json" \
  --agent "$out/agent_fix_te.jsonl=$out/agent_fix_te.json" | tee "$out/table.md"
