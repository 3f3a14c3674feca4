"""What the checkpoint suites train (test_torch_checkpoint.py, test_megatron_checkpoint.py), on the
CPU stand-in of TE: two blocks of two te.Linear, TE's autocast around the forward only and the
backward outside it (HF Accelerate's and Megatron's shape), each block run through a checkpoint or
directly."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Tuple

import torch


def train_blocks(checkpointed: Optional[Callable[[Any, torch.Tensor], torch.Tensor]],
                 microbatches: int = 3) -> Tuple[List[bool], List[Tuple[int, int]],
                                                 List[torch.Tensor], int]:
    """`checkpointed(block, x)` runs a block under the checkpoint tested (None: directly). Returns
    whether FP8 was on at each TE module call, TE's (forward, backward) updates per microbatch,
    the gradients, and the recompute stash entries TE still holds."""
    import transformer_engine.pytorch as te
    from te_driver import Counter
    from transformer_engine.common import recipe
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as manager

    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(
        [torch.nn.Sequential(te.Linear(16, 16), torch.nn.ReLU(), te.Linear(16, 16))
         for _ in range(2)])
    flags: List[bool] = []
    for m in blocks.modules():
        if isinstance(m, te.Linear):
            m.register_forward_pre_hook(lambda mod, inp: flags.append(manager.is_fp8_enabled()))
    counter = Counter(manager)
    counts, gen = [], torch.Generator().manual_seed(1)
    try:
        for _ in range(microbatches):
            x = torch.randn(8, 16, generator=gen, requires_grad=True)
            with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                for block in blocks:
                    x = checkpointed(block, x) if checkpointed is not None else block(x)
            x.float().pow(2).mean().backward()
            counts.append(counter.take())
    finally:
        counter.remove()
    grads = [p.grad.clone() for p in blocks.parameters()]
    held = sum(len(q) for q in manager.quantization_state.fp8_tensors_recompute_buffer)
    return flags, counts, grads, held
