"""torch.utils.checkpoint over TE modules (issue 19 item 4), on the CPU stand-in: HF gradient
checkpointing under Accelerate's FP8 opens TE's autocast around the forward only, so torch's
recompute in backward ran the TE modules without FP8. Under fp8audit.te the recompute runs under
the original forward's FP8 state and scales: FP8 on at every call, 1/1 updates, and gradients
bitwise equal to the run without checkpointing."""

from __future__ import annotations

import pytest
import torch
from checkpoint_training import train_blocks
from torch.utils.checkpoint import checkpoint  # imported early, as transformers does


def _te():
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    return te, recipe, FP8GlobalStateManager


def _train(use_checkpoint: bool, reentrant: bool):
    """Each block under torch's checkpoint (imported early, as transformers does), or not."""
    return train_blocks((lambda block, x: checkpoint(block, x, use_reentrant=reentrant))
                        if use_checkpoint else None)


@pytest.mark.parametrize("reentrant", [True, False])
def test_unpatched_torch_checkpoint_recomputes_te_modules_without_fp8(reentrant):
    flags, _, _, _ = _train(True, reentrant)
    assert True in flags and False in flags  # the recompute runs outside TE's autocast


@pytest.mark.parametrize("reentrant", [True, False])
def test_patched_torch_checkpoint_recomputes_in_fp8_once_each_way_and_equals_no_checkpoint(
        patched, reentrant):
    flags, counts, grads, held = _train(True, reentrant)
    assert all(flags) and len(flags) == 3 * 4 * 2  # 3 microbatches, 4 modules, forward+recompute
    assert counts == [(1, 1)] * 3
    assert held == 0
    import conftest

    conftest.reset_te()
    twin_flags, twin_counts, twin_grads, _ = _train(False, reentrant)
    assert all(twin_flags) and twin_counts == [(1, 1)] * 3
    assert all(torch.equal(a, b) for a, b in zip(grads, twin_grads))


def test_unpatch_gives_torch_its_checkpoint_back(patched):
    import fp8audit.te
    import torch.utils.checkpoint as tuc

    assert getattr(tuc.CheckpointFunction, "__fp8audit__", False)
    fp8audit.te.unpatch()
    assert not getattr(tuc.CheckpointFunction, "__fp8audit__", False)
    assert not getattr(tuc._checkpoint_without_reentrant_generator, "__fp8audit__", False)


def test_a_torch_checkpoint_without_te_modules_is_left_to_torch(patched):
    te, recipe_mod, manager = _te()
    plain = torch.nn.Linear(16, 16)
    before = patched.torch_routing.routed
    with te.autocast(enabled=True, recipe=recipe_mod.DelayedScaling()):
        y = checkpoint(plain, torch.randn(4, 16, requires_grad=True), use_reentrant=True)
    y.sum().backward()
    assert patched.torch_routing.routed == before


def test_fp8audit_te_imports_without_torch():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.modules['torch'] = None; import fp8audit.te; "
            "print(fp8audit.te.is_patched())")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(root / "python")}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
