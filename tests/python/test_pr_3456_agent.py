"""TE PR #3456's scheduling through the agent (issue 37 item 2), on the CPU stand-in following the
PR (FP8AUDIT_STANDIN_PR_3456=1): the hook reads the PR's fingerprint from TE's code, the report
models the run with te-3456; a microbatch whose backward runs as two backward() calls updates
twice and fails, its explanation naming te.quantization_backward_scope(); the same calls inside
the scope update once and pass. Without the PR the version picks te-2.20 as before."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

from pkgutil_fp8audit import MARK_STANDIN_UPDATES, audit_standin_job

JOB = textwrap.dedent("""
    import contextlib
    import os
    import sys
    if "--pr" in sys.argv:
        os.environ["FP8AUDIT_STANDIN_PR_3456"] = "1"
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
""") + MARK_STANDIN_UPDATES + textwrap.dedent("""
    torch.manual_seed(0)
    a, b = te.Linear(8, 8), te.Linear(8, 8)
    for step in range(2):
        with fp8audit.microbatch():
            x = torch.randn(4, 8, requires_grad=True)
            with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                ya, yb = a(x), b(x)
            scope = te.quantization_backward_scope() if "--scope" in sys.argv else \\
                contextlib.nullcontext()
            with scope:  # two losses, each with its own backward (a pipeline's per-node calls)
                ya.float().pow(2).mean().backward()
                yb.float().pow(2).mean().backward()
""")


def rows(rep: Dict[str, Any]) -> List[Any]:
    assert len(rep["ranks"]) == 1, rep
    return [(m["forward_updates"], m["backward_updates"], m["verdict"])
            for m in rep["ranks"][0]["microbatches"]]


def test_two_backward_calls_without_the_scope_fail_with_the_scope_named(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--pr")
    recording = rep["ranks"][0]["recording"]
    assert (recording.get("semantics"), recording.get("semantics_from")) == (
        "te-3456", "scheduling"), recording
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(1, 2, "FAIL")] * 2
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "with te.quantization_backward_scope():" in why, why
    assert "with te.quantization_backward_scope():" in rep["next_step"], rep["next_step"]
    assert "--fix-te" not in rep["next_step"]


def test_inside_the_scope_one_backward_update_passes(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--pr", "--scope")
    assert rep["returncode"] == 0, rep["stderr"]
    assert rows(rep) == [(1, 1, "PASS")] * 2
    assert rep["ranks"][0]["recording"].get("semantics") == "te-3456"


def test_without_the_pr_the_version_chooses_the_semantics(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB)
    recording = rep["ranks"][0]["recording"]
    assert recording.get("semantics_from") == "te_version", recording
    assert recording.get("scheduling_semantics", "") == ""
