"""A plain PyTorch DistributedDataParallel job (NCCL, no Transformer Engine) with known FP8 state
updates per logical microbatch, for auditing with `fp8audit run` under torchrun.

    torchrun --standalone --nproc-per-node 2 tests/multi_rank/ddp_job.py \
        --ops BUILD/lib/libfp8audit_ops.so [--microbatches 6] [--disagree [--disagree-at 2]]

Each microbatch is one NVTX range `fp8audit.microbatch`. In it every rank calls this project's
torch.ops.fp8audit.delayed_scaling_update (the kernel the agent classifies as a DelayedScaling
update) once at the end of forward on E4M3 state (448: forward) and once in backward, inside an
autograd function's backward on the autograd thread, on E5M2 state (57344: backward): 1/1. With
--disagree, rank --disagree-rank (1) updates its forward state twice in microbatch --disagree-at:
2/1 there, as when ranks run different code. Gradients are accumulated over --accumulate
microbatches (DDP no_sync) and each optimizer step is marked `fp8audit.step`.
"""
import argparse
import contextlib
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


class DelayedScalingState:
    """An amax history and scales, updated by the fp8audit op as DelayedScaling does."""

    def __init__(self, fmt, tensors, history=16):
        self.fmt = fmt
        self.history = torch.zeros(history, tensors, device="cuda")
        self.scale = torch.ones(tensors, device="cuda")
        self.scale_inv = torch.ones(tensors, device="cuda")

    def record(self, t):
        self.history[0].copy_(t.detach().float().abs().amax().expand_as(self.history[0]))

    def update(self):
        # One launch of delayed_scaling_update_kernel; its scaled_max (fp8 max / 2^margin) tells
        # the agent the direction: 448 (E4M3) forward, 57344 (E5M2) backward.
        torch.ops.fp8audit.delayed_scaling_update(self.history, self.scale, self.scale_inv,
                                                  self.fmt, 0, "max")


class BackwardUpdate(torch.autograd.Function):
    """Identity forward; in backward records the gradient's amax and updates the backward state."""

    @staticmethod
    def forward(ctx, x, state):
        ctx.state = state
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.state.record(grad)
        ctx.state.update()
        return grad, None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", required=True, help="BUILD/lib/libfp8audit_ops.so")
    p.add_argument("--microbatches", type=int, default=6)
    p.add_argument("--accumulate", type=int, default=2, help="microbatches per optimizer step")
    p.add_argument("--disagree", action="store_true")
    p.add_argument("--disagree-rank", type=int, default=1)
    p.add_argument("--disagree-at", type=int, default=2)
    p.add_argument("--width", type=int, default=1024)
    args = p.parse_args()

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.ops.load_library(args.ops)
    torch.manual_seed(1234 + rank)

    model = nn.Sequential(nn.Linear(args.width, args.width), nn.GELU(),
                          nn.Linear(args.width, args.width)).cuda()
    ddp = DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    forward_state = DelayedScalingState("e4m3", 4)
    backward_state = DelayedScalingState("e5m2", 2)

    expected = []
    for mb in range(args.microbatches):
        last_of_step = (mb + 1) % args.accumulate == 0 or mb + 1 == args.microbatches
        sync = contextlib.nullcontext() if last_of_step else ddp.no_sync()
        torch.cuda.nvtx.range_push("fp8audit.microbatch")
        with sync:
            x = torch.randn(64, args.width, device="cuda")
            y = ddp(x)
            forward_state.record(y)
            forward_updates = 1
            if args.disagree and rank == args.disagree_rank and mb == args.disagree_at:
                forward_updates = 2
            for _ in range(forward_updates):
                forward_state.update()
            y = BackwardUpdate.apply(y, backward_state)
            loss = y.float().pow(2).mean()
            loss.backward()
        torch.cuda.nvtx.range_pop()
        expected.append(f"{forward_updates}/1")
        if last_of_step:
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.nvtx.mark("fp8audit.step")

    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank}: {args.microbatches} microbatches, updates (forward/backward) "
          f"{' '.join(expected)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
