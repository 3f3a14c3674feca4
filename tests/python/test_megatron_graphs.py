"""Megatron-core's local CUDA graphs under fp8audit.te (issue 20), on the CPU stand-ins of TE and
of Megatron's cuda_graphs.py: each graphed layer's backward replay updates TE's FP8 state itself,
so with FP8 DelayedScaling the capture is refused with one line before it starts; other recipes
and Megatron without FP8 capture as before, and unpatching gives Megatron its function back."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import fp8audit.te
from conftest import fresh_megatron

STANDIN_MEGATRON = Path(__file__).resolve().parent / "standin_megatron"


def _fresh_graphs(monkeypatch):
    """The stand-in cuda_graphs module, imported fresh (as Megatron's schedules import it)."""
    fresh_megatron(monkeypatch, STANDIN_MEGATRON)
    import megatron.core.transformer.cuda_graphs as module

    module._CudagraphGlobalRecord.cudagraph_record = []
    module._CudagraphGlobalRecord.cudagraph_created = False
    return module


@pytest.fixture
def graphs(monkeypatch):
    return _fresh_graphs(monkeypatch)


def _runner(fp8_enabled: bool, recipe: str) -> SimpleNamespace:
    config = SimpleNamespace(fp8="hybrid" if fp8_enabled else None, fp8_recipe=recipe)
    return SimpleNamespace(fp8_enabled=fp8_enabled, base_module=SimpleNamespace(config=config))


def test_capturing_delayed_scaling_layers_is_refused_before_the_capture(graphs):
    fp8audit.te.patch()
    graphs._CudagraphGlobalRecord.record_fwd_graph(_runner(True, "delayed"))
    with pytest.raises(fp8audit.te.NotCovered) as e:
        graphs.create_cudagraphs()
    assert 'cuda_graph_impl="local"' in str(e.value) and "\n" not in str(e.value)
    assert not graphs._CudagraphGlobalRecord.cudagraph_created  # nothing was captured


def test_megatron_imported_after_the_patch_is_taken_over_at_the_next_autocast(monkeypatch):
    import transformer_engine.pytorch as te

    fp8audit.te.patch()
    module = _fresh_graphs(monkeypatch)
    module._CudagraphGlobalRecord.record_fwd_graph(_runner(True, "delayed"))
    with te.autocast():
        pass
    with pytest.raises(fp8audit.te.NotCovered):
        module.create_cudagraphs()


@pytest.mark.parametrize("fp8_enabled,recipe", [(True, "tensorwise"), (False, "delayed")])
def test_other_recipes_and_bf16_layers_capture_as_before(graphs, fp8_enabled, recipe):
    fp8audit.te.patch()
    runner = _runner(fp8_enabled, recipe)
    graphs._CudagraphGlobalRecord.record_fwd_graph(runner)
    graphs.create_cudagraphs()
    assert graphs._CudagraphGlobalRecord.captured == [runner]


def test_unpatching_restores_megatrons_create_cudagraphs(graphs):
    original = graphs._CudagraphGlobalRecord.__dict__["create_cudagraphs"]
    fp8audit.te.patch()
    assert graphs._CudagraphGlobalRecord.__dict__["create_cudagraphs"] is not original
    assert fp8audit.te.unpatch()
    assert graphs._CudagraphGlobalRecord.__dict__["create_cudagraphs"] is original
    graphs._CudagraphGlobalRecord.record_fwd_graph(_runner(True, "delayed"))
    graphs.create_cudagraphs()  # TE's own ownership again: Megatron captures
    assert graphs._CudagraphGlobalRecord.cudagraph_created
