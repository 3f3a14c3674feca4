#!/usr/bin/env bash
# tests/package/pip_route.sh MODE: the README's install route, word for word, as a user takes it:
# the wheel installed into an environment that already has its own torch, then the README's
# commands in a fresh copy of the checkout (its tracked and unignored files). The commands come from
# README.md, the fenced block after the line `<!-- pip_route.sh: ... -->` (a comment a reader does
# not see): `pip install ./fp8audit-*.whl`, `fp8audit run -- python examples/...`, `pytest
# --fp8audit examples/`, run with the environment's bin/ first on PATH. One PASS or FAIL line per
# check; exit 1 if any fails:
#   the wheel: tagged py3-none-manylinux_2_28_x86_64, auditwheel's tag no newer than that, every ELF
#     file needing only glibc's libraries (no libstdc++, no libprotobuf), no torch library, no
#     requirement on anything;
#   installed beside torch 2.11 (the interpreter fp8audit builds with, through a .pth) and beside
#     metadata-only stand-ins of torch 2.9.1 and 2.8.0a0+nv25.6: `pip freeze` keeps their torch,
#     `pip check` is clean; `fp8audit --version`; `import fp8audit` without torch;
#     fp8audit.microbatch() never raising; fp8audit.te's model library from the wheel;
#   the README's commands: the example under `fp8audit run` (1/1 in each of 4 microbatches, with
#     LD_LIBRARY_PATH empty and no libprotobuf mapped into the job) and under torchrun, `pytest
#     --fp8audit examples/` passing, the plugin failing a test whose microbatch is 2/1;
#   the optional torch ops: `import fp8audit.ops` says how to get them; the fp8audit-ops sdist
#     refuses to build without the environment's torch (one line) and builds against torch 2.11
#     with --no-build-isolation; then torch.ops.fp8audit works.
#
# MODE:
#   commands  print the README's route as read and check it has its three steps (CTest
#             readme_pip_route runs this, so README and route cannot drift; nothing installed)
#   ci        what ./test.sh runs: builds the wheel and the ops sdist (scripts/build_wheel.sh, into
#             a temporary dist/), or takes them from FP8AUDIT_DIST when set; torch is the one
#             fp8audit builds with (FP8AUDIT_PYTHON, else ./.venv/bin/python, else python3)
#   gpu       a GPU machine without network: the wheel and sdist from FP8AUDIT_DIST (built on a
#             CPU machine), python3's torch; scikit-build-core for the ops from FP8AUDIT_WHEELHOUSE;
#             the ops build their CUDA kernels; no stand-in environments, no auditwheel
# Wheels for pip: FP8AUDIT_WHEELHOUSE (default ~/.cache/fp8audit/wheels, which build_wheel.sh
# fills). Build jobs: FP8AUDIT_JOBS (default: the number of cores); more pip arguments for the ops
# build: FP8AUDIT_OPS_ARGS (e.g. "-C cmake.define.CMAKE_CUDA_ARCHITECTURES=90-real"). Prints the
# time of each step.
set -uo pipefail
mode=${1:-}
case "$mode" in
  commands | ci | gpu) ;;
  *)
    echo "usage: tests/package/pip_route.sh commands|ci|gpu" >&2
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
shown() { local c=${1%%#*}; echo "${c%"${c##*[! ]}"}"; }  # LINE: without its comment, for the log
if ((${#route[@]} != 3)) || [[ "$install_line" != "pip install ./fp8audit-*.whl"* ||
  "$run_line" != "fp8audit run -- python examples/"* ||
  "$pytest_line" != "pytest --fp8audit examples/"* ]]; then
  echo "FAIL: pip route ($mode): README.md's route (the block after <!-- pip_route.sh: -->) is not" \
    "the three steps this test follows: pip install the wheel, fp8audit run, pytest --fp8audit:" >&2
  printf '    %s\n' "${route[@]}" >&2
  exit 1
fi
if [[ "$mode" == commands ]]; then
  printf '%s\n' "${route[@]}"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/fp8audit-pip.XXXXXX")
trap 'rm -rf "$work"' EXIT
export CMAKE_BUILD_PARALLEL_LEVEL=${FP8AUDIT_JOBS:-$(nproc)}
wheels=${FP8AUDIT_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit/wheels}
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

# ---- the artifacts ------------------------------------------------------------------------------
dist=${FP8AUDIT_DIST:-}
if [[ -z "$dist" ]]; then
  [[ "$mode" == ci ]] || stop "FP8AUDIT_DIST: the folder with the wheel and the ops sdist"
  dist=$work/dist
  timed "scripts/build_wheel.sh" scripts/build_wheel.sh "$dist" || stop "scripts/build_wheel.sh" "$work/log"
fi
dist=$(cd "$dist" && pwd)
whl=("$dist"/fp8audit-*.whl) sdist=("$dist"/fp8audit_ops-*.tar.gz)
[[ -f "${whl[0]}" && -f "${sdist[0]}" ]] || stop "no fp8audit wheel and ops sdist in $dist"
whl=${whl[0]} sdist=${sdist[0]}
if [[ "${whl##*/}" == fp8audit-*-py3-none-manylinux_2_28_x86_64.whl ]]; then
  pass "the wheel: ${whl##*/}"
else
  fail "the wheel is not tagged py3-none-manylinux_2_28_x86_64: ${whl##*/}"
fi
unpacked=$work/unpacked
python3 -m zipfile -e "$whl" "$unpacked" >/dev/null || stop "unzip ${whl##*/}"
needs=$(find "$unpacked" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print |
  while read -r f; do readelf -d "$f" | sed -n "s|.*(NEEDED).*\[\(.*\)\]|${f#"$unpacked"/}: \1|p"; done)
others=$(grep -v -E ': (libc|libm|libdl|libpthread|librt)\.so\.[0-9]+$|: ld-linux-x86-64\.so\.2$' <<<"$needs")
if [[ -n "$needs" && -z "$others" ]]; then
  pass "its ELF files need glibc's libraries alone ($(cut -d' ' -f2 <<<"$needs" | sort -u | tr '\n' ' '))"
else
  echo "$others" >"$work/log"
  fail "its ELF files need more than glibc's libraries" "$work/log"
fi
# What they take from the process: glibc's versioned symbols alone, so nothing in a job (its own
# Protobuf, libstdc++, torch's exports) can stand in for something of theirs.
unversioned=$(for f in "$unpacked"/fp8audit/lib/*.so "$unpacked"/fp8audit/bin/fp8audit; do
  nm -D --undefined-only "$f" | grep -v "@GLIBC_" | sed "s|^|${f##*/}: |"
done)
if [[ -z "$unversioned" ]]; then
  pass "every symbol they import is glibc's, versioned"
else
  echo "$unversioned" | head -n 20 >"$work/log"
  fail "they import symbols other than glibc's" "$work/log"
fi
# What the libraries export: their C entry points (and the shim's interposed TE, exec, exit and
# signal functions), never the C++ runtime or Protobuf linked into them, which stay private.
exports=$(for f in "$unpacked"/fp8audit/lib/*.so; do
  nm -D --defined-only "$f" | awk -v l="${f##*/}" '{print l ": " $3}'
done)
leaked=$(grep -v -E ': (fp8audit_[a-z_0-9]+|InitializeInjection(Nvtx2)?|nvte_delayed_scaling_recipe_[a-z_]+|_exit|_Exit|exec[lv][ep]*|fexecve|sigaction|signal)$' <<<"$exports")
if [[ -n "$exports" && -z "$leaked" ]]; then
  pass "its libraries export their C entry points alone ($(wc -l <<<"$exports") symbols)"
else
  echo "$leaked" | head -n 20 >"$work/log"
  fail "its libraries export more than their C entry points" "$work/log"
fi
if [[ -x ${FP8AUDIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit}/wheel-tools/bin/auditwheel ]]; then
  aw=${FP8AUDIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit}/wheel-tools/bin/auditwheel
  "$aw" show "$whl" >"$work/log" 2>&1
  tag=$(tr '\n' ' ' <"$work/log" | grep -o 'platform tag: "manylinux_2_[0-9]*_x86_64"' | grep -o '2_[0-9]*' | cut -d_ -f2)
  if [[ -n "$tag" ]] && ((tag <= 28)); then
    pass "auditwheel show: consistent with manylinux_2_${tag}_x86_64 (2_28 or older)"
  else
    fail "auditwheel show: not manylinux_2_28 or older" "$work/log"
  fi
elif [[ "$mode" == ci ]]; then
  fail "auditwheel: not in scripts/build_wheel.sh's tools venv"
fi
python3 - "$unpacked" >"$work/log" 2>&1 <<'PY'
import pathlib, sys
root = pathlib.Path(sys.argv[1])
meta = next(root.glob("fp8audit-*.dist-info/METADATA")).read_text()
files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
need = ["fp8audit/bin/fp8audit"] + [f"fp8audit/lib/{l}.so" for l in (
    "libfp8audit", "libfp8audit_impl", "libfp8audit_model", "libfp8audit_markers")] + [
    "fp8audit/te/__init__.py", "fp8audit/hook/site/sitecustomize.py", "fp8audit/pytest_plugin.py",
    "fp8audit/ops.py", "fp8audit/_build.py"]
missing = [f for f in need if f not in files]
assert not missing, f"missing: {missing}"
assert not [f for f in files if "libfp8audit_ops" in f], "the torch op library is in the wheel"
assert "Requires-Dist" not in meta, [l for l in meta.splitlines() if l.startswith("Requires-Dist")]
PY
if [[ $? == 0 ]]; then
  pass "it holds the command, the agent, the libraries and the package; no torch library, no requirements"
else
  fail "the wheel's contents" "$work/log"
fi

# ---- environments that already have a torch -----------------------------------------------------
venv_with() {  # DIR SITE: a venv that sees SITE's packages after its own (a .pth)
  python3 -m venv "$1" >/dev/null || return 1
  local purelib
  purelib=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  [[ -z "$2" ]] || echo "$2" >"$purelib/zz-fp8audit-route-torch.pth"
}
stand_in_torch() {  # VENV VERSION: torch's metadata alone (a torch that does not fit here)
  local purelib info
  purelib=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  info=$purelib/torch-$2.dist-info
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: torch\nVersion: %s\n' "$2" >"$info/METADATA"
  printf 'pip\n' >"$info/INSTALLER"
  printf 'torch-%s.dist-info/METADATA,,\ntorch-%s.dist-info/INSTALLER,,\ntorch-%s.dist-info/RECORD,,\n' \
    "$2" "$2" "$2" >"$info/RECORD"
}
new_problems() {  # VENV CHECK_BEFORE: `pip check` lines that are new since CHECK_BEFORE, or about
  # fp8audit (an environment whose own packages already miss requirements keeps those)
  "$1/bin/pip" check 2>&1 | grep -v -x -F -f <(printf '%s\n' "$2") | grep -v "^No broken"
  "$1/bin/pip" check 2>&1 | grep -i "fp8audit"
}
install_keeps_torch() {  # VENV WHAT: pip install the wheel; torch unchanged, pip check clean
  local before after checked
  before=$("$1/bin/pip" freeze 2>/dev/null | grep -i '^torch[= ]')
  checked=$("$1/bin/pip" check 2>&1)
  if ! timed "pip install ${whl##*/} ($2)" "$1/bin/pip" install --no-index "$whl"; then
    fail "pip install into $2" "$work/log"
    return 1
  fi
  after=$("$1/bin/pip" freeze 2>/dev/null | grep -i '^torch[= ]')
  new_problems "$1" "$checked" >"$work/log"
  if [[ -n "$before" && "$before" == "$after" && ! -s "$work/log" ]]; then
    pass "installed into $2: pip freeze keeps $after, pip check finds nothing new"
  else
    echo "torch before: $before; after: $after" >>"$work/log"
    fail "installed into $2: torch kept and pip check clean" "$work/log"
  fi
}
if [[ "$mode" == ci ]]; then
  for version in 2.9.1 2.8.0a0+nv25.6; do
    e=$work/stand-in-$version
    venv_with "$e" "" && stand_in_torch "$e" "$version"
    install_keeps_torch "$e" "an environment with torch $version (a metadata-only stand-in)" &&
      "$e/bin/fp8audit" --version >"$work/log" 2>&1 && grep -q "^fp8audit 0\." "$work/log" ||
      fail "fp8audit --version beside torch $version" "$work/log"
  done
fi

# The route's environment: torch (and pytest) of the interpreter fp8audit builds with, or python3's.
if [[ "$mode" == ci ]]; then
  py=${FP8AUDIT_PYTHON:-}
  [[ -n "$py" ]] || { [[ -x .venv/bin/python ]] && py=$src/.venv/bin/python; } || py=$(command -v python3)
else
  py=$(command -v python3)
fi
site=$("$py" -c 'import os, pytest, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>"$work/log") ||
  stop "$py has no torch and pytest (run scripts/setup.sh)" "$work/log"
v=$work/v
venv_with "$v" "$site" || stop "python3 -m venv"
torch_v=$("$v/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
printf '#!/bin/sh\nexec "%s" -m pytest "$@"\n' "$v/bin/python" >"$v/bin/pytest"  # pytest is $site's
chmod +x "$v/bin/pytest"
checkout=$work/checkout  # the fresh checkout: tracked and unignored files, nothing built
mkdir -p "$checkout"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [[ ! -e "$f" ]] || printf '%s\0' "$f"; done |
  tar -c --null -T - | tar -x -C "$checkout"
cp "$whl" "$checkout/"
# The user's environment as it is, but for fp8audit's own variables (a developer's shell may point
# them at a build tree).
route_env=(env)
for name in $(compgen -e | grep '^FP8AUDIT_'); do route_env+=(-u "$name"); done
route_env+=(PATH="$v/bin:$PATH" VIRTUAL_ENV="$v" LD_LIBRARY_PATH=)
before=$("$v/bin/pip" freeze 2>/dev/null | grep -i '^torch[= ]')
checked=$("$v/bin/pip" check 2>&1)
if (cd "$checkout" && timed "$(shown "$install_line")" "${route_env[@]}" bash -c "$install_line"); then
  after=$("$v/bin/pip" freeze 2>/dev/null | grep -i '^torch[= ]')
  new_problems "$v" "$checked" >"$work/log"
  if [[ ! -s "$work/log" && -n "$before" && "$before" == "$after" ]]; then
    pass "$(shown "$install_line"): beside torch $torch_v, pip freeze keeps $after, pip check finds nothing new"
  else
    echo "torch before: $before; after: $after" >>"$work/log"
    fail "$(shown "$install_line"): torch kept and pip check clean" "$work/log"
  fi
else
  stop "$install_line (beside torch $torch_v)" "$work/log"
fi

# ---- the checks (outside the source tree: the installed package, not python/) -------------------
cd "$work"
py=$v/bin/python
check_py() {  # WHAT CODE: PASS when CODE exits 0 (with the first line it prints on stdout)
  if "${route_env[@]}" "$py" -c "$2" >"$work/out" 2>"$work/log"; then
    pass "$1$([[ -s "$work/out" ]] && echo ": $(head -n 1 "$work/out")")"
  else
    cat "$work/out" >>"$work/log"
    fail "$1" "$work/log"
  fi
}
if "$v/bin/fp8audit" --version >"$work/log" 2>&1 && grep -q "^fp8audit 0\.[0-9]" "$work/log"; then
  pass "fp8audit --version: $(head -n 1 "$work/log")"
else
  fail "fp8audit --version" "$work/log"
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
if (cd "$checkout" && timed "$(shown "$run_line")" "${route_env[@]}" bash -c "$run_line") &&
  counts_check "$checkout/fp8audit-traces"; then
  pass "$(shown "$run_line"): 4 microbatches, 1/1 each"
else
  fail "$(shown "$run_line"): 4 microbatches, 1/1 each" "$work/log"
fi
cat >"$work/maps_job.py" <<'PY'
import sys
import fp8audit, torch
with fp8audit.microbatch():
    fp8audit.update("forward")
    fp8audit.update("backward")
maps = {line.split()[-1] for line in open("/proc/self/maps") if "/" in line}
protobuf = [m for m in maps if "libprotobuf" in m]
agent = [m for m in maps if m.endswith("/fp8audit/lib/libfp8audit_impl.so")]
print(f"agent {agent}, libprotobuf {protobuf}")
sys.exit(0 if agent and not protobuf else 1)
PY
if timed "fp8audit run -- python maps_job.py (LD_LIBRARY_PATH empty)" "${route_env[@]}" \
  fp8audit run --out traces-maps -- python "$work/maps_job.py"; then
  pass "under fp8audit run, LD_LIBRARY_PATH empty: the wheel's agent is in the job, no libprotobuf is"
else
  fail "the wheel's agent in the job, no libprotobuf mapped" "$work/log"
fi
if timed "fp8audit run -- torchrun --standalone --nproc-per-node 1 examples/fp8_job.py" \
  "${route_env[@]}" fp8audit run --out traces-torchrun -- python -m torch.distributed.run \
  --standalone --nproc-per-node 1 "$src/examples/fp8_job.py" && counts_check traces-torchrun &&
  ls traces-torchrun/*.rank0.fp8trace >/dev/null 2>&1; then
  pass "fp8audit run -- torchrun ... examples/fp8_job.py: rank 0, 4 microbatches, 1/1 each"
else
  fail "fp8audit run -- torchrun ... examples/fp8_job.py" "$work/log"
fi
if (cd "$checkout" && timed "$(shown "$pytest_line")" "${route_env[@]}" bash -c "$pytest_line") &&
  grep -q "2 passed" "$work/log" && ! grep -q "warning" "$work/log"; then
  pass "$(shown "$pytest_line"): 2 passed, no warning"
else
  fail "$(shown "$pytest_line"): 2 passed, no warning" "$work/log"
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
timed "pytest --fp8audit on a test that is not 1/1" "${route_env[@]}" pytest --fp8audit \
  -p no:cacheprovider not_one_one/
rc=$?
if ((rc == 1)) && grep -q "1 failed, 1 passed" "$work/log" &&
  grep -q "FAILED not_one_one/test_not_one_one.py::test_two_forward_updates" "$work/log" &&
  grep -q "did not make 1 forward / 1 backward" "$work/log" &&
  grep -q "forward 2, backward 1" "$work/log" && grep -q -- "- forward update 2, expected 1" "$work/log"; then
  pass "pytest --fp8audit fails the 2/1 test, with: $(grep -m 1 -o -- "- forward update 2, expected 1.*" "$work/log")"
else
  fail "pytest --fp8audit on a test that is not 1/1 (exit $rc)" "$work/log"
fi

# ---- the optional torch ops ---------------------------------------------------------------------
check_py "without fp8audit-ops, import fp8audit.ops says how to get it" '
try:
    import fp8audit.ops
except ImportError as e:
    assert "pip install --no-build-isolation fp8audit-ops" in str(e), e
    print(e)
else:
    raise AssertionError("fp8audit.ops imported without its library")'
skb=("$v/bin/pip" install -q --no-index --find-links "$wheels" "scikit-build-core>=0.10")
"${skb[@]}" >"$work/log" 2>&1 || stop "scikit-build-core from $wheels (scripts/build_wheel.sh puts it there)" "$work/log"
if [[ "$mode" == ci ]]; then
  e=$work/stand-in-2.9.1
  "$e/bin/pip" install -q --no-index --find-links "$wheels" "scikit-build-core>=0.10" >/dev/null 2>&1
  timed "pip install --no-build-isolation fp8audit-ops beside a torch that does not import" \
    "$e/bin/pip" install --no-build-isolation --no-index "$sdist"
  rc=$?
  said=$(tr -s ' \n' ' ' <"$work/log" | grep -o "fp8audit-ops builds against the torch of the [^(]*(torch installed first)")
  if ((rc != 0)) && [[ "$said" == *"cannot import torch: there, run pip install --no-build-isolation"* ]]; then
    pass "the ops sdist refuses a build without the environment's torch: ${said/$e/STAND-IN}"
  else
    fail "the ops sdist refuses to build without the environment's torch, saying why" "$work/log"
  fi
fi
cuda=()
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=(--config-settings cmake.define.FP8AUDIT_CUDA=OFF)
fi
read -r -a ops_args <<<"${FP8AUDIT_OPS_ARGS:-}"
if timed "pip install --no-build-isolation ${sdist##*/} ${cuda[*]} ${ops_args[*]}" "${route_env[@]}" \
  pip install --no-build-isolation --no-index "${cuda[@]}" "${ops_args[@]}" "$sdist"; then
  pass "fp8audit-ops built against torch $torch_v (--no-build-isolation)"
else
  fail "pip install --no-build-isolation ${sdist##*/}" "$work/log"
fi
check_py "import fp8audit.ops loads torch.ops.fp8audit from fp8audit-ops" '
import torch, fp8audit, fp8audit.ops as ops
assert "site-packages/fp8audit_ops/" in str(ops.PATH), ops.PATH
h, s, si = torch.tensor([[2.0], [4.0]]), torch.ones(1), torch.ones(1)
ops.delayed_scaling_update(h, s, si, "e4m3", 0, "max")
assert abs(float(s[0]) - 448.0 / 4.0) < 1e-3, s
print(ops.PATH)'

if ((${#failed[@]})); then
  echo "FAIL: pip route ($mode): ${#failed[@]} check(s) failed: $(IFS=';'; echo "${failed[*]}")"
  exit 1
fi
echo "PASS: pip route ($mode): all checks passed"
