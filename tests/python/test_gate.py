"""fp8audit.te's version gate and lifecycle: it patches only TE sources it was verified on, all or
nothing, never while a scope is open, and unpatch() restores TE's own functions."""

import gc
import os
import sys

import pytest

import fp8audit.te
from fp8audit.te import _fingerprint, _targets, releases


def te_functions():
    from fp8audit.te._gate import resolve, te_modules

    mods = te_modules()
    return {t: resolve(mods, t)[2] for t in _targets.TARGETS}


def test_live_objects_fingerprint_like_their_source_files():
    from conftest import STANDIN_VERSION

    for target, raw in te_functions().items():
        assert _fingerprint.of_object(raw) == releases.get(STANDIN_VERSION).fingerprints[target], target


def test_fingerprints_ignore_docstrings_and_comments_but_not_code():
    import ast

    a = ast.parse("def f(x):\n    '''doc'''\n    return x + 1  # note\n").body[0]
    b = ast.parse("def f(x):\n\n    return x + 1\n").body[0]
    c = ast.parse("def f(x):\n    return x + 2\n").body[0]
    assert _fingerprint.of_node(a) == _fingerprint.of_node(b) != _fingerprint.of_node(c)


def test_patch_and_unpatch_replace_and_restore_every_target():
    before = te_functions()
    controller = fp8audit.te.patch()
    assert fp8audit.te.is_patched()
    after = te_functions()
    for target in _targets.REPLACED:
        assert after[target] is not before[target], target
    for target in _targets.RELIED_ON:
        assert after[target] is before[target], target
    assert fp8audit.te.patch() is controller  # idempotent
    assert os.environ["FP8AUDIT_TE_PATCHED"] == "2.20.2+standin"
    assert fp8audit.te.unpatch()
    assert te_functions() == before
    assert not fp8audit.te.unpatch()
    assert "FP8AUDIT_TE_PATCHED" not in os.environ


def test_patched_applies_the_fix_for_its_block_and_restores_te_after_it():
    before = te_functions()
    with fp8audit.te.patched() as controller:
        assert fp8audit.te.is_patched() and fp8audit.te.active() is controller
        assert te_functions() != before
    assert not fp8audit.te.is_patched()
    assert te_functions() == before


def test_patched_leaves_a_patch_it_did_not_apply_in_place():
    controller = fp8audit.te.patch()
    with fp8audit.te.patched() as inner:
        assert inner is controller
    assert fp8audit.te.active() is controller


def test_patched_refuses_as_patch_does_and_changes_nothing(monkeypatch):
    import transformer_engine

    monkeypatch.setattr(transformer_engine, "__version__", "2.13.0")
    before = te_functions()
    with pytest.raises(fp8audit.te.PatchRefused):
        with fp8audit.te.patched():
            pytest.fail("the block must not run unpatched")
    assert te_functions() == before and not fp8audit.te.is_patched()


def test_unknown_version_is_refused_and_nothing_changes(monkeypatch):
    import transformer_engine

    monkeypatch.setattr(transformer_engine, "__version__", "2.13.0")
    before = te_functions()
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert ("2.13.0 is not a release fp8audit.te was verified on (verified: 2.14.1, 2.16.0, "
            "2.17.1, 2.18.0, 2.19.0, 2.20.2") in str(e.value)
    assert "\n" not in str(e.value)
    assert te_functions() == before and not fp8audit.te.is_patched()


def test_a_changed_function_is_refused_by_name(monkeypatch):
    from transformer_engine.pytorch import distributed

    def changed(self):  # a different __enter__
        return None

    monkeypatch.setattr(distributed.activation_recompute_forward, "__enter__", changed)
    before = te_functions()
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert "distributed:activation_recompute_forward.__enter__ differs" in str(e.value)
    assert te_functions() == before


def test_a_te_with_the_upstream_fix_is_left_alone(monkeypatch):
    from transformer_engine.pytorch import distributed

    monkeypatch.setattr(distributed, "_ActivationRecomputeState", object, raising=False)
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert "already carries an upstream ownership fix" in str(e.value)


def test_a_te_with_the_earlier_pending_update_design_is_left_alone(monkeypatch):
    # docs/te-pr-3456.md §3: a TE that marks its backward update pending and runs it at the next
    # autocast entry owns its update; the fix must not patch it, whatever its version says.
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    monkeypatch.setattr(FP8GlobalStateManager, "schedule_backward_quantization_update",
                        classmethod(lambda cls: None), raising=False)
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert "already carries an upstream ownership fix " \
        "(FP8GlobalStateManager.schedule_backward_quantization_update)" in str(e.value)


