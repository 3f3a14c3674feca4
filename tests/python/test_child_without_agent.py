"""No wrong pass when a process of the job runs without the agent (issue 34 item 2): a worker the
job starts with an environment of its own (subprocess with env={...}: CPython starts it through
vfork and execve) loses LD_PRELOAD, so nothing it does is recorded; the audit names it and is
incomplete, never a pass. The same worker started with the job's environment passes.

The worker is the stand-in TE job of test_hook_absent.py: one logical microbatch of one forward
and one backward update through the stand-in TE core library."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from pkgutil_fp8audit import audit, report
from test_hook_absent import _job

PARENT = """
import os, subprocess, sys
env = {env}
sys.exit(subprocess.run([sys.executable, {job!r}], env=env).returncode)
"""


def _parent(tmp_path: Path, env: str) -> Path:
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(PARENT.format(env=env, job=str(_job(tmp_path)))))
    return parent


def test_a_worker_started_with_an_environment_of_its_own_is_named_and_incomplete(tmp_path):
    parent = _parent(tmp_path, '{"PATH": os.environ.get("PATH", "/usr/bin")}')
    r = audit(tmp_path / "t", [str(parent)])
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert f"started {Path(sys.executable).resolve()}" in out or f"started {sys.executable}" in out
    assert "without the agent" in out and "not a pass" in out, out
    rep = report(tmp_path / "t")
    assert any(rank.get("children_without_agent") for rank in rep["ranks"]), rep


def test_the_same_worker_with_the_jobs_environment_passes(tmp_path):
    parent = _parent(tmp_path, "dict(os.environ)")
    r = audit(tmp_path / "t", [str(parent)])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "without the agent" not in out, out
