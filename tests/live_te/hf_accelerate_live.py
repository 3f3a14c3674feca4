#!/usr/bin/env python3
"""HF transformers + Accelerate's FP8 (Transformer Engine) with gradient checkpointing
(torch.utils.checkpoint, reentrant or not), issue 19 item 4: does a TE module recomputed by
torch's checkpoint run in FP8 as its original forward did, and what do TE's update counts and the
numerics against the same model without checkpointing say.

A tiny random-init LlamaForCausalLM, `Accelerator(mixed_precision="fp8",
kwargs_handlers=[TERecipeKwargs(fp8_format="HYBRID")])` (nn.Linear become te.Linear; the model's
forward runs in TE's autocast), `model.gradient_checkpointing_enable()`. One JSON line per
microbatch (TE's counts; per TE module, FP8 on or off at each of its forward calls: the original
forward, then any recompute) and one per run (loss and gradients against the twin without
checkpointing: bitwise, else the largest relative difference).

  python3 tests/live_te/hf_accelerate_live.py --checkpoint reentrant --mode both
  fp8audit run --fix-te -- python3 tests/live_te/hf_accelerate_live.py --checkpoint non-reentrant
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "python")]


class Fp8Calls:
    """Forward pre-hooks on every TE module: per module, whether FP8 was on at each call."""

    def __init__(self, model: Any, manager: Any) -> None:
        from transformer_engine.pytorch.module.base import TransformerEngineBaseModule

        self.calls: Dict[str, List[Dict[str, Any]]] = {}
        self.handles = []
        main = threading.main_thread()
        for name, module in model.named_modules():
            if not isinstance(module, TransformerEngineBaseModule):
                continue

            def hook(mod, inputs, name=name):
                import torch

                self.calls.setdefault(name, []).append({
                    "fp8": bool(manager.is_fp8_enabled()), "grad": torch.is_grad_enabled(),
                    "backward_thread": threading.current_thread() is not main})
            self.handles.append(module.register_forward_pre_hook(hook))

    def take(self) -> Dict[str, Any]:
        """Per microbatch: modules called more than once (recomputed) and the FP8 flags."""
        recomputed = {n: [c["fp8"] for c in v] for n, v in self.calls.items() if len(v) > 1}
        mismatched = sorted(n for n, flags in recomputed.items() if len(set(flags)) > 1)
        out = {"te_modules_called": len(self.calls), "recomputed": len(recomputed),
               "fp8_mismatch": mismatched, "example": next(iter(recomputed.items()), None)}
        self.calls = {}
        return out

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def build(args, checkpoint: str):
    import torch
    from accelerate import Accelerator
    from accelerate.utils import TERecipeKwargs
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.heads,
                         max_position_embeddings=args.seq, attn_implementation="eager")
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    if checkpoint != "none":
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": checkpoint == "reentrant"})
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[
        TERecipeKwargs(fp8_format="HYBRID", amax_history_len=16, amax_compute_algo="max")])
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def train(args, checkpoint: str, counter: Any, manager: Any, te: Any) -> Dict[str, Any]:
    import torch
    from te_fix import reset_te, stash_entries

    reset_te(te)
    counter.take()
    accelerator, model, optimizer = build(args, checkpoint)
    calls = Fp8Calls(model, manager)
    gen = torch.Generator().manual_seed(args.seed + 1)
    records, losses, step_grads, errors = [], [], [], []
    for step in range(args.steps):
        for i in range(args.microbatches):
            ids = torch.randint(0, args.vocab, (args.mbs, args.seq), generator=gen).cuda()
            rec: Dict[str, Any] = {"microbatch": step * args.microbatches + i, "step": step}
            try:
                out = model(input_ids=ids, labels=ids)
                accelerator.backward(out.loss / args.microbatches)
                losses.append(out.loss.detach().float().clone())
            except Exception as e:
                rec["failed"] = f"{type(e).__name__}: {e}"[:300]
                errors.append({"microbatch": rec["microbatch"], "error": rec["failed"],
                               "where": traceback.format_exc(limit=-8)})
            rec["forward"], rec["backward"] = counter.take()
            rec["stash_left"] = stash_entries(manager)
            rec.update(calls.take())
            records.append(rec)
            if "failed" in rec:
                break
        if errors:
            break
        step_grads.append([None if p.grad is None else p.grad.detach().clone()
                           for p in model.parameters()])
        optimizer.step()
        optimizer.zero_grad()
    calls.remove()
    te_linears = sum(type(m).__name__ == "Linear" and hasattr(m, "fp8_meta")
                     for m in model.modules())
    return {"records": records, "losses": losses, "grads": step_grads, "errors": errors,
            "te_linears": te_linears}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", choices=["none", "reentrant", "non-reentrant"],
                   action="append", help="default: reentrant and non-reentrant")
    p.add_argument("--mode", choices=["unpatched", "patched", "both", "hook"], default="both")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--mbs", type=int, default=2)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    from megatron_live import mode_context, twin_differences
    from te_fix import import_te

    _, te, _, manager = import_te(False)
    modes = ["unpatched", "patched"] if args.mode == "both" else [args.mode]
    for checkpoint in args.checkpoint or ["reentrant", "non-reentrant"]:
        for mode in modes:
            import fp8audit.te

            with mode_context(manager, mode) as counter:
                run = train(args, checkpoint, counter, manager, te)
                patched = fp8audit.te.is_patched()
                twin = train(args, "none", counter, manager, te)
            for r in run["records"]:
                print(json.dumps({"kind": "microbatch", "checkpoint": checkpoint, "mode": mode,
                                  **r}), flush=True)
            summary = {"kind": "run", "checkpoint": checkpoint, "mode": mode, "patched": patched,
                       "te_linears": run["te_linears"], "errors": run["errors"],
                       "twin_errors": twin["errors"],
                       "twin_counts": [(r["forward"], r["backward"]) for r in twin["records"]],
                       **twin_differences(run, twin)}
            print(json.dumps(summary, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
