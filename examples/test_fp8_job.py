"""The example job as tests. `pytest --fp8audit examples/` runs them under the agent, which fails a
test whose microbatches do not make 1 forward and 1 backward FP8 state update."""

import math

import pytest

import fp8_job


def test_training_makes_one_update_per_pass_in_each_microbatch_and_stays_finite():
    losses = fp8_job.train(microbatches=3)
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)


@pytest.mark.fp8audit(forward=1, backward=1)  # what --fp8audit expects anyway, said explicitly
def test_one_microbatch_on_the_cpu():
    assert math.isfinite(fp8_job.train(microbatches=1, device="cpu")[0])
