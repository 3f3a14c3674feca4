#!/usr/bin/env bash
# On a machine with PyPI access and the CUDA 13 toolkit, but no GPU: builds Transformer Engine's
# PyTorch extension for the GPU machine (Python 3.12, PyTorch 2.11.0 from PyPI, sm_90 only) from
# the source package fetch_te.sh saved, so that install_te.sh there only unpacks it. The result,
# DEST/transformer_engine_torch-<version>-cp312-*.whl (about 1 MB), is not committed.
# Usage: build_te_ext.sh [DEST] (default .te); PYTHON312 names a Python 3.12 (default python3.12);
# the release is DEST's one source package's (fetch_te.sh TE_VERSION=...), or TE_VERSION.
# Takes about 25 minutes on 2 cores; MAX_JOBS sets the compile jobs.
set -euo pipefail
dest=$(realpath "${1:-.te}")
shopt -s nullglob
sources=("$dest"/transformer_engine_torch-*-src.tar.gz)
shopt -u nullglob
if [[ -z ${TE_VERSION:-} && ${#sources[@]} -eq 1 ]]; then
  version=${sources[0]##*/transformer_engine_torch-}
  version=${version%-src.tar.gz}
else
  version=${TE_VERSION:-2.20.2}
fi
py=${PYTHON312:-python3.12}
work=$(mktemp -d)
"$py" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "torch==${TORCH_VERSION:-2.11.0}" pybind11 ninja setuptools wheel packaging
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# cudnn.h and nccl.h come from PyTorch's CUDA wheels, as on the GPU machine.
export CPATH="$site/nvidia/cudnn/include:$site/nvidia/nccl/include${CPATH:+:$CPATH}"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH="$work/venv/bin:${CUDA_HOME:-/usr/local/cuda}/bin:$PATH"
mkdir -p "$work/src"
tar -C "$work/src" -xzf "$dest/transformer_engine_torch-$version-src.tar.gz"
(cd "$work/src" && NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 \
  MAX_JOBS=${MAX_JOBS:-$(nproc)} python -m pip wheel -q --no-deps --no-build-isolation \
  --no-cache-dir -w "$dest" .)
rm -rf "$work"
ls -la "$dest"/transformer_engine_torch-*.whl
