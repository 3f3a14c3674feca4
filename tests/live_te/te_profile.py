#!/usr/bin/env python3
"""A TE training job that profiles two of its microbatches with torch.profiler (CPU and CUDA
activities), as training scripts do: the reentrant-per-layer layout of te_counts.py, 4 microbatches
with the fp8audit.microbatch NVTX range, the 2nd and 3rd under the profiler. Prints te_counts.py's
per-microbatch lines (TE's own counter) and one line {"cuda_events": N, "cpu_events": M,
"cuda_kernels": K}: what the profiler recorded on the device. Run it alone and under `fp8audit
run`: the agent must leave the CUDA events as they were."""
import json
import sys

import torch

import te_counts as tc


def main():
    recipe = tc.DelayedScaling(fp8_format=tc.Format.HYBRID)
    torch.manual_seed(0)
    layout = "reentrant-per-layer"
    layers = tc.build(layout, 256)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    profiler = None
    for mb in range(4):
        if mb == 1:
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
        tc.COUNTS["forward"] = tc.COUNTS["backward"] = 0
        x = torch.randn(512, 256, device="cuda", requires_grad=True)
        torch.cuda.nvtx.range_push("fp8audit.microbatch")
        with tc.fp8_context(recipe):
            loss = tc.forward(layout, layers, x).float().pow(2).mean()
        loss.backward()
        torch.cuda.nvtx.range_pop()
        if mb == 2:
            torch.cuda.synchronize()
            profiler.__exit__(None, None, None)
        print(json.dumps({"layout": layout, "microbatch": mb, "forward": tc.COUNTS["forward"],
                          "backward": tc.COUNTS["backward"]}), flush=True)
    events = profiler.events()
    cuda = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    print(json.dumps({"cuda_events": len(cuda), "cpu_events": len(events) - len(cuda),
                      "cuda_kernels": sum(1 for e in cuda if "Memcpy" not in e.name
                                          and "Memset" not in e.name)}), flush=True)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
