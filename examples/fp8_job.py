"""A small FP8 training job without Transformer Engine, audited by fp8audit.

A two-layer MLP whose linear layers compute on FP8 (emulated in plain torch: scale, saturate, cast
to torch.float8_e4m3fn / float8_e5m2 and back, float GEMM): inputs and weights in E4M3, output
gradients in E5M2 (HYBRID), each tensor scaled with DelayedScaling state: an amax history and a
scale per tensor, updated once per logical microbatch at the end of forward and once at the end of
backward, as Transformer Engine intends. Each update is announced with fp8audit.update() (the
agent cannot tell these plain torch kernels from others) and each microbatch is marked with
fp8audit.microbatch(), so `fp8audit run` counts 1 forward and 1 backward update in each. Needs
torch >= 2.1 and fp8audit (no torch build of its own); CPU or GPU.

    fp8audit run -- python examples/fp8_job.py [--microbatches N] [--device cpu|cuda]
    python -m fp8audit run -- python examples/fp8_job.py
"""

from __future__ import annotations

import argparse
import math
from typing import List, Optional

import torch

import fp8audit

FP8 = {"forward": (torch.float8_e4m3fn, 448.0), "backward": (torch.float8_e5m2, 57344.0)}


class DelayedScaling:
    """The FP8 state of `tensors` tensors in one direction ("forward": E4M3, "backward": E5M2)."""

    def __init__(self, tensors: int, direction: str, device: torch.device,
                 history: int = 16) -> None:
        self.direction = direction
        self.dtype, self.fp8_max = FP8[direction]
        self.amax_history = torch.zeros(history, tensors, device=device)
        self.scale = torch.ones(tensors, device=device)
        self.amax = torch.zeros(tensors, device=device)  # since the last update

    def cast(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """x through FP8 with tensor i's current scale; records its amax."""
        x = x.detach()
        self.amax[i] = torch.maximum(self.amax[i], x.abs().amax().float())
        scale = self.scale[i]
        codes = (x.float() * scale).clamp(-self.fp8_max, self.fp8_max).to(self.dtype)
        return (codes.float() / scale).to(x.dtype)

    def update(self) -> None:
        """The one global update of this direction: amaxes into the history, new scales (TE's
        default: the history's max; rows roll, row 0 restarts at 0)."""
        self.amax_history[0].copy_(self.amax)
        self.amax.zero_()
        amax = self.amax_history.amax(dim=0)
        self.amax_history.copy_(torch.roll(self.amax_history, -1, 0))
        self.amax_history[0].zero_()
        usable = (amax > 0) & torch.isfinite(amax)
        self.scale.copy_(torch.where(usable, self.fp8_max / amax, self.scale))
        fp8audit.update(self.direction)  # one update, for the agent


class Fp8Linear(torch.autograd.Function):
    """y = x w^T on FP8 casts of x, w (forward state, tensors 2k, 2k+1) and of dy (backward state,
    tensor k)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, fwd: DelayedScaling,  # type: ignore
                bwd: DelayedScaling, k: int) -> torch.Tensor:
        xq, wq = fwd.cast(x, 2 * k), fwd.cast(w, 2 * k + 1)
        ctx.save_for_backward(xq, wq)
        ctx.bwd, ctx.k = bwd, k
        return xq @ wq.t()

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore
        xq, wq = ctx.saved_tensors
        dyq = ctx.bwd.cast(dy, ctx.k)
        return dyq @ wq, dyq.t() @ xq, None, None, None


def train(microbatches: int = 4, device: Optional[str] = None, hidden: int = 32,
          tokens: int = 16, seed: int = 0) -> List[float]:
    """Trains for `microbatches` microbatches (one optimizer step each); returns the losses."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(seed)
    weights = [torch.nn.Parameter(torch.randn(hidden, hidden, device=dev) / math.sqrt(hidden))
               for _ in range(2)]
    fwd = DelayedScaling(2 * len(weights), "forward", dev)
    bwd = DelayedScaling(len(weights), "backward", dev)
    optimizer = torch.optim.SGD(weights, lr=0.05)
    target = torch.randn(hidden, hidden, device=dev) / math.sqrt(hidden)
    losses = []
    for _ in range(microbatches):
        x = torch.randn(tokens, hidden, device=dev)
        with fp8audit.microbatch():
            h = x
            for k, w in enumerate(weights):
                h = Fp8Linear.apply(h, w, fwd, bwd, k)
                if k + 1 < len(weights):
                    h = torch.relu(h)
            loss = (h - x @ target.t()).pow(2).mean()
            fwd.update()  # end of forward: one update of the forward state
            loss.backward()
            bwd.update()  # end of backward: one update of the backward state
        optimizer.step()
        optimizer.zero_grad()
        fp8audit.step()
        losses.append(float(loss.detach()))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="default: cuda when available")
    args = parser.parse_args()
    losses = train(args.microbatches, args.device)
    print("losses: " + " ".join(f"{v:.4f}" for v in losses))


if __name__ == "__main__":
    main()
