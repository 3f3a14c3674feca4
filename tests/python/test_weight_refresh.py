"""The python hook's weight-refresh check (issue 36 item 2) on the CPU stand-in of TE: a recompute
that re-quantizes a cached FP8 weight its forward filled (te.checkpoint replaying
is_first_microbatch=True) sends one mark per weight, with the scale it quantized under; reusing
the cache, caching nothing and the forward itself send none."""

import os
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "python"))

from fp8audit.hook import recompute, refresh  # noqa: E402

import test_recompute_hook as base  # noqa: E402  (its job prelude and runner)

JOB = base.PRELUDE + textwrap.dedent("""
    import functools

    def arg(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(2)]
    first = {"True": True, "False": False, "None": None}[arg("--first", "True")]
    fp8_recipe = getattr(recipe, arg("--recipe", "DelayedScaling"))()
    how = arg("--checkpoint", "te")
    x = torch.randn(4, 8, requires_grad=True)
    with te.autocast(enabled=True, recipe=fp8_recipe):
        for layer in layers:
            if how == "te":
                x = te.checkpoint(layer, x, is_first_microbatch=first, use_reentrant=True)
            elif how == "torch":
                x = checkpoint(functools.partial(layer, is_first_microbatch=first), x,
                               use_reentrant=True)
            else:
                x = layer(x, is_first_microbatch=first)
        if "--backward-inside" in sys.argv:
            x.float().pow(2).mean().backward()
    if "--backward-in" in sys.argv:  # the backward in an autocast of its own (TE issue #1568)
        with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
            x.float().pow(2).mean().backward()
    elif "--backward-inside" not in sys.argv:
        x.float().pow(2).mean().backward()
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")


def run_job(tmp_path, *args, features="te-recompute"):
    return base.run_job(tmp_path, *args, features=features, prefix=refresh.MARK, job=JOB)


def marks(scale, checkpoint):
    return [f"{refresh.MARK} module=Linear#{n} scale={scale} checkpoint={checkpoint}"
            for n in (2, 1)]


def test_te_checkpoint_replaying_first_microbatch_refreshes_each_weight_with_its_forwards_scale(
        tmp_path):
    for name in ("DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling"):
        assert run_job(tmp_path, "--recipe", name) == marks(
            "forward", "te.distributed.checkpoint"), name


def test_reusing_the_cache_or_caching_nothing_refreshes_nothing(tmp_path):
    for first in ("False", "None"):
        assert run_job(tmp_path, "--first", first) == [], first


def test_without_a_checkpoint_the_forward_s_own_quantization_is_no_refresh(tmp_path):
    assert run_job(tmp_path, "--checkpoint", "none") == []


def test_delayed_scaling_outside_te_s_recompute_phase_refreshes_under_the_live_scale(tmp_path):
    # torch's checkpoint with the backward inside the forward's autocast: FP8 in the recompute,
    # but no TE stash restored the forward's scales.
    assert run_job(tmp_path, "--checkpoint", "torch", "--backward-inside") == marks(
        "live", "torch.utils.checkpoint")
    assert run_job(tmp_path, "--checkpoint", "torch", "--backward-in") == marks(
        "live", "torch.utils.checkpoint")


def test_current_scaling_outside_te_s_recompute_phase_refreshes_with_its_forwards_values(
        tmp_path):
    assert run_job(tmp_path, "--checkpoint", "torch", "--backward-inside", "--recipe",
                   "Float8CurrentScaling") == marks("forward", "torch.utils.checkpoint")


def test_under_the_fix_torch_checkpoint_refreshes_in_te_s_recompute_phase(tmp_path):
    if not os.environ.get("FP8AUDIT_MODEL_LIB"):
        pytest.skip("FP8AUDIT_MODEL_LIB (the built model library) is not set: run through CTest")
    assert run_job(tmp_path, "--patch", "--checkpoint", "torch") == marks(
        "forward", "torch.utils.checkpoint")


def test_while_recording_is_off_or_without_the_feature_nothing_is_marked(tmp_path):
    assert run_job(tmp_path, "--paused") == []
    assert run_job(tmp_path, features="te-count") == []


def test_the_wrapper_marks_only_a_host_decided_refresh_of_an_existing_cache():
    assert refresh.refreshes((), {"workspace": object()})
    assert refresh.refreshes((), {"workspace": object(), "update_workspace": True})
    assert not refresh.refreshes((), {"workspace": None, "update_workspace": True})
    assert not refresh.refreshes((), {"workspace": object(), "update_workspace": False})
    assert not refresh.refreshes((), {"workspace": object(), "skip_update_flag": object()})


def test_te_2_14_s_get_weight_workspace_is_checked_on_the_module_s_own_cache():
    class Module:  # TE 2.14's base class: the cache is the module's _fp8_workspaces[cache_name]
        def __init__(self):
            self._fp8_workspaces = {}

        def get_weight_workspace(self, *, tensor=None, cache_name=None, update_workspace=True,
                                 skip_update_flag=None):
            if cache_name is not None:
                self._fp8_workspaces.setdefault(cache_name, tensor)
            return tensor

    sent = []
    assert refresh.install(lambda: sent.append(1), lambda: 7, lambda: True, {}, Module) == [
        "get_weight_workspace"]
    m = Module()
    m.get_weight_workspace(tensor=1, cache_name="weight")  # makes the cache: no refresh
    m.get_weight_workspace(tensor=1, cache_name=None)  # caches nothing
    m.get_weight_workspace(tensor=1, cache_name="weight", update_workspace=False)
    assert sent == []
    assert m.get_weight_workspace(tensor=2, cache_name="weight") == 2
    assert sent == [1]


def test_a_failing_check_says_so_once_and_never_breaks_the_call(capsys):
    calls = []

    def broken():
        raise RuntimeError("boom")

    def inner(**kwargs):
        calls.append(kwargs)
        return "quantized", None

    wrapped = refresh.wrap(inner, broken, lambda: 1, lambda: True)
    for _ in range(3):
        assert wrapped(tensor=1, workspace=object()) == ("quantized", None)
    assert len(calls) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "refreshes are no longer checked" in err[0], err


def test_a_refresh_check_that_fails_tells_the_agent_once(monkeypatch, capsys):
    from fp8audit import _nvtx, hook

    marks = []
    monkeypatch.setattr(_nvtx, "NVTX", type("N", (), {"mark": staticmethod(marks.append)})())
    monkeypatch.setattr(hook, "_unchecked", set())

    def broken():
        raise KeyError("boom")

    wrapped = refresh.wrap(lambda **kwargs: "q", broken, lambda: 1, lambda: True)
    for _ in range(3):
        assert wrapped(workspace=object()) == "q"
    assert marks == ["fp8audit.te.unchecked check=refresh reason=KeyError"]
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_failure_in_one_wrapper_ends_the_check_in_all_of_them(capsys):
    class A:
        @staticmethod
        def quantize_weight(**kwargs):
            return "a"

    class B:
        @staticmethod
        def quantize_weight(**kwargs):
            return "b"

    tries = []

    def broken():
        tries.append(1)
        raise RuntimeError("boom")

    refresh.install(broken, lambda: 3, lambda: True, {"a": A, "b": B}, base=object())
    assert A.quantize_weight(workspace=object()) == "a"
    assert B.quantize_weight(workspace=object()) == "b"
    assert A.quantize_weight.__name__ == "quantize_weight"
    assert tries == [1]
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_refresh_in_another_task_than_the_last_module_seen_names_no_module():
    # The last TE module seen in backward ran in task 5 (another thread's backward); a refresh in
    # task 6 must not take its name or its recipe.
    class Delayed:
        pass

    sent = []
    record = ["Linear#1", None, "", "", None, {}]
    current = [(5, record, Delayed())]
    task = [5]
    refreshed = refresh.reporter(current, sent.append, lambda r: isinstance(r, Delayed),
                                 lambda: False, lambda: "torch.utils.checkpoint",
                                 lambda: task[0], lambda: None)
    refreshed()
    task[0] = 6
    refreshed()
    assert sent == [
        f"{refresh.MARK} module=Linear#1 scale=live checkpoint=torch.utils.checkpoint",
        f"{refresh.MARK} module=? scale=forward checkpoint=torch.utils.checkpoint"]


def test_outside_a_backward_pass_the_wrapper_sends_nothing():
    sent = []
    wrapped = refresh.wrap(lambda **k: (None, None), lambda: sent.append(1), lambda: -1,
                           lambda: True)
    wrapped(workspace=object())
    assert sent == []


def test_install_wraps_each_module_s_quantize_weight_once():
    class Module:
        @staticmethod
        def quantize_weight(**kwargs):
            return kwargs

    modules = {"linear": Module, "grouped_linear": object()}
    assert refresh.install(lambda: None, lambda: -1, lambda: True, modules) == ["linear"]
    first = Module.quantize_weight
    assert refresh.install(lambda: None, lambda: -1, lambda: True, modules) == ["linear"]
    assert Module.quantize_weight is first  # in place already: not wrapped twice


def test_install_finding_no_quantize_weight_says_the_check_is_not_in_place():
    # A TE that moved or renamed it: nothing wrapped, and the caller must say so.
    assert refresh.install(lambda: None, lambda: -1, lambda: True, {"linear": object()},
                           object()) == []


def test_a_module_name_too_long_for_the_agent_is_shortened_and_its_scale_kept():
    text = refresh.mark_text("Linear" * 40, "live", "torch.utils.checkpoint")
    assert len(text) <= recompute.MARK_LIMIT and text.endswith(" scale=live"), text
