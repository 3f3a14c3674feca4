"""The live 1F1B script (tests/live_te/interleaved_live.py) on the CPU stand-in of TE: patched,
each logical microbatch of the interleaved schedule updates once forward and once backward by
TE's own counter, leaves no recompute stash, and its FP8 state, loss, input and weight gradients
equal the no-checkpoint twin's bitwise; unpatched, TE's duplicates per microbatch are those of the
same schedule without interleaving."""

import json

import pytest

import interleaved_live

SMALL = ["--standin", "--hidden", "16", "--tokens", "16", "--microbatches", "5", "--steps", "2"]


def run(capsys, *args):
    assert interleaved_live.main(SMALL + list(args)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_schedule_runs_later_forwards_before_earlier_backwards():
    assert interleaved_live.schedule(5, 3) == [
        (0, True), (1, True), (2, True), (0, False), (3, True), (1, False), (4, True),
        (2, False), (3, False), (4, False)]


@pytest.mark.parametrize("checkpoint", [[], ["--non-reentrant"]])
def test_patched_interleaved_microbatches_update_once_each_way_and_equal_the_twin(
        capsys, checkpoint):
    lines = run(capsys, "--mode", "patched", "--warmup", "3", *checkpoint)
    rows = [line for line in lines if line["kind"] == "microbatch"]
    assert sorted(row["id"] for row in rows) == list(range(10))
    for row in rows:
        assert (row["forward"], row["backward"]) == (1, 1), row
        assert row["twin"] == [1, 1], row
        assert row["state_equal"] and row["loss_equal"] and row["x_grad_equal"], row
    [summary] = [line for line in lines if line["kind"] == "run"]
    assert summary["patched"] and summary["stash_left"] == 0, summary
    assert summary["grads_equal"] and summary["state_equal"], summary


def test_unpatched_counts_per_microbatch_are_those_without_interleaving(capsys):
    def counts(warmup):
        return [(row["forward"], row["backward"]) for row in
                run(capsys, "--mode", "unpatched", "--warmup", warmup)
                if row["kind"] == "microbatch"]

    interleaved = counts("3")
    assert interleaved == counts("1")
    assert all(c != (1, 1) for c in interleaved), interleaved  # TE's duplicates, attributed
