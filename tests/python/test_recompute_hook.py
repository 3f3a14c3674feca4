"""The python hook's te-recompute feature (issue 19 item 4) on the CPU stand-in of TE: a TE module
recomputed by torch.utils.checkpoint under an FP8 autocast that wraps the forward only (HF
gradient checkpointing under Accelerate) runs without FP8 and is reported with its checkpoint;
TE's own checkpoint, the same job under fp8audit.te, and a forward without FP8 report no change."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOOK_SITE = ROOT / "python" / "fp8audit" / "hook" / "site"
STANDIN = HERE / "standin"

# A job's start on the stand-in: the hook's marks recorded in a list (printed as JSON at the end),
# TE imported, and on request (--patch) fp8audit.te's fix applied or (--paused) recording off.
PRELUDE = textwrap.dedent("""
    import json, sys
    import torch
    from torch.utils.checkpoint import checkpoint
    import fp8audit._nvtx

    class Recorder:
        def __init__(self):
            self.marks = []
        def mark(self, message):
            self.marks.append(message)
        def range_push(self, message):
            pass
        def range_pop(self):
            pass

    fp8audit._nvtx.NVTX = Recorder()
    if "--patch" in sys.argv:
        from pathlib import Path
        from fp8audit.te import releases
        releases.register_source_tree("2.20.2+standin", Path(sys.argv[1]))
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    if "--patch" in sys.argv:
        import fp8audit.te
        fp8audit.te.patch()
    if "--paused" in sys.argv:
        import fp8audit.hook
        fp8audit.hook.set_recording(False)
""")

JOB = PRELUDE + textwrap.dedent("""
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(2)]
    x = torch.randn(4, 8, requires_grad=True)
    fp8 = "--no-fp8" not in sys.argv
    class TEDelayedScaling(recipe.DelayedScaling):  # Megatron-core's subclass
        pass
    if "--sm" in sys.argv:  # the device whose default recipe TE picks (te.autocast without one)
        from transformer_engine.pytorch import _release
        _release.COMPUTE_CAPABILITY = tuple(
            int(v) for v in sys.argv[sys.argv.index("--sm") + 1].split("."))
    fp8_recipe = (recipe.Float8CurrentScaling() if "--current" in sys.argv else
                  TEDelayedScaling() if "--subclass" in sys.argv else
                  getattr(recipe, sys.argv[sys.argv.index("--recipe") + 1])()
                  if "--recipe" in sys.argv else None if "--default-recipe" in sys.argv else
                  recipe.DelayedScaling(fp8_dpa="--fp8-dpa" in sys.argv))
    with te.autocast(enabled=fp8, recipe=fp8_recipe):
        if "--attention" in sys.argv:  # Megatron's selective core_attn: TE's DPA checkpointed
            layers = [te.DotProductAttention()]
            x = checkpoint(layers[0], x, x, x, use_reentrant=True)
        for layer in layers[:0] if "--attention" in sys.argv else layers:
            if "--te-checkpoint" in sys.argv:
                x = te.checkpoint(layer, x, use_reentrant=True)
            elif "--no-checkpoint" in sys.argv:
                x = layer(x)
            else:
                x = checkpoint(layer, x, use_reentrant="--non-reentrant" not in sys.argv)
    if "--backward-in" in sys.argv:  # the backward (and so torch's recompute) in an autocast of
        # its own: DelayedScaling with another margin, or another recipe class (TE issue #1568)
        kind = sys.argv[sys.argv.index("--backward-in") + 1]
        again = {"margin": recipe.DelayedScaling(margin=1), "current": recipe.Float8CurrentScaling(),
                 "same": recipe.DelayedScaling(), "default": None}[kind]
        with te.autocast(enabled=True, recipe=again):
            x.float().pow(2).mean().backward()
    else:
        x.float().pow(2).mean().backward()
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")


