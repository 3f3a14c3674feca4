#!/usr/bin/env python3
"""Plain PyTorch jobs with no DelayedScaling update (issue 12, item 4): eager BF16, torch.compile
with CUDA graphs (mode="reduce-overhead"), and an FP8 GEMM through torch._scaled_mm. Each marks its
microbatches with the fp8audit.microbatch NVTX range, so under `fp8audit run` every microbatch has
zero updates: nothing to judge (exit 2), never a pass (0) or a violation (3).

  python3 tests/live_te/plain_jobs.py --job eager|compile|scaled_mm [--microbatches 6]
"""

from __future__ import annotations

import argparse
import sys

import torch


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", choices=["eager", "compile", "scaled_mm"], required=True)
    p.add_argument("--microbatches", type=int, default=6)
    args = p.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 512)).to(dev, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = model
    if args.job == "compile":
        step = torch.compile(model, mode="reduce-overhead")
    w8 = torch.randn(512, 512, device=dev).to(torch.float8_e4m3fn)
    one = torch.ones((), device=dev)
    for _ in range(args.microbatches):
        torch.cuda.nvtx.range_push("fp8audit.microbatch")
        x = torch.randn(256, 512, device=dev, dtype=torch.bfloat16)
        if args.job == "scaled_mm":
            y = torch._scaled_mm(x.to(torch.float8_e4m3fn), w8.t(), scale_a=one, scale_b=one,
                                 out_dtype=torch.bfloat16)
            loss = y.float().pow(2).mean()
        else:
            loss = step(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print(f"loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
