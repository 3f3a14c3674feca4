#!/usr/bin/env bash
# The bundled demo audit. Installs what is missing, builds fp8audit, and shows, for every
# checkpointing configuration in the seeds, how many global FP8 DelayedScaling state updates
# Transformer Engine performs per microbatch (each release's semantics; the worked example under
# TE 2.20's, the newest release) against the corrected ownership (fixed), then runs the seeds' reproduction on the linked runtime under `fp8audit run` both ways
# and prints the agent's reports side by side: duplicates found vs 1/1 everywhere. Runs on a
# machine with or without a GPU. Extra arguments go to fp8-repro (e.g. --device cuda).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
jobs=${FP8AUDIT_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs" --target fp8audit fp8-repro fp8audit_agent >/dev/null
fp8audit=build/bin/fp8audit
# This checkout's Python package in its venv (a .pth file naming python/), so that
# `.venv/bin/python -m fp8audit` and `import fp8audit` work after the demo; python3's own
# environment is never changed.
if [[ -x .venv/bin/python ]]; then
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD/python" >"$site/fp8audit-checkout.pth"
fi

echo
echo "== 1. Prediction (state/ ownership model): updates per microbatch (forward/backward), expected 1/1"
"$fp8audit" model --compare state/scenarios/*.textproto
echo
echo "== 2. Why: the 28-layer x 7-Linear decoder with reentrant checkpoint per layer, under TE 2.20"
"$fp8audit" model state/scenarios/decoder_28x7_reentrant_per_layer.textproto \
  --semantics te-2.20 --microbatches 1 --max-explanations 4
echo
echo "== 3. Real runs: fp8-repro on the linked runtime (three Linear, DelayedScaling HYBRID, every"
echo "      checkpoint layout of the seeds, three seeds, gradient accumulation), audited by the agent"
echo "      under 'fp8audit run' with TE's ownership (te-legacy) and with the fixed one"
runtime/demo/run_demo.sh build "$@"