def run_job(tmp_path, *args, features="te-recompute", prefix="fp8audit.te.recompute", job=JOB):
    """The marks starting with `prefix` that `job` (PRELUDE first) sent, run with `args` and the
    hook's `features` on the stand-in."""
    script = tmp_path / "job.py"
    script.write_text(job)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_SITE), str(ROOT / "python"), str(STANDIN)])
    env["FP8AUDIT_PYHOOK"] = features
    result = subprocess.run(
        [sys.executable, str(script), str(STANDIN / "transformer_engine" / "pytorch"), *args],
        env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("fp8audit")] == []
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    return [m for m in json.loads(lines[-1]) if m.startswith(prefix)]


BROKEN_JOB = PRELUDE + textwrap.dedent("""
    from fp8audit.hook import callsite
    calls = []

    def broken(*args, **kwargs):  # the check's call-site lookup, at its first mismatch
        calls.append(1)
        raise RuntimeError("boom")

    callsite.user_site = broken
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(2)]
    for step in range(2):
        x = torch.randn(4, 8, requires_grad=True)
        with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
            for layer in layers:
                x = checkpoint(layer, x, use_reentrant=True)
        x.float().pow(2).mean().backward()  # recomputes outside FP8: mismatches
    print(json.dumps(len(calls)))
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")


def test_a_recompute_check_that_fails_stops_says_one_line_and_tells_the_agent_once(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(BROKEN_JOB)
    env = dict(os.environ, FP8AUDIT_PYHOOK="te-recompute",
               PYTHONPATH=os.pathsep.join([str(HOOK_SITE), str(ROOT / "python"), str(STANDIN)]))
    result = subprocess.run([sys.executable, str(script), str(STANDIN / "transformer_engine" /
                                                             "pytorch")],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("fp8audit")] == [
        "fp8audit: python hook 'te-recompute' failed (RuntimeError: boom); recomputes are not "
        "checked"]
    calls, marks = (json.loads(line) for line in result.stdout.splitlines()[-2:])
    assert calls == 1  # the check stopped at its first failure
    assert [m for m in marks if m.startswith("fp8audit.te.unchecked")] == [
        "fp8audit.te.unchecked check=recompute reason=RuntimeError"]
    assert [m for m in marks if m.startswith("fp8audit.te.recompute")] == []


def test_torch_checkpoint_recompute_outside_fp8_is_marked_with_module_and_checkpoint(tmp_path):
    for mode in ((), ("--non-reentrant",)):
        assert run_job(tmp_path, *mode) == [
            "fp8audit.te.recompute module=Linear#2 fp8=0 forward_fp8=1 "
            "checkpoint=torch.utils.checkpoint",
            "fp8audit.te.recompute module=Linear#1 fp8=0 forward_fp8=1 "
            "checkpoint=torch.utils.checkpoint"], mode


def test_a_recompute_in_fp8_under_another_recipe_than_its_forward_is_marked_context_recipe(
        tmp_path):
    for kind in ("current", "margin"):
        assert run_job(tmp_path, "--backward-in", kind) == [
            f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1 context=recipe "
            "checkpoint=torch.utils.checkpoint" for n in (2, 1)], kind


def test_a_recompute_under_an_equal_recipe_object_is_no_change(tmp_path):
    # A new DelayedScaling() with the forward's parameters: the same quantization.
    assert run_job(tmp_path, "--backward-in", "same") == [
        f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1" for n in (2, 1)]


def test_a_mark_too_long_for_the_agent_leaves_the_checkpoint_out():
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    name = "LayerNormLinearWithALongName#12"
    text = recompute.mark_text(name, True, True, "megatron.tensor_parallel.checkpoint", "recipe")
    assert text == f"{recompute.MARK} module={name} fp8=1 forward_fp8=1 context=recipe"
    short = recompute.mark_text("Linear#1", True, True, "torch.utils.checkpoint", "recipe")
    assert short.endswith(" context=recipe checkpoint=torch.utils.checkpoint")
    assert len(short) <= recompute.MARK_LIMIT


def test_a_recompute_in_another_fp8_state_is_located_in_the_jobs_code_first(tmp_path):
    # On the CPU the autograd engine runs on the thread that called backward(): the job's own
    # innermost frame is that call (in a model, the line of its forward that calls the module).
    line = max(i for i, text in enumerate(JOB.splitlines())  # the plain backward, the last one
               if text.strip() == "x.float().pow(2).mean().backward()") + 1
    site = f"fp8audit.te.site site={tmp_path.name}/job.py:{line} in <module>"
    marks = run_job(tmp_path, prefix="fp8audit.te.")
    assert marks == ["fp8audit.te.recipe recipe=DelayedScaling",
                     site, "fp8audit.te.recompute module=Linear#2 fp8=0 forward_fp8=1 "
                     "checkpoint=torch.utils.checkpoint",
                     site, "fp8audit.te.recompute module=Linear#1 fp8=0 forward_fp8=1 "
                     "checkpoint=torch.utils.checkpoint"]


def test_each_recipe_class_a_module_runs_under_is_named_once(tmp_path):
    # Issue 36 item 1: the audit learns the job's recipe (only DelayedScaling has updates to
    # count); two modules, each forward and recompute, one mark.
    assert run_job(tmp_path, "--current", prefix="fp8audit.te.recipe") == [
        "fp8audit.te.recipe recipe=Float8CurrentScaling"]
    assert run_job(tmp_path, "--te-checkpoint", prefix="fp8audit.te.recipe") == [
        "fp8audit.te.recipe recipe=DelayedScaling"]
    assert run_job(tmp_path, "--no-fp8", prefix="fp8audit.te.recipe") == []


def test_a_job_s_subclass_of_a_recipe_is_named_by_te_s_class(tmp_path):
    # Megatron-core runs DelayedScaling as its own TEDelayedScaling: still DelayedScaling's state.
    assert run_job(tmp_path, "--subclass", prefix="fp8audit.te.recipe") == [
        "fp8audit.te.recipe recipe=DelayedScaling"]


def test_a_current_scaling_recompute_outside_fp8_is_marked_like_a_delayed_scaling_one(tmp_path):
    assert run_job(tmp_path, "--current") == [
        "fp8audit.te.recompute module=Linear#2 fp8=0 forward_fp8=1 "
        "checkpoint=torch.utils.checkpoint",
        "fp8audit.te.recompute module=Linear#1 fp8=0 forward_fp8=1 "
        "checkpoint=torch.utils.checkpoint"]


def test_a_recompute_in_its_forwards_state_walks_no_stack(tmp_path):
    assert run_job(tmp_path, "--te-checkpoint", prefix="fp8audit.te.site") == []


def test_te_checkpoint_recomputes_in_the_forwards_fp8_state(tmp_path):
    assert run_job(tmp_path, "--te-checkpoint") == [
        "fp8audit.te.recompute module=Linear#2 fp8=1 forward_fp8=1",
        "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=1"]


def test_under_the_fix_torch_checkpoint_recomputes_in_fp8(tmp_path):
    if not os.environ.get("FP8AUDIT_MODEL_LIB"):
        pytest.skip("FP8AUDIT_MODEL_LIB (the built model library) is not set: run through CTest")
    for mode in ((), ("--non-reentrant",)):
        marks = run_job(tmp_path, "--patch", *mode)
        assert marks == ["fp8audit.te.recompute module=Linear#2 fp8=1 forward_fp8=1",
                         "fp8audit.te.recompute module=Linear#1 fp8=1 forward_fp8=1"], mode


def test_under_the_fix_torch_checkpoint_recomputes_under_its_forwards_recipe(tmp_path):
    if not os.environ.get("FP8AUDIT_MODEL_LIB"):
        pytest.skip("FP8AUDIT_MODEL_LIB (the built model library) is not set: run through CTest")
    assert run_job(tmp_path, "--patch", "--backward-in", "current") == [
        f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1" for n in (2, 1)]


def test_a_forward_without_fp8_recomputed_without_it_is_no_change(tmp_path):
    assert run_job(tmp_path, "--no-fp8") == [
        "fp8audit.te.recompute module=Linear#2 fp8=0 forward_fp8=0",
        "fp8audit.te.recompute module=Linear#1 fp8=0 forward_fp8=0"]


def test_attention_without_an_fp8_attention_recipe_recomputed_outside_fp8_is_no_change(tmp_path):
    # Inside an FP8 autocast TE's DotProductAttention computes in FP8 only with fp8_dpa (or
    # fp8_mha): without it the recompute outside the autocast runs as its forward did.
    assert run_job(tmp_path, "--attention") == [
        "fp8audit.te.recompute module=DotProductAttention#1 fp8=0 forward_fp8=0"]


def test_fp8_attention_recomputed_outside_fp8_is_marked(tmp_path):
    assert run_job(tmp_path, "--attention", "--fp8-dpa") == [
        "fp8audit.te.recompute module=DotProductAttention#1 fp8=0 forward_fp8=1 "
        "checkpoint=torch.utils.checkpoint"]


def test_while_recording_is_off_nothing_is_marked(tmp_path):
    assert run_job(tmp_path, "--paused") == []


def test_without_checkpoints_nothing_is_marked(tmp_path):
    assert run_job(tmp_path, "--no-checkpoint") == []


def test_without_the_feature_nothing_is_marked(tmp_path):
    assert run_job(tmp_path, features="te-version") == []


def test_the_checkpoint_is_the_innermost_known_one_on_the_stack():
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    class Code:
        def __init__(self, name):
            self.co_filename = name

    class Frame:
        def __init__(self, name, back=None):
            self.f_code, self.f_back = Code(name), back

    outer = Frame("/x/site-packages/torch/utils/checkpoint.py")
    inner = Frame("/y/megatron/core/tensor_parallel/random.py", Frame("/job.py", outer))
    assert recompute.checkpoint_on_stack(Frame("/job.py", inner)) == \
        "megatron.tensor_parallel.checkpoint"
    assert recompute.checkpoint_on_stack(Frame("/job.py")) == "unknown"


def test_a_call_in_fp8_counts_as_fp8_even_where_te_gives_no_recipe():
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    class Manager:
        enabled = True

        @classmethod
        def is_fp8_enabled(cls):
            return cls.enabled

        @classmethod
        def get_fp8_recipe(cls):
            return None

    marks = []
    in_backward = [False]
    check = recompute.watcher(Manager, (), lambda: 7 if in_backward[0] else -1, marks.append)
    module = type("Linear", (), {})()
    check(module)  # its forward, in FP8
    Manager.enabled, in_backward[0] = False, True
    check(module)  # its recompute, without
    assert marks[-1] == f"{recompute.MARK} module=Linear#1 fp8=0 forward_fp8=1 checkpoint=unknown"


def test_the_fp8_state_is_read_where_the_release_keeps_it():
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    recipe = object()

    class Before215:  # class attributes of FP8GlobalStateManager (TE 2.14)
        FP8_ENABLED, FP8_RECIPE = True, recipe

    class State:
        fp8_enabled, fp8_recipe = False, None

    class Since215:  # FP8GlobalState (TE PR #2759)
        quantization_state = State()

    class OnlyMethods:
        @classmethod
        def is_fp8_enabled(cls):
            return True

    assert recompute.state_reader(Before215)() == (True, recipe)
    assert recompute.state_reader(Since215)() == (False, None)
    Since215.quantization_state = State()  # TE's reset() puts in a new state: read through it
    Since215.quantization_state.fp8_enabled = True
    assert recompute.state_reader(Since215)() == (True, None)
    assert recompute.state_reader(OnlyMethods)() == (True, None)


def test_recipe_objects_made_per_call_never_break_the_check():
    # A job that makes a recipe object per autocast: every pair is compared by its parameters,
    # however many recipe objects the job makes.
    sys.path.insert(0, str(ROOT / "python"))
    from dataclasses import dataclass

    from fp8audit.hook import recompute

    @dataclass
    class DelayedScaling:
        margin: int = 0

    state = {"recipe": None, "task": -1}
    marks = []
    check = recompute.watcher(object, (), lambda: state["task"], marks.append,
                              read=lambda: (True, state["recipe"]))
    module = type("Linear", (), {})()

    def step(forward, again):
        state.update(recipe=forward, task=-1)
        check(module)
        state.update(recipe=again, task=3)
        check(module)

    kept = DelayedScaling()
    step(kept, DelayedScaling())
    step(kept, DelayedScaling())  # one recipe known, one new: the table's count turns odd
    for _ in range(100):
        step(DelayedScaling(), DelayedScaling())
    step(DelayedScaling(), DelayedScaling(margin=1))
    assert marks[:-2] == [f"{recompute.MARK} module=Linear#1 fp8=1 forward_fp8=1"] * 102
    assert marks[-2].startswith("fp8audit.te.site site=")  # a change: where the job called it
    assert " context=recipe " in marks[-1]


def recompute_marks(forward, again, module_class="Linear", attention=()):
    """The marks of one module's forward under `forward` and its recompute under `again`."""
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    state = {"recipe": forward, "task": -1}
    marks = []
    check = recompute.watcher(object, attention, lambda: state["task"], marks.append,
                              read=lambda: (True, state["recipe"]))
    module = type(module_class, attention, {})() if attention else type(module_class, (), {})()
    check(module)
    state.update(recipe=again, task=3)
    check(module)
    return [m for m in marks if m.startswith(recompute.MARK)]


def standin_recipes():
    sys.path.insert(0, str(STANDIN))
    from transformer_engine.common import recipe

    return recipe


def test_recipes_differing_only_in_a_field_their_repr_leaves_out_are_other_recipes():
    # TE's DelayedScaling.__repr__ does not show amax_compute_algo: its fields still tell.
    recipe = standin_recipes()
    [mark] = recompute_marks(recipe.DelayedScaling(amax_compute_algo="max"),
                             recipe.DelayedScaling(amax_compute_algo="most_recent"))
    assert " context=recipe" in mark


def test_fp8_attention_fields_change_the_recipe_of_attention_only():
    recipe = standin_recipes()
    forward, again = recipe.DelayedScaling(), recipe.DelayedScaling(fp8_dpa=True, fp8_mha=True)
    [linear] = recompute_marks(forward, again)
    assert " context=" not in linear  # a Linear does not read fp8_dpa / fp8_mha

    class DotProductAttention:
        pass

    [attention] = recompute_marks(recipe.DelayedScaling(fp8_dpa=True), again,
                                  "DotProductAttention", (DotProductAttention,))
    assert " context=recipe" in attention


def test_a_recipe_whose_repr_fails_is_compared_by_its_class():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    class Other(Broken):
        pass

    [same] = recompute_marks(Broken(), Broken())
    [other] = recompute_marks(Broken(), Other())
    assert " context=" not in same and " context=recipe" in other


def test_a_module_name_too_long_for_the_agent_is_shortened_and_its_states_kept():
    sys.path.insert(0, str(ROOT / "python"))
    from fp8audit.hook import recompute

    text = recompute.mark_text("L" * 200 + "#1", True, False, "torch.utils.checkpoint", "recipe")
    assert len(text) <= recompute.MARK_LIMIT
    assert text.endswith(" fp8=1 forward_fp8=0 context=recipe")
    assert f"{recompute.MARK} module=LLL" in text


BLOCK_SCALED = ("Float8BlockScaling", "MXFP8BlockScaling", "NVFP4BlockScaling")


def test_block_scaled_recipes_recomputed_outside_fp8_are_marked_as_current_scaling_is(tmp_path):
    # MXFP8 and NVFP4 need SM100 on TE: the stand-in runs them on the CPU (issue 36 item 4).
    for name in BLOCK_SCALED:
        assert run_job(tmp_path, "--recipe", name) == [
            f"fp8audit.te.recompute module=Linear#{n} fp8=0 forward_fp8=1 "
            "checkpoint=torch.utils.checkpoint" for n in (2, 1)], name
        assert run_job(tmp_path, "--recipe", name, prefix="fp8audit.te.recipe") == [
            f"fp8audit.te.recipe recipe={name}"], name


def test_under_the_fix_block_scaled_recipes_recompute_under_their_forwards_recipe(tmp_path):
    if not os.environ.get("FP8AUDIT_MODEL_LIB"):
        pytest.skip("FP8AUDIT_MODEL_LIB (the built model library) is not set: run through CTest")
    for name in BLOCK_SCALED:
        assert run_job(tmp_path, "--patch", "--recipe", name, "--backward-in", "current") == [
            f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1" for n in (2, 1)], name


def test_te_s_default_recipe_is_the_devices_and_a_new_default_in_backward_is_the_same_recipe(
        tmp_path):
    # TE 2.20 makes a new default recipe object at each autocast: MXFP8 on SM100, current
    # scaling from SM120, DelayedScaling on SM90. Equal parameters: no change.
    for sm, name in (("10.0", "MXFP8BlockScaling"), ("12.0", "Float8CurrentScaling"),
                     ("9.0", "DelayedScaling")):
        args = ("--sm", sm, "--default-recipe", "--backward-in", "default")
        assert run_job(tmp_path, *args) == [
            f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1" for n in (2, 1)], sm
        assert run_job(tmp_path, *args, prefix="fp8audit.te.recipe") == [
            f"fp8audit.te.recipe recipe={name}"], sm


def test_an_nvfp4_forward_recomputed_under_blackwells_default_is_another_recipe(tmp_path):
    assert run_job(tmp_path, "--sm", "10.0", "--recipe", "NVFP4BlockScaling",
                   "--backward-in", "default") == [
        f"fp8audit.te.recompute module=Linear#{n} fp8=1 forward_fp8=1 context=recipe "
        "checkpoint=torch.utils.checkpoint" for n in (2, 1)]


SAVE_AND_COPY = PRELUDE + textwrap.dedent("""
    import copy, io, pickle
    def step(layer):
        x = torch.randn(4, 8, requires_grad=True)
        with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
            y = checkpoint(layer, x, use_reentrant=True)
        y.float().pow(2).mean().backward()  # torch's recompute, outside TE's autocast
    layer = te.Linear(8, 8)
    step(layer)
    assert not [k for k in vars(layer) if "fp8audit" in k], vars(layer)
    pickle.dumps(layer)
    torch.save(layer, io.BytesIO())
    step(copy.deepcopy(layer))  # an EMA or teacher copy: a module of its own
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")


def test_a_watched_module_pickles_saves_and_copies_as_without_the_hook(tmp_path):
    """torch.save(model) and pickle keep working and carry nothing of the hook's (its record is
    not the module's attribute), and a deep copy is a module of its own to the check."""
    marks = run_job(tmp_path, job=SAVE_AND_COPY)
    assert [m.split(" ")[1] for m in marks] == ["module=Linear#1", "module=Linear#2"], marks


def test_delayed_scaling_is_told_by_te_s_own_predicate_for_subclasses_and_failing_recipes():
    # One predicate for the frozen-scale and weight-refresh checks: TE's Recipe.delayed(), a
    # subclass (Megatron-core's TEDelayedScaling) included; a recipe whose delayed() raises is
    # judged by its TE class's name, never raising into the job.
    from fp8audit.hook.recompute import delayed_scaling
    from transformer_engine.common import recipe

    class TEDelayedScaling(recipe.DelayedScaling):
        pass

    class Broken(recipe.DelayedScaling):
        def delayed(self) -> bool:
            raise RuntimeError("a job's recipe")

    class BrokenCurrent(recipe.Float8CurrentScaling):
        def delayed(self) -> bool:
            raise RuntimeError("a job's recipe")

    assert delayed_scaling(recipe.DelayedScaling())
    assert delayed_scaling(TEDelayedScaling())
    assert delayed_scaling(Broken())
    assert not delayed_scaling(BrokenCurrent())
    assert not delayed_scaling(recipe.Float8CurrentScaling())
    assert not delayed_scaling(None)
