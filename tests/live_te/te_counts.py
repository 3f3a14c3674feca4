#!/usr/bin/env python3
"""Counts Transformer Engine's global FP8 DelayedScaling state updates per microbatch.

A plain training loop on public TE APIs only (te.Linear, te.autocast / te.fp8_autocast with
DelayedScaling HYBRID, te.checkpoint). Ground truth comes from a counter wrapped around
FP8GlobalStateManager.reduce_and_update_fp8_tensors (and its new name under TE PR #3456) in this
process; it prints one JSON line per microbatch: {"layout", "microbatch", "forward", "backward"}.

With --markers each logical microbatch is an NVTX range "fp8audit.microbatch" (one line in a real
loop); without, the agent segments microbatches by the autograd thread.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformer_engine.pytorch as te
from transformer_engine.common.recipe import DelayedScaling, Format

try:  # TE >= 2.x keeps the state manager here; older releases in fp8.py
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager
except ImportError:  # pragma: no cover
    from transformer_engine.pytorch.fp8 import FP8GlobalStateManager

LAYOUTS = [
    "none",
    "non-reentrant-single",
    "non-reentrant-per-layer",
    "reentrant-single-1",
    "reentrant-single-3",
    "reentrant-per-layer",
    "nested",
    "decoder-28x7",
]

COUNTS = {"forward": 0, "backward": 0}
# The update under every name TE holds it: TE PR #3456 calls reduce_and_update_quantization_state
# and keeps reduce_and_update_fp8_tensors as the same classmethod; releases before it, the old only.
UPDATE_NAMES = [name for name in ("reduce_and_update_quantization_state",
                                  "reduce_and_update_fp8_tensors")
                if hasattr(FP8GlobalStateManager, name)]
_original = getattr(FP8GlobalStateManager, UPDATE_NAMES[0])


def _counting(*args, **kwargs):
    forward = kwargs.get("forward", args[0] if args else True)
    COUNTS["forward" if forward else "backward"] += 1
    return _original(*args, **kwargs)


for _name in UPDATE_NAMES:
    setattr(FP8GlobalStateManager, _name, _counting)
autocast = getattr(te, "autocast", None)


def fp8_context(recipe):
    if autocast is not None:
        return autocast(enabled=True, recipe=recipe)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe)


def build(layout, hidden, device="cuda"):
    if layout == "decoder-28x7":
        layers = [torch.nn.Sequential(*[te.Linear(hidden, hidden) for _ in range(7)])
                  for _ in range(28)]
    elif layout == "reentrant-single-1":
        layers = [te.Linear(hidden, hidden)]
    else:
        layers = [te.Linear(hidden, hidden) for _ in range(3)]
    return torch.nn.ModuleList(layers).to(device)


def run_layers(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def forward(layout, layers, x):
    ckpt = te.checkpoint
    if layout == "none":
        return run_layers(layers, x)
    if layout == "non-reentrant-single":
        return ckpt(lambda t: run_layers(layers, t), x, use_reentrant=False)
    if layout == "non-reentrant-per-layer":
        for layer in layers:
            x = ckpt(layer, x, use_reentrant=False)
        return x
    if layout in ("reentrant-single-1", "reentrant-single-3"):
        return ckpt(lambda t: run_layers(layers, t), x, use_reentrant=True)
    if layout in ("reentrant-per-layer", "decoder-28x7"):
        for layer in layers:
            x = ckpt(layer, x, use_reentrant=True)
        return x
    if layout == "nested":
        def outer(t):
            t = ckpt(layers[0], t, use_reentrant=True)
            return run_layers(layers[1:], t)
        return ckpt(outer, x, use_reentrant=True)
    raise ValueError(layout)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=LAYOUTS + ["all"], default="all")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--markers", action="store_true", help="NVTX range per microbatch")
    p.add_argument("--backward", choices=["after", "inside"], default="after")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timing", action="store_true",
                   help="synchronize after each microbatch and print the median step time and "
                        "tokens/s of the microbatches after the first three")
    args = p.parse_args()
    layouts = LAYOUTS if args.layout == "all" else [args.layout]
    recipe = DelayedScaling(fp8_format=Format.HYBRID)
    torch.manual_seed(args.seed)
    for layout in layouts:
        layers = build(layout, args.hidden)
        steps = []
        for mb in range(args.microbatches):
            start = time.perf_counter()
            COUNTS["forward"] = COUNTS["backward"] = 0
            x = torch.randn(args.tokens, args.hidden, device="cuda", requires_grad=True)
            if args.markers:
                torch.cuda.nvtx.range_push("fp8audit.microbatch")
            with fp8_context(recipe):
                loss = forward(layout, layers, x).float().pow(2).mean()
                if args.backward == "inside":
                    loss.backward()
            if args.backward == "after":
                loss.backward()
            if args.markers:
                torch.cuda.nvtx.range_pop()
            if args.timing:
                torch.cuda.synchronize()
                steps.append(time.perf_counter() - start)
            finite = bool(torch.isfinite(loss).item()) and bool(torch.isfinite(x.grad).all().item())
            print(json.dumps({"layout": layout, "microbatch": mb, "forward": COUNTS["forward"],
                              "backward": COUNTS["backward"], "finite": finite}), flush=True)
        if args.timing and len(steps) > 3:
            median = statistics.median(steps[3:])
            print(json.dumps({"layout": layout, "timed_microbatches": len(steps) - 3,
                              "median_step_ms": median * 1e3,
                              "tokens_per_s": args.tokens / median}), flush=True)
        del layers
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
