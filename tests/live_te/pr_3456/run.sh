#!/usr/bin/env bash
# On the GPU machine, after `device_setup.sh 2.20.2` (its exports sourced): TE 2.20.2 with TE PR
# #3456's scheduling (apply.py, on a copy of the installed TE) against its own counter, the agent
# and the te-3456 model, per layout (pr_live.py), then the table (pr_compare.py). Megatron-core's
# rows too with `megatron` (run_megatron_live.sh correctness on the patched TE).
# Usage: run.sh BUILD OUT [megatron]   Exit: the table's (1: a row disagrees).
set -uo pipefail
here=$(dirname "$(realpath "$0")")
build=$(realpath "$1")
out=$2
fp8audit=$build/bin/fp8audit
live=${LIVE:-/opt/fp8audit-live}
plain_site=$live/te-2.20.2/site
site=$live/te-2.20.2-pr-3456/site
mkdir -p "$out"
if [[ ! -d $site ]]; then
  [[ -d $plain_site ]] || { echo "run.sh: no TE 2.20.2 under $live (device_setup.sh 2.20.2)" >&2; exit 2; }
  mkdir -p "$(dirname "$site")" && cp -a "$plain_site" "$site.tmp"
  python3 "$here/apply.py" "$site.tmp" >&2 || { rm -rf "$site.tmp"; exit 2; }
  mv "$site.tmp" "$site"
fi
export PYTHONPATH=${PYTHONPATH//$plain_site/$site}
[[ $PYTHONPATH == *"$site"* ]] || export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONWARNINGS=ignore
python3 -c "import transformer_engine.pytorch as te; assert hasattr(te, 'quantization_backward_scope')" \
  || { echo "run.sh: the patched TE does not import" >&2; exit 2; }
for backward in after inside; do
  python3 "$here/pr_live.py" --backward "$backward" >"$out/plain_$backward.jsonl" 2>"$out/plain_$backward.err"
  echo "plain $backward: exit $?"
  "$fp8audit" run --out "$out/agent_$backward" --max-rows 0 -- \
    python3 "$here/pr_live.py" --markers --backward "$backward" \
    >"$out/agent_$backward.jsonl" 2>"$out/agent_$backward.err"
  echo "agent $backward: exit $?"
  "$fp8audit" report "$out/agent_$backward" --format json -o "$out/agent_$backward.json"
  "$fp8audit" report "$out/agent_$backward" >"$out/agent_$backward.txt"
done
if [[ ${3:-} == megatron ]]; then
  bash "$here/../run_megatron_live.sh" "$build" "$out/megatron" correctness >"$out/megatron.log" 2>&1
  echo "megatron: exit $?"
fi
python3 "$here/pr_compare.py" "$out" --fp8audit "$fp8audit" | tee "$out/table.md"
exit "${PIPESTATUS[0]}"
