"""A recompute called with other quantization kwargs than its forward, through the agent (issue 36
item 1): 2 te.Linear and a te.LayerNormMLP under Float8CurrentScaling, each in TE's own checkpoint
(so each recompute runs in its forward's FP8 state and recipe), the Linears called with fp8_output
or fp8_grad from a flag the job flips after the forward. The audit fails each microbatch on the
Linears' recomputes, named with the module and the kwarg, and tells the remedy (the job's own
arguments: not the fix); the same kwargs in both pass, and LayerNormMLP, whose forward takes
neither, is never named. The stand-in TE on a CPU torch; no GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

from pkgutil_fp8audit import audit_standin_job

JOB = textwrap.dedent("""
    import sys
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    import fp8audit

    which = sys.argv[sys.argv.index("--kw") + 1]
    names = ("fp8_output", "fp8_grad") if which == "both" else (which,)
    flag = {"value": False}

    def call(layer, x):
        if isinstance(layer, te.LayerNormMLP):
            return layer(x)
        return layer(x, **{name: flag["value"] for name in names})

    torch.manual_seed(0)
    layers = [te.Linear(8, 8), te.LayerNormMLP(8, 16), te.Linear(8, 8)]
    for step in range(2):
        with fp8audit.microbatch():
            flag["value"] = False
            x = torch.randn(4, 8, requires_grad=True)
            with te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling()):
                for layer in layers:
                    x = te.checkpoint(call, layer, x, use_reentrant=True)
            flag["value"] = "--flip" in sys.argv  # e.g. a flag for the next step set too early
            x.float().pow(2).mean().backward()
""")


def rows(rep: Dict[str, Any]) -> List[Any]:
    assert len(rep["ranks"]) == 1, rep
    return [(m.get("recomputes", 0), m.get("recompute_precision_changes", 0), m.get("verdict"))
            for m in rep["ranks"][0]["microbatches"]]


def test_a_recompute_with_another_fp8_output_fails_named_with_the_module(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--kw", "fp8_output", "--flip")
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(3, 2, "FAIL"), (3, 2, "FAIL")]
    violations = rep["ranks"][0]["violations"]
    assert {v["kind"] for v in violations} == {"RECOMPUTE_PRECISION"}, violations
    assert "(2 in FP8 called with another fp8_output or fp8_grad)" in violations[0]["message"]
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "Linear#1 FP8 on with another fp8_output in te.distributed.checkpoint" in why, why
    assert "Linear#2 FP8 on with another fp8_output in te.distributed.checkpoint" in why, why
    assert "LayerNormMLP" not in why, why
    assert "same fp8_output and fp8_grad in its recompute as in its forward" in rep["stderr"]
    assert "--fix-te" not in rep["stderr"], rep["stderr"]  # the fix changes no job's arguments


def test_a_recompute_with_another_fp8_grad_fails_named_so(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--kw", "fp8_grad", "--flip")
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(3, 2, "FAIL"), (3, 2, "FAIL")]
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "Linear#2 FP8 on with another fp8_grad in te.distributed.checkpoint" in why, why


def test_both_kwargs_differing_reach_the_report_together(tmp_path: Path) -> None:
    # The agent keeps the mark's context=fp8_output+fp8_grad as the hook wrote it (the mark then
    # too long for the checkpoint's name: the line of the job's code still says where).
    rep = audit_standin_job(tmp_path, JOB, "--kw", "both", "--flip")
    assert rep["returncode"] == 3, rep["stderr"]
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "Linear#1 FP8 on with another fp8_output and fp8_grad in unknown checkpoint, " \
        "called at " in why, why


def test_the_same_kwargs_in_forward_and_recompute_pass(tmp_path: Path) -> None:
    for which in ("fp8_output", "fp8_grad", "both"):
        (tmp_path / which).mkdir()
        rep = audit_standin_job(tmp_path / which, JOB, "--kw", which)
        assert rep["returncode"] == 0, rep["stderr"]
        assert rows(rep) == [(3, 0, "PASS"), (3, 0, "PASS")], which
        assert rep["verdict"] == "PASS"
