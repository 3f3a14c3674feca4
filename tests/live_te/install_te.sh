#!/usr/bin/env bash
# On the offline GPU machine, in the repository root: joins the core wheel parts carried under
# .te/parts, installs Transformer Engine's wheels into .te/site (kept between calls, git-ignored)
# and builds the PyTorch extension from its source package against the local PyTorch.
# Afterwards: export PYTHONPATH=<TE dir>/site (default .te/site)
set -euo pipefail
te=$(realpath "${1:-.te}")
site="$te/site"
name=$(cat "$te/parts/core.name")
cat "$te"/parts/core.part* >"$te/$name"
echo "$(cat "$te/parts/core.sha256")  $te/$name" | sha256sum -c --quiet
mkdir -p "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$site" "$te/$name" "$te"/transformer_engine-*.whl "$te"/pydantic*.whl \
  "$te"/annotated_types-*.whl "$te"/typing_inspection-*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
# The extension includes cudnn.h and nccl.h, which PyTorch's own CUDA wheels (nvidia-cudnn-cu13,
# nvidia-nccl-cu13) carry; the CUDA toolkit does not.
wheel_includes=$(python3 -c '
import importlib.util, pathlib
dirs = []
for name in ("nvidia.cudnn", "nvidia.nccl"):
    spec = importlib.util.find_spec(name)
    for loc in (spec.submodule_search_locations or []) if spec else []:
        if (pathlib.Path(loc) / "include").is_dir():
            dirs.append(str(pathlib.Path(loc) / "include"))
print(":".join(dirs))')
export CPATH="$wheel_includes${CPATH:+:$CPATH}"
# The extension's wheel puts its library under transformer_engine/, which pip --target will not
# merge into an existing package directory: stage it, then copy it over. A wheel built ahead of
# time (build_te_ext.sh) is only unpacked; otherwise the extension is built here from source.
stage=$(mktemp -d)
prebuilt=$(ls "$te"/transformer_engine_torch-*-cp312-*.whl 2>/dev/null | head -n 1 || true)
if [[ -n "$prebuilt" ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$stage" \
    "$prebuilt"
else
  src=$(mktemp -d)
  tar -C "$src" -xzf "$te"/transformer_engine_torch-*-src.tar.gz
  (cd "$src" && NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_FRAMEWORK=pytorch NVTE_CUDA_ARCHS=90 \
    MAX_JOBS=$(nproc) python3 -m pip install -q --no-index --no-deps --no-build-isolation \
    --no-cache-dir --target "$stage" .)
fi
cp -a "$stage"/. "$site"/
python3 -c "import transformer_engine.pytorch as te, transformer_engine; print('transformer_engine', transformer_engine.__version__)"
