"""Every state/scenarios/*.textproto run on the CPU stand-in of TE 2.20.2 with real torch autograd
and checkpointing: unpatched, TE's update counts per microbatch equal the model's te-2.20
prediction; patched with fp8audit.te (verify mode), they equal the fixed model's, microbatch by
microbatch."""

from pathlib import Path

import pytest

from fp8audit.te import _model
from te_driver import Counter, ScenarioRun

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "state" / "scenarios").glob("*.textproto"))


def run_standin(path: Path):
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe
    from transformer_engine.pytorch.quantization import FP8GlobalStateManager

    run = ScenarioRun(te, recipe, _model.scenario_json(str(path)))
    counter = Counter(FP8GlobalStateManager)
    try:
        return run.counts(counter)
    finally:
        counter.remove()


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_unpatched_standin_counts_equal_the_te_2_20_model(path):
    assert run_standin(path) == _model.run_scenario(str(path), "te-2.20")


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_patched_standin_counts_equal_the_fixed_model(path, patched):
    counts = run_standin(path)
    assert counts == _model.run_scenario(str(path), "fixed")
    assert patched.violations == [] or "failure" in path.stem
    assert patched.model.open_frames == 0


def test_every_scenario_is_driven():
    assert len(SCENARIOS) >= 20
