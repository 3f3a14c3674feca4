#!/usr/bin/env bash
# Installs what fp8audit needs to build and test, where it is missing (Debian/Ubuntu, as root or
# with sudo). CUDA, CUPTI and NVTX are used from /usr/local/cuda when present; nothing needs a GPU.
set -euo pipefail
pkgs=(build-essential cmake ninja-build libprotobuf-dev protobuf-compiler libcli11-dev
      libgtest-dev libtorch-dev python3 python3-torch clang libclang-rt-14-dev chromium)
pkgs+=(nlohmann-json3-dev)  # reports/: the JSON of the streaming formats (chrome-trace, metrics)
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
