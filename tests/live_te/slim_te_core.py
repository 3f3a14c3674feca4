#!/usr/bin/env python3
"""Makes Transformer Engine's core wheel small enough to carry to an offline GPU machine in one
piece: in every shared library of the wheel, the device code (cubins) built for GPU architectures
other than the kept ones is overwritten with zeros, which the wheel's deflate then shrinks to
almost nothing. Headers of the fat binaries are left as they are, so the CUDA driver still sees
every entry and picks the one for its GPU (an H200: sm_90); the zeroed entries are never loaded
there. The wheel keeps its name; its RECORD is rewritten with the new hashes.

    slim_te_core.py IN.whl OUT.whl [--keep-arch 90]

Prints, per library, the bytes of device code kept and zeroed. Exit 2 when no fat binary of the
kept architecture is found (the result would not run on that GPU). Only for carrying a downloaded
wheel to a test machine: nothing here is committed but this script."""

from __future__ import annotations

import argparse
import base64
import hashlib
import struct
import sys
import zipfile
from typing import Dict, Iterator, List, Tuple

FATBIN_MAGIC = 0xBA55ED50
ELF_MAGIC = b"\x7fELF"


def _sections(elf: bytes) -> Iterator[Tuple[str, int, int]]:
    """(name, file offset, size) of every section of a 64-bit little-endian ELF file."""
    if elf[:4] != ELF_MAGIC or elf[4] != 2 or elf[5] != 1:
        return
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def header(i: int) -> Tuple[int, int, int]:
        base = shoff + i * shentsize
        name, = struct.unpack_from("<I", elf, base)
        offset, size = struct.unpack_from("<QQ", elf, base + 0x18)
        return name, offset, size
    _, str_off, str_size = header(shstrndx)
    names = elf[str_off:str_off + str_size]
    for i in range(shnum):
        name, offset, size = header(i)
        end = names.index(b"\0", name)
        yield names[name:end].decode(), offset, size


def slim_library(data: bytearray, keep: set) -> Tuple[int, int]:
    """Zeroes in place the payload of every fat-binary entry for an architecture not in `keep`.
    Returns (bytes kept, bytes zeroed) of entry payloads."""
    kept = zeroed = 0
    for name, offset, size in list(_sections(bytes(data[:]))):
        if name != ".nv_fatbin":
            continue
        pos, end_section = offset, offset + size
        while pos + 16 <= end_section:
            magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
            if magic != FATBIN_MAGIC:
                pos += 8  # fat binaries are 8-byte aligned within the section
                continue
            entry, end = pos + header_size, pos + header_size + fat_size
            while entry + 32 <= end:
                _kind, _ver, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
                arch, = struct.unpack_from("<I", data, entry + 28)
                start = entry + entry_header
                if arch in keep:
                    kept += payload
                else:
                    data[start:start + payload] = bytes(payload)
                    zeroed += payload
                entry = start + payload
            pos = end
    return kept, zeroed


def _record_line(name: str, content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(content)}"


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel")
    ap.add_argument("out")
    ap.add_argument("--keep-arch", type=int, action="append", default=None,
                    help="GPU architecture whose device code stays (sm_NN as NN; default 90)")
    args = ap.parse_args(argv)
    keep = set(args.keep_arch or [90])
    files: Dict[str, bytes] = {}
    record_name = None
    total_kept = 0
    with zipfile.ZipFile(args.wheel) as src:
        for info in src.infolist():
            content = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                record_name = info.filename
                continue
            if ".so" in info.filename.rsplit("/", 1)[-1] and content[:4] == ELF_MAGIC:
                buf = bytearray(content)
                kept, zeroed = slim_library(buf, keep)
                if kept or zeroed:
                    print(f"{info.filename}: device code kept {kept / 1e6:.1f} MB, "
                          f"zeroed {zeroed / 1e6:.1f} MB")
                total_kept += kept
                content = bytes(buf)
            files[info.filename] = content
    if record_name is None:
        print(f"slim_te_core: {args.wheel} has no RECORD: not a wheel", file=sys.stderr)
        return 2
    if total_kept == 0:
        print(f"slim_te_core: no device code for sm_{sorted(keep)} in {args.wheel}",
              file=sys.stderr)
        return 2
    lines = [_record_line(n, c) for n, c in files.items()] + [f"{record_name},,"]
    files[record_name] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(args.out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for name, content in files.items():
            dst.writestr(name, content)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
