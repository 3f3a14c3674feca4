"""Megatron-core's tensor_parallel.checkpoint over TE modules (issue 19 item 4), on the CPU
stand-ins of TE and of Megatron's random.py: its recompute in backward restores Megatron's RNG but
not TE's FP8 autocast (selective core_attn with FP8 attention recomputes TE's DotProductAttention
in BF16). Under fp8audit.te the recompute runs under the original forward's FP8 state and scales,
whether Megatron was imported before the patch or after it. Megatron's CheckpointWithoutOutput
(MLA's recompute_up_proj) opens TE's activation_recompute_forward frames itself: one pending frame
recomputes from its own stash; a second opened while one is pending is refused with one line."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import torch
from checkpoint_training import train_blocks

STANDIN_MEGATRON = Path(__file__).resolve().parent / "standin_megatron"


@pytest.fixture
def megatron(monkeypatch):
    """The stand-in megatron package, imported fresh; forgotten afterwards."""
    monkeypatch.syspath_prepend(str(STANDIN_MEGATRON))

    def forget() -> None:
        for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
            del sys.modules[name]

    forget()
    yield lambda: __import__("megatron.core.tensor_parallel.random", fromlist=["random"])
    forget()


def _train(random, use_checkpoint: bool):
    """Each block under Megatron's checkpoint (`random`: its random.py), or not."""
    return train_blocks((lambda block, x: random.checkpoint(block, False, x))
                        if use_checkpoint else None)


def test_unpatched_megatron_checkpoint_recomputes_te_modules_without_fp8(megatron):
    flags, _, _, _ = _train(megatron(), True)
    assert True in flags and False in flags


@pytest.mark.parametrize("imported", ["before-patch", "after-patch"])
def test_patched_megatron_checkpoint_recomputes_in_fp8_once_each_way_and_equals_no_checkpoint(
        megatron, imported):
    import conftest
    import fp8audit.te

    random = megatron() if imported == "before-patch" else None
    controller = fp8audit.te.patch(verify=True)
    random = random or megatron()  # random.py completes after the patch: adopted at autocast
    flags, counts, grads, held = _train(random, True)
    assert controller.megatron_routing.installed()
    assert controller.megatron_routing.routed == 3 * 2
    assert all(flags) and len(flags) == 3 * 4 * 2  # microbatches, modules, forward + recompute
    assert counts == [(1, 1)] * 3
    assert held == 0
    conftest.reset_te()
    _, twin_counts, twin_grads, _ = _train(random, False)
    assert twin_counts == [(1, 1)] * 3
    assert all(torch.equal(a, b) for a, b in zip(grads, twin_grads))


def test_unpatch_gives_megatron_its_checkpoint_function_back(megatron):
    import fp8audit.te

    random = megatron()
    original = random.CheckpointFunction
    fp8audit.te.patch()
    assert getattr(random.CheckpointFunction, "__fp8audit__", False)
    fp8audit.te.unpatch()
    assert random.CheckpointFunction is original


def test_a_megatron_checkpoint_that_no_longer_calls_its_function_class_is_left_alone_with_one_line(
        megatron, capsys):
    import fp8audit.te

    random = megatron()
    random.checkpoint = lambda function, distribute, *args: function(*args)
    controller = fp8audit.te.patch()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fp8audit.te: megatron.core.tensor_parallel.checkpoint left alone "
                   "(megatron.core.tensor_parallel.checkpoint no longer calls CheckpointFunction):"
                   " TE modules it recomputes may run without FP8"]
    assert not controller.megatron_routing.installed()
    assert not getattr(random.CheckpointFunction, "__fp8audit__", False)


