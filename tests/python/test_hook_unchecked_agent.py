"""A check of the Python hook that gives up, through the agent: the hook says so in one stderr line
and in one mark `fp8audit.te.unchecked check=<c> reason=<r>`, and the report calls the process's
trace incomplete (exit 2), never a pass, naming the check, the reason and the process. Here
te-recompute's check fails at the first recompute it would mark (the job breaks its checkpoint
lookup), so the recomputes outside FP8 that fail the job with the check in place go unseen. (On
the stand-in such a job is incomplete for its missing backward updates too: the assertions that
tell the two apart are the rank's hook_unchecked and the problem line naming the check.) The
stand-in TE on a CPU torch; no GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict

from pkgutil_fp8audit import MARK_STANDIN_UPDATES, audit_standin_job

JOB = textwrap.dedent("""
    import sys
    import torch
    from torch.utils.checkpoint import checkpoint
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    import fp8audit
    import fp8audit.hook
""") + MARK_STANDIN_UPDATES + textwrap.dedent("""
    if "--break" in sys.argv:  # the te-recompute check raises at its first mismatch
        from fp8audit.hook import recompute

        def broken(*args, **kwargs):
            raise RuntimeError("broken by the job")

        recompute.checkpoint_on_stack = broken
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(3)]


    def train(steps):
        for step in range(steps):
            with fp8audit.microbatch():
                x = torch.randn(4, 8, requires_grad=True)
                with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                    for layer in layers:
                        x = checkpoint(layer, x, use_reentrant=True)
                x.float().pow(2).mean().backward()  # the recomputes run outside FP8


    train(2)
    if "--fork" in sys.argv:  # a forked worker: the parent's check given up; --idle records nothing
        import multiprocessing
        import os

        work = os.getpid if "--idle" in sys.argv else fp8audit.step  # a step mark: one event
        child = multiprocessing.get_context("fork").Process(target=work)
        child.start()
        child.join()
        sys.exit(child.exitcode)
""")


def ours(rep: Dict[str, Any]) -> list:
    return [line for line in rep["stderr"].splitlines() if "python hook" in line]


def test_with_the_check_in_place_the_recomputes_outside_fp8_fail(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB)
    assert rep["returncode"] == 3, rep["stderr"]
    assert rep["outcome"] == "OUTCOME_VIOLATIONS", rep
    assert not rep["ranks"][0].get("hook_unchecked"), rep
    assert ours(rep) == []


def test_a_recompute_check_that_fails_makes_the_trace_incomplete_not_a_pass(
        tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--break")
    assert rep["returncode"] == 2, rep["stderr"]
    assert rep["outcome"] == "OUTCOME_INCOMPLETE", rep
    assert rep.get("verdict") != "PASS" or rep["outcome"] != "OUTCOME_PASS"
    rank = rep["ranks"][0]
    assert rank["outcome"] == "OUTCOME_INCOMPLETE", rank
    assert rank["hook_unchecked"] == [{"check": "recompute", "reason": "RuntimeError"}], rank
    pid = rank["header"]["pid"]
    lines = [p for p in rep.get("problems", []) if "(recompute) could not run" in p]
    assert len(lines) == 1, rep.get("problems")
    assert f"in process {pid} (RuntimeError" in lines[0], lines[0]
    # Still one line on stderr, however many recomputes followed (the check stopped at the first).
    assert ours(rep) == ["fp8audit: python hook 'te-recompute' failed (RuntimeError: broken by "
                         "the job); recomputes are not checked"], rep["stderr"]


def test_a_forked_worker_of_a_process_whose_check_gave_up_is_incomplete_too(
        tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--break", "--fork")
    assert rep["returncode"] == 2, rep["stderr"]
    ranks = rep["ranks"]
    assert len(ranks) == 2, [r["header"] for r in ranks]
    parent = [r for r in ranks if not r["header"].get("parent_pid")]
    child = [r for r in ranks if r["header"].get("parent_pid")]
    assert len(parent) == 1 and len(child) == 1, [r["header"] for r in ranks]
    assert child[0]["header"]["parent_pid"] == parent[0]["header"]["pid"]
    for rank in ranks:  # the child's check never gives up again: it was never back in place
        assert rank["outcome"] == "OUTCOME_INCOMPLETE", rank
        assert rank["hook_unchecked"] == [{"check": "recompute", "reason": "RuntimeError"}], rank
    lines = [p for p in rep.get("problems", []) if "(recompute) could not run" in p]
    assert len(lines) == 2, rep.get("problems")
    assert ours(rep) == ["fp8audit: python hook 'te-recompute' failed (RuntimeError: broken by "
                         "the job); recomputes are not checked"], rep["stderr"]


def test_an_idle_forked_worker_leaves_no_trace(tmp_path: Path) -> None:
    # A data loader's worker that records nothing: the resent mark alone starts no trace.
    rep = audit_standin_job(tmp_path, JOB, "--break", "--fork", "--idle")
    assert rep["returncode"] == 2, rep["stderr"]
    assert len(rep["ranks"]) == 1, [r["header"] for r in rep["ranks"]]
    lines = [p for p in rep.get("problems", []) if "(recompute) could not run" in p]
    assert len(lines) == 1, rep.get("problems")
