"""The Python hook that `fp8audit run --fix-te` installs: sitecustomize first on PYTHONPATH chains
the job's own sitecustomize, patches TE when transformer_engine.pytorch is imported (never
earlier), in child processes too, and a refusal is one line on stderr while the job goes on.
Also `fp8audit run --fix-te` itself, where the executable is built."""

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

JOB = textwrap.dedent("""
    import json, os, subprocess, sys
    import torch
    print(json.dumps({"te_imported_at_start": "transformer_engine" in sys.modules}), flush=True)
    if "--no-te" in sys.argv:
        sys.exit(0)
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as M
    counts = {"forward": 0, "backward": 0}
    real = M.reduce_and_update_fp8_tensors
    def counting(forward=True):
        counts["forward" if forward else "backward"] += 1
        return real(forward=forward)
    M.reduce_and_update_fp8_tensors = counting
    torch.manual_seed(0)
    layers = [te.Linear(16, 16) for _ in range(3)]
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast():
        for layer in layers:
            x = te.checkpoint(layer, x, use_reentrant=True)
    x.sum().backward()
    import fp8audit.te
    print(json.dumps({"counts": [counts["forward"], counts["backward"]],
                      "patched": fp8audit.te.is_patched(),
                      "env": os.environ.get("FP8AUDIT_TE_PATCHED"),
                      "chained": os.environ.get("CHAINED_SITECUSTOMIZE")}), flush=True)
    if "--child" in sys.argv:
        subprocess.run([sys.executable, __file__], check=True)
""")

CHAINED = textwrap.dedent(f"""
    import os
    os.environ["CHAINED_SITECUSTOMIZE"] = "ran"
    if os.environ.get("REGISTER_STANDIN"):
        from pathlib import Path
        from fp8audit.te import releases
        releases.register_source_tree(
            "2.20.2+standin", Path({str(STANDIN / "transformer_engine" / "pytorch")!r}))
""")


def ours(result):
    """fp8audit's lines on stderr (torch may warn about its own optional dependencies)."""
    return [line for line in result.stderr.splitlines() if line.startswith("fp8audit")]


