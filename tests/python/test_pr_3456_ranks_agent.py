"""TE PR #3456's own hazard through the agent (issue 37 item 2): a quantization_backward_scope not
entered on every rank. Two ranks (RANK=0, 1, run one after the other by the job: no timing) on
the CPU stand-in following the PR: both inside the scope pass; rank 1 running its backward
without the scope fails the job with the ranks named and the remedy; rank 1 entering the scope
and never leaving it fails that rank with the place named; a TE without the PR sends no scope
mark and the job is judged as before."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

from pkgutil_fp8audit import MARK_STANDIN_UPDATES, audit_standin_job

JOB = textwrap.dedent("""
    import contextlib
    import gc
    import os
    import subprocess
    import sys
    if "RANK" not in os.environ:  # the launcher: each rank in turn, the agent inherited
        for rank in (0, 1):
            subprocess.run([sys.executable, *sys.argv], check=True,
                           env={**os.environ, "RANK": str(rank), "WORLD_SIZE": "2"})
        sys.exit(0)
    rank = int(os.environ["RANK"])
    if "--pr" in sys.argv:
        os.environ["FP8AUDIT_STANDIN_PR_3456"] = "1"
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
""") + MARK_STANDIN_UPDATES + textwrap.dedent("""
    torch.manual_seed(0)
    layer = te.Linear(8, 8)
    skip = "--skip" in sys.argv and rank == 1
    for step in range(2):
        with fp8audit.microbatch():
            x = torch.randn(4, 8, requires_grad=True)
            with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                y = layer(x)
            if "--open" in sys.argv and rank == 1 and step == 1:
                scope = te.quantization_backward_scope()
                scope.__enter__()  # never left: kept alive past the interpreter's end below
                keep = [scope]
                keep.append(keep)
                gc.freeze()
                y.float().pow(2).mean().backward()
                continue
            with contextlib.nullcontext() if skip or "--pr" not in sys.argv else \\
                    te.quantization_backward_scope():
                y.float().pow(2).mean().backward()
""")


def kinds(violations: List[Dict[str, Any]]) -> List[str]:
    return [v.get("kind", "") for v in violations]


def ranks_of(rep: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    """The ranks' traces by rank (the launcher's own trace, rank -1, holds no microbatch)."""
    return {r.get("rank", 0): r for r in rep["ranks"] if r.get("rank", 0) >= 0}  # 0: omitted


def test_both_ranks_inside_the_scope_pass(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--pr")
    assert rep["returncode"] == 0, rep["stderr"]
    ranks = ranks_of(rep)
    assert sorted(ranks) == [0, 1]
    for r in ranks.values():
        assert [m.get("backward_scope_exits", 0) for m in r["microbatches"]] == [1, 1], r
        assert r["recording"].get("scheduling_semantics") == "te-3456"
    assert rep.get("violations", []) == []


def test_a_rank_without_the_scope_fails_the_job_naming_the_ranks(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--pr", "--skip")
    assert rep["returncode"] == 3, rep["stderr"]
    assert rep["verdict"] == "FAIL"
    scope = [v for v in rep.get("violations", []) if v.get("kind") == "BACKWARD_SCOPE_RANKS"]
    assert len(scope) == 1, rep.get("violations")
    assert scope[0]["message"].startswith(
        "microbatches 0-1: quantization_backward_scope not entered and left on every rank: rank 0 "
        "did, rank 1 did not; enter te.quantization_backward_scope() on every rank"), scope
    assert [m.get("backward_scope_exits", 0) for m in ranks_of(rep)[1]["microbatches"]] == [0, 0]
    assert "quantization_backward_scope() on every rank" in rep["next_step"], rep["next_step"]
    assert "rank 1 did not" in rep["stderr"], rep["stderr"]  # the text report


def test_a_rank_that_never_leaves_the_scope_fails_with_the_place_named(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--pr", "--open")
    assert rep["returncode"] == 3, rep["stderr"]
    ranks = ranks_of(rep)
    assert "BACKWARD_SCOPE_OPEN" not in kinds(ranks[0].get("violations", []))
    opened = [v for v in ranks[1].get("violations", []) if v.get("kind") == "BACKWARD_SCOPE_OPEN"]
    assert len(opened) == 1, ranks[1].get("violations")
    message = opened[0]["message"]
    assert message.startswith("rank 1: quantization_backward_scope entered in microbatch 1 at "), \
        message
    assert "/job.py:" in message and " in <module> was never left" in message, message
    assert "was never left by the end of the trace" in message, message
    assert "BACKWARD_SCOPE_RANKS" in kinds(rep.get("violations", []))  # microbatch 1: 1 against 0
    # Its missing backward update fails too; the one step is the scope's, not the fix's.
    assert rep["next_step"].startswith(
        "next: enter te.quantization_backward_scope() on every rank and leave it"), rep["next_step"]
    assert "backward() calls" not in rep["next_step"] and "--fix-te" not in rep["next_step"]


def test_without_the_pr_no_scope_is_marked_and_the_job_is_judged_as_before(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB)
    assert rep["returncode"] == 0, rep["stderr"]
    for r in ranks_of(rep).values():
        assert all("backward_scope_exits" not in m for m in r["microbatches"]), r
        assert r["recording"].get("scheduling_semantics", "") == ""
    assert rep.get("violations", []) == []
