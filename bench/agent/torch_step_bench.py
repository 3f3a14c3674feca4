#!/usr/bin/env python3
"""One PyTorch training configuration: median step time over timed steps (after warm-up).

--config gpu_bound     120 blocks of Linear(2048) + GELU + LayerNorm, 8192 tokens, bf16
--config launch_bound  120 blocks of Linear(256) + GELU + LayerNorm, 256 tokens, bf16
--count-from DIR       under the agent: read its trace in DIR for the launches per step
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=CONFIGS, required=True)
    ap.add_argument("--blocks", type=int, default=120)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--count-from")
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

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    times = []
    torch.cuda.nvtx.mark("fp8audit.step")
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    torch.cuda.nvtx.mark("fp8audit.step")
    result = {"median_step_ms": statistics.median(times)}
    if args.count_from:
        time.sleep(0.3)  # two writer periods: the second mark is on disk
        pid = os.getpid()
        traces = glob.glob(os.path.join(args.count_from, f"*.{pid}.fp8trace"))
        if traces:
            _, events, _ = read_trace(traces[0])
            steps = [e for e in events if e["kind"] == STEP]
            if len(steps) >= 2:
                result["launches_per_step"] = (steps[-1]["launches"] - steps[0]["launches"]) // args.steps
    print(json.dumps(result))


if __name__ == "__main__":
    main()
