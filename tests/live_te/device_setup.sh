#!/usr/bin/env bash
# On the offline GPU machine, in the repository root, with .carry/ from prepare_carry.sh: one call
# sets up the live runs and keeps them under LIVE (default /opt/fp8audit-live, outside the
# checkout, so a later call on the same machine finds them):
#   LIVE/devkit      the build kit; LIVE/te-VERSION/site  TE installed (pip --target);
#   LIVE/wheels/site megatron-core and the other carried wheels; LIVE/tetests  TE's tests/pytorch
# then builds fp8audit into build/ (TARGETS, default all) against python3's torch.
# Prints the exports for later commands: PYTHONPATH (TE, then the wheels), FP8AUDIT_MODEL_LIB, and
# LD_PRELOAD where TE's core library needs cublaslt_grouped_stub.c (TE 2.14.1 on CUDA 13.0).
# Usage: device_setup.sh [VERSION]   (default 2.20.2); TARGETS="fp8audit fp8audit_agent ...";
# SKIP_BUILD=1 leaves the build out. Each step's time goes to stderr.
set -euo pipefail
SECONDS=0
took() { echo "device_setup: $1 at ${SECONDS} s" >&2; }
cd "$(dirname "$0")/../.."
version=${1:-2.20.2}
live=${LIVE:-/opt/fp8audit-live}
mkdir -p "$live"
if [[ -f .carry/kit.tar.xz && ! -d "$live/devkit" ]]; then
  tar -C "$live" -xJf .carry/kit.tar.xz && mv "$live/.devkit" "$live/devkit"
fi
took kit
site="$live/te-$version/site"
if [[ -d ".carry/te-$version" && ! -d "$site" ]]; then
  # Installed into $site.tmp and moved into place once whole: a failed step is tried again by
  # the next call rather than left as a broken TE.
  w=".carry/te-$version"
  final=$site
  site=$site.tmp
  rm -rf "$site" && mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
    "$w"/transformer_engine_cu13-*.whl "$w"/transformer_engine-"$version"-*.whl "$w"/pydantic*.whl \
    "$w"/annotated_types-*.whl "$w"/typing_inspection-*.whl
  stage=$(mktemp -d)
  ext=$(ls "$w"/transformer_engine_torch-*-cp312-*.whl 2>/dev/null | head -n 1 || true)
  if [[ -n "$ext" ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$stage" "$ext"
  else
    # No extension built ahead (build_te_ext.sh): build it here from the carried source package
    # against this machine's PyTorch, for sm_90 (about 100 s on 16 cores). cudnn.h and nccl.h come
    # from PyTorch's own CUDA wheels.
    src_pkg=$(ls "$w"/transformer_engine_torch-*-src.tar.gz 2>/dev/null | head -n 1 || true)
    [[ -n "$src_pkg" ]] || { echo "device_setup: no TE extension in $w, built or as source" >&2; exit 1; }
    command -v nvcc >/dev/null && command -v ninja >/dev/null &&
      python3 -c 'import setuptools' 2>/dev/null || {
      echo "device_setup: building TE's extension here needs nvcc, ninja and python3's setuptools (or build_te_ext.sh's wheel in $w)" >&2
      exit 1
    }
    inc=$(python3 -c '
import importlib.util, pathlib
dirs = []
for name in ("nvidia.cudnn", "nvidia.nccl"):
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if (pathlib.Path(loc) / "include").is_dir():
            dirs.append(str(pathlib.Path(loc) / "include"))
print(":".join(dirs))')
    src=$(mktemp -d)
    tar -C "$src" -xzf "$src_pkg"
    (cd "$src" && CPATH="$inc${CPATH:+:$CPATH}" NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_FRAMEWORK=pytorch \
      NVTE_CUDA_ARCHS=90 MAX_JOBS=$(nproc) python3 -m pip install -q --no-index --no-deps \
      --no-build-isolation --no-cache-dir --target "$stage" .) >&2
    took "TE extension built"
  fi
  cp -a "$stage"/. "$site"/
  mv "$site" "$final"
  site=$final
fi
took "TE $version"
if [[ -d .carry/wheels && ! -d "$live/wheels/site" ]]; then
  mkdir -p "$live/wheels/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$live/wheels/site" .carry/wheels/*.whl
fi
if [[ -f .carry/tetests.tar.xz && ! -d "$live/tetests" ]]; then
  mkdir -p "$live/tetests" && tar -C "$live/tetests" -xJf .carry/tetests.tar.xz
fi
export PYTHONPATH="$site:$live/wheels/site${PYTHONPATH:+:$PYTHONPATH}"
te_import() { python3 -c "import transformer_engine.pytorch, transformer_engine as t; print('transformer_engine', t.__version__)"; }
preload=""
if ! err=$(te_import 2>&1 >/dev/null); then
  if [[ $err == *"undefined symbol: cublasLtGroupedMatrixLayoutInit_internal"* ]]; then
    # TE 2.14.1 links a cuBLAS entry point that CUDA 13.0's lacks (cublaslt_grouped_stub.c).
    stub="$live/te-$version/libcublaslt_grouped_stub.so"
    gcc -shared -fPIC -O2 -Wl,--version-script=tests/live_te/cublaslt_grouped_stub.map \
      -o "$stub" tests/live_te/cublaslt_grouped_stub.c
    preload=$stub
    export LD_PRELOAD="$stub${LD_PRELOAD:+:$LD_PRELOAD}"
    echo "device_setup: TE $version's core library needs cuBLAS's grouped GEMM layout; preloading $stub" >&2
  else
    echo "$err" >&2
    exit 1
  fi
fi
te_import >&2
took "TE import"
K=$live/devkit
if [[ ${SKIP_BUILD:-0} == 1 ]]; then
  echo "export PYTHONPATH=$PYTHONPATH${preload:+ LD_PRELOAD=$LD_PRELOAD}"
  exit 0
fi
if [[ ! -f build/CMakeCache.txt ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$K" \
    -DProtobuf_PROTOC_EXECUTABLE="$K/bin/protoc" -DProtobuf_INCLUDE_DIR="$K/include" \
    -DProtobuf_LIBRARY="$K/lib/x86_64-linux-gnu/libprotobuf.so" >/dev/null
  took configure
fi
# shellcheck disable=SC2086
cmake --build build -j"$(nproc)" ${TARGETS:+--target $TARGETS} >/dev/null
took build
echo "export PYTHONPATH=$PYTHONPATH FP8AUDIT_MODEL_LIB=$PWD/build/lib/libfp8audit_model.so${preload:+ LD_PRELOAD=$LD_PRELOAD}"