def _up_proj(random, layers: int, steps: List[str], calls: Optional[List[int]] = None):
    """MLA's recompute_up_proj shape (megatron-core's multi_latent_attention.py): per layer an
    up-projection te.Linear under CheckpointWithoutOutput(fp8=...), its output consumed by the next
    te.Linear, whose output's grad hook recomputes it in backward (so layer N first). `steps`:
    "train" (forward and backward) or "eval" (forward under no_grad). Returns each up-projection's
    calls per step (forward and recompute) and TE's (forward, backward) updates per step; `calls`
    holds the current step's calls, also when a step raises."""
    import transformer_engine.pytorch as te
    from te_driver import Counter
    from transformer_engine.common import recipe
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as manager

    torch.manual_seed(0)
    ups = [te.Linear(16, 16) for _ in range(layers)]
    outs = [te.Linear(16, 16) for _ in range(layers)]
    calls = [0] * layers if calls is None else calls
    for i, up in enumerate(ups):
        up.register_forward_pre_hook(lambda mod, inp, i=i: calls.__setitem__(i, calls[i] + 1))
    counter = Counter(manager)
    ran: List[Tuple[List[int], Tuple[int, int]]] = []
    try:
        for step in steps:
            calls[:] = [0] * layers
            with contextlib.ExitStack() as stack:
                if step == "eval":
                    stack.enter_context(torch.no_grad())
                h = torch.randn(8, 16, requires_grad=step == "train")
                with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                    for up, out in zip(ups, outs):
                        ckpt = random.CheckpointWithoutOutput(fp8=True)
                        h = out(ckpt.checkpoint(up, h))
                        ckpt.discard_output_and_register_recompute(h)
                if step == "train":
                    h.float().pow(2).mean().backward()
            ran.append((list(calls), counter.take()))
    finally:
        counter.remove()
    return ran


def test_unpatched_checkpoint_without_output_runs_several_layers(megatron):
    ran = _up_proj(megatron(), 2, ["train", "train"])
    assert [calls for calls, _ in ran] == [[2, 2], [2, 2]]  # forward and recompute


def test_patched_checkpoint_without_output_of_one_layer_recomputes_from_its_own_stash(megatron):
    import fp8audit.te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as manager

    controller = fp8audit.te.patch(verify=True)
    ran = _up_proj(megatron(), 1, ["train"] * 3)
    assert [backward for _, (_, backward) in ran] == [1, 1, 1]
    assert not controller.violations and not controller.unpaired
    assert sum(len(q) for q in manager.quantization_state.fp8_tensors_recompute_buffer) == 0


def test_patched_checkpoint_without_output_frames_pending_together_are_refused_before_they_run(
        megatron):
    """Megatron recomputes them in backward, layer N first, each through a fresh
    activation_recompute_forward that names no frame: which frame each recompute belongs to is
    not known, so the second frame is refused before its callable runs."""
    import fp8audit.te

    random = megatron()
    fp8audit.te.patch(verify=True)
    calls: List[int] = []
    with pytest.raises(fp8audit.te.NotCovered) as e:
        _up_proj(random, 2, ["train"], calls)
    message = str(e.value)
    assert message.startswith("fp8audit.te: Megatron's CheckpointWithoutOutput"), message
    assert "activation_recompute_forward" in message and "\n" not in message
    assert "without --fix-te" in message
    assert calls == [1, 0]  # in the first forward, before the second layer's up-projection
    assert fp8audit.te.status()["open_frames"] == 0


def test_patched_checkpoint_without_output_left_pending_by_an_eval_forward_is_refused_not_mispaired(
        megatron):
    """An evaluation forward under no_grad opens the frame too and never recomputes it: the next
    microbatch's frame is refused rather than recomputed from the evaluation's stash."""
    import fp8audit.te

    random = megatron()
    fp8audit.te.patch(verify=True)
    with pytest.raises(fp8audit.te.NotCovered, match="CheckpointWithoutOutput"):
        _up_proj(random, 1, ["train", "eval", "train"])


def test_patched_checkpoint_without_output_whose_forward_raised_leaves_no_pending_frame(megatron):
    """A frame whose forward raised can never be recomputed: the next microbatch's frame is the
    only one pending, and runs."""
    import fp8audit.te
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    random = megatron()
    controller = fp8audit.te.patch(verify=True)

    def broken(x):
        raise ValueError("the callable failed")

    with pytest.raises(ValueError, match="the callable failed"):
        with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
            random.CheckpointWithoutOutput(fp8=True).checkpoint(
                broken, torch.randn(8, 16, requires_grad=True))
    assert not controller.unpaired
    ran = _up_proj(random, 1, ["train"])
    assert [backward for _, (_, backward) in ran] == [1]
