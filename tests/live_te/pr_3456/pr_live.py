#!/usr/bin/env python3
"""TE with PR #3456's scheduling (apply.py) against its own update counter, per layout: the
layouts of te_counts.py, plus the ones the PR changes most:

  torch-reentrant-per-layer  torch.utils.checkpoint(use_reentrant=True) per layer, the backward
                             inside the autocast (so the recompute runs in FP8): each recompute's
                             backward is its own autograd task;
  two-backward               the microbatch's backward in two calls, one per stage (a pipeline
                             schedule's per-stage backward, combined 1F1B's per-node backward);
  two-backward-scope         the same inside te.quantization_backward_scope().

One JSON line per microbatch: {"layout", "microbatch", "forward", "backward", "finite",
"pending", "depth", "slot"} (the last three: TE's PR state after the microbatch; healthy: false,
0, null). With --markers each microbatch is an NVTX range "fp8audit.microbatch"."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import te_counts  # noqa: E402  (wraps TE's update under both names: TE's counter)
from te_counts import COUNTS, FP8GlobalStateManager, fp8_context, te  # noqa: E402
from transformer_engine.common.recipe import DelayedScaling, Format  # noqa: E402

LAYOUTS = te_counts.LAYOUTS + ["torch-reentrant-per-layer", "two-backward",
                               "two-backward-scope"]


def microbatch(layout: str, layers, x: torch.Tensor, recipe, backward_inside: bool) -> torch.Tensor:
    if layout == "torch-reentrant-per-layer":
        with fp8_context(recipe):
            y = x
            for layer in layers:
                y = torch.utils.checkpoint.checkpoint(layer, y, use_reentrant=True)
            loss = y.float().pow(2).mean()
            loss.backward()  # inside: the recompute runs under this autocast, in FP8
        return loss
    if layout.startswith("two-backward"):
        with fp8_context(recipe):
            first = layers[0](x)
            cut = first.detach().requires_grad_()
            loss = te_counts.run_layers(layers[1:], cut).float().pow(2).mean()
        scope = te.quantization_backward_scope() if layout.endswith("scope") else _Nothing()
        with scope:
            loss.backward()  # the second stage's autograd task
            torch.autograd.backward(first, cut.grad)  # the first stage's
        return loss
    with fp8_context(recipe):
        loss = te_counts.forward(layout, layers, x).float().pow(2).mean()
        if backward_inside:
            loss.backward()
    if not backward_inside:
        loss.backward()
    return loss


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layout", choices=LAYOUTS + ["all"], default="all")
    p.add_argument("--microbatches", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--markers", action="store_true", help="NVTX range per microbatch")
    p.add_argument("--backward", choices=["after", "inside"], default="after")
    p.add_argument("--device", default="cuda", help="cpu: on the CPU stand-in of TE (tests)")
    args = p.parse_args()
    if not hasattr(te, "quantization_backward_scope"):
        print("pr_live: this TE has no quantization_backward_scope (apply.py first)",
              file=sys.stderr)
        return 2
    recipe = DelayedScaling(fp8_format=Format.HYBRID)
    torch.manual_seed(0)
    state = FP8GlobalStateManager.quantization_state
    for layout in LAYOUTS if args.layout == "all" else [args.layout]:
        layers = te_counts.build(layout, args.hidden, args.device)
        for mb in range(args.microbatches):
            COUNTS["forward"] = COUNTS["backward"] = 0
            x = torch.randn(args.tokens, args.hidden, device=args.device,
                            requires_grad=True)
            if args.markers:
                torch.cuda.nvtx.range_push("fp8audit.microbatch")
            loss = microbatch(layout, layers, x, recipe, args.backward == "inside")
            if args.markers:
                torch.cuda.nvtx.range_pop()
            finite = bool(torch.isfinite(loss).item())
            print(json.dumps({
                "layout": layout, "microbatch": mb, "forward": COUNTS["forward"],
                "backward": COUNTS["backward"], "finite": finite,
                "pending": state.pending_backward_quantization_update,
                "depth": state.quantization_backward_scope_depth,
                "slot": state.backward_quantization_update_callback_task_id}), flush=True)
        del layers
    if args.device == "cuda":
        torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
