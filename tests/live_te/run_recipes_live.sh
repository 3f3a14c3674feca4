#!/usr/bin/env bash
# Issue 36's recompute-parity rows in one call, on the GPU machine after device_setup.sh's exports
# (TE on PYTHONPATH) and a build with the fp8audit executable: recipes_live.py per recipe under
# `fp8audit run`, plain and under --fix-te, in the layouts that tell the checks apart (torch's
# checkpoint: recomputes with FP8 off, the fix restores it; TE's checkpoint with fp8_output or
# fp8_grad flipped after the forward: other kwargs, which no fix changes; the same kwargs: none),
# then recipes_compare.py's table (the script's truth = the agent's rows and verdicts). Each
# layout's twin (the same arguments, --no-checkpoint, without the agent) runs first; every run's
# weight gradients are compared with it (the table's "= twin": what the fix must reproduce).
#   tests/live_te/run_recipes_live.sh BUILD OUT
# RECIPES (default "current block delayed": 24 runs; one or two recipes per call where device
# time is short), DEVICE (default cuda; cpu on TE's CPU stand-in, as CI rehearses it, where a
# --fix-te run may run unpatched: no release the fix patches), PYTHON (default python3) and
# RUN_TIMEOUT (default 120 s a run) choose the runs. Exit: the table's (0 all agree, 1 a run
# differs or was not checked in full), 1 when a run failed, 2 bad arguments.
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
# fp8_output by keyword, fp8_grad positionally: both ways the hook binds a call.
layouts=("torch|" "te|--kwargs fp8_output --flip" "te|--kwargs fp8_grad --flip --positional"
         "te|--kwargs both")
failed=0
pairs=()
n=0
for recipe in ${RECIPES:-current block delayed}; do
  for layout in "${layouts[@]}"; do
    IFS='|' read -r checkpoint kwargs <<<"$layout"
    twin=$out/twin_${recipe}_$n.pt
    rm -f "$twin" "$twin".*  # no earlier call's twin stands in for a failed one
    # shellcheck disable=SC2086
    timeout "${RUN_TIMEOUT:-120}" "${PYTHON:-python3}" "$here/recipes_live.py" --device \
      "${DEVICE:-cuda}" --recipe "$recipe" --checkpoint "$checkpoint" $kwargs --no-checkpoint \
      --grads "$twin" >"$twin.json" 2>"$twin.err" \
      || { echo "run_recipes_live.sh: the twin of $recipe $checkpoint $kwargs failed" >&2; failed=1; }
    for flags in "" "--fix-te"; do
      n=$((n + 1))
      name=$out/run$n
      rm -rf "$name" "$name".*  # nothing of an earlier run into the same OUT
      # shellcheck disable=SC2086
      timeout "${RUN_TIMEOUT:-120}" "$fp8audit" run $flags --max-rows 0 --out "$name" -- \
        "${PYTHON:-python3}" "$here/recipes_live.py" --device "${DEVICE:-cuda}" --markers \
        --recipe "$recipe" --checkpoint "$checkpoint" $kwargs --twin-grads "$twin" \
        >"$name.json" 2>"$name.err"
      rc=$?
      echo "run$n: $recipe, $checkpoint checkpoint ${kwargs:-(no kwargs)} ${flags:-plain}: exit $rc"
      # The report exits as the run did (3: violations); its file is what counts.
      "$fp8audit" report "$name" --format json -o "$name.report.json" 2>>"$name.err"
      if [[ ($rc -eq 0 || $rc -eq 3) && -s $name.report.json ]]; then
        pairs+=("$name.json=$name.report.json${flags:+=fix}")
      else
        failed=1
      fi
    done
  done
done
[[ ${#pairs[@]} -gt 0 ]] || { echo "run_recipes_live.sh: no run finished" >&2; exit 1; }
may_refuse=()
[[ ${DEVICE:-cuda} == cpu ]] && may_refuse=(--fix-may-refuse)
"${PYTHON:-python3}" "$here/recipes_compare.py" ${may_refuse[@]+"${may_refuse[@]}"} "${pairs[@]}" \
  | tee "$out/table.md"
rc=${PIPESTATUS[0]}
[[ $rc -ne 0 ]] && exit "$rc"
exit "$failed"
