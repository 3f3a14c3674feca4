"""bench/python/hook_bench.py (issue 36 item 5), smoke-run on the CPU stand-in of TE: it arms the
hook itself, times the three arms in one process, counts a forward and a recompute per module and
step, and refuses in one line with exit 2 when Transformer Engine cannot be imported. Its figures
are not checked here: benchmarks are read on the GPU, never timed in tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BENCH = ROOT / "bench" / "python" / "hook_bench.py"
STANDIN = HERE / "standin"


def bench(tmp_path: Path, *args: str, standin: bool = True) -> subprocess.CompletedProcess:
    paths = [str(ROOT / "python")] + ([str(STANDIN)] if standin else [str(tmp_path / "no_te")])
    if not standin:  # a Transformer Engine that fails to import, whatever the host has
        (tmp_path / "no_te" / "transformer_engine").mkdir(parents=True)
        (tmp_path / "no_te" / "transformer_engine" / "__init__.py").write_text(
            "raise ImportError('no Transformer Engine here')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), CUDA_VISIBLE_DEVICES="")
    env.pop("FP8AUDIT_PYHOOK", None)
    return subprocess.run([sys.executable, str(BENCH), *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)


def test_the_bench_times_each_arm_over_a_forward_and_a_recompute_per_module(tmp_path):
    for checkpoint in ("te", "torch"):
        r = bench(tmp_path, "--json", "--checkpoint", checkpoint, "--layers", "3", "--hidden",
                  "16", "--steps", "3", "--rounds", "3")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["calls_per_step"] == 6  # 3 modules: each its forward and its recompute
        assert out["under_agent"] is False and out["checkpoint"] == checkpoint
        assert out["steps_per_arm"] == 9  # 3 rounds of 3 timed steps
        assert out["absent"]["ratio"] == 1.0
        for arm in ("absent", "off", "on"):
            lo, hi = out[arm]["ci95_ms"]
            assert 0 < lo <= out[arm]["median_ms"] <= hi


def test_the_table_names_the_setup_and_the_arms(tmp_path):
    r = bench(tmp_path, "--recipe", "delayed", "--layers", "2", "--hidden", "16", "--steps", "2",
              "--rounds", "3")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("DelayedScaling on cpu, 2 x te.Linear(16) under the te checkpoint")
    assert "the hook armed in-process" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == ["absent", "off", "on"]


def test_without_transformer_engine_the_bench_says_so_in_one_line_and_exits_2(tmp_path):
    r = bench(tmp_path, standin=False)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "hook_bench: cannot import Transformer Engine and torch (no Transformer Engine here)"]


def test_the_hooks_wrapper_keeps_tes_own_call_for_the_absent_arm():
    sys.path.insert(0, str(BENCH.parent))
    import hook_bench
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule as base

    from fp8audit import hook

    own = base.__call__  # TE's class inherits torch.nn.Module's until the hook wraps it
    if getattr(own, "__fp8audit_recompute__", False):  # armed by an earlier test in this process
        own = own.__wrapped__
    hook.install(["te-recompute"])
    [(cls, wrapper, kept)] = hook_bench.wrapped_classes((base,))
    assert cls is base and kept is own and wrapper is base.__dict__["__call__"]
    assert wrapper is not own


def test_the_profile_of_an_arm_lists_the_hooks_own_functions(tmp_path):
    r = bench(tmp_path, "--profile", "on", "--checkpoint", "torch", "--layers", "2", "--hidden",
              "16", "--steps", "2")
    assert r.returncode == 0, r.stderr
    assert "fp8audit/hook/recompute.py" in r.stdout and "(before_call)" in r.stdout


def test_in_a_healthy_job_the_check_adds_a_few_python_calls_per_module_call(tmp_path):
    r = bench(tmp_path, "--calls", "--json", "--layers", "3", "--hidden", "16")
    assert r.returncode == 0, r.stderr
    added = json.loads(r.stdout)["added_per_call"]
    assert added["absent"] == {"python": 0.0, "builtin": 0.0}
    # The wrappers themselves: the module's __call__ and its quantize_weight (the weight-refresh
    # check's, one dictionary lookup without a cache).
    assert added["off"]["python"] == 2.0
    # The wrappers, torch's compile check (two), the check, half a mark (one per recompute) and
    # te-count at each recompute's autocast exit: no stack walk, no lookup per mark, no recipe
    # comparison where the recompute's recipe is its forward's object (7.67 with that call). The
    # check as it was before reading TE's state in one call took 20.6 here.
    assert added["on"]["python"] <= 7.5, added


def test_a_recompute_in_another_fp8_state_costs_the_check_its_stack_walk(tmp_path):
    healthy, failing = (json.loads(bench(tmp_path, "--calls", "--json", "--layers", "3",
                                         "--hidden", "16", "--checkpoint", c).stdout)
                        for c in ("te", "torch"))
    assert failing["added_per_call"]["on"]["python"] > \
        healthy["added_per_call"]["on"]["python"] + 5


def test_the_timed_arm_reports_the_checks_own_time_inside_the_step(tmp_path):
    r = bench(tmp_path, "--inside", "--json", "--layers", "2", "--hidden", "16", "--steps", "2",
              "--rounds", "4")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["steps_per_arm"] == out["rounds"] * 2 and "timed" in out
    assert out["inside_us_per_call"] > 0
    table = bench(tmp_path, "--inside", "--layers", "2", "--hidden", "16", "--steps", "2",
                  "--rounds", "4").stdout.splitlines()
    assert [line.split()[0] for line in table[2:6]] == ["absent", "off", "on", "timed"]
    assert table[6].startswith("the check itself, timed inside the timed arm's steps: ")
