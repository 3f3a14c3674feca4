#!/usr/bin/env bash
# On the GPU machine, after `device_setup.sh 2.20.2` (its exports evaluated: TE, then megatron-core,
# on PYTHONPATH): TE 2.20.2 with TE PR #3456's scheduling (apply.py, on a copy of the installed TE,
# made again whenever apply.py is newer) against its own counter, the agent and the te-3456 model,
# per layout (pr_live.py), then the table (pr_compare.py). Beside them, on the same edited TE,
# Megatron-core rows (../megatron_live.py --mode unpatched: fp8audit.te.patch() refuses
# the PR's TE, which would stop the script's patched mode) and the agent on some, plain and under
# --fix-te (where the fix stands aside), nine processes sharing the GPU at once, each killed after
# MC_TIMEOUT s (default 420, as run_megatron_live.sh's ROW_TIMEOUT); then `megatron_compare.py
# OUT/megatron --semantics te-3456`: TE's counter = the agent = model te-3456, no run raising
# (selective-mlp, without a scenario, must raise IndexError as on 2.20.2). Both tables go to
# stdout and OUT/table.md, OUT/megatron_table.md.
# Usage: run.sh BUILD OUT
# Exit: 0 every row agrees; 1 a row disagrees or a run failed; 2 bad arguments or set-up.
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: run.sh BUILD OUT" >&2
  exit 2
fi
here=$(dirname "$(realpath "$0")")
build=$(realpath "$1")
out=$2
fp8audit=$build/bin/fp8audit
[[ -x $fp8audit ]] || { echo "run.sh: no $fp8audit (build first)" >&2; exit 2; }
live=${LIVE:-/opt/fp8audit-live}
plain_site=$live/te-2.20.2/site
site=$live/te-2.20.2-pr-3456/site
mkdir -p "$out"
if [[ ! -f $site/.applied || $here/apply.py -nt $site/.applied ]]; then
  [[ -d $plain_site ]] || { echo "run.sh: no TE 2.20.2 under $live (device_setup.sh 2.20.2)" >&2; exit 2; }
  rm -rf "$site" "$site.tmp" && mkdir -p "$(dirname "$site")" && cp -a "$plain_site" "$site.tmp"
  python3 "$here/apply.py" "$site.tmp" >&2 || { rm -rf "$site.tmp"; exit 2; }
  touch "$site.tmp/.applied" && mv "$site.tmp" "$site"
fi
path=${PYTHONPATH:-}
path=${path//$plain_site/$site}
[[ $path == *"$site"* ]] || path="$site${path:+:$path}"
export PYTHONPATH=$path PYTHONWARNINGS=ignore FP8AUDIT_MODEL_LIB=$build/lib/libfp8audit_model.so
python3 -c "import transformer_engine.pytorch as te; assert hasattr(te, 'quantization_backward_scope')" \
  || { echo "run.sh: the patched TE does not import" >&2; exit 2; }
# Megatron-core rows, started first (they share the GPU with pr_live.py's runs): none (baseline);
# TE's reentrant checkpoint per layer (full-uniform) and over every layer (full-uniform-all: only
# the checkpoint's scope asks the outer task); GroupedLinear inside it (moe-selective-moe);
# Megatron's own checkpoint, a nested autograd task (selective-core-attn-te); selective-mlp, which
# TE 2.20.2 fails (IndexError).
mc=$out/megatron
mkdir -p "$mc"
mc_live=$here/../megatron_live.py
mc_row() {  # ROW
  timeout "${MC_TIMEOUT:-420}" python3 "$mc_live" --row "$1" --mode unpatched --diagnose \
    >"$mc/mc_$1.jsonl" 2>"$mc/mc_$1.err"
  echo $? >"$mc/mc_$1.rc"
}
mc_agent() {  # NAME FLAGS ROW: the unmodified script under fp8audit run FLAGS
  # shellcheck disable=SC2086
  timeout "${MC_TIMEOUT:-420}" "$fp8audit" run $2 --max-rows 0 --out "$mc/$1" -- \
    python3 "$mc_live" --row "$3" --mode hook --no-twin >"$mc/$1.jsonl" 2>"$mc/$1.err"
  echo $? >"$mc/$1.rc"
  "$fp8audit" report "$mc/$1" --format json -o "$mc/$1.json" 2>>"$mc/$1.err"
}
mc_rows=(none full-uniform full-uniform-all moe-selective-moe selective-core-attn-te selective-mlp)
mc_agents=("agent_full_uniform||full-uniform" "agent_full_uniform_fix|--fix-te|full-uniform"
           "agent_moe_fix|--fix-te|moe-selective-moe")
for row in "${mc_rows[@]}"; do
  mc_row "$row" &
done
for spec in "${mc_agents[@]}"; do
  IFS='|' read -r name flags row <<<"$spec"
  mc_agent "$name" "$flags" "$row" &
done
failed=0
for backward in after inside; do
  python3 "$here/pr_live.py" --backward "$backward" >"$out/plain_$backward.jsonl" \
    2>"$out/plain_$backward.err"
  rc=$?
  echo "plain $backward: exit $rc"
  [[ $rc -eq 0 ]] || failed=1
  "$fp8audit" run --out "$out/agent_$backward" --max-rows 0 -- \
    python3 "$here/pr_live.py" --markers --backward "$backward" \
    >"$out/agent_$backward.jsonl" 2>"$out/agent_$backward.err"
  rc=$?
  echo "agent $backward: exit $rc (3: the layouts that update more than once fail)"
  [[ $rc -eq 0 || $rc -eq 3 ]] || failed=1
  "$fp8audit" report "$out/agent_$backward" --format json -o "$out/agent_$backward.json"
  "$fp8audit" report "$out/agent_$backward" >"$out/agent_$backward.txt"
done
wait
pairs=()
for row in "${mc_rows[@]}"; do
  rc=$(cat "$mc/mc_$row.rc" 2>/dev/null || echo none)
  echo "megatron $row: exit $rc"
  [[ $rc == 0 ]] || failed=1
done
for spec in "${mc_agents[@]}"; do
  IFS='|' read -r name flags row <<<"$spec"
  rc=$(cat "$mc/$name.rc" 2>/dev/null || echo none)
  echo "megatron $name: fp8audit run exit $rc"
  if [[ ($rc == 0 || $rc == 3) && -f $mc/$name.json ]]; then  # a run that died is left out
    pairs+=(--agent "$mc/$name.jsonl=$mc/$name.json")
  else
    failed=1
  fi
done
python3 "$here/pr_compare.py" "$out" --fp8audit "$fp8audit" --microbatches 3 | tee "$out/table.md"
rc=${PIPESTATUS[0]}
echo
python3 "$here/../megatron_compare.py" "$mc" --fp8audit "$fp8audit" --semantics te-3456 \
  ${pairs[@]+"${pairs[@]}"} | tee "$out/megatron_table.md"
mc_rc=${PIPESTATUS[0]}
(( mc_rc > rc )) && rc=$mc_rc
[[ $rc -ne 0 ]] && exit "$rc"
exit "$failed"
