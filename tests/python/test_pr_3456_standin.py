"""TE PR #3456 ("Schedule delayed-scaling updates after backward", docs/te-pr-3456.md) on the CPU
stand-in (issue 37): with _release.WITH_PR_3456 the modules' backward asks for the update and one
callback per autograd task runs it, `quantization_backward_scope` widens that to one update at its
outermost exit; without the flag the stand-in is TE 2.20.2 as before. fp8audit.te stands aside on
such a TE, with one line, changing nothing (item 3)."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, STANDIN, reset_te

import fp8audit.te
from fp8audit.te import _targets


@pytest.fixture
def counts(monkeypatch):
    """Updates made, by direction, counted by wrapping the update under each name TE holds it by
    (the PR's new name, which TE calls, and the old, its alias)."""
    from fp8audit.hook import update_names
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as manager

    made = {"forward": 0, "backward": 0}
    original, names = update_names(manager)

    def counting(cls, forward=True):
        made["forward" if forward else "backward"] += 1
        return original(cls, forward)

    for name in names:
        monkeypatch.setattr(manager, name, classmethod(counting))
    return made


def _te():
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common.recipe import DelayedScaling

    torch.manual_seed(0)
    return torch, te, DelayedScaling()


def _microbatches(made, step, n=2):
    """(forward, backward) updates of each of n microbatches run by step()."""
    out = []
    for _ in range(n):
        before = dict(made)
        step()
        out.append((made["forward"] - before["forward"], made["backward"] - before["backward"]))
    return out


def _healthy():
    from transformer_engine.pytorch.quantization import qstate

    s = qstate()
    return (s.pending_backward_quantization_update, s.backward_quantization_update_callback_task_id,
            s.quantization_backward_scope_depth) == (False, None, 0)


def _plain(checkpoint=False):
    torch, te, recipe = _te()
    layers = [te.Linear(16, 16) for _ in range(2)]

    def step():
        x = torch.randn(4, 16, requires_grad=True)
        with te.autocast(recipe=recipe):
            y = x
            for layer in layers:
                y = te.checkpoint(layer, y, use_reentrant=True) if checkpoint else layer(y)
        y.sum().backward()

    return step


def _two_backwards(scope=None):
    """Two branches of one microbatch, each loss backward on its own (as a pipeline schedule's
    several run_backward calls); inside `scope` (a factory of context managers) when given."""
    torch, te, recipe = _te()
    trunk, left, right = te.Linear(16, 16), te.Linear(16, 16), te.Linear(16, 16)

    def step(seen=None):
        x = torch.randn(4, 16, requires_grad=True)
        with te.autocast(recipe=recipe):
            h = trunk(x)
            a, b = left(h), right(h)
        with scope() if scope else _nothing():
            a.sum().backward(retain_graph=True)
            b.sum().backward()
            if seen is not None:
                seen.append(_healthy())

    return step


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_flag_defines_the_prs_api_and_only_then(monkeypatch):
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch import _release, quantization

    monkeypatch.setattr(_release, "WITH_PR_3456", False)  # as without FP8AUDIT_STANDIN_PR_3456
    reset_te()
    assert not hasattr(te, "quantization_backward_scope")
    assert not hasattr(quantization, "quantization_backward_scope")
    assert not hasattr(quantization.FP8GlobalStateManager, "request_backward_quantization_update")
    assert type(quantization.FP8GlobalStateManager.quantization_state) is \
        quantization.FP8GlobalState


def test_with_the_flag_the_prs_api_is_there(pr_3456):
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch import quantization

    assert te.quantization_backward_scope is quantization.quantization_backward_scope
    manager = quantization.FP8GlobalStateManager
    for name in ("request_backward_quantization_update",
                 "_queue_backward_quantization_update_callback",
                 "_run_backward_quantization_update_callback",
                 "_run_pending_backward_quantization_update",
                 "reduce_and_update_quantization_state", "is_first_fp8_module",
                 "reduce_and_update_fp8_tensors"):
        assert hasattr(manager, name), name
    assert _healthy()


def test_the_environment_turns_the_flag_on_for_a_new_process():
    env = dict(os.environ, FP8AUDIT_STANDIN_PR_3456="1",
               PYTHONPATH=os.pathsep.join([str(STANDIN), str(ROOT / "python")]))
    code = ("import transformer_engine.pytorch as te; "
            "print(hasattr(te, 'quantization_backward_scope'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "True"


def test_a_plain_job_updates_once_each_way_per_microbatch(pr_3456, counts):
    assert _microbatches(counts, _plain()) == [(1, 1), (1, 1)]
    assert _healthy()


def test_tes_reentrant_checkpoint_makes_one_backward_update(pr_3456, counts):
    # Backward: the checkpoint queues on the outer task ([D], stated not read), so 1. Forward: the
    # PR leaves autocast_exit alone, so each recompute's outermost autocast still updates forward
    # as TE 2.20.2's does (docs/te-pr-3456.md §3: [D] is silent): 1 + 2 layers.
    assert _microbatches(counts, _plain(checkpoint=True)) == [(3, 1), (3, 1)]
    assert _healthy()


def test_without_the_flag_tes_reentrant_checkpoint_updates_backward_per_layer(counts):
    assert _microbatches(counts, _plain(checkpoint=True)) == [(3, 2), (3, 2)]


def test_two_backward_calls_make_two_backward_updates(pr_3456, counts):
    assert _microbatches(counts, _two_backwards()) == [(1, 2), (1, 2)]
    assert _healthy()


def test_in_a_scope_two_backward_calls_make_one_update_at_its_exit(pr_3456, counts):
    import transformer_engine.pytorch as te

    seen = []
    step = _two_backwards(te.quantization_backward_scope)
    assert _microbatches(counts, lambda: step(seen)) == [(1, 1), (1, 1)]
    assert seen == [False, False]  # inside the scope: pending, nothing updated yet
    assert _healthy()


def test_a_nested_scope_adds_nothing(pr_3456, counts):
    import contextlib

    import transformer_engine.pytorch as te

    @contextlib.contextmanager
    def nested():
        with te.quantization_backward_scope():
            with te.quantization_backward_scope():
                yield

    assert _microbatches(counts, _two_backwards(nested)) == [(1, 1), (1, 1)]
    assert _healthy()


@pytest.mark.parametrize("kind", ["layernorm_linear", "layernorm_mlp_checkpoint", "ops"])
def test_every_module_kind_asks_once_per_task(kind, pr_3456, counts):
    torch, te, recipe = _te()
    if kind == "layernorm_linear":
        layers = [te.LayerNormLinear(16, 16), te.LayerNormLinear(16, 16)]
    elif kind == "layernorm_mlp_checkpoint":
        layers = [te.LayerNormMLP(16, 32, checkpoint=True), te.LayerNormMLP(16, 32, checkpoint=True)]
    else:
        layers = [te.ops.Sequential(te.ops.Linear(16, 16)), te.ops.Sequential(te.ops.Linear(16, 16))]

    def step():
        x = torch.randn(4, 16, requires_grad=True)
        with te.autocast(recipe=recipe):
            y = x
            for layer in layers:
                y = layer(y)
        y.sum().backward()

    assert _microbatches(counts, step) == [(1, 1), (1, 1)]
    assert _healthy()


# fp8audit.te on such a TE (issue 37 item 3)

LINE = ("fp8audit.te: not patched: transformer_engine 2.20.2+standin schedules its backward FP8 "
        "update per autograd task (TE PR #3456): its update ownership is TE's own, so fp8audit.te "
        "leaves it alone; a logical microbatch spanning several backward() calls needs `with "
        "te.quantization_backward_scope():` around them, and recomputes under torch's/Megatron's "
        "checkpoints are left as TE runs them (the audit still reports them)")


def _te_functions():
    from fp8audit.te._gate import resolve, te_modules

    mods = te_modules()
    return {t: resolve(mods, t)[2] for t in _targets.TARGETS}


def test_patch_stands_aside_with_one_line_and_changes_nothing(pr_3456):
    before = _te_functions()
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    assert str(e.value) == LINE
    assert _te_functions() == before and not fp8audit.te.is_patched()
    assert "FP8AUDIT_TE_PATCHED" not in os.environ
    assert fp8audit.te.check() == [LINE.removeprefix("fp8audit.te: not patched: ")]


def test_the_fingerprint_decides_not_the_version(pr_3456, monkeypatch):
    import transformer_engine
    from transformer_engine.pytorch import quantization

    monkeypatch.setattr(transformer_engine, "__version__", "2.20.2")  # a verified release's name
    assert "TE PR #3456" in fp8audit.te.check()[0]
    monkeypatch.delattr(quantization, "quantization_backward_scope")  # the method alone suffices
    assert "TE PR #3456" in fp8audit.te.check()[0]


def test_fix_te_reports_the_refusal_in_one_line(pr_3456):
    with pytest.raises(fp8audit.te.PatchRefused) as e:
        fp8audit.te.patch()
    # python/fp8audit/hook/__init__.py _te_fix's wording around it
    said = f"--fix-te: {e.value}; the job runs with Transformer Engine unpatched"
    assert "\n" not in said and said.count("TE PR #3456") == 1
