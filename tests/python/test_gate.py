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


def _checkpointed_forward():
    """A forward of a checkpointed TE module under DelayedScaling: its checkpoint awaits its
    recompute until the output's backward runs."""
    import torch

    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    layer, head = te.Linear(16, 16), te.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
        return head(te.checkpoint(layer, x, use_reentrant=True))


def test_patched_block_ending_before_a_pending_recompute_leaves_the_patch_and_says_so(capfd):
    # A block that keeps its last forward (returned, logged) ends while that checkpoint awaits
    # its recompute: TE cannot be restored yet, and that is no error of the block.
    with fp8audit.te.patched() as controller:
        _checkpointed_forward().sum().backward()
        y = _checkpointed_forward()
    assert fp8audit.te.active() is controller
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "patched()" in line]
    assert len(lines) == 1, err
    assert "stays in force" in lines[0] and "1 checkpoint(s) await their recompute" in lines[0]
    assert "fp8audit.te.unpatch()" in lines[0]
    y.sum().backward()
    assert fp8audit.te.unpatch()


def test_patched_block_error_reaches_the_job_unmasked_by_a_pending_recompute(capfd):
    held = []
    with pytest.raises(ValueError, match="the job's own error"):
        with fp8audit.te.patched():
            held.append(_checkpointed_forward())
            raise ValueError("the job's own error")
    assert fp8audit.te.is_patched()
    assert "stays in force" in capfd.readouterr().err
    held[0].sum().backward()
    assert fp8audit.te.unpatch()


def test_a_patch_a_block_left_in_force_goes_at_the_next_blocks_end():
    held = []
    with fp8audit.te.patched():
        held.append(_checkpointed_forward())
    with fp8audit.te.patched():
        held.pop().sum().backward()
    assert not fp8audit.te.is_patched()
    # patch() called meanwhile makes it the caller's: a block leaves it in place again.
    with fp8audit.te.patched():
        held.append(_checkpointed_forward())
    controller = fp8audit.te.patch()
    held.pop().sum().backward()
    with fp8audit.te.patched():
        pass
    assert fp8audit.te.active() is controller


def test_patch_without_the_model_library_is_refused_with_one_line(monkeypatch, tmp_path):
    from fp8audit.te import _model

    monkeypatch.setattr(_model, "_lib", None)
    monkeypatch.setattr(_model, "library_candidates", lambda: [tmp_path / "missing.so"])
    before = te_functions()
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert str(e.value).startswith("fp8audit.te: not patched: no usable libfp8audit_model.so")
    assert "set FP8AUDIT_MODEL_LIB" in str(e.value) and "\n" not in str(e.value)
    assert te_functions() == before and not fp8audit.te.is_patched()
    assert "FP8AUDIT_TE_PATCHED" not in os.environ


def test_check_names_a_te_lacking_a_name_it_reads_instead_of_raising(monkeypatch):
    from transformer_engine.pytorch import quantization

    monkeypatch.delattr(quantization, "autocast")
    problems = fp8audit.te.check()
    assert len(problems) == 1 and "AttributeError" in problems[0] and "autocast" in problems[0]
    assert "\n" not in problems[0]
    with pytest.raises(fp8audit.te.PatchRefused, match="autocast"):
        fp8audit.te.patch()
    assert not fp8audit.te.is_patched()


def _everything_patch_touches():
    """What patch() may change, by identity or value: every target, the backports' places, TE's
    state class, flag and recompute globals, torch's checkpoint globals, Megatron's checkpoint
    class and graph creation, te.ops' fuser call."""
    import torch.utils.checkpoint as tuc

    import megatron.core.tensor_parallel.random as random
    import megatron.core.transformer.cuda_graphs as graphs
    from transformer_engine.pytorch import distributed
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule
    from transformer_engine.pytorch.ops.fuser import OperationFuser
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    state = FP8GlobalStateManager.quantization_state
    return {
        **te_functions(),
        "prepare_forward": TransformerEngineBaseModule.__dict__.get("prepare_forward"),
        "_CheckpointFunction.apply": distributed._CheckpointFunction.__dict__.get("apply"),
        "state class": type(state), "flag": state.is_first_fp8_module,
        **{name: getattr(distributed, name, None)
           for name in releases.RECOMPUTE_GLOBALS + releases.RECOMPUTE_GLOBALS_BEFORE_PR_3284},
        "torch CheckpointFunction": tuc.CheckpointFunction,
        "torch generator": tuc._checkpoint_without_reentrant_generator,
        "megatron CheckpointFunction": random.CheckpointFunction,
        "megatron create_cudagraphs": graphs._CudagraphGlobalRecord.__dict__["create_cudagraphs"],
        "OperationFuser.__call__": OperationFuser.__dict__["__call__"],
    }


_INSTALL_STEPS = {  # each step of Controller.install after TE's functions are replaced
    "backports": ("fp8audit.te._backports", "Backports", "install"),
    "flag": ("fp8audit.te._state_layouts", "DataclassState", "own_flag"),
    "recompute-globals": ("fp8audit.te._patch", "Controller", "sync_globals"),
    "torch-checkpoint": ("fp8audit.te._torch_ckpt", "Routing", "install"),
    "megatron-checkpoint": ("fp8audit.te._megatron_ckpt", "MegatronRouting", "adopt"),
    "megatron-graphs": ("fp8audit.te._megatron_graphs", "MegatronGraphs", "adopt"),
    "ops-fuser": ("fp8audit.te._ops_fuser", "OpsFusers", "install"),
}


@pytest.mark.parametrize("release", ["2.20.2", "2.19.0"])
@pytest.mark.parametrize("step", list(_INSTALL_STEPS))
def test_a_patch_failing_at_any_install_step_leaves_te_torch_and_megatron_as_they_were(
        monkeypatch, step, release):
    """The step completes, then fails: patch() raises it and undoes every step done so far, so
    nothing is patched, and a later patch() applies the fix and unpatch() removes it. 2.19.0: the
    stand-in as that release, whose backports the patch installs too."""
    import importlib
    from pathlib import Path

    from conftest import as_release, fresh_megatron, leave_release

    version = as_release(monkeypatch, "2.19.0", ("3394",)) if release == "2.19.0" else None
    try:
        fresh_megatron(monkeypatch, Path(__file__).resolve().parent / "standin_megatron")
        importlib.import_module("megatron.core.tensor_parallel.random")
        importlib.import_module("megatron.core.transformer.cuda_graphs")
        before = _everything_patch_touches()
        module, cls, name = _INSTALL_STEPS[step]
        owner = getattr(importlib.import_module(module), cls)
        original = owner.__dict__[name]

        def failing(self, *args, **kwargs):
            original(self, *args, **kwargs)
            raise RuntimeError(f"injected after {step}")

        monkeypatch.setattr(owner, name, failing)
        with pytest.raises(RuntimeError, match=f"injected after {step}"):
            fp8audit.te.patch()
        assert not fp8audit.te.is_patched()
        after = _everything_patch_touches()
        assert [k for k in before if after[k] is not before[k] and after[k] != before[k]] == []
        monkeypatch.setattr(owner, name, original)
        controller = fp8audit.te.patch()
        assert controller.megatron_routing.installed() and fp8audit.te.unpatch()
        assert _everything_patch_touches() == before
    finally:
        if version is not None:
            leave_release(version)
