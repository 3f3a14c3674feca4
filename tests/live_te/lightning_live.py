#!/usr/bin/env python3
"""PyTorch Lightning's Transformer Engine precision with torch.utils.checkpoint (issue 33): TE's
update counts per microbatch, FP8 on or off at each TE module call (the forward, then any
recompute), and the numerics against the same job without checkpointing, unpatched and under
fp8audit.te.

The model is Lightning's shape: nn.Linear blocks (optionally with nn.LayerNorm) that
`precision="transformer-engine"` swaps for te.Linear (te.LayerNorm), each block run by the model
itself through torch's checkpoint; TE's FP8 autocast (inside Lightning's bf16 torch.autocast
fallback) is open around the forward only, the backward runs after it. Drivers:
  trainer  Trainer(precision="transformer-engine", accumulate_grad_batches=M), automatic
           optimization (the backward in the optimizer's closure)
  fabric   Fabric(precision="transformer-engine"): fabric.setup, fabric.backward
  plain    no Lightning: te.autocast around the forward, the backward after it (HF Accelerate's)
One JSON line per microbatch ({"kind": "microbatch", ...}: TE's counts, the fix's view) and one
per run ({"kind": "run", ...}: losses and gradients against the twin without checkpointing).

  python3 tests/live_te/lightning_live.py --driver trainer --checkpoint reentrant --mode both
  fp8audit run --fix-te -- python3 tests/live_te/lightning_live.py --mode hook ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "python")]


def make_model(args: Any, checkpoint: str) -> Any:
    """The LightningModule (a plain nn.Module with the same forward where Lightning is absent)."""
    import torch
    from torch.utils.checkpoint import checkpoint as torch_checkpoint

    try:
        import lightning.pytorch as pl

        base: Any = pl.LightningModule
    except ImportError:
        base = torch.nn.Module

    class Blocks(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            h = args.hidden
            self.inp = torch.nn.Linear(h, h) if args.head == "first" else None
            blocks = []
            for _ in range(args.blocks):
                layers: List[Any] = [torch.nn.LayerNorm(h)] if args.layernorm else []
                layers += [torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, h)]
                blocks.append(torch.nn.Sequential(*layers))
            self.blocks = torch.nn.ModuleList(blocks)
            self.out = torch.nn.Linear(h, h)
            self.records: List[Dict[str, Any]] = []
            self.on_batch: Any = None

        def forward(self, x):
            if self.inp is not None:
                x = self.inp(x)
            for block in self.blocks:
                if checkpoint == "none":
                    x = block(x)
                else:
                    x = torch_checkpoint(block, x, use_reentrant=checkpoint == "reentrant")
            return self.out(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self(x).float(), y.float())
            self.records.append({"loss": loss.detach().float().clone()})
            return loss

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.on_batch is not None:
                self.on_batch()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=args.lr)

    torch.manual_seed(args.seed)
    return Blocks()


def data(args: Any, device: Any) -> List[Any]:
    import torch

    gen = torch.Generator().manual_seed(args.seed + 1)
    n = args.microbatches * args.steps
    return [(torch.randn(args.mbs, args.hidden, generator=gen).to(device),
             torch.randn(args.mbs, args.hidden, generator=gen).to(device)) for _ in range(n)]


class Fp8Calls:
    """Per TE module: FP8 on or off at each forward call, and on which thread."""

    def __init__(self, model: Any, manager: Any) -> None:
        import torch

        self.calls: Dict[str, List[bool]] = {}
        self.backward_calls = 0
        self.handles = []
        main = threading.main_thread()
        te_types = _te_types()
        for name, module in model.named_modules():
            if not isinstance(module, te_types):
                continue

            def hook(mod, inputs, name=name):
                self.calls.setdefault(name, []).append(bool(manager.is_fp8_enabled()))
                if threading.current_thread() is not main or torch.is_grad_enabled() and \
                        getattr(torch._C, "_current_graph_task_id", lambda: -1)() != -1:
                    self.backward_calls += 1
            self.handles.append(module.register_forward_pre_hook(hook))

    def take(self) -> Dict[str, Any]:
        recomputed = {n: v for n, v in self.calls.items() if len(v) > 1}
        out = {"te_modules_called": len(self.calls), "recomputed": len(recomputed),
               "fp8_mismatch": sorted(n for n, v in recomputed.items() if len(set(v)) > 1),
               "calls_in_backward": self.backward_calls,
               "example": next(iter(recomputed.items()), None)}
        self.calls, self.backward_calls = {}, 0
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _te_types() -> tuple:
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule

    types: tuple = (TransformerEngineBaseModule,)
    try:
        from transformer_engine.pytorch.ops import FusibleOperation

        types += (FusibleOperation,)
    except ImportError:
        pass
    return types


def fix_view() -> Dict[str, Any]:
    """What the installed fix holds after a microbatch: ownerships granted whose backward update
    has not run, its counts, its violations (empty when unpatched)."""
    try:
        from fp8audit.te import _lifecycle
    except ImportError:
        return {}
    c = getattr(_lifecycle, "_active", None)
    if c is None:
        return {}
    return {"owners_open": c.owners, "fix_counts": dict(c.counts),
            "fix_lost": c.safety.lost, "fix_violations": list(c.violations[-3:])}


def train(args: Any, driver: str, checkpoint: str, counter: Any, manager: Any, te: Any,
          device: str) -> Dict[str, Any]:
    import torch
    from te_fix import reset_te, stash_entries

    reset_te(te)
    counter.take()
    model = make_model(args, checkpoint)
    batches = data(args, device)
    records: List[Dict[str, Any]] = []
    errors: List[Dict[str, Any]] = []
    grads: List[List[Optional[torch.Tensor]]] = []
    calls: Optional[Fp8Calls] = None

    def take(i: int, failed: Optional[str] = None) -> None:
        rec: Dict[str, Any] = {"microbatch": i, "step": i // args.microbatches}
        if failed:
            rec["failed"] = failed
        rec["forward"], rec["backward"] = counter.take()
        rec["stash_left"] = stash_entries(manager)
        rec.update(calls.take() if calls else {})
        rec.update(fix_view())
        records.append(rec)

    losses: List[torch.Tensor] = []

    def loop(model: Any, optimizer: Any, forward: Any, backward: Any) -> None:
        """The fabric and plain drivers: gradient accumulation over args.microbatches."""
        for i, (x, y) in enumerate(batches):
            loss = torch.nn.functional.mse_loss(forward(x).float(), y.float())
            backward(loss / args.microbatches)
            losses.append(loss.detach().float().clone())
            take(i)
            if (i + 1) % args.microbatches == 0:
                grads.append([None if p.grad is None else p.grad.detach().clone()
                              for p in model.parameters()])
                optimizer.step()
                optimizer.zero_grad()

    try:
        if driver == "trainer":
            import lightning.pytorch as pl

            class Grads(pl.Callback):
                def on_before_optimizer_step(self, trainer, module, optimizer):
                    grads.append([None if p.grad is None else p.grad.detach().clone()
                                  for p in module.parameters()])

            trainer = pl.Trainer(accelerator="gpu" if device == "cuda" else "cpu", devices=1,
                                 precision="transformer-engine", max_steps=args.steps,
                                 accumulate_grad_batches=args.microbatches, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False,
                                 enable_model_summary=False, callbacks=[Grads()],
                                 num_sanity_val_steps=0)
            done = [0]

            def on_batch() -> None:
                take(done[0])
                done[0] += 1

            model.on_batch = on_batch
            original_setup = trainer.strategy.setup

            def setup_then_hook(t):  # after Lightning swapped in TE's modules
                nonlocal calls
                original_setup(t)
                calls = Fp8Calls(t.lightning_module, manager)

            trainer.strategy.setup = setup_then_hook
            trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader(
                [(x.cpu(), y.cpu()) for x, y in batches], batch_size=None))
            losses = [r["loss"] for r in model.records]
        elif driver == "fabric":
            from lightning.fabric import Fabric

            fabric = Fabric(accelerator="cuda" if device == "cuda" else "cpu", devices=1,
                            precision="transformer-engine")
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
            model, optimizer = fabric.setup(model, optimizer)
            calls = Fp8Calls(model, manager)
            loop(model, optimizer, lambda x: model(x), fabric.backward)
        else:
            from transformer_engine.common import recipe

            model = model.to(device=device, dtype=torch.bfloat16)
            _swap(model, te)
            model = model.to(device=device, dtype=torch.bfloat16)
            optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
            calls = Fp8Calls(model, manager)

            def forward(x: Any) -> Any:  # TE's autocast around the forward only
                with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                    return model(x.to(torch.bfloat16))

            loop(model, optimizer, forward, lambda loss: loss.backward())
    except Exception as e:
        errors.append({"error": f"{type(e).__name__}: {e}"[:800],
                       "where": traceback.format_exc(limit=-8)})
        take(len(records), failed=errors[-1]["error"])
    finally:
        if calls is not None:
            calls.remove()
    return {"records": records, "losses": losses, "grads": grads, "errors": errors}


def _swap(module: Any, te: Any) -> None:
    """nn.Linear -> te.Linear and nn.LayerNorm -> te.LayerNorm with the same weights (the plain
    driver's copy of what Lightning's precision plugin does)."""
    import torch

    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            new = te.Linear(child.in_features, child.out_features, bias=child.bias is not None)
            new.weight.data = child.weight.data.clone()
            if child.bias is not None:
                new.bias.data = child.bias.data.clone()
            setattr(module, name, new)
        elif isinstance(child, torch.nn.LayerNorm):
            new = te.LayerNorm(child.normalized_shape[0], eps=child.eps)
            new.weight.data = child.weight.data.clone()
            new.bias.data = child.bias.data.clone()
            setattr(module, name, new)
        else:
            _swap(child, te)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--driver", choices=["trainer", "fabric", "plain"], action="append",
                   help="default: all three")
    p.add_argument("--checkpoint", choices=["reentrant", "non-reentrant"], action="append",
                   help="default: both")
    p.add_argument("--mode", choices=["unpatched", "patched", "both", "hook"], default="both")
    p.add_argument("--layernorm", action="store_true", help="a LayerNorm first in each block")
    p.add_argument("--head", choices=["first", "last"], default="last",
                   help="a Linear before the blocks too (first), or only after them")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--mbs", type=int, default=16)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: the CPU stand-in of TE (tests/python/standin)")
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    from megatron_live import mode_context, twin_differences
    from te_fix import import_te

    _, te, _, manager = import_te(False)
    modes = ["unpatched", "patched"] if args.mode == "both" else [args.mode]
    for driver in args.driver or ["trainer", "fabric", "plain"]:
        for checkpoint in args.checkpoint or ["reentrant", "non-reentrant"]:
            for mode in modes:
                import fp8audit.te

                with mode_context(manager, mode) as counter:
                    run = train(args, driver, checkpoint, counter, manager, te, args.device)
                    patched = fp8audit.te.is_patched()
                    twin = train(args, driver, "none", counter, manager, te, args.device)
                for r in run["records"]:
                    print(json.dumps({"kind": "microbatch", "driver": driver,
                                      "checkpoint": checkpoint, "mode": mode, **r},
                                     default=str), flush=True)
                summary = {"kind": "run", "driver": driver, "checkpoint": checkpoint,
                           "mode": mode, "patched": patched, "layernorm": args.layernorm,
                           "head": args.head, "errors": run["errors"],
                           "twin_errors": twin["errors"],
                           "counts": [(r["forward"], r["backward"]) for r in run["records"]],
                           "twin_counts": [(r["forward"], r["backward"]) for r in twin["records"]],
                           "losses": [round(float(v), 6) for v in run["losses"]],
                           "twin_losses": [round(float(v), 6) for v in twin["losses"]],
                           **twin_differences(run, twin)}
                print(json.dumps(summary, default=str), flush=True)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
