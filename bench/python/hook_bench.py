#!/usr/bin/env python3
"""The Python hook's cost per TE module call (issue 36 item 5): one model in one process, the
hook's te-recompute check (and te-count) toggled step by step.

The model: LAYERS te.Linear(HIDDEN, HIDDEN), each under a checkpoint, the forward inside
te.autocast(recipe=RECIPE), the backward after it; every module is called twice per step (forward,
recompute), the path the hook checks. --checkpoint te (default): TE's own checkpoint, each recompute
in its forward's FP8 state (a healthy job: the hook's common path); torch: torch.utils.checkpoint
(reentrant), each recompute without FP8 (a job the audit fails: each call a mismatch, its stack
walked for the call site). Arms:

  absent  TE's own __call__ and quantize_weight (the hook's wrappers taken out)
  off     the wrapper, not recording (fp8audit.hook.set_recording(False))
  on      the wrapper recording: the default under `fp8audit run`
  timed   (--inside) TE's own call (and quantize_weight) after the same check, whose own time is
          summed inside the step: the check's cost where it runs, caches cold, against what it
          adds to the step

The arms take turns step by step (each first in turn per round), so drift over the run falls on
all three alike. Per arm: the median step time with a distribution-free 95% interval (order
statistics, megatron_live.median_interval), and the added time per module call,
(median(arm) - median(absent)) / calls per step. Under
`fp8audit run` the recompute marks go to the agent, as in a real job; run alone, the bench arms
the hook itself and the marks go to no NVTX tool. On a GPU with TE:

    fp8audit run --max-rows 0 -- python3 bench/python/hook_bench.py --recipe current

On a CPU (TE's CPU stand-in of tests/python/standin on PYTHONPATH) the same, in wrapper time.
--calls counts, instead of timing, the Python calls each arm adds per module call: a figure that
does not depend on the machine.
Exit status: 0, or 2 when TE cannot be imported or the hook cannot be armed (one line says why).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "live_te"))
from megatron_live import median_interval  # noqa: E402  (the live scripts' interval, shared)

ARMS = ("absent", "off", "on")


def wrapped_classes(te_module_classes: Tuple[type, ...]) -> List[Tuple[type, Any, Any]]:
    """(class, the hook's wrapper, TE's own __call__) for each class the te-recompute check
    wraps."""
    out = []
    for cls in te_module_classes:
        call = cls.__dict__.get("__call__")
        if getattr(call, "__fp8audit_recompute__", False):
            out.append((cls, call, call.__wrapped__))
    return out


def wrapped_functions() -> List[Tuple[Any, Any, Any]]:
    """(TE module file, the hook's quantize_weight wrapper, TE's own) for each file whose
    quantize_weight the weight-refresh check wraps (hook/refresh.py)."""
    from fp8audit.hook import refresh

    out = []
    for name in refresh.MODULES:
        module = sys.modules.get("transformer_engine.pytorch.module." + name)
        fn = getattr(module, "quantize_weight", None)
        if getattr(fn, "__fp8audit_refresh__", False):
            out.append((module, fn, fn.__wrapped__))
    return out


def timed_call(own: Callable[..., Any], hook: Any, inside: List[int]) -> Callable[..., Any]:
    """The timed arm's call: the hook's check (te-recompute's, its own instance) before TE's own
    call, its time and calls added to `inside`."""
    import torch

    from fp8audit import _nvtx
    from fp8audit.hook import recompute

    check = recompute.watcher(hook._state_manager(), (), torch._C._current_graph_task_id,
                              _nvtx.sender())
    clock = time.perf_counter_ns

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        check(self, args, kwargs)
        inside[0] += clock() - t0
        inside[1] += 1
        return own(self, *args, **kwargs)

    return call


def count_calls(args: argparse.Namespace, recipe: str, per_step: int, step: Callable[[], None],
                arm: Callable[[str], None]) -> int:
    """--calls: one step per arm under sys.setprofile, the calls of Python functions and of
    built-ins counted; printed per module call, added to the absent arm's."""
    counts: Dict[str, Dict[str, int]] = {}
    for name in ARMS:
        arm(name)
        step()  # each arm's first step after the switch, not counted
        seen = {"python": 0, "builtin": 0}

        def profile(_frame: Any, event: str, _arg: Any) -> None:
            if event == "call":
                seen["python"] += 1
            elif event == "c_call":
                seen["builtin"] += 1

        sys.setprofile(profile)
        try:
            step()
        finally:
            sys.setprofile(None)
        counts[name] = seen
    arm("on")
    added = {name: {kind: (counts[name][kind] - counts["absent"][kind]) / per_step
                    for kind in ("python", "builtin")} for name in ARMS}
    out = {"recipe": recipe, "checkpoint": args.checkpoint, "calls_per_step": per_step,
           "added_per_call": added}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{recipe}, {args.layers} x te.Linear under the {args.checkpoint} checkpoint, "
          f"{per_step} module calls per step: calls added per module call")
    print(f"{'arm':8} {'python':>8} {'built-in':>9}")
    for name in ARMS:
        print(f"{name:8} {added[name]['python']:8.2f} {added[name]['builtin']:9.2f}")
    return 0


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", choices=["delayed", "current", "block"], default="current")
    p.add_argument("--checkpoint", choices=["te", "torch"], default="te")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256, help="small: launch-bound, the worst case")
    p.add_argument("--steps", type=int, default=30, help="timed, per arm and round")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--profile", choices=ARMS, help="instead: --steps steps of this arm under "
                   "cProfile, fp8audit's functions by cumulative time")
    p.add_argument("--calls", action="store_true", help="instead: the Python functions (and "
                   "built-ins) each arm adds per module call over one step, counted by "
                   "sys.setprofile on the step's thread (on CUDA autograd's own thread, where "
                   "recomputes run, is not seen): a figure that does not depend on the machine")
    p.add_argument("--inside", action="store_true", help="a fourth arm, timed: TE's own call "
                   "after the same check, the check's own time summed inside the step")
    p.add_argument("--json", action="store_true", help="one JSON line instead of the table")
    args = p.parse_args(argv)
    try:
        import torch
        import torch.utils.checkpoint as torch_checkpoint

        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe as recipes
        from transformer_engine.pytorch.module.base import TransformerEngineBaseModule
    except ImportError as e:
        print(f"hook_bench: cannot import Transformer Engine and torch ({e})", file=sys.stderr)
        return 2
    from fp8audit import hook

    classes = (TransformerEngineBaseModule,)
    under_agent = bool(wrapped_classes(classes))
    if not under_agent:
        hook.install(["te-count", "te-recompute"])
    wrapped = wrapped_classes(classes)
    functions = wrapped_functions()
    if not wrapped:
        print("hook_bench: the Python hook's te-recompute check could not be armed",
              file=sys.stderr)
        return 2
    make = {"delayed": "DelayedScaling", "current": "Float8CurrentScaling",
            "block": "Float8BlockScaling"}[args.recipe]
    if not hasattr(recipes, make):
        print(f"hook_bench: this Transformer Engine has no {make}", file=sys.stderr)
        return 2
    recipe = getattr(recipes, make)()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    torch.manual_seed(0)
    layers = [te.Linear(args.hidden, args.hidden).to(device) for _ in range(args.layers)]
    x0 = torch.randn(args.hidden, args.hidden, device=device)
    checkpoint: Callable[..., Any] = te.distributed.checkpoint if args.checkpoint == "te" else \
        torch_checkpoint.checkpoint
    calls = [0]

    def count(_module: Any, _inputs: Any) -> None:
        calls[0] += 1

    def step() -> None:
        x = x0.clone().requires_grad_(True)
        with te.autocast(enabled=True, recipe=recipe):
            for layer in layers:
                x = checkpoint(layer, x, use_reentrant=True)
        x.float().pow(2).mean().backward()

    handles = [layer.register_forward_pre_hook(count) for layer in layers]
    step()  # warm-up and the calls per step, counted once outside the timed rounds
    for h in handles:
        h.remove()
    per_step = calls[0]

    inside = [0, 0]  # ns in the timed arm's check, its calls
    timed = {cls: timed_call(own, hook, inside) for cls, _, own in wrapped}
    arms = ARMS + (("timed",) if args.inside else ())

    def arm(name: str) -> None:
        for cls, wrapper, own in wrapped:
            setattr(cls, "__call__", own if name == "absent" else
                    timed[cls] if name == "timed" else wrapper)
        for module, wrapper, own in functions:
            setattr(module, "quantize_weight", own if name in ("absent", "timed") else wrapper)
        hook.set_recording(name == "on")

    if args.profile:  # where the hook's time goes in this arm: fp8audit's own functions
        import cProfile
        import pstats

        arm(args.profile)
        profile = cProfile.Profile()
        profile.runcall(lambda: [step() for _ in range(args.steps)])
        arm("on")
        stats = pstats.Stats(profile)
        stats.sort_stats("cumulative").print_stats(r"/fp8audit/(hook/|_nvtx|_markers|te/)", 12)
        return 0
    if args.calls:
        return count_calls(args, make, per_step, step, arm)
    times: Dict[str, List[float]] = {a: [] for a in arms}
    for r in range(args.rounds):  # the arms interleaved step by step, each first in turn
        order = arms[r % len(arms):] + arms[:r % len(arms)]
        for i in range(args.steps + 1):
            for name in order:
                arm(name)
                sync()
                t0 = time.perf_counter()
                step()
                sync()
                if i:  # the first step of a round, a warm-up, left out
                    times[name].append(time.perf_counter() - t0)
    arm("on")
    base = statistics.median(times["absent"])
    out: Dict[str, Any] = {"recipe": make, "checkpoint": args.checkpoint, "device": device,
                           "under_agent": under_agent, "layers": args.layers,
                           "hidden": args.hidden, "calls_per_step": per_step,
                           "steps_per_arm": len(times["absent"]), "rounds": args.rounds}
    if args.inside:
        out["inside_us_per_call"] = inside[0] / max(inside[1], 1) / 1e3
    for name in arms:
        med = statistics.median(times[name])
        lo, hi = median_interval(times[name])
        out[name] = {"median_ms": med * 1e3, "ci95_ms": [lo * 1e3, hi * 1e3],
                     "ratio": med / base, "added_us_per_call": (med - base) / per_step * 1e6}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{make} on {device}, {args.layers} x te.Linear({args.hidden}) under the "
          f"{args.checkpoint} checkpoint, {per_step} module calls per step, "
          f"{out['steps_per_arm']} steps per arm over {args.rounds} rounds"
          f"{', under fp8audit run' if under_agent else ', the hook armed in-process'}")
    print(f"{'arm':8} {'median ms':>10} {'95% interval':>20} {'ratio':>7} {'µs/call':>8}")
    for name in arms:
        a = out[name]
        lo, hi = a["ci95_ms"]
        print(f"{name:8} {a['median_ms']:10.3f} {lo:9.3f} - {hi:8.3f} {a['ratio']:7.4f} "
              f"{a['added_us_per_call']:+8.2f}")
    if args.inside:
        print(f"the check itself, timed inside the timed arm's steps: "
              f"{out['inside_us_per_call']:.2f} µs per module call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
