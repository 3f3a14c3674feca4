"""Megatron-core's tensor_parallel.checkpoint over TE modules (issue 19 item 4), on the CPU
stand-ins of TE and of Megatron's random.py: its recompute in backward restores Megatron's RNG but
not TE's FP8 autocast (selective core_attn with FP8 attention recomputes TE's DotProductAttention
in BF16). Under fp8audit.te the recompute runs under the original forward's FP8 state and scales,
whether Megatron was imported before the patch or after it."""

from __future__ import annotations

import sys
from pathlib import Path

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
