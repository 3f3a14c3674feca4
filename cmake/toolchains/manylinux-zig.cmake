# The toolchain of the wheel (scripts/build_wheel.sh): zig's clang, whose own glibc stubs and
# headers target an old glibc (FP8AUDIT_GLIBC, default 2.28: manylinux_2_28, as torch's and TE's
# wheels) and whose libc++ is linked statically, its symbols hidden by each library's version
# script. The binaries then need libc, libm, libdl and libpthread alone: no libstdc++, so none of
# the job's (torch's libstdc++ symbols: pytorch/pytorch#133437) is ever used. zig: $FP8AUDIT_ZIG,
# else zig on PATH (pip's ziglang puts it in site-packages/ziglang/zig).
set(CMAKE_C_COMPILER ${CMAKE_CURRENT_LIST_DIR}/zig-cc)
set(CMAKE_CXX_COMPILER ${CMAKE_CURRENT_LIST_DIR}/zig-c++)
