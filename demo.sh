#!/usr/bin/env bash
# The bundled demo audit. Installs what is missing, builds fp8audit, and shows, for every
# checkpointing configuration in the seeds, how many global FP8 DelayedScaling state updates
# Transformer Engine performs per microbatch today (te-legacy) against the corrected ownership
# (fixed): duplicates found vs 1/1 everywhere. Runs on a machine with or without a GPU.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
jobs=${FP8AUDIT_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" --target fp8audit >/dev/null
fp8audit=build/bin/fp8audit

echo
echo "== FP8 state updates per microbatch (forward/backward), expected 1/1"
"$fp8audit" model --compare state/scenarios/*.textproto
echo
echo "== Why: the 28-layer x 7-Linear decoder with reentrant checkpoint per layer, under TE today"
"$fp8audit" model state/scenarios/decoder_28x7_reentrant_per_layer.textproto \
  --semantics te-legacy --microbatches 1 --max-explanations 4
echo
echo "== The same model under the corrected ownership"
"$fp8audit" model state/scenarios/decoder_28x7_reentrant_per_layer.textproto --semantics fixed \
  --microbatches 2 --check
