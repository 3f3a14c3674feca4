"""Recompute parity per recipe on real TE (issue 36): LAYERS te.Linear, each under
torch.utils.checkpoint, the forward inside te.autocast(recipe=RECIPE) and the backward after it
(the HF / Lightning pattern); with --backward-recipe the backward inside an autocast of that
recipe (TE issue #1568: torch's reentrant recompute runs under it). --checkpoint te: TE's own
checkpoint instead (each recompute in its forward's FP8 state and recipe). --kwargs K: each Linear
called with K (fp8_output, fp8_grad or both) from a flag that is False in the forward and, with
--flip, True once the forward is done (a flag for the next step set too early): its recompute is
called with other kwargs than its forward (issue 36 item 1). The script's own truth: a forward
pre-hook on each module records whether FP8 was on in its forward and in its recompute, under which
recipe (TE's class and repr) and with which fp8_output / fp8_grad. --grads FILE saves the layers'
weight gradients after the run; --twin-grads FILE compares them with a twin's (the same arguments
with --no-checkpoint, run alone: the numerics a fixed recompute must give, issue 36 item 3),
bitwise and by the largest relative difference, into the JSON's "twin". A call is a recompute when the
script's own backward() is running (its phase, not autograd's graph task, which the audit's hook
reads: a fault there would not be shared). Per microbatch it prints the
recomputes, how many ran in another FP8 state, under another recipe or with other kwargs
(`changes`), and of those the kwargs-only ones (`kwargs_changes`), as JSON, for recipes_compare.py
against `fp8audit report`'s rows. --device cpu: on TE's CPU stand-in (tests/python/standin).

    python recipes_live.py --recipe current|block|delayed [--backward-recipe R]
        [--non-reentrant | --no-checkpoint] [--checkpoint torch|te] [--kwargs K [--flip]]
        [--positional] [--markers] [--device cuda|cpu] [--grads FILE] [--twin-grads FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
from typing import Any, Dict, List, Tuple

import torch
from torch.utils.checkpoint import checkpoint

import transformer_engine.pytorch as te
from transformer_engine.common import recipe as recipes
from transformer_engine.pytorch.quantization import FP8GlobalStateManager

RECIPES = {"current": recipes.Float8CurrentScaling, "block": recipes.Float8BlockScaling,
           "delayed": recipes.DelayedScaling}
KWARGS = {"fp8_output": ("fp8_output",), "fp8_grad": ("fp8_grad",),
          "both": ("fp8_output", "fp8_grad")}


def passed_kwargs(module: Any, inputs: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[bool, ...]:
    """fp8_output and fp8_grad as the module's forward receives them, positional or keyword, its
    defaults where not passed: bound by the forward's signature as Python binds the call (the
    truth, apart from the hook's own binding)."""
    bound = inspect.signature(type(module).forward).bind(module, *inputs, **kwargs)
    bound.apply_defaults()
    return tuple(bool(bound.arguments.get(name)) for name in ("fp8_output", "fp8_grad"))