def job(tmp_path, *args, hook="te-fix", register=True, pythonpath=None, cmd=None):
    (tmp_path / "chain").mkdir(exist_ok=True)
    (tmp_path / "chain" / "sitecustomize.py").write_text(CHAINED)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ)
    env.pop("FP8AUDIT_TE_PATCHED", None)
    path = pythonpath if pythonpath is not None else [str(HOOK_SITE), str(ROOT / "python")]
    env["PYTHONPATH"] = os.pathsep.join(path + [str(STANDIN), str(tmp_path / "chain")])
    if hook is not None:
        env["FP8AUDIT_PYHOOK"] = hook
    if register:
        env["REGISTER_STANDIN"] = "1"
    command = (cmd or []) + [sys.executable, str(script), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result, lines


def test_the_hook_patches_te_on_import_and_chains_the_jobs_sitecustomize(tmp_path):
    result, lines = job(tmp_path)
    assert result.returncode == 0, result.stderr
    assert lines[0] == {"te_imported_at_start": False}
    assert lines[1] == {"counts": [1, 1], "patched": True, "env": "2.20.2+standin",
                        "chained": "ran"}
    assert ours(result) == []


def test_child_processes_are_patched_too(tmp_path):
    result, lines = job(tmp_path, "--child")
    assert result.returncode == 0, result.stderr
    patched = [line for line in lines if "counts" in line]
    assert len(patched) == 2 and all(line["counts"] == [1, 1] for line in patched)


def test_without_the_feature_nothing_is_patched(tmp_path):
    result, lines = job(tmp_path, hook=None)
    assert result.returncode == 0, result.stderr
    assert lines[1]["patched"] is False and lines[1]["counts"] == [4, 3]
    assert lines[1]["chained"] == "ran"


def test_a_refusal_is_one_line_and_the_job_runs_unpatched(tmp_path):
    result, lines = job(tmp_path, register=False)
    assert result.returncode == 0, result.stderr
    assert lines[1]["patched"] is False and lines[1]["counts"] == [4, 3]
    err = ours(result)
    assert len(err) == 1 and err[0].startswith("fp8audit: --fix-te: fp8audit.te: not patched:")
    assert "2.20.2+standin is not a release" in err[0]


def test_te_is_never_imported_by_the_hook(tmp_path):
    result, lines = job(tmp_path, "--no-te")
    assert result.returncode == 0, result.stderr
    assert lines == [{"te_imported_at_start": False}]


def test_an_unknown_feature_is_reported_once_and_ignored(tmp_path):
    result, lines = job(tmp_path, hook="te-fix,bogus")
    assert result.returncode == 0
    assert lines[1]["patched"] is True
    assert result.stderr.count("unknown python hook feature(s) bogus") == 1


def test_a_feature_named_twice_is_armed_once(tmp_path):
    # FP8AUDIT_PYHOOK as a user may write it beside the one `fp8audit run` merges its own into:
    # the refusal is said once, not per mention.
    result, lines = job(tmp_path, hook="te-fix, te-fix ,te-fix", register=False)
    assert result.returncode == 0, result.stderr
    assert lines[1]["patched"] is False
    assert len(ours(result)) == 1, result.stderr


def test_fp8audit_run_fix_te_patches_an_unmodified_job(tmp_path):
    binary = Path(os.environ.get("FP8AUDIT_BIN", ROOT / "build" / "bin" / "fp8audit"))
    if not binary.is_file():
        pytest.skip(f"{binary} is not built")
    env_agent = os.environ.get("FP8AUDIT_MODEL_LIB")
    if not env_agent:
        pytest.skip("FP8AUDIT_MODEL_LIB is not set")
    os.environ["FP8AUDIT_AGENT"] = env_agent  # any loadable library stands in for the agent here
    try:
        result, lines = job(tmp_path, pythonpath=[],
                            cmd=[str(binary), "run", "--fix-te", "--out", str(tmp_path / "t"), "--"])
    finally:
        os.environ.pop("FP8AUDIT_AGENT")
    # No GPU, so no trace: `run` exits 2 after the job, whose own output is what is checked.
    assert lines[1]["patched"] is True and lines[1]["counts"] == [1, 1], result.stderr


def test_fp8audit_run_fix_te_without_its_python_package_is_a_usage_error(tmp_path):
    binary = Path(os.environ.get("FP8AUDIT_BIN", ROOT / "build" / "bin" / "fp8audit"))
    lib = os.environ.get("FP8AUDIT_MODEL_LIB")
    if not binary.is_file() or not lib:
        pytest.skip("fp8audit or FP8AUDIT_MODEL_LIB missing")
    env = dict(os.environ, FP8AUDIT_AGENT=lib, FP8AUDIT_PYTHON_DIR=str(tmp_path))
    result = subprocess.run([str(binary), "run", "--fix-te", "--out", str(tmp_path / "t"), "--",
                             "true"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"fp8audit run: --fix-te: fp8audit's Python package not found (looked in {tmp_path}; "
        "set FP8AUDIT_PYTHON_DIR to the directory holding fp8audit/)"]
    env = dict(os.environ, FP8AUDIT_AGENT=lib, FP8AUDIT_MODEL_LIB=str(tmp_path / "none.so"))
    env.pop("FP8AUDIT_PYTHON_DIR", None)
    result = subprocess.run([str(binary), "run", "--fix-te", "--out", str(tmp_path / "t"), "--",
                             "true"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "FP8AUDIT_MODEL_LIB=" in result.stderr and "is not a file" in result.stderr


def test_te_version_feature_marks_without_importing_torch_cuda(tmp_path, monkeypatch):
    import fp8audit._nvtx
    import fp8audit.hook as hook

    marks = []
    monkeypatch.setattr(fp8audit._nvtx, "mark", marks.append)
    hook._te_version(type("M", (), {"__version__": "2.20.2"}))
    assert marks == ["fp8audit.te te=2.20.2"]


def test_te_version_mark_names_pr_3456_semantics_where_te_s_code_has_its_scope(monkeypatch):
    import types

    import fp8audit._nvtx
    import fp8audit.hook as hook

    marks = []
    monkeypatch.setattr(fp8audit._nvtx, "mark", marks.append)
    quantization = types.ModuleType("transformer_engine.pytorch.quantization")
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.quantization", quantization)
    hook._te_version(type("M", (), {"__version__": "2.21.0.dev0"}))
    quantization.quantization_backward_scope = lambda: None  # PR #3456's fingerprint
    hook._te_version(type("M", (), {"__version__": "2.21.0.dev0"}))
    del quantization.quantization_backward_scope  # its other one, as fp8audit.te reads it
    quantization.FP8GlobalStateManager = type(
        "FP8GlobalStateManager", (), {"request_backward_quantization_update": lambda: None})
    hook._te_version(type("M", (), {"__version__": "2.21.0.dev0"}))
    assert marks == ["fp8audit.te te=2.21.0.dev0"] + [
        "fp8audit.te te=2.21.0.dev0 semantics=te-3456"] * 2


def test_nvtx_asks_torch_for_cuda_once_not_on_every_mark(monkeypatch):
    import torch

    import fp8audit._nvtx as nvtx

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: asked.append(1) or False)
    for name, value in (("NVTX", None), ("_torch_nvtx", None), ("_no_cuda", False),
                        ("_broken", False)):
        monkeypatch.setattr(nvtx, name, value)
    assert [nvtx.call("mark", "m") for _ in range(3)] == [False, False, False]
    assert asked == [1]


def test_frequent_marks_go_straight_to_torchs_nvtx_function_and_fall_back_when_it_fails(
        monkeypatch):
    import fp8audit._nvtx as nvtx

    sent, fallback = [], []

    class Native:
        @staticmethod
        def markA(message):
            if message == "bad":
                raise RuntimeError("NVTX is gone")
            sent.append(message)

    torch_nvtx = type("TorchNvtx", (), {"_nvtx": Native, "mark": lambda m: fallback.append(m)})
    for name, value in (("NVTX", None), ("_torch_nvtx", torch_nvtx), ("_no_cuda", False),
                        ("_broken", False)):
        monkeypatch.setattr(nvtx, name, value)
    send = nvtx.sender()
    send("a")
    send("bad")
    assert sent == ["a"]  # torch.cuda.nvtx.mark's own body, without it
    assert fallback == ["bad"]  # the failed one through mark(): NVTX's failure is handled there
    send("c")
    assert sent == ["a"] and fallback == ["bad", "c"]  # after a failure, mark() only


def test_with_a_test_nvtx_frequent_marks_go_through_mark(monkeypatch):
    import fp8audit._nvtx as nvtx

    class Recorder:
        def __init__(self):
            self.marks = []

        def mark(self, message):
            self.marks.append(message)

    recorder = Recorder()
    monkeypatch.setattr(nvtx, "NVTX", recorder)
    assert nvtx.sender() is nvtx.mark
    nvtx.sender()("m")
    assert recorder.marks == ["m"]


def test_a_feature_that_fails_tells_the_agent_once_per_process_and_check(monkeypatch, capsys):
    import fp8audit._nvtx as nvtx
    from fp8audit import hook

    marks = []
    monkeypatch.setattr(nvtx, "NVTX", type("N", (), {"mark": staticmethod(marks.append)})())
    monkeypatch.setattr(hook, "_unchecked", set())

    def broken(module):
        raise KeyError("boom")

    hook._run("te-count", broken, None)
    hook._run("te-count", broken, None)
    hook.unchecked("refresh", "no quantize_weight!")  # a token: no spaces, nothing odd
    assert marks == ["fp8audit.te.unchecked check=te-count reason=KeyError",
                     "fp8audit.te.unchecked check=refresh reason=no-quantize_weight-"]
    assert capsys.readouterr().err.count("python hook 'te-count' failed (KeyError") == 2


def test_a_forked_child_sends_again_the_checks_its_parent_gave_up(monkeypatch):
    import fp8audit._nvtx as nvtx
    from fp8audit import hook

    marks = []
    monkeypatch.setattr(nvtx, "NVTX", type("N", (), {"mark": staticmethod(marks.append)})())
    monkeypatch.setattr(hook, "_unchecked", set())
    monkeypatch.setattr(hook, "_given_up", {})
    hook.unchecked("refresh", "KeyError")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own trace, the same check still given up
        os.close(read)
        os.write(write, json.dumps(marks).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = json.load(f)
    os.waitpid(pid, 0)
    mark = "fp8audit.te.unchecked check=refresh reason=KeyError"
    assert marks == [mark]
    assert child == [mark, mark]  # the parent's (inherited memory) and the child's own


# ---- te-count: the python hook's own count of TE's updates (needs no torch: a fake TE 2.x) ----

FAKE_TE = {
    "transformer_engine/__init__.py": "__version__ = '2.20.2'\n",
    "transformer_engine/pytorch/__init__.py": "from . import quantization\n",
    # The state manager's layout in TE 2.20.2 (quantization.py): global_amax_buffer keyed
    # "<forward|backward>_<autocast key>", autocast_arguments[key] = (recipe, group).
    "transformer_engine/pytorch/quantization.py": textwrap.dedent("""
        from dataclasses import dataclass, field

        @dataclass
        class QuantizationState:
            global_amax_buffer: dict = field(default_factory=dict)
            autocast_arguments: dict = field(default_factory=dict)

        class FP8GlobalStateManager:
            quantization_state = QuantizationState()
            calls = []

            @classmethod
            def split_key_in_buffer(cls, key):
                forward, autocast_key = key.split("_", 1)
                return forward == "forward", autocast_key

            @classmethod
            def reduce_and_update_fp8_tensors(cls, forward=True):
                cls.calls.append(forward)
        """),
}

COUNT_JOB = textwrap.dedent("""
    import json, sys
    import fp8audit.hook as hook

    class Recorder:
        def __init__(self):
            self.calls = []
        def range_push(self, message):
            self.calls.append(["push", message])
        def range_pop(self):
            self.calls.append(["pop"])
        def mark(self, message):
            self.calls.append(["mark", message])

    import fp8audit._nvtx
    fp8audit._nvtx.NVTX = Recorder()
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager as M

    class Fused:
        amax_compute_algo = "max"
        scaling_factor_compute_algo = None

    class Unfused:
        amax_compute_algo = staticmethod(lambda history: history.max())
        scaling_factor_compute_algo = None

    s = M.quantization_state
    if "--paused" in sys.argv:
        from fp8audit import _agent
        print(json.dumps({"agent_switched": _agent.set_recording(False)}))
    s.autocast_arguments = {"a": (Fused(), None), "b": (Unfused(), None)}
    s.global_amax_buffer = {"forward_a": [1], "backward_a": [1, 2], "forward_b": [3],
                            "backward_b": []}
    M.reduce_and_update_fp8_tensors(forward=True)
    M.reduce_and_update_fp8_tensors(False)
    s.global_amax_buffer = {}
    M.reduce_and_update_fp8_tensors()
    if "--reinstall" in sys.argv:
        hook.install(["te-count"])
        s.global_amax_buffer = {"forward_a": [1]}
        M.reduce_and_update_fp8_tensors()
    print(json.dumps({"nvtx": fp8audit._nvtx.NVTX.calls, "te_calls": M.calls,
                      "wrapped_name": M.reduce_and_update_fp8_tensors.__name__}))
""")


def count_job(tmp_path, *args, env_extra=None, features="te-version,te-count"):
    for name, text in FAKE_TE.items():
        path = tmp_path / "fake_te" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    script = tmp_path / "count_job.py"
    script.write_text(COUNT_JOB)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_SITE), str(ROOT / "python"),
                                         str(tmp_path / "fake_te")])
    env["FP8AUDIT_PYHOOK"] = features
    env.pop("NVTE_UNFUSED_FP8_UPDATE", None)
    env.update(env_extra or {})
    result = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True,
                            text=True, timeout=120)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return result, lines


