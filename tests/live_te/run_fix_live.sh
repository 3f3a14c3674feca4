#!/usr/bin/env bash
# Issue 14's live acceptance on the GPU machine, after install_te.sh (TE 2.20.2 on PYTHONPATH) and
# a build with the agent, the fp8audit executable and fp8audit_model:
#   cmake --build BUILD --target fp8audit fp8audit_agent fp8audit_model
#   tests/live_te/run_fix_live.sh BUILD OUT   # then: te_fix_compare.py (printed at the end)
# Unpatched and patched runs of every layout against their no-checkpoint twins (8 microbatches x 2
# steps, verify mode), backward inside the autocast, state/scenarios on real TE, the agent on an
# unpatched run and on the unmodified script under `fp8audit run --fix-te`, and the 28x7 decoder's
# step time patched vs unpatched in one process. About 10-15 minutes on one H200.
set -uo pipefail
build=$(realpath "$1")
out=$2
here=$(dirname "$(realpath "$0")")
fix=$here/te_fix.py
mkdir -p "$out"
export FP8AUDIT_MODEL_LIB=$build/lib/libfp8audit_model.so PYTHONWARNINGS=ignore
step() { echo "== $*" >&2; }
step "layouts, backward after the autocast"
python3 "$fix" --verify >"$out/fix_after.jsonl" 2>"$out/fix_after.err" || echo "te_fix exit $?"
step "layouts, backward inside the autocast"
python3 "$fix" --verify --backward inside --microbatches 4 --steps 1 \
  >"$out/fix_inside.jsonl" 2>"$out/fix_inside.err" || echo "te_fix exit $?"
step "state/scenarios on TE"
python3 "$fix" --scenarios --skip-layouts \
  >"$out/fix_scenarios.jsonl" 2>"$out/fix_scenarios.err" || echo "te_fix exit $?"
agent() {  # name, extra fp8audit run flags...
  local name=$1
  shift
  step "agent: $name"
  "$build/bin/fp8audit" run "$@" --out "$out/$name" --max-rows 0 -- python3 "$fix" --markers \
    --mode unpatched --microbatches 4 --steps 1 >"$out/$name.jsonl" 2>"$out/$name.err"
  echo "$name: fp8audit run exit $?"
  "$build/bin/fp8audit" report "$out/$name" --format json -o "$out/$name.json"
}
agent agent_unpatched
agent agent_fix_te --fix-te
step "timing"
python3 "$fix" --time --skip-layouts >"$out/timing.jsonl" \
  2>"$out/timing.err" || echo "te_fix exit $?"
python3 "$here/te_fix_compare.py" "$out/fix_after.jsonl" "$out/fix_inside.jsonl" \
  "$out/fix_scenarios.jsonl" "$out/timing.jsonl" \
  --agent "$out/agent_unpatched.jsonl=$out/agent_unpatched.json" \
  --agent "$out/agent_fix_te.jsonl=$out/agent_fix_te.json" | tee "$out/table.md"
