"""Fails when a binary linked with libtorch uses a libstdc++ facility that PyTorch's libraries export.

    torch_linked_symbols.py --torch-lib-dir DIR [--extra FILE]... [--exclude DIR]... BUILD_DIR...

PyTorch's pip wheels link parts of a newer libstdc++ statically and export them with strong
definitions (std::filesystem, the C++20 time-zone database, ...; pytorch/pytorch#133437). In a
program linked with libtorch those definitions come before libstdc++.so's in symbol lookup, so a
call from our code lands in PyTorch's copy while the inline parts come from our compiler's headers:
std::filesystem::remove_all crashed that way.

Every ELF executable or shared library under BUILD_DIR whose DT_NEEDED names a library of DIR is
checked (plus each --extra file: e.g. the agent, preloaded into such programs): none of its
undefined dynamic symbols may be a std:: symbol that a library of DIR defines strongly (nm type T,
D, B or R), except the stateless helpers in ALLOWED. Prints one line per problem (binary, symbol)
and a summary; exits 1 on any problem, 2 on bad usage (no torch libraries, nothing checked).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator

# Exported by PyTorch too, but harmless to bind to its copy: they keep no state and share no
# layout with inline code (throwing a standard exception, the assertion handler, the iostream
# initialisation anchor of GCC 13+, exception_ptr reference counting, the futex wait of std::future).
ALLOWED = (
    re.compile(r"^std::__throw_"),
    re.compile(r"^std::__glibcxx_assert_fail\("),
    re.compile(r"^std::ios_base_library_init\(\)$"),
    re.compile(r"^std::__exception_ptr::exception_ptr::_M_(addref|release)\(\)$"),
    re.compile(r"^std::__atomic_futex_unsigned_base::_M_futex_wait_until"),
)
# std:: symbols of PyTorch's own (its template instantiations over its types) are not libstdc++'s.
TORCH_OWN = re.compile(r"\b(c10|at|torch|caffe2)::")


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def is_elf_object(path: str) -> bool:
    """True for an ELF executable or shared object (not a relocatable .o)."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return False
    return len(head) == 18 and head[:4] == b"\x7fELF" and head[16] in (2, 3)


def elf_files(root: str) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "CMakeFiles"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path) and is_elf_object(path):
                yield path


def needed(path: str) -> set[str]:
    out = run(["readelf", "-d", "-W", path])
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


def demangled_symbols(path: str, *flags: str) -> list[tuple[str, str, str]]:
    """(type, mangled name without @version, demangled name) of the dynamic symbols nm lists."""
    rows: list[tuple[str, str]] = []
    for line in run(["nm", "-D", *flags, path]).splitlines():
        fields = line.split()
        if len(fields) >= 2:
            rows.append((fields[-2], fields[-1].split("@")[0]))
    if not rows:
        return []
    names = subprocess.run(
        ["c++filt"], input="\n".join(m for _, m in rows) + "\n", check=True,
        capture_output=True, text=True,
    ).stdout.splitlines()
    return [(kind, mangled, name) for (kind, mangled), name in zip(rows, names)]


def exported_libstdcxx(torch_libs: Iterable[str]) -> dict[str, str]:
    """mangled -> demangled for the strong std:: definitions the torch libraries export."""
    out: dict[str, str] = {}
    for lib in torch_libs:
        for kind, mangled, name in demangled_symbols(lib, "--defined-only"):
            if kind in "TDBR" and name.startswith("std::") and not TORCH_OWN.search(name):
                out[mangled] = name
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-lib-dir", required=True)
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[], help="a folder not to scan")
    parser.add_argument("--canary", metavar="NAME",
                        help="the binaries are canaries that call NAME: exit 77 (skip) where the "
                             "torch libraries export no NAME or the toolchain resolved it inside "
                             "the canary (no dynamic reference): nothing can be flagged there")
    parser.add_argument("build_dirs", nargs="+")
    args = parser.parse_args(argv)

    torch_libs = sorted(
        os.path.join(args.torch_lib_dir, n)
        for n in os.listdir(args.torch_lib_dir)
        if n.endswith(".so") and (n.startswith("libtorch") or n.startswith("libc10"))
    )
    if not torch_libs:
        print(f"torch_linked_symbols: no libtorch*/libc10* in {args.torch_lib_dir}")
        return 2
    lib_names = {os.path.basename(p) for p in torch_libs}
    forbidden = exported_libstdcxx(torch_libs)
    if args.canary and not any(n.startswith(args.canary) for n in forbidden.values()):
        print(f"SKIP: the {len(torch_libs)} torch libraries in {args.torch_lib_dir} export no "
              f"{args.canary}... ({len(forbidden)} libstdc++ symbols): nothing to flag")
        return 77

    checked: list[str] = []
    problems: list[tuple[str, str]] = []
    excluded = [os.path.realpath(e) + os.sep for e in args.exclude]
    candidates = [
        p
        for d in args.build_dirs
        for p in elf_files(d)
        if not any(os.path.realpath(p).startswith(e) for e in excluded)
    ]
    targets = [p for p in candidates if needed(p) & lib_names] + args.extra
    if args.canary and not any(
            name.startswith(args.canary)
            for path in targets for _k, _m, name in demangled_symbols(path, "--undefined-only")):
        print(f"SKIP: no canary refers to {args.canary}... dynamically (the toolchain resolved it "
              "inside the program, e.g. a static libstdc++): nothing to flag")
        return 77
    for path in sorted(set(targets)):
        checked.append(path)
        for _kind, mangled, name in demangled_symbols(path, "--undefined-only"):
            if mangled in forbidden and not any(a.search(name) for a in ALLOWED):
                problems.append((path, name))
    for path, name in problems:
        print(f"{path}: uses {name}, which PyTorch's libraries also export")
    print(
        f"torch_linked_symbols: {len(checked)} binaries checked against "
        f"{len(forbidden)} libstdc++ symbols exported by {len(torch_libs)} torch libraries; "
        f"{len(problems)} problem(s)"
    )
    for path in checked:
        print(f"  checked {path}")
    if not checked:
        return 2
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