def site_of(tmp_path, call):
    """The call-site mark for the count job's line holding `call`."""
    line = COUNT_JOB.splitlines().index(call) + 1
    return ["mark", f"fp8audit.te.site site={tmp_path.name}/count_job.py:{line} in <module>"]


def test_te_count_brackets_each_updating_call_with_its_counts_and_runs_te(tmp_path):
    result, lines = count_job(tmp_path)
    assert result.returncode == 0, result.stderr
    assert lines == [{
        "nvtx": [["mark", "fp8audit.te te=2.20.2"],
                 site_of(tmp_path, "M.reduce_and_update_fp8_tensors(forward=True)"),
                 ["push", "fp8audit.te.update pass=forward count=2 unfused=1"], ["pop"],
                 site_of(tmp_path, "M.reduce_and_update_fp8_tensors(False)"),
                 ["push", "fp8audit.te.update pass=backward count=1 unfused=0"], ["pop"]],
        "te_calls": [True, False, True],  # the empty call ran too, without a range
        "wrapped_name": "reduce_and_update_fp8_tensors"}]
    assert ours(result) == []


def test_te_count_counts_every_update_as_unfused_under_nvte_unfused_fp8_update(tmp_path):
    result, lines = count_job(tmp_path, env_extra={"NVTE_UNFUSED_FP8_UPDATE": "1"},
                              features="te-count")
    assert result.returncode == 0, result.stderr
    assert [c for c in lines[0]["nvtx"] if c[0] != "mark"] == [
        ["push", "fp8audit.te.update pass=forward count=2 unfused=2"], ["pop"],
        ["push", "fp8audit.te.update pass=backward count=1 unfused=1"], ["pop"]]


