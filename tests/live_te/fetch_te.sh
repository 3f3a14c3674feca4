#!/usr/bin/env bash
# On a machine with PyPI access: downloads Transformer Engine (core wheel for CUDA 13, the
# framework-independent Python wheel, and the PyTorch extension's source package) into DEST
# (default .te, git-ignored) and splits the large core wheel into parts small enough to carry to
# an offline GPU machine one call at a time. Nothing downloaded is committed.
set -euo pipefail
dest=${1:-.te}
version=${TE_VERSION:-2.20.2}
mkdir -p "$dest"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${plat[@]}" -d "$dest" "transformer-engine-cu13==$version" \
  "transformer-engine==$version" pydantic pydantic-core annotated-types typing-inspection
# The PyTorch extension ships as source only, and pip cannot prepare its metadata without torch;
# --no-clean keeps the unpacked source package, which is all that is needed.
tmp=$(mktemp -d)
TMPDIR=$tmp python3 -m pip download -q --no-deps --no-binary=:all: --no-build-isolation \
  --no-clean -d "$dest" "transformer-engine-torch==$version" >/dev/null 2>&1 || true
src=$(find "$tmp" -maxdepth 2 -type d -name 'transformer-engine-torch_*' | head -n 1)
[[ -n "$src" && -f "$src/setup.py" ]] || { echo "fetch_te: no transformer-engine-torch source" >&2; exit 1; }
tar -C "$src" -czf "$dest/transformer_engine_torch-$version-src.tar.gz" .
rm -rf "$tmp"
core=$(ls "$dest"/transformer_engine_cu13-*.whl)
mkdir -p "$dest/parts"
split -b 56M -d "$core" "$dest/parts/core.part"
sha256sum "$core" | awk '{print $1}' >"$dest/parts/core.sha256"
basename "$core" >"$dest/parts/core.name"
ls -la "$dest" "$dest/parts"
