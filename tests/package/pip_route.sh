#!/usr/bin/env bash
# tests/package/pip_route.sh MODE: the README's pip route, word for word, in a fresh copy of the
# checkout (its tracked and unignored files, as a clone of this working tree has them) in a
# temporary directory: the commands are read from README.md, from the fenced block after the line
# `<!-- pip_route.sh: ... -->` (a comment a reader of the README does not see), one step a line:
# `python3 -m venv v && v/bin/pip install .`, `v/bin/python -m fp8audit run -- ...` (its traces in
# ./fp8audit-traces), `v/bin/pytest --fp8audit examples/`. Then the same checks in every mode (one
# PASS or FAIL line each; exit 1 if any fails):
#   the wheel's contents (the command, the agent, the libraries, fp8audit.te, the hook, the plugin),
#   `fp8audit --version`, `import fp8audit` without torch, fp8audit.microbatch() never raising on
#   this torch, fp8audit.ops, fp8audit.te's model, `python -m fp8audit run -- python
#   examples/fp8_job.py` (and under torchrun) with 1 forward / 1 backward update per microbatch,
#   `pytest --fp8audit examples/` passing, and the plugin failing a test whose microbatch is 2/1
#   with the report's explanation.
#
# MODE says how the venv gets torch and how the wheel is built:
#   commands  print the README's route as read, one command a line, and check it has the three
#         steps (no install: CTest readme_pip_route runs this, so README and route cannot drift)
#   user  python3 -m venv v && v/bin/pip install .  -- the README's first line, as it is: pip's isolated
#         build installs scikit-build-core and torch==2.11.0 into a build environment, then torch
#         again into v (4.6 GB each, about 6 min each on 2 cores). Wheels from the wheelhouse
#         (FP8AUDIT_WHEELHOUSE, default ~/.cache/fp8audit/wheels; PIP_FIND_LINKS and PIP_NO_INDEX,
#         the line unchanged) when it has them all, else PyPI.
#   ci    what ./test.sh runs, to spare those two torch installs: v reuses the torch and pytest of
#         the interpreter fp8audit builds with (FP8AUDIT_PYTHON, else ./.venv/bin/python, else
#         python3, as cmake/Fp8auditTorch.cmake chooses) through a .pth file naming its
#         site-packages; scikit-build-core comes from the wheelhouse (downloaded into it once, about
#         0.5 MB), then `pip install --no-build-isolation --no-index .`: the same build and the same
#         wheel, its torch==2.11.0 and pytest requirements met by those. Without a GPU the wheel is
#         built without CUDA kernels (cmake.define.FP8AUDIT_CUDA=OFF; the GPU mode builds them).
#   gpu   a GPU machine whose python3 has its torch (e.g. 2.11 for CUDA) and no network:
#         python3 -m venv v seeing python3's site-packages (a .pth: python3 may be a venv), and
#         scikit-build-core from the wheels in FP8AUDIT_WHEELHOUSE when set (else python3's
#         own), `pip install --no-build-isolation --no-deps --no-index .`; pytest must be python3's. The example job runs on the GPU, where
#         the agent counts the update kernels' launches. Build dependencies the machine lacks
#         (Protobuf, CLI11, ...) from FP8AUDIT_DEVKIT, default ./.devkit when present (tests/README.md).
# ci and gpu replace the README's first line by their install into v (the line's own venv and
# pip install are user's), and where v has no pytest script, v/bin/pytest runs v's python -m pytest.
# Extra pip arguments: FP8AUDIT_PIP_ARGS (e.g. "-C cmake.define.FP8AUDIT_CUDA=ON"). Build jobs:
# FP8AUDIT_JOBS (default: the number of cores). Prints the time of each step.
set -uo pipefail
mode=${1:-}
case "$mode" in
  commands | user | ci | gpu) ;;
  *)
    echo "usage: tests/package/pip_route.sh commands|user|ci|gpu" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/../.."
src=$PWD

