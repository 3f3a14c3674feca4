#!/usr/bin/env python3
"""Live acceptance of fp8audit.te (issue 14): every layout of te_layouts.py, unpatched and patched,
against its no-checkpoint twin; one JSON line per microbatch and per layout on stdout.

Per microbatch: TE's update counts (a counter around reduce_and_update_fp8_tensors that counts
DelayedScaling updates), recompute stash entries left (TE's FIFOs and the patch's), and whether
FP8 state (every module's amax history and scale), loss, input and weight gradients equal the
twin's bitwise. Per layout: the first microbatch where the checkpointed run's FP8 state left the
twin's, and which tensor. --scenarios also runs state/scenarios/*.textproto (counts only).

Runs on the GPU with TE 2.20.2, or on the CPU stand-in (--standin): the same code path.
  python3 tests/live_te/te_fix.py --mode both > out/fix.jsonl
  python3 tests/live_te/te_fix_compare.py out/fix.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "python")]


def import_te(standin: bool):
    if standin:
        sys.path.insert(0, str(ROOT / "tests" / "python" / "standin"))
    import transformer_engine
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    try:
        from transformer_engine.pytorch.quantization import FP8GlobalStateManager
    except ImportError:  # pragma: no cover - older TE
        from transformer_engine.pytorch.fp8 import FP8GlobalStateManager
    return transformer_engine, te, recipe, FP8GlobalStateManager


def stash_entries(manager: Any) -> int:
    """Recompute metadata entries still held in TE's per-module FIFOs (fp8audit.te keeps its
    entries there too; its per-frame FIFOs only point at them)."""
    from te_driver import global_state

    return sum(len(q) for q in global_state(manager).fp8_tensors_recompute_buffer)


def reset_te(te: Any) -> None:
    """A fresh global FP8 state for each run (as a new process has): TE's reset, its checkpoint
    first-module list and recompute globals."""
    from transformer_engine.pytorch import distributed

    manager = sys.modules[te.__name__ + ".quantization"].FP8GlobalStateManager
    manager.reset()
    distributed.activation_recompute_forward._is_first_fp8_module.clear()
    from fp8audit.te import releases

    for name in releases.RECOMPUTE_GLOBALS + releases.RECOMPUTE_GLOBALS_BEFORE_PR_3284:
        if hasattr(distributed, name):  # the release's names (renamed in TE 2.19)
            setattr(distributed, name, False)


# The microbatch run_layout is in (what the agent saw of a run TE failed in: up to it).
PROGRESS: Dict[str, int] = {"microbatch": 0}


def run_layout(te: Any, recipe_mod: Any, counter: Any, layout: Any, *, checkpointing: bool,
               hidden: int, tokens: int, device: str, microbatches: int, steps: int,
               backward_inside: bool, seed: int, markers: bool = False,
               group: Any = None, keep_tensors: bool = True) -> List[Dict[str, Any]]:
    """One record per microbatch: counts, time, stash left, and (keep_tensors) clones of the FP8
    state, loss and gradients for the twin comparison; timed runs keep none (a 28x7 decoder at
    H=4096 has 13 GB of gradients)."""
    import torch
    from te_layouts import Ctx, Injected, fp8_state, seeded

    reset_te(te)
    if counter.track_state:
        counter.forget()
    with seeded(seed):
        layers = [layer.to(device) for layer in layout.build(te, hidden)]
    params = [p for layer in layers for p in layer.parameters()]
    optimizer = torch.optim.SGD(params, lr=1e-2)
    gen = torch.Generator().manual_seed(seed + 1)
    ctx = Ctx(recipe=recipe_mod.DelayedScaling(fp8_format=recipe_mod.Format.HYBRID), group=group)
    shape = (tokens // 2, 2, hidden)
    records = []
    for step in range(steps):
        for i in range(microbatches):
            ctx.mb = PROGRESS["microbatch"] = step * microbatches + i
            ctx.calls = {}
            for layer in layers:
                layer.train(not layout.eval_modules)
            x = torch.randn(shape, generator=gen).to(device).requires_grad_()
            counter.take()
            counter.take_advancing()
            if counter.track_state:
                counter.mark()
            if device == "cuda":
                torch.cuda.synchronize()  # the previous microbatch's copies are not timed here
            start = time.perf_counter()
            failed: Optional[str] = None
            loss = y = None
            outer = ctx.autocast(te) if backward_inside else _null()
            if markers:
                torch.cuda.nvtx.range_push("fp8audit.microbatch")
            closed = contextlib.ExitStack()
            if markers:  # closed whatever happens in the microbatch
                closed.callback(torch.cuda.nvtx.range_pop)
            try:
                with outer:
                    y = layout.forward(te, ctx, layers, x, checkpointing)
                    if layout.after_forward:
                        layout.after_forward(layers, ctx.mb)
                    loss = y.float().pow(2).mean()
                    if backward_inside:
                        loss.backward()
                if not backward_inside:
                    loss.backward()
            except Injected as e:
                failed = str(e)
            finally:
                closed.close()
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            fwd, bwd = counter.take()
            advancing = list(counter.take_advancing()) if counter.track_state else None
            silent, cold = counter.silent() if counter.track_state else (None, None)
            loss_value = None if loss is None else loss.detach().clone()
            del y, loss  # a graph whose backward failed is freed here, with its frames
            if failed:
                # ... unless a reference cycle holds it (an exception's traceback keeps the
                # checkpoint's frames): the patch drops a frame's stash when its graph is freed
                gc.collect()
            records.append({
                "microbatch": ctx.mb, "step": step, "forward": fwd, "backward": bwd,
                "failed": failed, "seconds": seconds, "advancing": advancing, "silent": silent,
                "cold": cold,
                "stash_left": stash_entries(counter.manager),
                "state": fp8_state(layers) if keep_tensors else [],
                "loss": loss_value,
                "x_grad": None if x.grad is None or not keep_tensors else x.grad.clone(),
                "grads": [None if p.grad is None or not keep_tensors else p.grad.clone()
                          for p in params],
                "finite": bool(loss_value is not None and torch.isfinite(loss_value).item()),
            })
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    return records


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _equal(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and torch.equal(a, b)


def compare(run: List[Dict[str, Any]], twin: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    from te_layouts import first_difference

    out = []
    for r, t in zip(run, twin):
        diff = first_difference(r["state"], t["state"])
        out.append({"state_equal": diff is None, "state_first_tensor": diff,
                    "loss_equal": _equal(r["loss"], t["loss"]),
                    "x_grad_equal": _equal(r["x_grad"], t["x_grad"]),
                    "grads_equal": _equal(r["grads"], t["grads"])})
    return out


@contextlib.contextmanager
def counted(manager: Any, mode: str, verify: bool, track_state: bool = False):
    """Patched or not, with the update counter installed after the patch (the patch checks TE's
    own functions, so nothing may wrap them before it); track_state: it also tells which updates
    advanced state (timed runs leave that out)."""
    import fp8audit.te
    from te_driver import Counter

    if mode == "patched":
        fp8audit.te.patch(verify=verify)
    counter = Counter(manager, track_state=track_state)
    try:
        yield counter
    finally:
        counter.remove()
        if mode == "patched":
            fp8audit.te.unpatch()


def layout_lines(args, te_pkg, te, recipe_mod, manager, layout, mode: str) -> List[Dict[str, Any]]:
    with counted(manager, mode, args.verify, track_state=True) as counter:
        common = dict(hidden=args.hidden, tokens=args.tokens, device=args.device,
                      microbatches=layout.microbatches or args.microbatches, steps=args.steps,
                      backward_inside=args.backward == "inside", seed=args.seed,
                      markers=args.markers)
        run = run_layout(te, recipe_mod, counter, layout, checkpointing=True, **common)
        twin = run_layout(te, recipe_mod, counter, layout, checkpointing=False, **common)
    cmp = compare(run, twin)
    lines = []
    first_change = None
    for r, c in zip(run, cmp):
        if first_change is None and not c["state_equal"]:
            first_change = {"microbatch": r["microbatch"], "tensor": c["state_first_tensor"]}
        lines.append({"kind": "microbatch", "layout": layout.name, "mode": mode,
                      "backward_placement": args.backward, "microbatch": r["microbatch"],
                      "step": r["step"], "forward": r["forward"], "backward": r["backward"],
                      "advancing": r["advancing"], "silent": r["silent"],
                      "cold": r["cold"],
                      "failed": r["failed"], "stash_left": r["stash_left"],
                      "finite": r["finite"], **{k: v for k, v in c.items()}})
    import fp8audit.te

    lines.append({"kind": "layout", "layout": layout.name, "mode": mode,
                  "microbatches": len(run), "patched_by_hook": fp8audit.te.is_patched(),
                  "backward_placement": args.backward, "te_version": te_pkg.__version__,
                  "twin_comparable": layout.twin_comparable, "refused": layout.refused,
                  "first_state_change": first_change,
                  "twin_counts": [(t["forward"], t["backward"]) for t in twin[:1]]})
    return lines


def scenario_lines(args, te, recipe_mod, manager, mode: str) -> List[Dict[str, Any]]:
    from fp8audit.te import _model
    from te_driver import ScenarioRun

    lines = []
    for path in sorted((ROOT / "state" / "scenarios").glob("*.textproto")):
        reset_te(te)
        with counted(manager, mode, args.verify) as counter:
            run = ScenarioRun(te, recipe_mod, _model.scenario_json(str(path)),
                              hidden=args.hidden, tokens=args.tokens, device=args.device)
            counts = run.counts(counter)
        lines.append({"kind": "scenario", "scenario": path.stem, "mode": mode, "counts": counts,
                      "errors": run.errors[:3]})
    return lines


def timing(args, te, recipe_mod, manager) -> List[Dict[str, Any]]:
    """Forward + backward time per microbatch of the 28 x 7 decoder, patched and unpatched
    alternating in this process (each run's first microbatch, a warm-up, left out)."""
    from te_layouts import LAYOUTS

    layout = LAYOUTS["decoder-28x7"]
    times: Dict[str, List[float]] = {"unpatched": [], "patched": []}
    for _ in range(args.rounds):
        for mode in ("unpatched", "patched"):
            with counted(manager, mode, False) as counter:
                records = run_layout(te, recipe_mod, counter, layout, checkpointing=True,
                                     hidden=args.time_hidden, tokens=args.time_tokens,
                                     device=args.device, microbatches=args.time_microbatches,
                                     steps=1, backward_inside=False, seed=args.seed,
                                     keep_tensors=False)
            times[mode] += [r["seconds"] for r in records[1:] or records]
    med = {k: statistics.median(v) for k, v in times.items()}
    return [{"kind": "timing", "layout": "decoder-28x7", "hidden": args.time_hidden,
             "tokens": args.time_tokens, "rounds": args.rounds,
             "unpatched_ms": [t * 1e3 for t in times["unpatched"]],
             "patched_ms": [t * 1e3 for t in times["patched"]],
             "ratio": med["patched"] / med["unpatched"]}]


def main(argv=None) -> int:
    from te_layouts import LAYOUTS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--standin", action="store_true", help="the CPU stand-in of TE (tests)")
    p.add_argument("--layout", action="append", choices=sorted(LAYOUTS), help="default: all")
    p.add_argument("--mode", choices=["unpatched", "patched", "both"], default="both")
    p.add_argument("--backward", choices=["after", "inside"], default="after")
    p.add_argument("--microbatches", type=int, default=8, help="per optimizer step")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verify", action="store_true", help="fp8audit.te verify mode")
    p.add_argument("--markers", action="store_true",
                   help="an NVTX range fp8audit.microbatch around each microbatch (the run's, "
                        "then the twin's), for the agent")
    p.add_argument("--scenarios", action="store_true", help="also run state/scenarios")
    p.add_argument("--skip-layouts", action="store_true", help="only --scenarios / --time")
    p.add_argument("--time", action="store_true", help="time the 28x7 decoder, both modes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--time-hidden", type=int, default=4096)
    p.add_argument("--time-tokens", type=int, default=4096)
    p.add_argument("--time-microbatches", type=int, default=10)
    args = p.parse_args(argv)
    args.device = "cpu" if args.standin else "cuda"
    if args.standin:
        os.environ.setdefault("FP8AUDIT_TE_STANDIN", "1")
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    te_pkg, te, recipe_mod, manager = import_te(args.standin)
    modes = ["unpatched", "patched"] if args.mode == "both" else [args.mode]
    failures = 0
    out = sys.stdout
    for name in [] if args.skip_layouts else args.layout or list(LAYOUTS):
        layout = LAYOUTS[name]
        if any(not hasattr(te, attr) for attr in layout.needs):
            print(json.dumps({"kind": "skipped", "layout": name,
                              "why": "needs te." + ", te.".join(layout.needs)}), file=out)
            continue
        if layout.cuda_only and args.device != "cuda":
            print(json.dumps({"kind": "skipped", "layout": name, "why": "needs CUDA"}), file=out)
            continue
        for mode in modes:
            try:
                lines = layout_lines(args, te_pkg, te, recipe_mod, manager, layout, mode)
            except Exception as e:  # TE's own failure (2.19.0 unpatched: eval-reentrant)
                traceback.print_exc()
                lines = [{"kind": "error", "layout": name, "mode": mode,
                          "backward_placement": args.backward,
                          "error": f"{type(e).__name__}: {e}",
                          "microbatch": PROGRESS["microbatch"]}]
                failures += 1
            for line in lines:
                print(json.dumps(line), file=out, flush=True)
    if args.scenarios:
        for mode in modes:
            for line in scenario_lines(args, te, recipe_mod, manager, mode):
                print(json.dumps(line), file=out, flush=True)
    if args.time:
        for line in timing(args, te, recipe_mod, manager):
            print(json.dumps(line), file=out, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
