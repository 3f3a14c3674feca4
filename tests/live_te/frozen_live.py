"""Frozen scales on real TE (issue 36 item 2): LAYERS te.Linear trained under DelayedScaling, with
an evaluation step under another recipe (--eval current|block, inside torch.no_grad) after step
EVAL_AT, or none (--eval none: the twin). TE registers a module's DelayedScaling state for its
global update once; the switch makes the module's state again on the way back, unregistered.

The script's own truth, per training step (tensor reads: the truth may read, the audit does not):
how many modules' forward scales the step's updates moved ("moved"), with inputs growing step by
step so that a registered module's scales move every step; and, after the run, how many modules'
scale tensors are not the ones in TE's global scale buffer ("unregistered"). Printed as JSON, for
comparison with `fp8audit report`.

    python frozen_live.py [--eval current|block|none] [--eval-at 1] [--steps 6] [--markers]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any, Dict, List

import torch

import transformer_engine.pytorch as te
from transformer_engine.common import recipe as recipes

EVAL = {"current": recipes.Float8CurrentScaling, "block": recipes.Float8BlockScaling}


def forward_scale(module: Any) -> Any:
    """The module's forward scale tensor (DelayedScaling's state), None under another recipe."""
    return getattr(module.fp8_meta.get("scaling_fwd"), "scale", None)


def unregistered(modules: List[Any]) -> int:
    """Modules whose forward scale tensor is not at their place in TE's global scale buffer."""
    try:
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager as manager
    except ImportError:
        from transformer_engine.pytorch.fp8 import FP8GlobalStateManager as manager
    state = getattr(manager, "quantization_state", manager)
    count = 0
    for m in modules:
        info = m.fp8_meta.get("buffer_index_and_autocast_key")
        kept = state.global_scale_buffer.get(info[1], []) if info else []
        if not info or info[0] >= len(kept) or kept[info[0]] is not forward_scale(m):
            count += 1
    return count


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--eval", choices=("current", "block", "none"), default="current")
    p.add_argument("--eval-at", type=int, default=1, help="the training step it follows")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--markers", action="store_true", help="fp8audit.microbatch() around each")
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [te.Linear(args.hidden, args.hidden).cuda() for _ in range(args.layers)]
    opt = torch.optim.SGD([q for layer in layers for q in layer.parameters()], lr=1e-3)
    marker: Any = contextlib.nullcontext
    if args.markers:
        import fp8audit
        marker = fp8audit.microbatch
    train = recipes.DelayedScaling()
    rows: List[Dict[str, Any]] = []
    for step in range(args.steps):
        before = [forward_scale(m) for m in layers]
        before = [b.clone() if b is not None else None for b in before]
        with marker():
            x = torch.randn(args.hidden, args.hidden, device="cuda") * 2.0 ** step
            with te.autocast(enabled=True, recipe=train):
                y = x
                for layer in layers:
                    y = layer(y)
            y.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()
        moved = sum(b is not None and not torch.equal(b, forward_scale(m))
                    for b, m in zip(before, layers))
        rows.append({"step": step, "moved": moved})
        if step == args.eval_at and args.eval != "none":
            with torch.no_grad(), te.autocast(enabled=True, recipe=EVAL[args.eval]()):
                y = torch.randn(args.hidden, args.hidden, device="cuda")
                for layer in layers:
                    y = layer(y)
    print(json.dumps({"eval": args.eval, "eval_at": args.eval_at, "rows": rows,
                      "unregistered": unregistered(layers), "layers": args.layers}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
