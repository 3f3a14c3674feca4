#!/usr/bin/env bash
# The runtime's demo: fp8-repro (the seeds' reproduction on the linked runtime) runs under
# `fp8audit run` twice, with Transformer Engine's current ownership (te-legacy) and with the fixed
# one, and the two audit reports are printed side by side: duplicates found vs 1/1 everywhere.
# Works with or without a GPU (CPU backend by default; pass --device cuda on a GPU machine).
#
# Usage: runtime/demo/run_demo.sh BUILD_DIR [fp8-repro flags...]
#   default flags: --layout all --seeds 3 --microbatches 4 --accumulation 2
# Exit status: 0 when the te-legacy audit found duplicates and the fixed audit passed.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [fp8-repro flags...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
shift
flags=("$@")
if [[ ${#flags[@]} -eq 0 ]]; then
  flags=(--layout all --seeds 3 --microbatches 4 --accumulation 2)
fi
jobs=${FP8AUDIT_JOBS:-$(nproc)}
targets=(fp8audit fp8-repro)
if grep -q '^fp8audit_agent:' <<<"$(cmake --build "$build" --target help 2>/dev/null)"; then
  targets+=(fp8audit_agent)
else
  echo "demo: this build has no agent (NVTX3 headers or a shared libprotobuf missing)" >&2
  exit 2
fi
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >/dev/null
fp8audit="$build/bin/fp8audit"
repro="$build/bin/fp8-repro"
out=$(mktemp -d "${TMPDIR:-/tmp}/fp8audit-runtime-demo.XXXXXX")
width=${COLUMNS:-200}

declare -A code
for ownership in te-legacy fixed; do
  rm -rf "${out:?}/$ownership"
  set +e
  "$fp8audit" run --out "$out/$ownership" --max-rows 0 -- "$repro" --semantics "$ownership" \
    "${flags[@]}" >"$out/$ownership.repro.txt" 2>"$out/$ownership.run.txt"
  code[$ownership]=$?
  "$fp8audit" report "$out/$ownership" --max-rows 0 >"$out/$ownership.report.txt" 2>&1
  set -e
  {
    echo "=== ownership: $ownership (fp8audit run exit ${code[$ownership]})"
    echo
    cat "$out/$ownership.report.txt"
  } >"$out/$ownership.column.txt"
done

echo "== fp8-repro's own verdicts (its per-microbatch counts are the table's runtime columns)"
for ownership in te-legacy fixed; do
  grep '^fp8-repro:' "$out/$ownership.repro.txt" | sed "s/^/$ownership: /" || true
done
echo
echo "== What the agent counted on the real runs (fp8audit report), beside the runtime's own count"
for ownership in te-legacy fixed; do
  "$fp8audit" report "$out/$ownership" --format json --no-progress >"$out/$ownership.json" 2>/dev/null ||
    true
done
python=${FP8AUDIT_PYTHON:-python3}
set +e
"$python" "$here/side_by_side.py" "$out/te-legacy.repro.txt" "$out/te-legacy.json" \
  "$out/fixed.repro.txt" "$out/fixed.json"
agree=$?
set -e
echo
for ownership in te-legacy fixed; do
  grep -E '^job total' "$out/$ownership.report.txt" | sed "s/^/$ownership audit, /" || true
done
echo
echo "full reports side by side: pr -m -t -w $width $out/te-legacy.column.txt $out/fixed.column.txt"
echo "traces and reports: $out"
if grep -qs "File already exists in database: fp8audit/" "$out"/*.run.txt "$out"/*.repro.txt; then
  echo "demo: the audited process aborted at start-up: the agent and the runtime both register"
  echo "      fp8audit's .proto files in the shared libprotobuf (an agent-side fix is needed)"
fi
if [[ ${code[te-legacy]} -eq 3 && ${code[fixed]} -eq 0 && $agree -eq 0 ]]; then
  echo "demo: te-legacy duplicates found by the agent; fixed ownership 1/1 in every microbatch"
  echo
  echo "Now audit your own job (a TE training script, torchrun or srun line), with the fp8audit"
  echo "just built (or the one \`pip install\` puts in your environment: README, Install):"
  echo "  $fp8audit run -- torchrun --nproc-per-node 8 train.py ...     # report; exit 3 on violations"
  echo "  $fp8audit run --fix-te -- torchrun --nproc-per-node 8 train.py # the same job with the fix"
  if [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import fp8audit' 2>/dev/null; then
    echo "  .venv/bin/python -m fp8audit run -- .venv/bin/python train.py   # the same from this checkout's venv"
  fi
  exit 0
fi
echo "demo: unexpected outcome (te-legacy audit exit ${code[te-legacy]}, expected 3; fixed" \
  "audit exit ${code[fixed]}, expected 0; agent and runtime agree: exit $agree, expected 0);" \
  "see $out/*.run.txt"
exit 1
