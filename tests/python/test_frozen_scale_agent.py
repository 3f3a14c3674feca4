"""Frozen scales through the agent (issue 36 item 2): 2 te.Linear trained under DelayedScaling,
one microbatch per step, with an evaluation under Float8CurrentScaling after the first step
(--eval). The switch back makes each module's DelayedScaling state again, and TE keeps the first
registration: the hook names each module, the audit fails the microbatch it is found in and
counts the modules. Without the evaluation the run passes. The stand-in TE on a CPU torch."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

from pkgutil_fp8audit import MARK_STANDIN_UPDATES, audit_standin_job


JOB = textwrap.dedent("""
    import sys
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
""") + MARK_STANDIN_UPDATES + textwrap.dedent("""
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(2)]
    train = recipe.DelayedScaling()
    for step in range(5):
        with fp8audit.microbatch():
            x = torch.randn(4, 8, requires_grad=True)
            with te.autocast(enabled=True, recipe=train):
                for layer in layers:
                    x = layer(x)
            x.float().pow(2).mean().backward()
        if step == 0 and "--eval" in sys.argv:
            with torch.no_grad(), te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling()):
                y = torch.randn(4, 8)
                for layer in layers:
                    y = layer(y)
""")


def violations(rep: Dict[str, Any]) -> List[Dict[str, Any]]:
    assert len(rep["ranks"]) == 1, rep
    return [v for v in rep["ranks"][0].get("violations", []) if v["kind"] == "FROZEN_SCALE"]


def test_modules_switched_to_another_recipe_and_back_fail_the_run_named(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB, "--eval")
    assert rep["returncode"] == 3, rep["stderr"]
    found = violations(rep)
    named = sorted(m for v in found for m in ("Linear#1", "Linear#2")
                   if f"{m}: its DelayedScaling scales are not among those TE updates" in v["message"])
    assert len(found) == 2 and named == ["Linear#1", "Linear#2"], found
    # switched back in step 1 (the state made again), a whole forward with it there, found at
    # step 2's start
    assert {v["microbatch"] for v in found} == {2}, found
    verdicts = [m["verdict"] for m in rep["ranks"][0]["microbatches"]]
    assert verdicts == ["PASS", "PASS", "FAIL", "PASS", "PASS"], verdicts
    assert int(rep["ranks"][0]["recording"].get("frozen_scales", 0)) == 2


def test_a_run_that_keeps_its_recipe_passes_with_no_frozen_scale(tmp_path: Path) -> None:
    rep = audit_standin_job(tmp_path, JOB)
    assert rep["returncode"] == 0, rep["stderr"]
    assert violations(rep) == []
    assert int(rep["ranks"][0]["recording"].get("frozen_scales", 0)) == 0
