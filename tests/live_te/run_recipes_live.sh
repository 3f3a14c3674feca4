#!/usr/bin/env bash
# Issue 36's recompute-parity rows in one call, on the GPU machine after device_setup.sh's exports
# (TE on PYTHONPATH) and a build with the fp8audit executable: recipes_live.py per recipe under
# `fp8audit run`, plain and under --fix-te, in the layouts that tell the checks apart (torch's
# checkpoint: recomputes with FP8 off, the fix restores it; TE's checkpoint with fp8_output or
# fp8_grad flipped after the forward: other kwargs, which no fix changes; the same kwargs: none),
# then recipes_compare.py's table (the script's truth = the agent's rows and verdicts).
#   tests/live_te/run_recipes_live.sh BUILD OUT
# RECIPES (default "current block delayed"), DEVICE (default cuda; cpu on TE's CPU stand-in,
# as CI rehearses it) and PYTHON (default python3) choose the runs; the table's label says
# --fix-te where the fix was in force (the stand-in's TE is not a release it patches). Exit: the
# table's (0 all agree, 1 a run differs), 1 when a run failed, 2 bad arguments.
set -uo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: run_recipes_live.sh BUILD OUT" >&2
  exit 2
fi
here=$(dirname "$(realpath "$0")")
fp8audit=$(realpath "$1")/bin/fp8audit
out=$(realpath -m "$2")
[[ -x $fp8audit ]] || { echo "run_recipes_live.sh: no $fp8audit (build first)" >&2; exit 2; }
mkdir -p "$out"
layouts=("torch|" "te|--kwargs fp8_output --flip" "te|--kwargs fp8_grad --flip"
         "te|--kwargs both")
failed=0
pairs=()
n=0
for recipe in ${RECIPES:-current block delayed}; do
  for layout in "${layouts[@]}"; do
    IFS='|' read -r checkpoint kwargs <<<"$layout"
    for flags in "" "--fix-te"; do
      n=$((n + 1))
      name=$out/run$n
      # shellcheck disable=SC2086
      timeout "${RUN_TIMEOUT:-300}" "$fp8audit" run $flags --max-rows 0 --out "$name" -- \
        "${PYTHON:-python3}" "$here/recipes_live.py" --device "${DEVICE:-cuda}" --markers \
        --recipe "$recipe" --checkpoint "$checkpoint" $kwargs >"$name.json" 2>"$name.err"
      rc=$?
      echo "run$n: $recipe, $checkpoint checkpoint ${kwargs:-(no kwargs)} ${flags:-plain}: exit $rc"
      # The report exits as the run did (3: violations); its file is what counts.
      "$fp8audit" report "$name" --format json -o "$name.report.json" 2>>"$name.err"
      if [[ ($rc -eq 0 || $rc -eq 3) && -s $name.report.json ]]; then
        pairs+=("$name.json=$name.report.json")
      else
        failed=1
      fi
    done
  done
done
[[ ${#pairs[@]} -gt 0 ]] || { echo "run_recipes_live.sh: no run finished" >&2; exit 1; }
"${PYTHON:-python3}" "$here/recipes_compare.py" "${pairs[@]}" | tee "$out/table.md"
rc=${PIPESTATUS[0]}
[[ $rc -ne 0 ]] && exit "$rc"
exit "$failed"
