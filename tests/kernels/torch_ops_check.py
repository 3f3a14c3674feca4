"""Loads the fp8audit op library the way a Python user does and checks torch.ops.fp8audit.*.

    python3 tests/kernels/torch_ops_check.py BUILD/lib/libfp8audit_ops.so

Checks: every op is registered; CUDA results equal the CPU path bit for bit (when a GPU is
present); in-range values quantize exactly as PyTorch's own float8 conversion does (torch >= 2.1);
bad arguments raise errors that name the argument. Prints one line per check and exits non-zero
if any failed.
"""
import sys

import torch


FAILURES = []


def check(name, condition):
    print(("ok   " if condition else "FAIL ") + name)
    if not condition:
        FAILURES.append(name)


def raises_naming(fn, *fragments):
    try:
        fn()
    except RuntimeError as e:
        return all(f in str(e) for f in fragments)
    return False


def main():
    torch.ops.load_library(sys.argv[1])
    ops = torch.ops.fp8audit
    for name in ("cast_transpose", "quantize", "dequantize", "delayed_scaling_update"):
        check("registered " + name, hasattr(ops, name))

    torch.manual_seed(0)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {}
    for dev in devices:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for fmt in ("e4m3", "e5m2"):
                g = torch.Generator().manual_seed(1)
                x = (torch.randn(257, 1031, generator=g) * 50).to(dtype).to(dev)
                scale = torch.tensor([1.5], device=dev)
                amax = torch.zeros(1, device=dev)
                scale_inv = torch.zeros(1, device=dev)
                rw, cw = ops.cast_transpose(x, scale, amax, scale_inv, fmt)
                check(f"{dev} {dtype} {fmt}: columnwise is the transpose",
                      torch.equal(rw.t().contiguous(), cw))
                check(f"{dev} {dtype} {fmt}: amax", amax.item() == x.float().abs().max().item())
                deq = ops.dequantize(rw, scale_inv, fmt, torch.float32)
                results[(dev, dtype, fmt)] = [t.cpu() for t in (rw, cw, amax, scale_inv, deq)]
                if hasattr(torch, "float8_e4m3fn"):
                    # Where PyTorch's conversion does not saturate, it rounds like ours.
                    limit = 448.0 if fmt == "e4m3" else 57344.0
                    tdtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
                    y = x.float() * 1.5
                    inside = y.abs() < limit
                    theirs = y.clamp(-limit, limit).to(tdtype).view(torch.uint8)
                    check(f"{dev} {dtype} {fmt}: same codes as torch's float8 cast",
                          torch.equal(theirs[inside], rw[inside]))
    if "cuda" in devices:
        for key in results:
            if key[0] != "cuda":
                continue
            cpu = results[("cpu",) + key[1:]]
            same = all(torch.equal(a.view(torch.uint8) if a.dtype != torch.uint8 else a,
                                   b.view(torch.uint8) if b.dtype != torch.uint8 else b)
                       for a, b in zip(results[key], cpu))
            check(f"cuda == cpu bit for bit: {key[1]} {key[2]}", same)

    for dev in devices:
        hist = torch.rand(16, 4, device=dev) * 10
        scale = torch.ones(4, device=dev)
        sinv = torch.ones(4, device=dev)
        amax = hist.max(0).values.cpu()
        # Tensor / tensor: PyTorch computes scalar / tensor as reciprocal * scalar instead.
        expected = torch.full_like(amax, 448.0) / amax / 2.0
        ops.delayed_scaling_update(hist, scale, sinv, "e4m3", 1, "max")
        check(f"{dev}: delayed scaling update", torch.equal(scale.cpu(), expected))
        check(f"{dev}: history slot 0 cleared", bool((hist[0] == 0).all()))

        x = torch.ones(4, 4, device=dev)
        one = torch.ones(1, device=dev)
        check(f"{dev}: wrong dtype names 'input'",
              raises_naming(lambda: ops.quantize(x.int(), one, torch.zeros(1, device=dev),
                                                 torch.zeros(1, device=dev), "e4m3"), "'input'"))
        check(f"{dev}: wrong scale size names 'scale'",
              raises_naming(lambda: ops.cast_transpose(x, torch.ones(2, device=dev),
                                                       torch.zeros(1, device=dev),
                                                       torch.zeros(1, device=dev), "e4m3"),
                            "'scale'"))
        check(f"{dev}: non-contiguous input",
              raises_naming(lambda: ops.cast_transpose(torch.ones(4, 6, device=dev).t(), one,
                                                       torch.zeros(1, device=dev),
                                                       torch.zeros(1, device=dev), "e4m3"),
                            "'input'", "contiguous"))
        check(f"{dev}: unknown format",
              raises_naming(lambda: ops.dequantize(torch.zeros(4, dtype=torch.uint8, device=dev),
                                                   one, "e2m5", torch.float32), "'fp8_format'"))
    if "cuda" in devices:
        x = torch.ones(4, 4, device="cuda")
        check("cuda input with a cpu scale names 'scale'",
              raises_naming(lambda: ops.cast_transpose(x, torch.ones(1), torch.zeros(1, device="cuda"),
                                                       torch.zeros(1, device="cuda"), "e4m3"),
                            "'scale'", "same device"))
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all torch.ops.fp8audit checks passed")


if __name__ == "__main__":
    main()
