"""fp8audit.te on TE 2.14.1, whose global FP8 state is class attributes of FP8GlobalStateManager
(before PR #2759, TE 2.15) and which predates PR #3284 and PR #3394, on the CPU stand-in switched
to that layout and behaviour: unpatched it fails where 2.17.1 does (te-2.17 models 2.14 too);
patched with 2.14.1's release profile it keeps the state where TE keeps it, and every layout
updates once each way and equals its twin."""

import pytest

from conftest import as_release, leave_release
from fp8audit.te import releases
from te_layouts import cpu_layouts
from test_layouts import assert_patched_rows, run
from test_release_2_17 import inner_autocast_table

CPU_LAYOUTS = cpu_layouts()
VERSION = "2.14.1+standin"


@pytest.fixture
def te_2_14(monkeypatch):
    """The stand-in behaving as TE 2.14.1, registered with 2.14.1's profile."""
    yield as_release(monkeypatch, "2.14.1", ("3394", "3284", "2759"))
    leave_release(VERSION)


def _manager():
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    return FP8GlobalStateManager


def test_the_stand_in_keeps_its_state_in_class_attributes_as_te_2_14_does(te_2_14):
    manager = _manager()
    assert not hasattr(manager, "quantization_state")
    assert manager.IS_FIRST_FP8_MODULE is False and manager.AUTOCAST_DEPTH == 0


def test_unpatched_an_autocast_opened_inside_the_checkpoint_leaves_its_recompute_no_stash(te_2_14):
    import torch
    import transformer_engine.pytorch as te

    layer = te.Linear(16, 16)

    def body(x):
        with te.autocast():
            return layer(x)

    y = te.checkpoint(body, torch.randn(8, 16, requires_grad=True), use_reentrant=True)
    with pytest.raises(KeyError, match="global_fp8_buffer_pos_fwd_recompute"):
        y.sum().backward()


def test_patched_the_fix_reads_and_writes_the_class_attributes(te_2_14):
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    import fp8audit.te

    manager = _manager()
    controller = fp8audit.te.patch(verify=True)  # verify: TE's depth checked against the model's
    assert controller.state.name == releases.STATE_CLASS_ATTRIBUTES
    layers = [te.Linear(16, 16) for _ in range(2)]
    depths = []

    def body(x):
        depths.append(manager.AUTOCAST_DEPTH)
        return layers[1](layers[0](x))

    with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
        y = te.checkpoint(body, torch.randn(8, 16, requires_grad=True), use_reentrant=True)
        assert sum(len(q) for q in manager.fp8_tensors_recompute_buffer) == 2
    y.sum().backward()
    assert depths == [1, 1]  # the original forward, then its recompute under TE's own autocast
    assert manager.AUTOCAST_DEPTH == 0
    assert sum(len(q) for q in manager.fp8_tensors_recompute_buffer) == 0
    assert (controller.counts["forward"], controller.counts["backward"]) == (1, 1)
    assert not hasattr(manager, "quantization_state")
    assert fp8audit.te.unpatch()
    assert manager.IS_FIRST_FP8_MODULE is False  # the model's flag, written back


@pytest.mark.parametrize("name", CPU_LAYOUTS)
def test_patched_every_layout_updates_once_and_equals_its_twin(name, te_2_14, capsys):
    assert_patched_rows(run(capsys, "--layout", name, "--mode", "patched"), name)


def test_the_model_of_te_2_17_predicts_where_te_2_14_raises(te_2_14, capsys, tmp_path):
    inner_autocast_table(capsys, tmp_path, "te-2.14")  # te-2.17's alias for the release


def test_a_release_whose_state_is_not_where_its_profile_says_is_refused(te_2_14, monkeypatch):
    from transformer_engine.pytorch import _release

    import fp8audit.te

    monkeypatch.setattr(_release, "BEFORE_PR_2759", False)
    _manager().reset()  # the dataclass layout, under 2.14.1's profile
    problems = fp8audit.te.check()
    assert problems and "FP8 state is not where its verified release keeps it" in problems[0]
    with pytest.raises(fp8audit.te.PatchRefused, match="not patched"):
        fp8audit.te.patch()
    monkeypatch.setattr(_release, "BEFORE_PR_2759", True)


def test_a_release_profile_names_a_known_state_layout_only():
    with pytest.raises(ValueError, match="unknown FP8 state layout"):
        releases.Release("9.9.9", {}, state_layout="registers")