def test_te_count_records_nothing_while_recording_is_off_and_te_still_runs(tmp_path):
    result, lines = count_job(tmp_path, "--paused", features="te-count")
    assert result.returncode == 0, result.stderr
    assert lines[0] == {"agent_switched": False}  # no agent preloaded: only the hook switched
    assert lines[1]["nvtx"] == [] and lines[1]["te_calls"] == [True, False, True]


def test_te_count_wraps_once(tmp_path):
    result, lines = count_job(tmp_path, "--reinstall", features="te-count")
    assert result.returncode == 0, result.stderr
    pushes = [call for call in lines[0]["nvtx"] if call[0] == "push"]
    assert len(pushes) == 3 and lines[0]["te_calls"] == [True, False, True, True]


def test_te_count_without_a_state_manager_is_one_line_and_the_job_goes_on(tmp_path):
    (tmp_path / "fake_te" / "transformer_engine" / "pytorch").mkdir(parents=True)
    FAKE_TE_SAVED = dict(FAKE_TE)
    try:
        FAKE_TE["transformer_engine/pytorch/quantization.py"] = "X = 1\n"
        script = tmp_path / "noop.py"
        script.write_text("import transformer_engine.pytorch\nprint('{\"ran\": true}')\n")
        for name, text in FAKE_TE.items():
            path = tmp_path / "fake_te" / name
            path.write_text(text)
        env = dict(os.environ, FP8AUDIT_PYHOOK="te-count",
                   PYTHONPATH=os.pathsep.join([str(HOOK_SITE), str(ROOT / "python"),
                                               str(tmp_path / "fake_te")]))
        result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                                text=True, timeout=120)
    finally:
        FAKE_TE.clear()
        FAKE_TE.update(FAKE_TE_SAVED)
    assert result.returncode == 0 and '{"ran": true}' in result.stdout
    assert ours(result) == ["fp8audit: python hook 'te-count' failed (RuntimeError: "
                            "transformer_engine.pytorch has no FP8GlobalStateManager); continuing "
                            "without it"]


