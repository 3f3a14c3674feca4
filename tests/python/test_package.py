"""fp8audit's Python API and entry points: `import fp8audit` without torch, fp8audit.microbatch()
/ update() / step() on the CPU under the agent and without any route, fp8audit.ops, the example
job under the agent, `python -m fp8audit`, and the wheel's layout (the executable finding the
agent, the hook and the markers library beside it)."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pkgutil_fp8audit import (AGENT, BIN, PYTHON_DIR, ROOT, audit, counts, env, needs_agent,
                              needs_ops, python, report)

MARKED = textwrap.dedent("""
    import sys, fp8audit
    if "--torch" in sys.argv:
        import torch  # a CPU torch: no CUDA, so the markers library is the route
    for forward in [int(a) for a in sys.argv[1:] if a.isdigit()]:
        with fp8audit.microbatch():
            fp8audit.update("forward", forward)
            fp8audit.update("backward")
        fp8audit.step()
""")


def test_import_fp8audit_and_its_markers_need_no_torch():
    r = python("import sys, fp8audit\nwith fp8audit.microbatch():\n    fp8audit.update('forward')"
               "\nfp8audit.step()\nprint('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_microbatch_without_any_route_never_raises_and_says_so_once_under_a_tool():
    code = textwrap.dedent("""
        import torch, fp8audit
        def unavailable(*args, **kwargs):  # as a CPU torch's NVTX: no route through torch
            raise RuntimeError("NVTX functions not installed")
        torch.cuda.nvtx.range_push = torch.cuda.nvtx.range_pop = unavailable
        for _ in range(3):
            with fp8audit.microbatch():
                pass
        try:
            with fp8audit.microbatch():
                raise KeyError("the body's")
        except KeyError as e:
            print(e)
    """)
    r = python(code, FP8AUDIT_MARKERS_LIB="/nonexistent/libfp8audit_markers.so",
               NVTX_INJECTION64_PATH="/nonexistent/tool.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "\"the body's\""
    ours = [line for line in r.stderr.splitlines() if line.startswith("fp8audit")]
    assert len(ours) == 1 and "fp8audit.microbatch(): not marked" in ours[0], r.stderr


def test_update_refuses_an_unknown_direction():
    r = python("import fp8audit\ntry:\n    fp8audit.update('sideways')\nexcept ValueError as e:"
               "\n    print(e)")
    assert "direction must be 'forward', 'backward' or None" in r.stdout, r.stderr


@pytest.mark.parametrize("torch_imported", [False, True])
def test_microbatches_marked_on_the_cpu_reach_the_agents_trace(tmp_path, torch_imported):
    needs_agent()
    (tmp_path / "job.py").write_text(MARKED)
    args = [str(tmp_path / "job.py"), "1", "2", "1"] + (["--torch"] if torch_imported else [])
    r = audit(tmp_path / "t", args)
    # The second microbatch's extra forward update is a violation: run exits 3.
    assert r.returncode == 3, r.stderr
    assert counts(report(tmp_path / "t")) == [(1, 1), (2, 1), (1, 1)]


def test_microbatches_are_marked_where_torchs_nvtx_raises(tmp_path):
    """A torch that reports CUDA but whose NVTX raises, as a CPU build's torch.cuda.nvtx does
    ("NVTX functions not installed"): microbatch() and step() fall back to the markers library,
    so the job neither fails nor loses a microbatch."""
    needs_agent()
    job = textwrap.dedent("""
        import torch, fp8audit
        def not_installed(*args, **kwargs):
            raise RuntimeError("NVTX functions not installed")
        torch.cuda.is_available = lambda: True
        torch.cuda.nvtx.range_push = torch.cuda.nvtx.range_pop = not_installed
        torch.cuda.nvtx.mark = not_installed
        for _ in range(2):
            with fp8audit.microbatch():
                fp8audit.update("forward")
                fp8audit.update("backward")
            fp8audit.step()
    """)
    (tmp_path / "job.py").write_text(job)
    r = audit(tmp_path / "t", [str(tmp_path / "job.py")])
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert counts(report(tmp_path / "t")) == [(1, 1), (1, 1)]


def test_python_spells_the_nvtx_names_as_the_agent_does():
    """The microbatch range, the step mark and the Python hook's mark and range names, spelled
    once in Python (fp8audit._markers), are the C++ grammar's (proto/fp8audit/nvtx_grammar.h), as
    the markers library built from it reports them."""
    code = textwrap.dedent("""
        import ctypes
        from fp8audit import _markers
        lib = _markers.library()
        lib.fp8audit_markers_name.restype = ctypes.c_char_p
        lib.fp8audit_markers_name.argtypes = [ctypes.c_int]
        print([lib.fp8audit_markers_name(i).decode() for i in range(12)])
        print([_markers.RANGE, _markers.STEP, _markers.HOOK_TE_MARK, _markers.HOOK_UPDATE_RANGE,
               _markers.HOOK_RECOMPUTE_MARK, _markers.HOOK_LOST_MARK, _markers.HOOK_SITE_MARK,
               _markers.HOOK_RECIPE_MARK, _markers.HOOK_REFRESH_MARK,
               _markers.HOOK_FROZEN_MARK, _markers.HOOK_SCOPE_MARK, _markers.HOOK_UNCHECKED_MARK])
        print(lib.fp8audit_markers_name(12))
    """)
    r = python(code)
    assert r.returncode == 0, r.stderr
    native, python_names, past = r.stdout.splitlines()
    assert native == python_names, r.stdout
    assert past == "None", r.stdout


def test_threads_that_first_mark_at_once_all_get_the_markers_library():
    """The library loads once; a thread that asks while another is loading it waits for it
    instead of finding none (its microbatch would go unmarked)."""
    code = textwrap.dedent("""
        import ctypes, threading
        from fp8audit import _markers
        loading, release = threading.Event(), threading.Event()
        real = ctypes.CDLL
        class Slow:  # the first load stops inside the library's first call until released
            def __init__(self, path):
                self._lib = real(path)
            def __getattr__(self, name):
                attr = getattr(self._lib, name)
                if name != "fp8audit_markers_abi":
                    return attr
                def abi():
                    loading.set()
                    release.wait(60)
                    return attr()
                return abi
        ctypes.CDLL = Slow
        got = {}
        first = threading.Thread(target=lambda: got.update(first=_markers.library()))
        first.start()
        loading.wait(60)
        second = threading.Thread(target=lambda: got.update(second=_markers.library()))
        second.start()
        second.join(2)  # a second that finds no library returns at once
        returned_early = not second.is_alive()
        release.set()
        first.join()
        second.join()
        print(returned_early, got["first"] is not None, got["second"] is got["first"])
    """)
    r = python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "True"], r.stdout + r.stderr


THREADS = textwrap.dedent("""
    import sys, threading, fp8audit
    threads, each = int(sys.argv[1]), int(sys.argv[2])
    start = threading.Barrier(threads)
    def work():
        start.wait()  # every thread's first microbatch at once (the markers library loads then)
        for _ in range(each):
            with fp8audit.microbatch():
                fp8audit.update("forward")
                fp8audit.update("backward")
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
""")


def test_microbatches_of_many_threads_at_once_are_each_counted_once(tmp_path):
    """32 threads each marking their own microbatches, interleaved (every marker call releases the
    GIL): every thread's microbatch is found, with its own thread's updates in it."""
    needs_agent()
    (tmp_path / "job.py").write_text(THREADS)
    r = audit(tmp_path / "t", [str(tmp_path / "job.py"), "32", "50"])
    assert r.returncode == 0, r.stderr + r.stdout
    totals = report(tmp_path / "t")["ranks"][0]["totals"]
    assert int(totals["microbatches"]) == 32 * 50, totals
    assert int(totals.get("failing_microbatches", 0)) == 0, totals
    assert int(totals["forward_updates"]) == int(totals["backward_updates"]) == 32 * 50, totals


def test_ops_delayed_scaling_update_follows_the_rule():
    needs_ops()
    code = textwrap.dedent("""
        import json, torch, fp8audit.ops as ops
        history = torch.tensor([[2.0, 0.0], [4.0, 1.0], [1.0, 0.5]])
        scale, scale_inv = torch.ones(2), torch.ones(2)
        ops.delayed_scaling_update(history, scale, scale_inv, "e4m3", 0, "max")
        print(json.dumps([scale.tolist(), (scale * scale_inv).tolist(), history.tolist()]))
    """)
    r = python(code)
    assert r.returncode == 0, r.stderr
    scale, product, history = json.loads(r.stdout)
    # amax = the column's max over the history (4 and 1); scale = 448 / amax; scale_inv = 1/scale;
    # the rows roll up one (the old row 0 last) and row 0 starts at 0.
    assert scale == [112.0, 448.0]
    assert product == [1.0, 1.0]
    assert history == [[0.0, 0.0], [1.0, 0.5], [2.0, 0.0]]


def test_ops_refuse_a_library_built_for_another_torch_and_say_how_to_rebuild(tmp_path):
    """The optional fp8audit-ops package records the torch it was built against; another torch
    gets one ImportError naming both and the install line, before anything is loaded."""
    package = tmp_path / "fp8audit_ops"
    package.mkdir()
    (package / "libfp8audit_ops.so").write_bytes(b"not loaded")
    (package / "__init__.py").write_text(
        "from pathlib import Path\nLIBRARY = Path(__file__).parent / 'libfp8audit_ops.so'\n")
    (package / "_build.py").write_text("TORCH_VERSION = '1.0.0'\n")
    code = ("import torch\ntry:\n    import fp8audit.ops\nexcept ImportError as e:\n"
            "    print(type(e).__name__, e)\n")
    r = python(code, FP8AUDIT_OPS_LIB="", PYTHONPATH=f"{PYTHON_DIR}:{tmp_path}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OpsUnavailable fp8audit.ops: "), r.stdout
    assert "was built against torch 1.0.0, this is torch 2." in r.stdout, r.stdout
    assert "pip install --no-build-isolation fp8audit-ops" in r.stdout, r.stdout


def test_ops_without_their_library_say_how_to_get_it():
    code = textwrap.dedent("""
        import fp8audit._paths as paths
        paths.find = lambda *args, **kwargs: None  # no build tree's library either
        try:
            import fp8audit.ops
        except ImportError as e:
            print(type(e).__name__, e)
    """)
    r = python(code, FP8AUDIT_OPS_LIB="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OpsUnavailable fp8audit.ops needs the optional torch ops"), r.stdout
    assert "built against your torch: pip install --no-build-isolation fp8audit-ops" in r.stdout


def test_example_job_makes_one_update_per_pass_in_every_microbatch_under_the_agent(tmp_path):
    """The README's example needs torch and fp8audit alone (no torch ops)."""
    needs_agent()
    r = audit(tmp_path / "t", [str(ROOT / "examples" / "fp8_job.py"), "--microbatches", "3",
                               "--device", "cpu"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("losses: ")
    assert counts(report(tmp_path / "t")) == [(1, 1)] * 3


def test_python_dash_m_fp8audit_is_the_executable():
    needs_agent()
    r = python("import runpy; runpy.run_module('fp8audit', run_name='__main__')", timeout=60)
    assert r.returncode != 0 or r.stdout  # no arguments: the executable's usage
    r = python("import sys; sys.argv = ['fp8audit', 'run', '--help']\n"
               "import runpy; runpy.run_module('fp8audit', run_name='__main__')", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "fp8audit run" in r.stdout and "--expect-forward" in r.stdout


def test_python_dash_m_fp8audit_without_the_executable_is_one_line_and_exit_2():
    r = python("import runpy; runpy.run_module('fp8audit', run_name='__main__')", timeout=60,
               FP8AUDIT_BIN="/nonexistent/fp8audit")
    assert r.returncode == 2
    assert r.stderr.startswith("fp8audit: the fp8audit executable was not found (looked at ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_the_wheel_layout_finds_agent_hook_and_markers_beside_the_executable(tmp_path):
    """<site-packages>/fp8audit/{bin,lib}: as pip installs it, with only the hook's directory on
    the job's PYTHONPATH; the job imports fp8audit through the hook."""
    needs_agent()
    package = tmp_path / "site-packages" / "fp8audit"
    shutil.copytree(PYTHON_DIR / "fp8audit", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (package / "bin").mkdir()
    (package / "lib").mkdir()
    shutil.copy2(BIN, package / "bin" / "fp8audit")
    for name in ("libfp8audit.so", "libfp8audit_impl.so", "libfp8audit_markers.so"):
        shutil.copy2(AGENT.parent / name, package / "lib" / name)
    (tmp_path / "job.py").write_text(MARKED)
    r = audit(tmp_path / "t", [str(tmp_path / "job.py"), "1"], binary=package / "bin" / "fp8audit",
              PYTHONPATH="", FP8AUDIT_BIN="", FP8AUDIT_MARKERS_LIB="")
    assert r.returncode == 0, r.stderr
    assert counts(report(tmp_path / "t")) == [(1, 1)]
    assert "not armed" not in r.stderr


def test_te_check_without_transformer_engine_returns_its_reason_and_patch_refuses():
    r = python(textwrap.dedent("""
        import json, sys
        sys.modules["transformer_engine"] = None  # as on a machine without TE
        import fp8audit.te
        reasons = fp8audit.te.check()
        try:
            fp8audit.te.patch()
            refused = ""
        except fp8audit.te.PatchRefused as e:
            refused = str(e)
        print(json.dumps({"reasons": reasons, "refused": refused}))
    """))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert len(out["reasons"]) == 1 and "Transformer Engine" in out["reasons"][0], out
    assert "nothing to patch" in out["reasons"][0]
    assert out["refused"].startswith("fp8audit.te:"), out


def test_a_checkouts_version_is_the_projects_not_unknown():
    import re

    r = python("import fp8audit; print(fp8audit.__version__)")
    assert r.returncode == 0, r.stderr
    project = re.search(r"project\(fp8audit VERSION ([0-9.]+)",
                        (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert r.stdout.strip() == project


def test_the_package_says_it_is_typed():
    assert (PYTHON_DIR / "fp8audit" / "py.typed").is_file()


def test_the_package_never_looks_above_itself_for_its_binaries(tmp_path):
    """A checkout right under a shared directory (/tmp) has that directory's bin/ and lib/ two
    levels up: another user's libfp8audit_markers.so or fp8audit planted there is never used."""
    root = tmp_path / "checkout"
    shutil.copytree(PYTHON_DIR / "fp8audit", root / "python" / "fp8audit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for kind, name in (("bin", "fp8audit"), ("lib", "libfp8audit_markers.so")):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / name).write_text("planted")
    code = ("from fp8audit import _paths\n"
            "print(_paths.binary(), _paths.find('lib', 'libfp8audit_markers.so'))")
    r = python(code, PYTHONPATH=str(root / "python"), FP8AUDIT_BIN="", FP8AUDIT_MARKERS_LIB="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["None", "None"], r.stdout


def test_microbatch_never_raises_out_of_file_descriptors_or_with_a_bad_library_path():
    code = textwrap.dedent("""
        import resource, fp8audit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        held = []
        try:
            while True:
                held.append(open("/dev/null"))
        except OSError:
            pass
        with fp8audit.microbatch():
            fp8audit.update("forward")
        for f in held:
            f.close()
        print("ok")
    """)
    r = python(code, FP8AUDIT_MARKERS_LIB="", NVTX_INJECTION64_PATH="/nonexistent/tool.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    long = python("import fp8audit\nwith fp8audit.microbatch():\n    pass\nprint('ok')",
                  FP8AUDIT_MARKERS_LIB="/" + "x" * 5000)
    assert long.returncode == 0, long.stderr
    assert long.stdout.strip() == "ok"


def test_a_job_that_preloads_a_sanitizer_runs_under_the_agent_as_alone(tmp_path):
    """ASan's runtime must come first in LD_PRELOAD: the agent goes after the job's own."""
    needs_agent()
    asan = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("libasan.so.*"))
    if not asan:
        pytest.skip("no libasan here")
    job = tmp_path / "job.py"
    job.write_text(MARKED)
    extra = {"LD_PRELOAD": str(asan[0]), "ASAN_OPTIONS": "detect_leaks=0"}
    alone = subprocess.run([sys.executable, str(job), "1"], env=env(**extra), capture_output=True,
                           text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    r = audit(tmp_path / "t", [str(job), "1"], **extra)
    assert r.returncode == 0, r.stderr
    assert counts(report(tmp_path / "t")) == [(1, 1)]


def test_command_line_secrets_never_reach_the_trace(tmp_path):
    """`--token VALUE` and KEY=VALUE arguments whose names look like secrets are redacted before
    the agent writes the trace header, which every report prints (FP8AUDIT_REDACT adds words)."""
    needs_agent()
    job = tmp_path / "job.py"
    job.write_text(MARKED)
    r = audit(tmp_path / "t", [str(job), "1", "--token", "s3cr3t", "HF_TOKEN=hf_abc",
                               "--sentry-dsn", "https://k@x"], FP8AUDIT_REDACT="dsn")
    assert r.returncode == 0, r.stderr
    trace = next((tmp_path / "t").glob("*.fp8trace")).read_bytes()
    for secret in (b"s3cr3t", b"hf_abc", b"https://k@x"):
        assert secret not in trace
    command = report(tmp_path / "t")["ranks"][0]["header"]["command"]
    assert command[-5:] == ["--token", "<redacted>", "HF_TOKEN=<redacted>", "--sentry-dsn",
                            "<redacted>"], command


def test_microbatches_of_many_short_lived_threads_are_each_counted_once(tmp_path):
    """2,000 threads, a few alive at a time (the system reuses their ids), each marking one
    microbatch: none fails (a thread's ended microbatch once took a later thread's updates)."""
    needs_agent()
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import sys, threading, fp8audit
        def work():
            with fp8audit.microbatch():
                fp8audit.update("forward")
                fp8audit.update("backward")
        alive = []
        for _ in range(int(sys.argv[1])):
            t = threading.Thread(target=work)
            t.start()
            alive.append(t)
            if len(alive) >= 6:
                alive.pop(0).join()
        for t in alive:
            t.join()
    """))
    r = audit(tmp_path / "t", [str(tmp_path / "job.py"), "2000"])
    assert r.returncode == 0, r.stderr[-2000:]
    totals = report(tmp_path / "t")["ranks"][0]["totals"]
    assert int(totals["microbatches"]) == 2000, totals
    assert int(totals.get("failing_microbatches", 0)) == 0, totals
