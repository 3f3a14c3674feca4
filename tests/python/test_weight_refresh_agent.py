"""Weight-cache refreshes in recompute, through the agent (issue 36 item 2): 3 te.Linear, 2 steps
of 2 microbatches with is_first_microbatch=True on each step's first. TE's checkpoint replays it
and re-quantizes every weight with its forward's values: counted per microbatch and called
wasted, the verdict unchanged. torch's checkpoint recomputing under DelayedScaling in an autocast
of the backward's own, after the forward's update moved the scales, re-quantizes under the scale
of the moment: harmful, the microbatch fails; under fp8audit.te's fix the recompute runs in TE's
recompute phase with the forward's scales. The stand-in TE on a CPU torch; no GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

from pkgutil_fp8audit import MARK_STANDIN_UPDATES, STANDIN, audit_standin_job


JOB = textwrap.dedent(f"""
    import sys
    import torch
    from torch.utils.checkpoint import checkpoint
    if "--patch" in sys.argv:
        from pathlib import Path
        from fp8audit.te import releases
        releases.register_source_tree(
            "2.20.2+standin", Path({str(STANDIN / "transformer_engine" / "pytorch")!r}))
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    import fp8audit
    import fp8audit.hook
    if "--patch" in sys.argv:
        import fp8audit.te
        fp8audit.te.patch()
""") + MARK_STANDIN_UPDATES + textwrap.dedent("""
    torch.manual_seed(0)
    layers = [te.Linear(8, 8) for _ in range(3)]
    named = sys.argv[sys.argv.index("--recipe") + 1]
    for step in range(2):
        for i in range(2):
            first = i == 0
            with fp8audit.microbatch():
                x = torch.randn(4, 8, requires_grad=True)
                with te.autocast(enabled=True, recipe=getattr(recipe, named)()):
                    for layer in layers:
                        if "--torch" in sys.argv:
                            x = checkpoint(lambda t, m=layer: m(t, is_first_microbatch=first), x,
                                           use_reentrant=True)
                        else:
                            x = te.checkpoint(layer, x, is_first_microbatch=first)
                if "--torch" in sys.argv:  # the backward in an autocast of its own
                    with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
                        x.float().pow(2).mean().backward()
                else:
                    x.float().pow(2).mean().backward()
""")


def run(tmp_path: Path, *args: str) -> Dict[str, Any]:
    return audit_standin_job(tmp_path, JOB, *args)


def refreshes(rep: Dict[str, Any]) -> List[Any]:
    assert len(rep["ranks"]) == 1, rep
    return [(m.get("weight_refreshes", 0), m.get("weight_refreshes_harmful", 0))
            for m in rep["ranks"][0]["microbatches"]]


def kinds(rep: Dict[str, Any]) -> set:
    return {v["kind"] for v in rep["ranks"][0].get("violations", [])}


def test_te_checkpoint_replaying_first_microbatch_is_wasted_work_and_passes(
        tmp_path: Path) -> None:
    rep = run(tmp_path, "--recipe", "Float8CurrentScaling")
    assert rep["returncode"] == 0, rep["stderr"]
    assert refreshes(rep) == [(3, 0), (0, 0), (3, 0), (0, 0)]
    assert [m["verdict"] for m in rep["ranks"][0]["microbatches"]] == ["PASS"] * 4
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "Linear#1" in why and "wasted" in why, why
    recording = rep["ranks"][0]["recording"]
    assert int(recording.get("weight_refreshes", 0)) == 6, recording


def test_delayed_scaling_under_te_checkpoint_refreshes_with_the_forwards_scales(
        tmp_path: Path) -> None:
    rep = run(tmp_path, "--recipe", "DelayedScaling", "--patch")
    assert refreshes(rep) == [(3, 0), (0, 0), (3, 0), (0, 0)]
    assert "RECOMPUTE_WEIGHT_REFRESH" not in kinds(rep), rep["ranks"][0].get("violations")
    assert rep["returncode"] == 0, rep["stderr"]


def test_a_refresh_under_scales_moved_since_the_forward_fails_the_microbatch(
        tmp_path: Path) -> None:
    rep = run(tmp_path, "--recipe", "DelayedScaling", "--torch")
    assert rep["returncode"] == 3, rep["stderr"]
    assert refreshes(rep) == [(3, 3), (0, 0), (3, 3), (0, 0)]
    assert "RECOMPUTE_WEIGHT_REFRESH" in kinds(rep), rep["ranks"][0].get("violations")
    first = rep["ranks"][0]["microbatches"][0]
    assert first["verdict"] == "FAIL"
    violation = next(v for v in rep["ranks"][0]["violations"]
                     if v["kind"] == "RECOMPUTE_WEIGHT_REFRESH")
    assert "Linear#3" in violation["message"], violation


def test_under_the_fix_torch_checkpoint_refreshes_with_the_forwards_scales(
        tmp_path: Path) -> None:
    rep = run(tmp_path, "--recipe", "DelayedScaling", "--torch", "--patch")
    assert refreshes(rep) == [(3, 0), (0, 0), (3, 0), (0, 0)]
    assert "RECOMPUTE_WEIGHT_REFRESH" not in kinds(rep), rep["ranks"][0].get("violations")
