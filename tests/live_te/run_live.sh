#!/usr/bin/env bash
# On the GPU machine, after install_te.sh: runs te_counts.py over every layout without the agent
# (TE's counter alone), under `fp8audit run` with NVTX microbatch markers and without any marker,
# and with the backward inside the autocast; writes the reports as JSON, then times the 28 x 7
# decoder with and without the agent in alternating rounds. Afterwards: compare.py OUT.
# Usage: run_live.sh FP8AUDIT_BIN OUT [ROUNDS]
set -uo pipefail
fp8audit=$(realpath "$1")
out=$2
rounds=${3:-5}
script=$(dirname "$(realpath "$0")")/te_counts.py
mkdir -p "$out"
export PYTHONWARNINGS=ignore
run_agent() {  # name, te_counts arguments...; exit 3 (violations) is the expected te-legacy verdict
  local name=$1
  shift
  "$fp8audit" run --out "$out/$name" --max-rows 0 -- python3 "$script" "$@" \
    >"$out/$name.jsonl" 2>"$out/$name.err"
  echo "$name: fp8audit run exit $?"
  "$fp8audit" report "$out/$name" --format json -o "$out/$name.json"
}
python3 "$script" >"$out/plain.jsonl" || exit 1
python3 "$script" --backward inside >"$out/inside_plain.jsonl" || exit 1
run_agent markers --markers
run_agent nomarkers
run_agent inside --markers --backward inside

timing=(--layout decoder-28x7 --hidden 4096 --tokens 4096 --microbatches 20 --timing)
for r in $(seq "$rounds"); do
  python3 "$script" "${timing[@]}" >"$out/time_plain_$r.jsonl" 2>/dev/null
  "$fp8audit" run --out "$out/time_agent_$r" -- python3 "$script" "${timing[@]}" \
    >"$out/time_agent_$r.jsonl" 2>/dev/null
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
def medians(kind):
    return [json.loads(l)["median_step_ms"] for f in sorted(glob.glob(f"{sys.argv[1]}/time_{kind}_*.jsonl"))
            for l in open(f) if "median_step_ms" in l]
plain, agent = medians("plain"), medians("agent")
print("step ms per round, without agent:", " ".join(f"{v:.1f}" for v in plain))
print("step ms per round, with agent:   ", " ".join(f"{v:.1f}" for v in agent))
print(f"median of rounds: {statistics.median(plain):.1f} ms vs {statistics.median(agent):.1f} ms, "
      f"x{statistics.median(agent) / statistics.median(plain):.3f}")
PY
