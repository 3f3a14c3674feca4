#!/usr/bin/env python3
"""One PyTorch training configuration: median step time over timed steps (after warm-up).

--config gpu_bound     120 blocks of Linear(2048) + GELU + LayerNorm, 8192 tokens, bf16
--config launch_bound  120 blocks of Linear(256) + GELU + LayerNorm, 256 tokens, bf16
--count-from DIR       under the agent: read its trace in DIR for the launches per step
--toggle               under a tool exporting fp8audit_set_launch_probe (the agent, the counting-only
                       subscriber): timed steps alternate probe on / probe off in this one process;
                       adds the medians of both and the median ratio of adjacent on/off pairs
Prints one JSON line.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "agent", "gpu"))
from torch_launch_count import read_trace, STEP  # noqa: E402

CONFIGS = {"gpu_bound": (2048, 8192), "launch_bound": (256, 256)}


def find_toggle():
    """The loaded tool's fp8audit_set_launch_probe, checked to work, or None."""
    import ctypes
    libs = [None]  # the global scope: an LD_PRELOAD-ed agent
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if path:
        libs.append(path)
    for lib in libs:
        try:
            handle = ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_NOLOAD) if lib else ctypes.CDLL(None)
            fn = handle.fp8audit_set_launch_probe
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        if fn(1) == 0:
            return fn
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=CONFIGS, required=True)
    ap.add_argument("--blocks", type=int, default=120)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--count-from")
    ap.add_argument("--toggle", action="store_true")
    args = ap.parse_args()
    import torch
    width, tokens = CONFIGS[args.config]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[
        torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width))
        for _ in range(args.blocks)]).cuda().to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)

    def step():
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    toggle = find_toggle() if args.toggle else None
    if args.toggle and toggle is None:
        sys.exit("--toggle: no loaded tool exports fp8audit_set_launch_probe, or it has no probe")
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    on_times, off_times = [], []
    torch.cuda.nvtx.mark("fp8audit.step")
    for i in range(args.steps):
        on = toggle is None or i % 2 == 0
        if toggle is not None:
            toggle(1 if on else 0)
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000
        (on_times if on else off_times).append(ms)
    if toggle is not None:
        toggle(1)
    torch.cuda.nvtx.mark("fp8audit.step")
    result = {"median_step_ms": statistics.median(on_times)}
    if toggle is not None:
        pairs = [a / b for a, b in zip(on_times, off_times)]
        result.update(probe_on_ms=statistics.median(on_times),
                      probe_off_ms=statistics.median(off_times),
                      paired_on_off_ratio=statistics.median(pairs))
    if args.count_from:
        time.sleep(0.3)  # two writer periods: the second mark is on disk
        pid = os.getpid()
        traces = glob.glob(os.path.join(args.count_from, f"*.{pid}.fp8trace"))
        if traces:
            _, events, _ = read_trace(traces[0])
            steps = [e for e in events if e["kind"] == STEP]
            if len(steps) >= 2:
                result["launches_per_step"] = (steps[-1]["launches"] - steps[0]["launches"]) // len(on_times)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
