#!/usr/bin/env bash
# The pip route as a user takes it, in a fresh virtual environment in a temporary directory:
#   python3 -m venv v && v/bin/pip install .           (scikit-build-core; isolated build)
#   v/bin/python -m fp8audit run -- v/bin/python examples/fp8_job.py
#   v/bin/pytest --fp8audit examples/
# and checks the job's trace: 1 forward and 1 backward update in each of its microbatches.
# Wheels come from the project's wheelhouse (FP8AUDIT_WHEELHOUSE, default ~/.cache/fp8audit/wheels,
# which scripts/setup.sh fills with torch's) without the network when it has them all, else from
# PyPI (kept there for the next run). Extra pip arguments: FP8AUDIT_PIP_ARGS (e.g.
# "-C cmake.define.FP8AUDIT_CUDA=OFF"). Prints the time of each step.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/fp8audit-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
wheels=${FP8AUDIT_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit/wheels}
mkdir -p "$wheels"
read -r -a extra <<<"${FP8AUDIT_PIP_ARGS:-}"
timed() {  # NAME CMD...: runs CMD, prints how long it took
  local t=$SECONDS name=$1
  shift
  "$@"
  echo "   pip route: $name: $((SECONDS - t)) s"
}
timed "python3 -m venv" python3 -m venv "$work/v"
pip=("$work/v/bin/pip" install -q --find-links "$wheels")
if ! timed "pip install . (from the wheelhouse)" "${pip[@]}" --no-index "${extra[@]}" . 2>"$work/offline.log"; then
  if ! grep -q "No matching distribution found" "$work/offline.log"; then
    cat "$work/offline.log" >&2
    exit 1
  fi
  echo "   pip route: the wheelhouse lacks a wheel ($(grep -m1 -o 'No matching distribution found for [^ ]*' "$work/offline.log" || echo see below)); from PyPI, kept in $wheels"
  "$work/v/bin/pip" download -q -d "$wheels" --find-links "$wheels" "scikit-build-core>=0.10" \
    "torch==2.11.0" "pytest>=7"
  timed "pip install ." "${pip[@]}" "${extra[@]}" .
fi
cd "$work"  # the installed package, not the checkout's python/
src=$OLDPWD
timed "python -m fp8audit run -- python examples/fp8_job.py" \
  v/bin/python -m fp8audit run --out traces -- v/bin/python "$src/examples/fp8_job.py"
v/bin/python -m fp8audit report traces --format json --no-progress >report.json
v/bin/python - <<'PY'
import json
ranks = json.load(open("report.json"))["ranks"]
counts = [(m.get("forward_updates", 0), m.get("backward_updates", 0)) for m in ranks[0]["microbatches"]]
assert len(ranks) == 1 and counts == [(1, 1)] * 4, counts
print(f"   pip route: the job's {len(counts)} microbatches: 1/1 each")
PY
cp -r "$src/examples" examples
timed "pytest --fp8audit examples/" v/bin/pytest --fp8audit -p no:cacheprovider examples/