def test_the_fix_still_patches_when_te_count_is_armed(tmp_path):
    result, lines = job(tmp_path, hook="te-version,te-count,te-fix")  # as `run --fix-te` arms
    assert result.returncode == 0, result.stderr
    assert lines[1]["patched"] is True and lines[1]["counts"] == [1, 1]
    assert ours(result) == []


CHAIN_JOB = textwrap.dedent("""
    import json, os
    import fp8audit.hook
    print(json.dumps({"chained": os.environ.get("CHAINED_SITECUSTOMIZE"),
                      "armed": {k: len(v) for k, v in fp8audit.hook._pending.items()}}))
""")


@pytest.mark.parametrize("second", ["symlink", "copy"])
def test_a_second_fp8audit_hook_on_the_path_is_skipped_and_the_jobs_own_sitecustomize_runs(
        tmp_path, second):
    """Two fp8audit hook directories on PYTHONPATH (another install, or a link to the same one):
    the chain skips every fp8audit hook, runs the job's own sitecustomize once, and arms once."""
    other = tmp_path / "other" / "site"
    other.parent.mkdir()
    if second == "symlink":
        other.symlink_to(HOOK_SITE, target_is_directory=True)
    else:
        other.mkdir()
        (other / "sitecustomize.py").write_text((HOOK_SITE / "sitecustomize.py").read_text())
    (tmp_path / "chain").mkdir()
    (tmp_path / "chain" / "sitecustomize.py").write_text(textwrap.dedent("""
        import os
        os.environ["CHAINED_SITECUSTOMIZE"] = os.environ.get("CHAINED_SITECUSTOMIZE", "") + "ran"
    """))
    (tmp_path / "job.py").write_text(CHAIN_JOB)
    env = dict(os.environ, FP8AUDIT_PYHOOK="te-version")  # armed: one action waits for TE
    env.pop("CHAINED_SITECUSTOMIZE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_SITE), str(other), str(ROOT / "python"),
                                         str(tmp_path / "chain")])
    result = subprocess.run([sys.executable, str(tmp_path / "job.py")], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "RecursionError" not in result.stderr
    assert "Error in sitecustomize" not in result.stderr, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines == [{"chained": "ran", "armed": {"transformer_engine": 1}}]


def test_update_names_give_both_of_pr_3456_s_names_of_one_function_and_the_old_alone_before():
    import fp8audit.hook as hook

    def update(cls, forward=True):
        return forward

    class Before:
        reduce_and_update_fp8_tensors = classmethod(update)

    class WithPr:  # TE PR #3456: the new name is what TE calls, the old its alias
        reduce_and_update_quantization_state = classmethod(update)
        reduce_and_update_fp8_tensors = reduce_and_update_quantization_state

    assert hook.update_names(Before) == (update, ["reduce_and_update_fp8_tensors"])
    assert hook.update_names(WithPr) == (update, ["reduce_and_update_quantization_state",
                                                  "reduce_and_update_fp8_tensors"])
