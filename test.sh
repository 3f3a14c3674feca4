#!/usr/bin/env bash
# Builds fp8audit and runs every test that needs no GPU (GPU tests build and skip), then the same
# suite under AddressSanitizer + UndefinedBehaviorSanitizer. Exit status: 0 when all pass.
# Then fuzzes the trace reader and the pattern parser for a bounded time (clang, libFuzzer).
# Last, the install route (tests/package/pip_route.sh ci: scripts/build_wheel.sh makes the
# manylinux wheel and the ops sdist; the wheel goes into environments that already have a torch,
# which it keeps; then the README's commands from that install; docs/building.md).
# FP8AUDIT_SKIP_ASAN=1 / FP8AUDIT_SKIP_FUZZ=1 / FP8AUDIT_SKIP_PIP=1 skip those stages.
set -euo pipefail
cd "$(dirname "$0")"
start=$SECONDS stage_start=$SECONDS stage_name=""
stage() {  # NAME: ends the previous stage (printing its time) and starts the next
  if [[ -n "$stage_name" ]]; then echo "   ($stage_name: $((SECONDS - stage_start)) s)"; fi
  stage_name=$1 stage_start=$SECONDS
  if [[ -n "$1" ]]; then echo "== $1"; fi
}
stage "setup (scripts/setup.sh)"
scripts/setup.sh
jobs=${FP8AUDIT_JOBS:-$(nproc)}

stage "build (RelWithDebInfo)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
stage "tests"
ctest --test-dir build -LE benchmark --output-on-failure -j"$jobs"

if [[ "${FP8AUDIT_SKIP_ASAN:-0}" != 1 ]]; then
  stage "build (ASan+UBSan, host code only)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFP8AUDIT_SANITIZE=ON \
    -DFP8AUDIT_CUDA=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  stage "tests (ASan+UBSan)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -LE 'benchmark|gpu|fuzz' --output-on-failure -j"$jobs"
fi

if [[ "${FP8AUDIT_SKIP_FUZZ:-0}" != 1 ]]; then
  stage "fuzz (libFuzzer, 30 s per target: trace reader + auditor, pattern-file parser)"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFP8AUDIT_FUZZ=ON -DFP8AUDIT_SANITIZE=ON \
    -DFP8AUDIT_CUDA=OFF -DFP8AUDIT_TORCH=OFF >/dev/null
  cmake --build build-fuzz -j"$jobs" --target fp8audit_trace_fuzzer fp8audit_write_fuzz_seeds \
    agent_pattern_fuzzer
  ctest --test-dir build-fuzz -L fuzz --output-on-failure
fi
if [[ "${FP8AUDIT_SKIP_PIP:-0}" != 1 ]]; then
  stage "install route (the manylinux wheel into environments with their own torch, then the README's commands)"
  tests/package/pip_route.sh ci
fi
stage ""
echo "== test.sh: all stages passed in $((SECONDS - start)) s"
