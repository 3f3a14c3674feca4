#!/usr/bin/env bash
# Installs what fp8audit needs to build and test, where it is missing (Debian/Ubuntu, as root or
# with sudo). CUDA, CUPTI and NVTX are used from /usr/local/cuda when present; nothing needs a GPU.
#
# PyTorch: the build uses the PyTorch of one Python interpreter (CMake's FP8AUDIT_PYTHON; see
# cmake/Fp8auditTorch.cmake for how it is chosen). This script makes sure there is one:
#   - $FP8AUDIT_PYTHON when set (it must already have torch >= 2; nothing is installed into it);
#   - else ./.venv when it holds the pinned torch (checked through a stamp file: no import);
#   - else python3 when it already has torch >= 2 (e.g. a GPU machine's job environment, which may
#     have no network): used as it is;
#   - else ./.venv is (re)created with python3 -m venv and torch==$FP8AUDIT_TORCH_VERSION from PyPI
#     (about 2.6 GB of wheels, 4.6 GB installed). Wheels are kept in $FP8AUDIT_WHEELHOUSE (default
#     ~/.cache/fp8audit/wheels) so a second clone on the same machine installs without downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake ninja-build libprotobuf-dev protobuf-compiler libcli11-dev
      libgtest-dev python3 python3-venv clang libclang-rt-14-dev chromium binutils)
pkgs+=(ccache)  # rebuilds of the same sources (a second clone, the pip route) come from its cache
pkgs+=(nlohmann-json3-dev)  # reports/: the JSON of the streaming formats (chrome-trace, metrics)
pkgs+=(zsh)  # tests/cli: the zsh completion script is checked by zsh itself
pkgs+=(curl)  # scripts/build_wheel.sh: Protobuf's source from the Debian archive
if [[ "${FP8AUDIT_SETUP_EXTRA:-}" != "" ]]; then read -r -a extra <<<"$FP8AUDIT_SETUP_EXTRA"; pkgs+=("${extra[@]}"); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- PyTorch ----------------------------------------------------------------------------------
torch_version=${FP8AUDIT_TORCH_VERSION:-2.11.0}
venv=.venv
# numpy: torch warns on import without it; pytest: the Python suites (tests/python); mypy: their
# type check (CTest python_typecheck); lightning: tests/python/test_lightning.py runs its Trainer
# and Fabric on the stand-in of TE (issue 33).
req=("torch==$torch_version" numpy pytest mypy==2.4.1 lightning==2.6.6)
stamp=$venv/.fp8audit-$(echo "${req[*]}" | tr ' =' '_-')
has_torch2() {  # PYTHON: exit 0 when it imports torch 2.x or later
  "$1" -c 'import sys, torch; sys.exit(int(torch.__version__.split(".")[0]) < 2)' >/dev/null 2>&1
}
if [[ -n "${FP8AUDIT_PYTHON:-}" ]]; then
  if ! has_torch2 "$FP8AUDIT_PYTHON"; then
    echo "setup: FP8AUDIT_PYTHON=$FP8AUDIT_PYTHON has no torch 2.x" >&2
    exit 2
  fi
  exit 0
fi
if [[ -f "$stamp" && -x $venv/bin/python ]]; then exit 0; fi
if [[ ! -d $venv ]] && command -v python3 >/dev/null && has_torch2 python3; then
  exit 0  # python3's own torch (no venv is made, so CMake takes python3: cmake/Fp8auditTorch.cmake)
fi
echo "setup: creating $venv with torch==$torch_version from PyPI (a few minutes on a fresh machine)" >&2
rm -rf "$venv"
python3 -m venv "$venv"
wheels=${FP8AUDIT_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit/wheels}
mkdir -p "$wheels"
# From the wheelhouse alone when it has everything (no index, works offline), else download first.
if ! $venv/bin/pip install -q --no-index --find-links "$wheels" "${req[@]}" 2>/dev/null; then
  $venv/bin/pip download -q -d "$wheels" "${req[@]}"
  $venv/bin/pip install -q --no-index --find-links "$wheels" "${req[@]}"
fi
# TE 2.20.2's Python wheel (pure Python, 1.2 MB): tests/python/test_gate_te_source.py checks the
# fix's fingerprints against that release's own source.
$venv/bin/pip download -q --no-deps --only-binary=:all: -d "$wheels" "transformer-engine==2.20.2" ||
  echo "setup: TE 2.20.2's wheel not downloaded: python_gate_te_source will say skipped" >&2
abi=$($venv/bin/python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
if [[ "$abi" != 1 ]]; then
  echo "setup: torch==$torch_version was built with the pre-C++11 libstdc++ ABI; fp8audit needs the C++11 ABI" >&2
  exit 1
fi
touch "$stamp"
