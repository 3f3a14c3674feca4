#!/usr/bin/env bash
# On the GPU machine, after `device_setup.sh 2.20.2` (its exports evaluated): TE 2.20.2 with TE PR
# #3456's scheduling (apply.py, on a copy of the installed TE, made again whenever apply.py is newer)
# against its own counter, the agent and the te-3456 model, per layout (pr_live.py), then the table
# (pr_compare.py). Megatron-core's rows are not part of it yet (megatron_compare.py models te-2.20
# and expects the fix to apply; under the PR it stands aside).
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
export PYTHONPATH=$path PYTHONWARNINGS=ignore
python3 -c "import transformer_engine.pytorch as te; assert hasattr(te, 'quantization_backward_scope')" \
  || { echo "run.sh: the patched TE does not import" >&2; exit 2; }
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
python3 "$here/pr_compare.py" "$out" --fp8audit "$fp8audit" --microbatches 3 | tee "$out/table.md"
rc=${PIPESTATUS[0]}
[[ $rc -ne 0 ]] && exit "$rc"
exit "$failed"
