"""No wrong pass when the Python hook could not run (issue 34 item 3): a Python process that calls
Transformer Engine's update entry point while the hook, armed by `fp8audit run`, never ran in it
(python -I or -E, a PYTHONPATH the job sets itself) leaves a trace the report calls incomplete,
naming the process and the reason, never a pass. The same job with the hook running passes.

The job imports a stand-in `transformer_engine` package (what the hook watches) and calls the
stand-in TE core library through the test extension (tests/agent/fake_te), one logical
microbatch of one forward and one backward update."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pkgutil_fp8audit import AGENT, BIN, audit, env, needs_agent, report

FAKE_EXT = Path(os.environ.get("FP8AUDIT_FAKE_TE_EXT", AGENT.parent.parent / "tests" / "agent" /
                               "fake_te" / "libagent_fake_te_ext.so"))

JOB = """
import ctypes, os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)       # python -I leaves the script's folder out
sys.path.insert(0, {python!r})  # and PYTHONPATH: fp8audit's markers, imported by hand
import transformer_engine      # the stand-in the hook watches
import fp8audit
ext = ctypes.CDLL({ext!r})
ext.fake_ext_run.argtypes = [ctypes.c_char_p]
with fp8audit.microbatch():
    failures = ext.fake_ext_run(b"one")
sys.exit(failures)
"""


def _job(tmp_path: Path) -> Path:
    needs_agent()
    if not FAKE_EXT.is_file():
        pytest.skip(f"{FAKE_EXT} is not built")
    te = tmp_path / "transformer_engine"
    te.mkdir()
    (te / "__init__.py").write_text('__version__ = "2.20.2"\n')
    job = tmp_path / "job.py"
    python_dir = Path(__file__).resolve().parents[2] / "python"
    job.write_text(textwrap.dedent(JOB.format(python=str(python_dir), ext=str(FAKE_EXT))))
    return job


def test_a_process_the_hook_never_ran_in_is_incomplete_not_a_pass(tmp_path):
    job = _job(tmp_path)
    r = audit(tmp_path / "t", ["-I", str(job)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Python hook did not run in this Python process" in r.stdout + r.stderr
    rep = report(tmp_path / "t")
    assert rep["ranks"][0].get("python_hook_absent") is True, rep
    assert rep.get("verdict") != "PASS"


def test_the_same_job_with_the_hook_running_passes(tmp_path):
    job = _job(tmp_path)
    r = audit(tmp_path / "t", [str(job)])
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "Python hook did not run" not in r.stdout + r.stderr
    assert not report(tmp_path / "t")["ranks"][0].get("python_hook_absent")


def test_fix_te_says_the_unhooked_process_ran_unpatched_not_that_no_process_used_te(tmp_path):
    job = _job(tmp_path)
    r = subprocess.run([str(BIN), "run", "--fix-te", "--out", str(tmp_path / "t"), "--",
                        sys.executable, "-I", str(job)], env=env(), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert ("--fix-te: 1 process used Transformer Engine without fp8audit's Python hook, so "
            "without the fix") in r.stderr, r.stderr
    assert "no process of the command imported Transformer Engine" not in r.stderr