def test_patch_and_unpatch_are_refused_inside_an_autocast():
    import transformer_engine.pytorch as te

    with te.autocast():
        with pytest.raises(fp8audit.te.PatchRefused, match="an FP8 autocast is open"):
            fp8audit.te.patch()
    assert not fp8audit.te.is_patched()
    fp8audit.te.patch()
    with te.autocast():
        with pytest.raises(fp8audit.te.PatchRefused, match="not unpatched"):
            fp8audit.te.unpatch()
    assert fp8audit.te.is_patched()


def test_names_imported_before_the_patch_get_the_fix():
    import torch

    from transformer_engine.pytorch import checkpoint as early_checkpoint  # like Megatron's import
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    fp8audit.te.patch(verify=True)
    torch.manual_seed(0)
    layers = [te.Linear(16, 16) for _ in range(3)]
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast():
        for layer in layers:
            x = early_checkpoint(layer, x, use_reentrant=True)
    x.sum().backward()
    status = fp8audit.te.status()
    assert (status["forward_updates"], status["backward_updates"]) == (1, 1)
    assert FP8GlobalStateManager.quantization_state.autocast_depth == 0


def test_verify_raises_when_te_state_is_changed_behind_the_models_back():
    import torch

    import transformer_engine.pytorch as te
    from transformer_engine.pytorch import distributed

    fp8audit.te.patch(verify=True)
    layer = te.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    distributed._IN_ACTIVATION_RECOMPUTE_REGION = True  # someone else's code
    with pytest.raises(fp8audit.te.VerifyError, match="recompute globals"):
        with te.autocast():
            te.checkpoint(layer, x, use_reentrant=False)
    distributed._IN_ACTIVATION_RECOMPUTE_REGION = False


def test_a_model_library_that_cannot_be_found_is_one_clear_error(monkeypatch, tmp_path):
    from fp8audit.te import _model

    monkeypatch.setattr(_model, "_lib", None)
    monkeypatch.setattr(_model, "library_candidates", lambda: [tmp_path / "missing.so"])
    with pytest.raises(_model.ModelUnavailable, match="set FP8AUDIT_MODEL_LIB"):
        _model.Model()


def test_unpatch_waits_for_pending_recomputes():
    import torch

    import transformer_engine.pytorch as te

    fp8audit.te.patch()
    layer = te.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast():
        y = te.checkpoint(layer, x, use_reentrant=True)
    with pytest.raises(fp8audit.te.PatchRefused, match="1 checkpoint.s. await their recompute"):
        fp8audit.te.unpatch()
    y.sum().backward()
    assert fp8audit.te.unpatch()


def test_a_forward_whose_graph_is_dropped_frees_its_frame():
    import gc

    import torch

    import transformer_engine.pytorch as te

    controller = fp8audit.te.patch()
    layer = te.Linear(16, 16)
    with te.autocast():
        y = te.checkpoint(layer, torch.randn(8, 16, requires_grad=True), use_reentrant=False)
    assert controller.pending and controller.stash
    del y
    gc.collect()
    assert not controller.pending and not any(controller.stash.values())
    assert fp8audit.te.unpatch()


def test_a_checkpoint_inside_a_cuda_graph_capture_is_refused_with_one_line():
    """Live (TE 2.20.2, graphed-checkpoint): under the patch a checkpoint inside a callable that
    te.make_graphed_callables captures recomputes without its stash; TE alone gets 1/1 there. The
    frame is refused before it opens (TE's autocast marks the capture: _graph=True)."""
    import torch

    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    fp8audit.te.patch(verify=True)
    layer = te.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    FP8GlobalStateManager.autocast_enter(enabled=True, _graph=True)  # as make_graphed_callables
    try:
        with pytest.raises(fp8audit.te.NotCovered) as e:
            te.checkpoint(layer, x, use_reentrant=True)
    finally:
        FP8GlobalStateManager.autocast_exit(True, _graph=True)
    assert "make_graphed_callables" in str(e.value) and "\n" not in str(e.value)
    assert fp8audit.te.status()["open_frames"] == 0
    with te.autocast():  # outside a capture, the same checkpoint is fixed
        y = te.checkpoint(layer, x, use_reentrant=True)
    y.sum().backward()
    status = fp8audit.te.status()
    assert (status["forward_updates"], status["backward_updates"]) == (1, 1)
