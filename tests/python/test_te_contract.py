"""TE's recompute-stash contract under fp8audit.te (issue 19 item 2), on the CPU stand-in: code that
relies on TE's own stash and restore functions, the fp8_meta key they write and TE's buffer sees
the same under the patch as without it. Modelled on what TE's own tests check
(test_numerics.py: the inner-autocast recompute test counts stash and restore calls per module
by that key; the mixed-FP8-regions test reads the key per module)."""

from __future__ import annotations

import pytest
import torch

STASH_KEY = "global_fp8_buffer_pos_fwd_recompute"


def _te():
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    return te, recipe, FP8GlobalStateManager


class StashCalls:
    """Wraps the manager's stash and restore functions as TE's test does (after any patch):
    a stash counts when it left the key, a restore must follow a counted stash."""

    def __init__(self, monkeypatch, manager) -> None:
        self.stashed, self.restored, self.unstashed_restores = {}, {}, 0
        stash_fn = manager.copy_forward_fp8_meta_tensors_for_recompute
        restore_fn = manager.get_old_fp8_meta_tensors_for_recompute

        def stash(fp8_meta):
            stash_fn(fp8_meta)
            if STASH_KEY in fp8_meta:
                self.stashed[id(fp8_meta)] = self.stashed.get(id(fp8_meta), 0) + 1

        def restore(fp8_meta):
            if fp8_meta["recipe"].delayed():
                if id(fp8_meta) not in self.stashed:
                    self.unstashed_restores += 1
                self.restored[id(fp8_meta)] = self.restored.get(id(fp8_meta), 0) + 1
            restore_fn(fp8_meta)

        monkeypatch.setattr(manager, "copy_forward_fp8_meta_tensors_for_recompute",
                            staticmethod(stash))
        monkeypatch.setattr(manager, "get_old_fp8_meta_tensors_for_recompute",
                            staticmethod(restore))


def _inner_autocast_step(te, recipe_mod, layers, reentrant: bool) -> None:
    fp8_recipe = recipe_mod.DelayedScaling()

    def body(t):
        with te.autocast(enabled=True, recipe=fp8_recipe):
            for layer in layers:
                t = layer(t)
            return t

    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast(enabled=False, recipe=fp8_recipe):
        y = te.checkpoint(body, x, use_reentrant=reentrant)
    y.float().pow(2).mean().backward()


@pytest.mark.parametrize("reentrant", [True, False])
def test_every_restore_follows_a_stash_tes_key_recorded_when_patched(monkeypatch, patched,
                                                                     reentrant):
    te, recipe_mod, manager = _te()
    torch.manual_seed(0)
    layers = [te.Linear(16, 16) for _ in range(3)]
    calls = StashCalls(monkeypatch, manager)
    _inner_autocast_step(te, recipe_mod, layers, reentrant)
    assert calls.stashed, "no module stashed through TE's function"
    assert calls.unstashed_restores == 0, "a restore came for a module never stashed"
    assert calls.restored == calls.stashed


@pytest.mark.parametrize("reentrant", [True, False])
def test_only_fp8_modules_carry_tes_stash_key_when_patched(patched, reentrant):
    te, recipe_mod, _ = _te()
    torch.manual_seed(0)
    plain, fp8 = te.Linear(16, 16), te.Linear(16, 16)
    fp8_recipe = recipe_mod.DelayedScaling()

    def body(t):
        t = plain(t)
        with te.autocast(enabled=True, recipe=fp8_recipe):
            return fp8(t)

    x = torch.randn(8, 16, requires_grad=True)
    te.checkpoint(body, x, use_reentrant=reentrant).float().sum().backward()
    assert STASH_KEY not in plain.fp8_meta
    assert STASH_KEY in fp8.fp8_meta


@pytest.mark.parametrize("reentrant", [True, False])
def test_recompute_leaves_tes_buffer_empty_when_patched(patched, reentrant):
    te, recipe_mod, manager = _te()
    torch.manual_seed(0)
    layers = [te.Linear(16, 16) for _ in range(3)]
    for _ in range(2):
        _inner_autocast_step(te, recipe_mod, layers, reentrant)
        held = sum(len(q) for q in manager.quantization_state.fp8_tensors_recompute_buffer)
        assert held == 0
    assert manager.quantization_state.fp8_tensors_recompute_buffer, "TE's buffer never used"


def test_a_frame_never_recomputed_takes_its_entries_out_of_tes_buffer(patched):
    import gc

    te, recipe_mod, manager = _te()
    layers = [te.Linear(16, 16) for _ in range(2)]
    with te.autocast(enabled=True, recipe=recipe_mod.DelayedScaling()):
        y = te.checkpoint(lambda t: layers[1](layers[0](t)), torch.randn(8, 16,
                          requires_grad=True), use_reentrant=True)
    buffers = manager.quantization_state.fp8_tensors_recompute_buffer
    assert sum(len(q) for q in buffers) == 2
    del y  # its graph, and with it the frame, is freed without a backward
    gc.collect()
    assert sum(len(q) for q in buffers) == 0


class _BiasBlock(torch.nn.Module):
    """Megatron's MLP shape: the output and, apart, the output bias parameter."""

    def __init__(self, te) -> None:
        super().__init__()
        self.fc = te.Linear(16, 16, bias=False)
        self.bias = torch.nn.Parameter(torch.full((16,), 0.5))

    def forward(self, x):
        return self.fc(x), self.bias


def _bias_microbatch(te, recipe_mod, block, checkpointing: bool):
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(3), requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe_mod.DelayedScaling()):
        out, bias = te.checkpoint(block, x, use_reentrant=True) if checkpointing else block(x)
    (out + bias).float().pow(2).mean().backward()


def test_unpatched_a_parameter_returned_through_a_reentrant_checkpoint_stops_being_a_leaf():
    te, recipe_mod, _ = _te()
    block = _BiasBlock(te)
    with pytest.raises(IndexError):  # its recompute re-enters the checkpoint: an empty stash
        _bias_microbatch(te, recipe_mod, block, True)
    assert not block.bias.is_leaf


def test_a_parameter_returned_through_a_reentrant_checkpoint_trains_as_without_it(patched):
    import conftest

    te, recipe_mod, _ = _te()
    torch.manual_seed(0)
    block = _BiasBlock(te)
    _bias_microbatch(te, recipe_mod, block, True)
    assert block.bias.is_leaf and block.bias.grad is not None
    conftest.reset_te()
    torch.manual_seed(0)
    twin = _BiasBlock(te)
    _bias_microbatch(te, recipe_mod, twin, False)
    assert torch.equal(block.bias.grad, twin.bias.grad)
    assert torch.equal(block.fc.weight.grad, twin.fc.weight.grad)
