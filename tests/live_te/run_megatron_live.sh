#!/usr/bin/env bash
# Issue 19's live Megatron-core and HF Accelerate runs on the GPU machine, after device_setup.sh's
# exports (TE and megatron-core on PYTHONPATH) and a build with the fp8audit executable:
#   tests/live_te/run_megatron_live.sh BUILD OUT [correctness|cost|all|hf-agent|precision|cost-agent]
# correctness, small models sharing the GPU at once: every megatron_live.py row unpatched (with
# --diagnose) and patched, each against its no-recompute twin; the unmodified script under
# `fp8audit run` and `fp8audit run --fix-te` for some rows (the agent's counts, JSON reports);
# hf_accelerate_live.py (torch.utils.checkpoint, reentrant and not, unpatched and patched), and
# the same script under `fp8audit run` and `fp8audit run --fix-te` (hf_agent_*: the audit's
# recompute check; NAME.rc holds the run's exit status).
# precision: the TE-attention rows (selective core_attn through Megatron's own checkpoint, with and
# without FP8 attention) unpatched and patched against their twins, and under `fp8audit run` with
# and without --fix-te (prec_*: report and exit status, for megatron_compare.py --precision-agent).
# cost, alone: a mid-size model's step time with the patch toggled between rounds in one process;
# cost-agent: the same model under `fp8audit run`, the agent's recording toggled between rounds.
set -uo pipefail
build=$(realpath "$1")
out=$(realpath -m "$2")
phase=${3:-all}
here=$(dirname "$(realpath "$0")")
mkdir -p "$out"
export PYTHONWARNINGS=ignore FP8AUDIT_MODEL_LIB=$build/lib/libfp8audit_model.so
mc() {  # NAME megatron_live.py arguments...
  local name=$1
  shift
  timeout "${ROW_TIMEOUT:-420}" python3 "$here/megatron_live.py" "$@" >"$out/$name.jsonl" \
    2>"$out/$name.err"
  echo "$name: exit $?"
}
agent() {  # NAME FLAGS ROW: the unmodified script under fp8audit run FLAGS
  local name=$1 flags=$2 row=$3
  # shellcheck disable=SC2086
  timeout "${ROW_TIMEOUT:-420}" "$build/bin/fp8audit" run $flags --max-rows 0 --out "$out/$name" \
    -- python3 "$here/megatron_live.py" --row "$row" --mode hook --no-twin >"$out/$name.jsonl" \
    2>"$out/$name.err"
  echo "$name: fp8audit run exit $?"
  "$build/bin/fp8audit" report "$out/$name" --format json -o "$out/$name.json" 2>>"$out/$name.err"
}
hf_agent() {  # NAME FLAGS CHECKPOINT: hf_accelerate_live.py --mode hook under fp8audit run FLAGS
  local name=$1 flags=$2 checkpoint=$3
  # shellcheck disable=SC2086
  timeout "${ROW_TIMEOUT:-420}" "$build/bin/fp8audit" run $flags --max-rows 0 --out "$out/$name" \
    -- python3 "$here/hf_accelerate_live.py" --checkpoint "$checkpoint" --mode hook \
    >"$out/$name.jsonl" 2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  echo "$name: fp8audit run exit $(cat "$out/$name.rc")"
  "$build/bin/fp8audit" report "$out/$name" --format json -o "$out/$name.json" 2>>"$out/$name.err"
}
precision_agent() {  # NAME FLAGS ROW: megatron_live.py --mode hook under fp8audit run FLAGS
  local name=$1 flags=$2 row=$3
  # shellcheck disable=SC2086
  timeout "${ROW_TIMEOUT:-420}" "$build/bin/fp8audit" run $flags --max-rows 0 --out "$out/$name" \
    -- python3 "$here/megatron_live.py" --row "$row" --mode hook --no-twin >"$out/$name.jsonl" \
    2>"$out/$name.err"
  echo $? >"$out/$name.rc"
  echo "$name: fp8audit run exit $(cat "$out/$name.rc")"
  "$build/bin/fp8audit" report "$out/$name" --format json -o "$out/$name.json" 2>>"$out/$name.err"
}
if [[ $phase == precision ]]; then
  for row in selective-core-attn-te selective-core-attn-fp8-dpa; do
    mc "mc_$row" --row "$row" --mode both &
    precision_agent "prec_${row//-/_}" "" "$row" &
    precision_agent "prec_${row//-/_}_fix" "--fix-te" "$row" &
  done
  wait
  exit 0
fi
if [[ $phase == cost-agent ]]; then
  "$build/bin/fp8audit" run --max-rows 0 --out "$out/cost_agent" -- python3 "$here/megatron_live.py" \
    --time --toggle agent --row "${TIME_ROW:-full-uniform}" --layers 16 --hidden 2048 --heads 16 \
    --seq 2048 --mbs 1 --vocab 32000 --microbatches 8 --steps 4 --rounds "${ROUNDS:-8}" \
    >"$out/mc_timing_agent.jsonl" 2>"$out/mc_timing_agent.err"
  echo "timing agent: fp8audit run exit $? (rounds with the agent off report missing updates)"
  exit 0
fi
if [[ $phase == hf-agent || $phase == correctness || $phase == all ]]; then
  for ck in reentrant non-reentrant; do
    hf_agent "hf_agent_${ck//-/_}" "" "$ck" &
    hf_agent "hf_agent_${ck//-/_}_fix" "--fix-te" "$ck" &
  done
  [[ $phase == hf-agent ]] && { wait; exit 0; }
fi
if [[ $phase != cost ]]; then
  for row in $(python3 -c "import sys; sys.path.insert(0, '$here'); import megatron_live as m; print(' '.join(m.ROWS))" 2>/dev/null); do
    mc "mc_$row" --row "$row" --mode both --diagnose &
  done
  agent agent_full_uniform "" full-uniform &
  agent agent_full_uniform_fix "--fix-te" full-uniform &
  agent agent_selective_mlp_fix "--fix-te" selective-mlp &
  agent agent_moe_fix "--fix-te" moe-selective-moe &
  timeout "${ROW_TIMEOUT:-420}" python3 "$here/hf_accelerate_live.py" --mode both \
    >"$out/hf.jsonl" 2>"$out/hf.err" &
  wait
  echo "hf: done"
fi
[[ $phase == correctness ]] && exit 0
python3 "$here/megatron_live.py" --time --row "${TIME_ROW:-full-uniform}" --layers 16 \
  --hidden 2048 --heads 16 --seq 2048 --mbs 1 --vocab 32000 --microbatches 8 --steps 4 \
  --rounds "${ROUNDS:-6}" >"$out/mc_timing.jsonl" 2>"$out/mc_timing.err"
echo "timing: exit $?"
