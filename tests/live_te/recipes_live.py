"""Recompute parity per recipe on real TE (issue 36): LAYERS te.Linear, each under
torch.utils.checkpoint, the forward inside te.autocast(recipe=RECIPE) and the backward after it
(the HF / Lightning pattern); with --backward-recipe the backward inside an autocast of that
recipe (TE issue #1568: torch's reentrant recompute runs under it). The script's own truth: a
forward pre-hook on each module records whether FP8 was on in its forward and in its recompute,
and under which recipe (TE's class and repr); per microbatch it prints the recomputes and how many
ran in another FP8 state or under another recipe, as JSON, for comparison with `fp8audit
report`'s rows.

    python recipes_live.py --recipe current|block|delayed [--backward-recipe R]
        [--non-reentrant | --no-checkpoint] [--markers]
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any, Dict, List

import torch
from torch.utils.checkpoint import checkpoint

import transformer_engine.pytorch as te
from transformer_engine.common import recipe as recipes
from transformer_engine.pytorch.quantization import FP8GlobalStateManager

RECIPES = {"current": recipes.Float8CurrentScaling, "block": recipes.Float8BlockScaling,
           "delayed": recipes.DelayedScaling}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", choices=sorted(RECIPES), default="current")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--backward-recipe", choices=sorted(RECIPES), help="the backward inside "
                   "te.autocast(recipe=R())")
    p.add_argument("--non-reentrant", action="store_true")
    p.add_argument("--no-checkpoint", action="store_true", help="the layers called directly")
    p.add_argument("--markers", action="store_true", help="fp8audit.microbatch() around each")
    args = p.parse_args()
    torch.manual_seed(0)
    layers = [te.Linear(args.hidden, args.hidden).cuda() for _ in range(args.layers)]
    seen: Dict[int, Any] = {}
    mb: Dict[str, int] = {}

    def pre_hook(module: Any, _inputs: Any) -> None:
        fp8 = FP8GlobalStateManager.is_fp8_enabled()
        recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
        state = (fp8, f"{type(recipe).__name__}:{recipe!r}" if fp8 else "")
        if torch._C._current_graph_task_id() == -1:  # the original forward
            seen[id(module)] = state
            return
        mb["recomputes"] += 1
        mb["changes"] += int(seen.get(id(module), state) != state)

    for layer in layers:
        layer.register_forward_pre_hook(pre_hook)
    rows: List[Dict[str, Any]] = []
    marker: Any = None
    if args.markers:
        import fp8audit
        marker = fp8audit.microbatch
    error = ""
    for i in range(args.microbatches):
        mb.update(recomputes=0, changes=0)
        ctx = marker() if marker else contextlib.nullcontext()
        try:
            with ctx:
                x = torch.randn(args.hidden, args.hidden, device="cuda", requires_grad=True)
                with te.autocast(enabled=True, recipe=RECIPES[args.recipe]()):
                    for layer in layers:
                        x = layer(x) if args.no_checkpoint else checkpoint(
                            layer, x, use_reentrant=not args.non_reentrant)
                backward = te.autocast(enabled=True, recipe=RECIPES[args.backward_recipe]()) \
                    if args.backward_recipe else contextlib.nullcontext()
                with backward:
                    x.float().pow(2).mean().backward()
        except Exception as e:  # TE refuses some layouts (CheckpointError): the truth says so
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            break
        rows.append(dict(mb))
    torch.cuda.synchronize()
    print(json.dumps({"recipe": args.recipe, "backward_recipe": args.backward_recipe,
                      "reentrant": not args.non_reentrant, "rows": rows, "error": error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
