"""Recipes without global state updates, through the agent (issue 36 item 1): a job whose TE modules
run under Float8CurrentScaling, recomputed by torch.utils.checkpoint after the forward's FP8 autocast
has closed (the HF / Lightning pattern), is judged on its recomputes instead of "nothing audited":
FAIL unpatched (each recompute runs without FP8), PASS under fp8audit.te's fix; without any
recompute there is nothing to judge, said so. The stand-in TE on a CPU torch; no GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

from pkgutil_fp8audit import STANDIN, audit_standin_job


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
    if "--patch" in sys.argv:
        import fp8audit.te
        fp8audit.te.patch()
    torch.manual_seed(0)
    if "--ops" in sys.argv:  # te.ops operations called on their own, each its own fuser
        layers = [te.ops.Linear(8, 8) for _ in range(3)]
    elif "--ops-sequential" in sys.argv:
        layers = [te.ops.Sequential(te.ops.Linear(8, 8)) for _ in range(3)]
    else:
        layers = [te.Linear(8, 8) for _ in range(3)]
    named = sys.argv[sys.argv.index("--recipe") + 1] if "--recipe" in sys.argv else ""
    for step in range(2):
        with fp8audit.microbatch():
            x = torch.randn(4, 8, requires_grad=True)
            forward_recipe = getattr(recipe, named)() if named else recipe.Float8CurrentScaling()
            with te.autocast(enabled=True, recipe=forward_recipe):
                for layer in layers:
                    if "--no-checkpoint" in sys.argv:
                        x = layer(x)
                    else:
                        x = checkpoint(layer, x, use_reentrant=True)
            if "--backward-e4m3" in sys.argv:  # the backward in an autocast of its own (TE #1568)
                with te.autocast(enabled=True, recipe=recipe.Float8CurrentScaling(
                        fp8_format=recipe.Format.E4M3)):
                    x.float().pow(2).mean().backward()
            else:
                x.float().pow(2).mean().backward()
""")


def run(tmp_path: Path, *args: str) -> Dict[str, Any]:
    return audit_standin_job(tmp_path, JOB, *args)


def rows(rep: Dict[str, Any]) -> List[Any]:
    assert len(rep["ranks"]) == 1, rep
    return [(m.get("recomputes", 0), m.get("recompute_precision_changes", 0), m.get("verdict"))
            for m in rep["ranks"][0]["microbatches"]]


def test_current_scaling_recomputed_outside_fp8_fails_on_its_recomputes(tmp_path: Path) -> None:
    rep = run(tmp_path)
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(3, 3, "FAIL"), (3, 3, "FAIL")]
    recording = rep["ranks"][0]["recording"]
    assert recording["recipes"] == ["Float8CurrentScaling"]
    assert recording["updates_not_expected"] is True
    notes = "\n".join(recording["notes"])
    assert "no module ran under DelayedScaling (recipes: Float8CurrentScaling)" in notes, notes
    assert "6 module recomputes checked" in notes, notes
    violations = rep["ranks"][0]["violations"]
    assert {v["kind"] for v in violations} == {"RECOMPUTE_PRECISION"}, violations


@pytest.mark.parametrize("layers", ["--ops-sequential", "--ops"])
def test_te_ops_recomputed_outside_fp8_fail_whether_in_a_sequential_or_called_on_their_own(
        tmp_path: Path, layers: str) -> None:
    # An operation called on its own runs its own fuser, through no TE module's call.
    rep = run(tmp_path, layers)
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(3, 3, "FAIL"), (3, 3, "FAIL")]
    named = "ops.Sequential#1" if layers == "--ops-sequential" else "ops.Linear#1"
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert named in why, why


def test_recomputes_in_fp8_under_another_recipe_than_the_forward_fail(tmp_path: Path) -> None:
    rep = run(tmp_path, "--backward-e4m3")
    assert rep["returncode"] == 3, rep["stderr"]
    assert rows(rep) == [(3, 3, "FAIL"), (3, 3, "FAIL")]
    violations = rep["ranks"][0]["violations"]
    assert {v["kind"] for v in violations} == {"RECOMPUTE_PRECISION"}, violations
    assert "(3 in FP8 under another recipe)" in violations[0]["message"], violations
    why = "\n".join(rep["ranks"][0]["microbatches"][0]["explanations"])
    assert "Linear#3 FP8 on under another recipe in torch.utils.checkpoint" in why, why


def test_under_the_fix_recomputes_run_under_the_forwards_recipe(tmp_path: Path) -> None:
    rep = run(tmp_path, "--patch", "--backward-e4m3")
    assert rep["returncode"] == 0, rep["stderr"]
    assert rows(rep) == [(3, 0, "PASS"), (3, 0, "PASS")]


def test_current_scaling_under_the_fix_passes_on_its_recomputes(tmp_path: Path) -> None:
    rep = run(tmp_path, "--patch")
    assert rep["returncode"] == 0, rep["stderr"]
    assert rows(rep) == [(3, 0, "PASS"), (3, 0, "PASS")]
    assert rep["verdict"] == "PASS"


def test_current_scaling_without_recomputes_has_nothing_to_judge(tmp_path: Path) -> None:
    rep = run(tmp_path, "--no-checkpoint")
    assert rep["returncode"] == 2, rep["stderr"]
    assert rep["outcome"] == "OUTCOME_NOTHING_AUDITED"
    assert "verdict" not in rep
    assert "ran under Float8CurrentScaling, which has no global FP8 state updates" in \
        rep["stderr"], rep["stderr"]


def test_mxfp8_and_nvfp4_are_judged_on_their_recomputes_as_current_scaling_is(
        tmp_path: Path) -> None:
    # Both need SM100 on TE: here on the stand-in only (README: "not verified (needs SM100)").
    for name in ("MXFP8BlockScaling", "NVFP4BlockScaling"):
        for where in (name, f"{name}-fixed"):
            (tmp_path / where).mkdir()
        rep = run(tmp_path / name, "--recipe", name)
        assert rep["returncode"] == 3, rep["stderr"]
        assert rows(rep) == [(3, 3, "FAIL"), (3, 3, "FAIL")], name
        recording = rep["ranks"][0]["recording"]
        assert recording["recipes"] == [name]
        notes = "\n".join(recording["notes"])
        assert f"no module ran under DelayedScaling (recipes: {name})" in notes, notes
        fixed = run(tmp_path / f"{name}-fixed", "--recipe", name, "--patch")
        assert fixed["returncode"] == 0, fixed["stderr"]
        assert rows(fixed) == [(3, 0, "PASS"), (3, 0, "PASS")], name
