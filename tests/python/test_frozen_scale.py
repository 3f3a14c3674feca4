"""The python hook's frozen-scale check (issue 36 item 2) on the CPU stand-in of TE, which
registers a module's DelayedScaling state once and makes it again on a switch of recipe class as
TE 2.20.2 does: a module switched to another recipe and back to DelayedScaling computes with
scales TE's update never reaches, and the hook names it once; a job that keeps its recipe, or
changes only DelayedScaling's parameters, sends nothing."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "python"))

from fp8audit.hook import frozen  # noqa: E402

import test_recompute_hook as base  # noqa: E402  (its job prelude and runner)

# One step per recipe named in --schedule (delayed, current, margin: DelayedScaling(margin=1)), its
# forward inside te.autocast and its backward after it, 2 te.Linear; then the stand-in's truth
# per module: whether TE's update moved its scales in the last two steps.
JOB = base.PRELUDE + textwrap.dedent("""
    recipes = {"delayed": recipe.DelayedScaling(), "current": recipe.Float8CurrentScaling(),
               "margin": recipe.DelayedScaling(margin=1)}
    schedule = sys.argv[sys.argv.index("--schedule") + 1].split(",")
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(2)]
    moved = []
    for step, name in enumerate(schedule):
        before = [layer.fp8_meta["scaling_fwd"].scale.clone() for layer in layers
                  if "scaling_fwd" in layer.fp8_meta]
        x = torch.randn(4, 8, requires_grad=True) * (step + 2)
        with te.autocast(enabled=True, recipe=recipes[name]):
            for layer in layers:
                x = layer(x)
        x.float().pow(2).mean().backward()
        after = [layer.fp8_meta["scaling_fwd"].scale for layer in layers]
        moved = [not torch.equal(b, a) for b, a in zip(before, after)] if before else []
    print("truth", json.dumps(moved))
    print(json.dumps(fp8audit._nvtx.NVTX.marks))
""")


def run(tmp_path, schedule):
    """(the frozen marks the job sent, the stand-in's truth: whether each module's scales moved in
    the last step) for a job stepping through `schedule` under the hook's te-recompute."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(base.HOOK_SITE), str(ROOT / "python"),
                                         str(base.STANDIN)])
    env["FP8AUDIT_PYHOOK"] = "te-recompute"
    result = subprocess.run([sys.executable, str(script), "--schedule", schedule], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("fp8audit")] == []
    lines = result.stdout.splitlines()
    moved = json.loads([line for line in lines if line.startswith("truth ")][-1][6:])
    marks = json.loads([line for line in lines if line.startswith("[")][-1])
    return [m for m in marks if m.startswith(frozen.MARK)], moved


def test_a_module_switched_to_another_recipe_and_back_is_named_once(tmp_path):
    # and the stand-in's truth: TE's update no longer moves their scales
    assert run(tmp_path, "delayed,current,delayed,delayed,delayed") == (
        [frozen.mark_text("Linear#1"), frozen.mark_text("Linear#2")], [False, False])


def test_a_job_that_keeps_delayed_scaling_sends_nothing(tmp_path):
    assert run(tmp_path, "delayed,delayed,delayed,delayed") == ([], [True, True])


def test_delayed_scaling_first_registered_after_another_recipe_sends_nothing(tmp_path):
    assert run(tmp_path, "current,current,delayed,delayed,delayed") == ([], [True, True])


def test_changing_only_delayed_scaling_s_parameters_keeps_the_state_and_sends_nothing(tmp_path):
    assert run(tmp_path, "delayed,margin,delayed,margin")[0] == []


def test_a_state_is_judged_at_the_forward_after_one_under_delayed_scaling_ran_with_it(tmp_path):
    # made in the step switching back, a whole forward ran with it in the next, judged after it
    assert run(tmp_path, "delayed,current,delayed,delayed")[0] == [
        frozen.mark_text("Linear#1"), frozen.mark_text("Linear#2")]
    assert run(tmp_path, "delayed,current,delayed")[0] == []


def test_an_evaluation_under_another_recipe_after_every_step_is_caught(tmp_path):
    # each re-made state is judged at the evaluation after the step which ran with it: two here
    assert run(tmp_path, "delayed,current,delayed,current,delayed,current")[0] == [
        frozen.mark_text("Linear#1"), frozen.mark_text("Linear#2")] * 2


def test_a_job_under_another_recipe_only_is_never_judged(tmp_path):
    assert run(tmp_path, "current,current,current") == ([], [False, False])


def test_mark_names_the_module_in_the_grammar_s_words():
    assert frozen.mark_text("Linear#3") == "fp8audit.te.frozen module=Linear#3"


class _Recipe:
    def __init__(self, delayed):
        self._delayed = delayed

    def delayed(self):
        return self._delayed


class _State:
    def __init__(self):
        self.scale = object()


class _Manager:
    """TE's FP8GlobalStateManager as far as the check reads it."""

    def __init__(self, info_key="buffer_index_and_autocast_key", capturing=False):
        self.quantization_state = type("S", (), {"global_scale_buffer": {}})()
        self._info_key, self._capturing = info_key, capturing

    def get_buffer_info(self):
        return self._info_key

    def fp8_graph_capturing(self):
        return self._capturing


def _module(state):
    return type("M", (), {"fp8_meta": {"scaling_fwd": state}})()


def test_a_te_keeping_the_module_s_place_otherwise_makes_the_check_stand_aside_once(capsys):
    sent = []
    check = frozen.judge(_Manager(info_key="elsewhere"), sent.append)
    delayed = _Recipe(True)
    for _ in range(2):
        state = _State()
        check(_module(state), ["Linear#1", None, "", "", None, {}, None], state, delayed, delayed)
    assert sent == []
    assert capsys.readouterr().err.count("frozen scales are not checked") == 1


def test_a_frozen_check_that_stands_aside_tells_the_agent_once(monkeypatch, capsys):
    from fp8audit import _nvtx, hook

    marks = []
    monkeypatch.setattr(_nvtx, "NVTX", type("N", (), {"mark": staticmethod(marks.append)})())
    monkeypatch.setattr(hook, "_unchecked", set())
    check = frozen.judge(_Manager(info_key="elsewhere"), lambda text: None)
    delayed = _Recipe(True)
    for _ in range(2):
        state = _State()
        check(_module(state), ["Linear#1", None, "", "", None, {}, None], state, delayed, delayed)
    assert marks == ["fp8audit.te.unchecked check=frozen reason=LookupError"]
    assert capsys.readouterr().err.count("frozen scales are not checked") == 1


def test_a_state_under_graph_capture_is_not_judged_until_an_eager_forward():
    sent = []
    state = _State()
    entry = ["Linear#1", None, "", "", None, {}, None]
    delayed = _Recipe(True)
    frozen.judge(_Manager(capturing=True), sent.append)(_module(state), entry, state, delayed,
                                                         delayed)
    assert (sent, entry[frozen.AT_JUDGED]) == ([], None)
    frozen.judge(_Manager(), sent.append)(_module(state), entry, state, delayed, delayed)
    assert sent == [frozen.mark_text("Linear#1")] and entry[frozen.AT_JUDGED] is state
