#!/usr/bin/env bash
# On a machine with PyPI access: packs what the offline GPU machine needs for the live runs into
# .carry/ (git-ignored), small enough to travel in one call (under 64 MiB):
#   kit.tar.xz         the build dependencies it lacks (../shared/device/make-kit.sh's .devkit)
#   te-VERSION/        Transformer Engine VERSION: its core wheel with device code for sm_90 only
#                      (slim_te_core.py), the Python wheel, pydantic's, the PyTorch extension built
#                      ahead of time (build_te_ext.sh, from fetch_te.sh's download in .te)
#   wheels/            megatron-core (and any other pure job dependency named in EXTRA_WHEELS)
#   tetests.tar.xz     TE's own tests/pytorch (from a TE git directory, TE_GIT, at TE_TESTS_REV)
# Usage: prepare_carry.sh [VERSION]   (default 2.20.2; TE_DIR: fetch_te.sh's download, default
# .te). Nothing here is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:-2.20.2}
here=tests/live_te
mkdir -p .carry/wheels ".carry/te-$version"
if [[ -d .devkit ]]; then tar -cJf .carry/kit.tar.xz .devkit; fi
te=${TE_DIR:-.te}
core=$(ls "$te"/transformer_engine_cu13-"$version"-*.whl)
python3 "$here/slim_te_core.py" "$core" ".carry/te-$version/$(basename "$core")"
cp "$te"/transformer_engine-"$version"-*.whl "$te"/pydantic*.whl "$te"/annotated_types-*.whl \
  "$te"/typing_inspection-*.whl ".carry/te-$version/"
ext=$(ls "$te"/transformer_engine_torch-"$version"-cp312-*.whl 2>/dev/null | head -n 1 || true)
if [[ -n "$ext" ]]; then cp "$ext" ".carry/te-$version/"; else
  echo "prepare_carry: no prebuilt extension for $version (build_te_ext.sh): it builds there" >&2
  cp "$te/transformer_engine_torch-$version-src.tar.gz" ".carry/te-$version/"
fi
py=(--python-version 3.12 --implementation cp --only-binary=:all:)
python3 -m pip download -q --no-deps "${py[@]}" -d .carry/wheels "megatron-core==${MCORE_VERSION:-0.19.2}" \
  ${EXTRA_WHEELS:-}
if [[ -n "${TE_GIT:-}" ]]; then
  tmp=$(mktemp -d)
  git --git-dir "$TE_GIT" archive "${TE_TESTS_REV:-HEAD}" tests/pytorch | tar -C "$tmp" -x
  tar -C "$tmp/tests" -cJf .carry/tetests.tar.xz pytorch
  rm -rf "$tmp"
fi
du -sh .carry