def compare_twin(grads: List[torch.Tensor], path: str) -> Dict[str, Any]:
    """The run's weight gradients against the twin's saved in `path`: bitwise equal, and the
    largest max|a - b| / max(max|a|, max|b|) over the layers (0 where equal)."""
    try:  # a twin that failed left no file (or another's): said in the row, the truth kept
        twin = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001
        return {"equal": False, "max_relative_difference": None,
                "error": f"no twin ({type(e).__name__})"}
    if len(twin) != len(grads) or any(a.shape != b.shape for a, b in zip(grads, twin)):
        return {"equal": False, "max_relative_difference": None, "error": "shapes differ"}
    equal = all(torch.equal(a, b) for a, b in zip(grads, twin))
    worst = max((float((a - b).abs().max() /
                       torch.maximum(a.abs().max(), b.abs().max()).clamp_min(1e-30))
                 for a, b in zip(grads, twin) if a.numel()), default=0.0)
    return {"equal": equal, "max_relative_difference": worst, "error": ""}


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
    p.add_argument("--checkpoint", choices=["torch", "te"], default="torch")
    p.add_argument("--kwargs", choices=[*KWARGS], help="the Linears called with these from a flag")
    p.add_argument("--flip", action="store_true", help="the flag True once the forward is done")
    p.add_argument("--positional", action="store_true", help="the kwargs passed positionally")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--grads", metavar="FILE", help="save the weight gradients (torch.save)")
    p.add_argument("--twin-grads", metavar="FILE", help="compare the weight gradients with "
                   "these (a --no-checkpoint run's --grads)")
    args = p.parse_args()
    if args.flip and not args.kwargs:
        p.error("--flip needs --kwargs")
    torch.manual_seed(0)
    layers = [te.Linear(args.hidden, args.hidden).to(args.device) for _ in range(args.layers)]
    seen: Dict[int, Any] = {}
    mb: Dict[str, int] = {}
    names = KWARGS.get(args.kwargs or "", ())
    flag = {"value": False}
    in_backward = {"value": False}  # the script's phase: set around its own backward()

    def pre_hook(module: Any, _inputs: Any, kwargs: Dict[str, Any]) -> None:
        fp8 = FP8GlobalStateManager.is_fp8_enabled()
        recipe = FP8GlobalStateManager.get_fp8_recipe() if fp8 else None
        state = (fp8, f"{type(recipe).__name__}:{recipe!r}" if fp8 else "")
        passed = passed_kwargs(module, _inputs, kwargs)
        if not in_backward["value"]:  # the original forward
            seen[id(module)] = (state, passed)
            return
        mb["recomputes"] += 1
        forward_state, forward_passed = seen.get(id(module), (state, passed))
        if forward_state != state:
            mb["changes"] += 1
        elif fp8 and forward_passed != passed:  # in FP8 under its recipe, other kwargs
            mb["changes"] += 1
            mb["kwargs_changes"] += 1

    for layer in layers:
        layer.register_forward_pre_hook(pre_hook, with_kwargs=True)

    def call(layer: Any, x: Any) -> Any:
        if args.positional:  # (inp, is_first_microbatch, fp8_output, fp8_grad), TE 2.20's order
            return layer(x, None, *(flag["value"] and name in names
                                    for name in ("fp8_output", "fp8_grad")))
        return layer(x, **{name: flag["value"] for name in names})

    def run(layer: Any, x: Any) -> Any:
        if args.no_checkpoint:
            return call(layer, x)
        if args.checkpoint == "te":
            return te.checkpoint(call, layer, x, use_reentrant=not args.non_reentrant)
        return checkpoint(call, layer, x, use_reentrant=not args.non_reentrant)
    rows: List[Dict[str, Any]] = []
    marker: Any = None
    if args.markers:
        import fp8audit
        marker = fp8audit.microbatch
    error = ""
    for i in range(args.microbatches):
        mb.update(recomputes=0, changes=0, kwargs_changes=0)
        ctx = marker() if marker else contextlib.nullcontext()
        try:
            with ctx:
                flag["value"] = False
                x = torch.randn(args.hidden, args.hidden, device=args.device, requires_grad=True)
                with te.autocast(enabled=True, recipe=RECIPES[args.recipe]()):
                    for layer in layers:
                        x = run(layer, x)
                flag["value"] = args.flip
                backward = te.autocast(enabled=True, recipe=RECIPES[args.backward_recipe]()) \
                    if args.backward_recipe else contextlib.nullcontext()
                with backward:
                    loss = x.float().pow(2).mean()
                    in_backward["value"] = True
                    try:
                        loss.backward()
                    finally:
                        in_backward["value"] = False
        except Exception as e:  # TE refuses some layouts (CheckpointError): the truth says so
            error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
            rows.append(dict(mb, failed=True))  # what it saw before, as the agent saw it
            break
        rows.append(dict(mb))
    if args.device == "cuda":
        torch.cuda.synchronize()
    grads = [layer.weight.grad.detach().float().cpu() if layer.weight.grad is not None
             else torch.zeros(0) for layer in layers]
    if args.grads and not error:  # a run that raised is no twin
        torch.save(grads, args.grads)
    twin = compare_twin(grads, args.twin_grads) if args.twin_grads else None
    print(json.dumps({"twin": twin,"recipe": args.recipe, "backward_recipe": args.backward_recipe,
                      "reentrant": not args.non_reentrant, "checkpoint": args.checkpoint,
                      "no_checkpoint": args.no_checkpoint, "kwargs": args.kwargs,
                      "flip": args.flip, "layers": args.layers,
                      "microbatches": args.microbatches, "argv": sys.argv[1:], "rows": rows,
                      "error": error}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
