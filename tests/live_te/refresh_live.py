"""Weight-cache refreshes in recompute on real TE (issue 36 item 2): LAYERS te.Linear, each
checkpointed (TE's or torch's reentrant checkpoint), MICROBATCHES per step with
is_first_microbatch=True on each step's first microbatch and False after it (TE's weight caching),
the forward inside te.autocast(recipe=RECIPE); the backward after it, inside it (--backward
inside) or inside an autocast of its own (--backward own, DelayedScaling: TE issue #1568).

The script's own truth, per microbatch: a wrapper around TE's quantize_weight (where te.Linear
looks it up) counts the calls that re-quantize an existing cache while the script's own backward()
runs (its phase, not autograd's graph task, which the audit's hook reads), and a copy of each
module's cache taken after the forward is compared with the cache after the backward (tensor
reads: the truth may read, the audit does not): "changed" where the recompute left other values in
it. Printed as JSON, for comparison with `fp8audit report`'s rows. --device cpu: on TE's CPU
stand-in (tests/python/standin), as CI rehearses it.

    python refresh_live.py --recipe delayed|current|block [--checkpoint te|torch|none]
        [--backward after|inside|own] [--markers] [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any, Dict, List

import torch
from torch.utils.checkpoint import checkpoint

import transformer_engine.pytorch as te
import transformer_engine.pytorch.module.linear as te_linear
from transformer_engine.common import recipe as recipes

RECIPES = {"current": recipes.Float8CurrentScaling, "block": recipes.Float8BlockScaling,
           "delayed": recipes.DelayedScaling}


def cache_copy(module: Any) -> List[torch.Tensor]:
    """Every tensor the module's weight cache holds (data, transposes, scales), copied."""
    ws = getattr(module, "_fp8_workspaces", {}).get("weight")
    if ws is None:
        return []
    return [v.detach().clone() for _, v in sorted(vars(ws).items())
            if isinstance(v, torch.Tensor)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", choices=sorted(RECIPES), default="delayed")
    p.add_argument("--checkpoint", choices=("te", "torch", "none"), default="te")
    p.add_argument("--backward", choices=("after", "inside", "own"), default="after")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=2, help="per step")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--markers", action="store_true", help="fp8audit.microbatch() around each")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [te.Linear(args.hidden, args.hidden).to(args.device) for _ in range(args.layers)]
    opt = torch.optim.SGD([q for layer in layers for q in layer.parameters()], lr=0.1)
    mb: Dict[str, int] = {}
    in_backward = {"value": False}  # the script's phase: set around its own backward()
    inner = te_linear.quantize_weight

    def backward(loss: torch.Tensor) -> None:
        in_backward["value"] = True
        try:
            loss.backward()
        finally:
            in_backward["value"] = False

    def counting(*a: Any, **k: Any) -> Any:
        if (in_backward["value"] and k.get("workspace") is not None and
                k.get("update_workspace", True) and k.get("skip_update_flag") is None):
            mb["refreshes"] += 1
        return inner(*a, **k)

    te_linear.quantize_weight = counting
    marker: Any = None
    if args.markers:
        import fp8audit
        marker = fp8audit.microbatch
    rows: List[Dict[str, Any]] = []
    error = ""
    try:
        for step in range(args.steps):
            for i in range(args.microbatches):
                mb.update(refreshes=0)
                first = i == 0
                with marker() if marker else contextlib.nullcontext():
                    x = torch.randn(args.hidden, args.hidden, device=args.device,
                                    requires_grad=True)
                    fp8 = te.autocast(enabled=True, recipe=RECIPES[args.recipe]())
                    with fp8:
                        for layer in layers:
                            if args.checkpoint == "te":
                                x = te.checkpoint(layer, x, is_first_microbatch=first)
                            elif args.checkpoint == "torch":
                                x = checkpoint(lambda t, m=layer: m(t, is_first_microbatch=first),
                                               x, use_reentrant=True)
                            else:
                                x = layer(x, is_first_microbatch=first)
                        if args.backward == "inside":
                            before = [cache_copy(m) for m in layers]
                            backward(x.float().pow(2).mean())
                    if args.backward != "inside":
                        before = [cache_copy(m) for m in layers]
                        own = te.autocast(enabled=True, recipe=recipes.DelayedScaling()) \
                            if args.backward == "own" else contextlib.nullcontext()
                        with own:
                            backward(x.float().pow(2).mean())
                after = [cache_copy(m) for m in layers]
                changed = sum(any(not torch.equal(a, b) for a, b in zip(x0, x1))
                              for x0, x1 in zip(before, after))
                rows.append({"step": step, "first": first, "refreshes": mb["refreshes"],
                             "changed": changed})
            opt.step()
            opt.zero_grad()
    except Exception as e:  # TE refuses some layouts: the truth says so
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    if args.device == "cuda":
        torch.cuda.synchronize()
    print(json.dumps({"recipe": args.recipe, "checkpoint": args.checkpoint,
                      "backward": args.backward, "rows": rows, "error": error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