# ---- the route, from README.md ------------------------------------------------------------------
route=()
while IFS= read -r line; do route+=("$line"); done < <(awk '
  /^<!-- pip_route\.sh:/ { marked = 1; next }
  marked && /^```/ { if (inside) exit; inside = 1; next }
  inside { print }' README.md)
install_line=${route[0]:-} run_line=${route[1]:-} pytest_line=${route[2]:-}
if ((${#route[@]} != 3)) || [[ "$install_line" != "python3 -m venv v && v/bin/pip install ."* ||
  "$run_line" != "v/bin/python -m fp8audit run -- "* ||
  "$pytest_line" != "v/bin/pytest --fp8audit examples/"* ]]; then
  echo "FAIL: pip route ($mode): README.md's route (the block after <!-- pip_route.sh: -->) is not" \
    "the three steps this test follows: venv and pip install, fp8audit run, pytest --fp8audit:" >&2
  printf '    %s\n' "${route[@]}" >&2
  exit 1
fi
if [[ "$mode" == commands ]]; then
  printf '%s\n' "${route[@]}"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fp8audit-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
read -r -a extra <<<"${FP8AUDIT_PIP_ARGS:-}"
export CMAKE_BUILD_PARALLEL_LEVEL=${FP8AUDIT_JOBS:-$(nproc)}
# The fresh checkout: this working tree's tracked and unignored files, nothing built, no .venv.
checkout=$work/checkout
mkdir -p "$checkout"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do
    [[ "$f" == .venv* || ! -e "$f" ]] || printf '%s\0' "$f"
  done | tar -c --null -T - | tar -x -C "$checkout"
v=$checkout/v
failed=()
pass() { echo "PASS: pip route ($mode): $1"; }
fail() {  # WHAT [DETAILS FILE]: one FAIL line, then the details
  echo "FAIL: pip route ($mode): $1"
  if [[ -n "${2:-}" && -s "$2" ]]; then tail -n 40 "$2" | sed 's/^/    /'; fi
  failed+=("$1")
}
stop() {  # WHAT [DETAILS FILE]: a FAIL that leaves nothing else to check
  fail "$@"
  echo "FAIL: pip route ($mode): stopped; nothing else checked"
  exit 1
}
timed() {  # NAME CMD...: runs CMD with its output in $work/log, prints how long it took
  local t=$SECONDS rc=0 name=$1
  shift
  "$@" >"$work/log" 2>&1 || rc=$?
  echo "   pip route ($mode): $name: $((SECONDS - t)) s$( ((rc == 0)) || echo ", exit $rc")"
  return $rc
}

# ---- the venv and the install -------------------------------------------------------------------
wheels=${FP8AUDIT_WHEELHOUSE:-}
case "$mode" in
  user)
    wheels=${wheels:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit/wheels}
    mkdir -p "$wheels"
    # README's line as it is, in the checkout; pip's options from the environment (and
    # FP8AUDIT_PIP_ARGS after it, its comment then cut).
    if ((${#extra[@]})); then install_line="${install_line%%#*} ${extra[*]}"; fi
    if ! (cd "$checkout" && PIP_FIND_LINKS=$wheels PIP_NO_INDEX=1 \
      timed "$install_line (wheels from the wheelhouse)" bash -c "$install_line"); then
      grep -q "No matching distribution found" "$work/log" || stop "$install_line" "$work/log"
      echo "   pip route ($mode): the wheelhouse lacks a wheel; from PyPI, kept in $wheels"
      "$v/bin/pip" download -q -d "$wheels" --find-links "$wheels" "scikit-build-core>=0.10" \
        "torch==2.11.0" "pytest>=7" || stop "pip download into $wheels"
      rm -rf "$v"
      (cd "$checkout" && PIP_FIND_LINKS=$wheels timed "$install_line" \
        bash -c "$install_line") || stop "$install_line" "$work/log"
    fi
    ;;
  ci)
    wheels=${wheels:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit/wheels}
    mkdir -p "$wheels"
    py=${FP8AUDIT_PYTHON:-}
    if [[ -z "$py" ]]; then
      if [[ -x .venv/bin/python ]]; then py=$src/.venv/bin/python; else py=$(command -v python3); fi
    fi
    site=$("$py" -c 'import os, pytest, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>"$work/log") ||
      stop "$py has no torch and pytest (run scripts/setup.sh)" "$work/log"
    # From a venv's interpreter, -m venv makes a venv of the same base interpreter.
    timed "python -m venv" "$py" -m venv "$v" || stop "python -m venv" "$work/log"
    purelib=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$site" >"$purelib/fp8audit-ci-torch.pth"  # after v's own site-packages on sys.path
    echo "   pip route ($mode): torch and pytest of $py ($site), through $purelib/fp8audit-ci-torch.pth"
    skb=("$v/bin/pip" install -q --no-index --find-links "$wheels" "scikit-build-core>=0.10")
    if ! "${skb[@]}" >/dev/null 2>&1; then
      "$v/bin/pip" download -q -d "$wheels" "scikit-build-core>=0.10" >"$work/log" 2>&1 ||
        stop "scikit-build-core: not in $wheels and not downloadable" "$work/log"
      "${skb[@]}" >"$work/log" 2>&1 || stop "pip install scikit-build-core" "$work/log"
    fi
    cuda=()
    if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
      cuda=(--config-settings cmake.define.FP8AUDIT_CUDA=OFF)
    fi
    timed "pip install --no-build-isolation --no-index . ${cuda[*]}" "$v/bin/pip" install \
      --no-build-isolation --no-index --find-links "$wheels" "${cuda[@]}" "${extra[@]}" "$checkout" ||
      stop "pip install --no-build-isolation ." "$work/log"
    ;;
  gpu)
    # python3 may itself be a venv (its torch in the venv's site-packages, which
    # --system-site-packages would not reach): v sees python3's site-packages through a .pth file.
    site=$(python3 -c 'import os, pytest, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>"$work/log") ||
      stop "python3 lacks torch or pytest" "$work/log"
    timed "python3 -m venv" python3 -m venv "$v" || stop "python3 -m venv" "$work/log"
    purelib=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$site" >"$purelib/fp8audit-gpu-torch.pth"
    echo "   pip route ($mode): torch, pytest (and scikit-build-core where it has it) of python3 ($site)"
    if [[ -n "$wheels" ]]; then
      "$v/bin/pip" install -q --no-index --find-links "$wheels" "scikit-build-core>=0.10" \
        >"$work/log" 2>&1 || stop "pip install scikit-build-core from $wheels" "$work/log"
    elif ! "$v/bin/python" -c 'import scikit_build_core' >/dev/null 2>&1; then
      stop "no scikit-build-core in python3; set FP8AUDIT_WHEELHOUSE to a directory with its wheel"
    fi
    kit=${FP8AUDIT_DEVKIT:-}  # Protobuf, CLI11, ... packed for a machine without them (tests/README.md)
    if [[ -z "$kit" && -d .devkit ]]; then kit=$src/.devkit; fi
    if [[ -n "$kit" ]]; then
      echo "   pip route ($mode): build dependencies from $kit"
      # The shared library where the kit has it: a static libprotobuf.a built without -fPIC cannot
      # go into the wheel's shared libraries (libfp8audit_model.so).
      pblib=$kit/lib/x86_64-linux-gnu/libprotobuf.so
      [[ -e "$pblib" ]] || pblib=$kit/lib/x86_64-linux-gnu/libprotobuf.a
      extra+=(--config-settings "cmake.define.CMAKE_PREFIX_PATH=$kit"
        --config-settings "cmake.define.Protobuf_PROTOC_EXECUTABLE=$kit/bin/protoc"
        --config-settings "cmake.define.Protobuf_INCLUDE_DIR=$kit/include"
        --config-settings "cmake.define.Protobuf_LIBRARY=$pblib")
    fi
    timed "pip install --no-build-isolation --no-deps --no-index ." "$v/bin/pip" install \
      --no-build-isolation --no-deps --no-index "${extra[@]}" "$checkout" ||
      stop "pip install --no-build-isolation --no-deps ." "$work/log"
    ;;
esac
pass "installed ($("$v/bin/python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null))"

# ci, gpu: pytest is the torch interpreter's, without a script in v/bin: one that runs it.
if [[ ! -x "$v/bin/pytest" ]]; then
  printf '#!/bin/sh\nexec "%s" -m pytest "$@"\n' "$v/bin/python" >"$v/bin/pytest"
  chmod +x "$v/bin/pytest"
fi

# ---- the checks (outside the source tree: the installed package, not python/) -------------------
cd "$work"
py=$v/bin/python
pytest=("$v/bin/pytest")
check_py() {  # WHAT CODE: PASS when CODE exits 0 (with the first line it prints on stdout)
  if "$py" -c "$2" >"$work/out" 2>"$work/log"; then
    pass "$1$([[ -s "$work/out" ]] && echo ": $(head -n 1 "$work/out")")"
  else
    cat "$work/out" >>"$work/log"
    fail "$1" "$work/log"
  fi
}

check_py "the wheel holds the command, the agent, the libraries, fp8audit.te, the hook and the plugin" '
import importlib.metadata as md
files = {str(f) for f in md.files("fp8audit")}
need = ["fp8audit/bin/fp8audit"] + [f"fp8audit/lib/{l}.so" for l in ("libfp8audit",
        "libfp8audit_impl", "libfp8audit_model", "libfp8audit_markers", "libfp8audit_ops")] + [
        "fp8audit/te/__init__.py", "fp8audit/te/_patch.py", "fp8audit/hook/site/sitecustomize.py",
        "fp8audit/pytest_plugin.py", "fp8audit/_build.py"]
missing = [f for f in need if f not in files]
eps = {(e.group, e.name) for e in md.distribution("fp8audit").entry_points}
missing += [f"entry point {e}" for e in [("console_scripts", "fp8audit"),
                                         ("pytest11", "fp8audit.pytest_plugin")]
            if e not in eps]
assert not missing, missing'

if "$v/bin/fp8audit" --version >"$work/log" 2>&1 && grep -q "fp8audit 0\.[0-9]" "$work/log"; then
  pass "v/bin/fp8audit --version: $(head -n 1 "$work/log")"
else
  fail "v/bin/fp8audit --version" "$work/log"
fi

check_py "import fp8audit imports no torch; microbatch(), step(), update() need none" '
import sys, fp8audit
with fp8audit.microbatch():
    fp8audit.update("forward")
fp8audit.step()
assert "torch" not in sys.modules'

check_py "fp8audit.microbatch() never raises with this torch, nor where torch.cuda.nvtx raises" '
import os, torch, fp8audit
os.environ["NVTX_INJECTION64_PATH"] = "/nonexistent/tool.so"  # as under a tool
try:
    torch.cuda.nvtx.range_push("x"); torch.cuda.nvtx.range_pop()
    print("torch.cuda.nvtx works here")
except Exception as e:
    print(f"torch.cuda.nvtx raises here: {e}")
for _ in range(3):
    with fp8audit.microbatch():
        pass
    fp8audit.step()
try:
    with fp8audit.microbatch():
        raise KeyError("body")
except KeyError:
    pass
def not_installed(*args, **kwargs):  # a CPU torch build: torch.cuda.nvtx raises
    raise RuntimeError("NVTX functions not installed")
torch.cuda.is_available = lambda: True
torch.cuda.nvtx.range_push = torch.cuda.nvtx.range_pop = torch.cuda.nvtx.mark = not_installed
import fp8audit._markers as markers
markers._torch_checked = False
with fp8audit.microbatch():
    pass
fp8audit.step()'

check_py "import fp8audit.ops loads torch.ops.fp8audit from the wheel" '
import torch, fp8audit, fp8audit.ops as ops
assert "site-packages/fp8audit/lib" in str(ops.PATH), ops.PATH
h, s, si = torch.tensor([[2.0], [4.0]]), torch.ones(1), torch.ones(1)
ops.delayed_scaling_update(h, s, si, "e4m3", 0, "max")
assert abs(float(s[0]) - 448.0 / 4.0) < 1e-3, s'

check_py "fp8audit.te: the model library from the wheel, fixed 1/1 where TE 172bd93 is not" "
import fp8audit.te, fp8audit.te._model as m
assert 'site-packages/fp8audit/lib' in m.lib()._name, m.lib()._name
s = '$src/state/scenarios/decoder_28x7_reentrant_per_layer.textproto'
fixed, te = m.run_scenario(s, 'fixed', 2), m.run_scenario(s, 'te-172bd93', 2)
assert fixed == [(1, 1)] * 2 and all(c != (1, 1) for c in te), (fixed, te)"

counts_check() {  # TRACE_DIR: the job's one rank has 4 microbatches of 1/1
  "$py" -m fp8audit report "$1" --format json --no-progress >"$work/report.json" 2>"$work/log"
  "$py" - "$work/report.json" >>"$work/log" 2>&1 <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
counts = [(m.get("forward_updates", 0), m.get("backward_updates", 0)) for m in ranks[0]["microbatches"]]
assert len(ranks) == 1 and counts == [(1, 1)] * 4, (len(ranks), counts)
PY
}
if (cd "$checkout" && timed "$run_line" bash -c "$run_line") &&
  counts_check "$checkout/fp8audit-traces"; then
  pass "$run_line: 4 microbatches, 1/1 each"
else
  fail "$run_line: 4 microbatches, 1/1 each" "$work/log"
fi
if timed "python -m fp8audit run -- torchrun --standalone --nproc-per-node 1 examples/fp8_job.py" \
  "$py" -m fp8audit run --out traces-torchrun -- "$py" -m torch.distributed.run --standalone \
  --nproc-per-node 1 "$src/examples/fp8_job.py" && counts_check traces-torchrun &&
  ls traces-torchrun/*.rank0.fp8trace >/dev/null 2>&1; then
  pass "python -m fp8audit run -- torchrun ... examples/fp8_job.py: rank 0, 4 microbatches, 1/1 each"
else
  fail "python -m fp8audit run -- torchrun ... examples/fp8_job.py" "$work/log"
fi

if (cd "$checkout" && timed "$pytest_line" bash -c "$pytest_line") && grep -q "2 passed" "$work/log"
then
  pass "$pytest_line: 2 passed"
else
  fail "$pytest_line" "$work/log"
fi

# A test whose microbatch updates the forward state twice (as a checkpoint's recompute does in TE):
# the plugin must fail it, and only it, with the counts and the report's explanation.
mkdir not_one_one
cp "$src/examples/fp8_job.py" not_one_one/
cat >not_one_one/test_not_one_one.py <<'PY'
import torch

import fp8audit
import fp8_job


def microbatch(forward_updates):
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fwd = fp8_job.DelayedScaling(2, "forward", dev)
    bwd = fp8_job.DelayedScaling(1, "backward", dev)
    with fp8audit.microbatch():
        for _ in range(forward_updates):
            fwd.update()
        bwd.update()


def test_one_forward_update():
    microbatch(1)


def test_two_forward_updates():
    microbatch(2)
PY
timed "pytest --fp8audit on a test that is not 1/1" "${pytest[@]}" --fp8audit -p no:cacheprovider \
  not_one_one/
rc=$?
if ((rc == 1)) && grep -q "1 failed, 1 passed" "$work/log" &&
  grep -q "FAILED not_one_one/test_not_one_one.py::test_two_forward_updates" "$work/log" &&
  grep -q "did not make 1 forward / 1 backward" "$work/log" &&
  grep -q "forward 2, backward 1" "$work/log" && grep -q -- "- forward update 2, expected 1" "$work/log"; then
  pass "pytest --fp8audit fails the 2/1 test, with: $(grep -m 1 -o -- "- forward update 2, expected 1.*" "$work/log")"
else
  fail "pytest --fp8audit on a test that is not 1/1 (exit $rc)" "$work/log"
fi

if ((${#failed[@]})); then
  echo "FAIL: pip route ($mode): ${#failed[@]} check(s) failed: $(IFS=';'; echo "${failed[*]}")"
  exit 1
fi
echo "PASS: pip route ($mode): all checks passed"
