#!/usr/bin/env bash
# Audits ddp_job.py on 2 GPUs under `fp8audit run -- torchrun --nproc-per-node 2`, twice: ranks
# agreeing (run and report exit 0), and rank 1 with 2 forward updates in microbatch 2 (exit 3, the
# disagreement flagged). Each report's JSON is checked by check_counts.py: both ranks' traces, no
# other trace, the expected counts. Exits non-zero on any mismatch.
#
#   tests/multi_rank/run_2gpu.sh BUILD_DIR OUT
#
# BUILD_DIR: a build with the agent and the torch ops (bin/fp8audit, lib/libfp8audit.so,
# lib/libfp8audit_ops.so). OUT: where each case's traces, logs and report.json go.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT" >&2
  exit 2
fi
# NVLink multicast stays off: NCCL, PyTorch and NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
fp8audit=$build/bin/fp8audit
ops=$build/lib/libfp8audit_ops.so
python=${PYTHON:-python3}
microbatches=6

for f in "$fp8audit" "$build/lib/libfp8audit.so" "$ops"; do
  [ -e "$f" ] || { echo "run_2gpu: $f is missing (build with CUDA and libtorch)" >&2; exit 2; }
done
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -lt 2 ]; then
  echo "run_2gpu: needs 2 GPUs, PyTorch sees $gpus" >&2
  exit 2
fi
# torchrun is PyTorch's console script for this module; the module works where it is not on PATH.
if command -v torchrun >/dev/null; then
  launcher=(torchrun)
else
  launcher=("$python" -m torch.distributed.run)
fi

failed=0
# case NAME EXPECTED_EXIT CHECK_ARGS -- JOB_ARGS
run_case() {
  local name=$1 want=$2
  shift 2
  local check=()
  while [ "$1" != "--" ]; do check+=("$1"); shift; done
  shift
  local dir=$out/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  local code=0
  "$fp8audit" run --out "$dir/traces" -- "${launcher[@]}" --standalone --nproc-per-node 2 \
    "$here/ddp_job.py" --ops "$ops" --microbatches "$microbatches" "$@" \
    >"$dir/job.log" 2>"$dir/run.log" || code=$?
  if [ "$code" -ne "$want" ]; then
    echo "FAIL $name: fp8audit run exited $code, expected $want (see $dir/run.log)"
    tail -n 30 "$dir/run.log" | sed 's/^/  /'
    failed=1
  else
    echo "ok   $name: fp8audit run exited $code"
  fi
  code=0
  "$fp8audit" report "$dir/traces" --format json -o "$dir/report.json" || code=$?
  if [ "$code" -ne "$want" ]; then
    echo "FAIL $name: fp8audit report exited $code, expected $want"
    failed=1
  fi
  "$fp8audit" report "$dir/traces" --format markdown -o "$dir/report.md" || true
  # pipefail: check_counts.py's status comes through the pipe.
  if ! "$python" "$here/check_counts.py" "$dir/report.json" --ranks 2 \
      --microbatches "$microbatches" "${check[@]}" | sed "s/^/$name: /"; then
    failed=1
  fi
}

run_case agree 0 --
run_case disagree 3 --disagree-rank 1 --disagree-at 2 -- \
  --disagree --disagree-rank 1 --disagree-at 2

if [ "$failed" -ne 0 ]; then
  echo "run_2gpu: FAILED (outputs in $out)"
  exit 1
fi
echo "run_2gpu: both cases as expected (outputs in $out)"
