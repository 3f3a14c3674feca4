"""The live acceptance script (tests/live_te/te_fix.py) on the CPU stand-in: with fp8audit.te, every
layout of issue 14 updates once forward and once backward per microbatch, leaves no recompute
stash, and its FP8 state, loss, input and weight gradients equal the no-checkpoint twin's bitwise
over 3 microbatches x 2 optimizer steps; unpatched, the duplicates are TE's."""

import json

import pytest

import te_fix
from te_layouts import LAYOUTS

SMALL = ["--standin", "--hidden", "16", "--tokens", "16", "--microbatches", "3", "--steps", "2",
         "--verify"]
CPU_LAYOUTS = [name for name, layout in LAYOUTS.items()
               if not layout.needs and name != "decoder-28x7"]


def run(capsys, *args):
    assert te_fix.main(SMALL + list(args)) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("name", CPU_LAYOUTS)
def test_patched_layout_updates_once_each_way_and_equals_its_twin(name, capsys):
    lines = run(capsys, "--layout", name, "--mode", "patched")
    layout = LAYOUTS[name]
    rows = [line for line in lines if line["kind"] == "microbatch"]
    assert len(rows) == 6
    for row in rows:
        expected = layout.patched(row["microbatch"]) if layout.patched else (1, 1)
        assert (row["forward"], row["backward"]) == tuple(expected), row
        assert row["stash_left"] == 0, row
        if layout.twin_comparable:
            assert row["state_equal"] and row["loss_equal"], row
            assert row["x_grad_equal"] and row["grads_equal"], row


def test_unpatched_duplicates_are_te_2_20s(capsys):
    lines = run(capsys, "--layout", "reentrant-per-layer", "--layout", "nested",
                "--layout", "layernorm-mlp-checkpoint", "--mode", "unpatched")
    counts = {}
    for line in lines:
        if line["kind"] == "microbatch":
            counts.setdefault(line["layout"], set()).add((line["forward"], line["backward"]))
    assert counts == {"reentrant-per-layer": {(4, 3)}, "nested": {(3, 2)},
                      "layernorm-mlp-checkpoint": {(1, 2)}}
    nested = [line for line in lines if line["kind"] == "layout" and line["layout"] == "nested"]
    assert nested[0]["first_state_change"]["microbatch"] == 0
    assert any(line["stash_left"] for line in lines if line.get("layout") == "nested")


def test_backward_inside_the_autocast_is_fixed_too(capsys):
    lines = run(capsys, "--layout", "reentrant-per-layer", "--layout", "non-reentrant-per-layer",
                "--mode", "patched", "--backward", "inside")
    for line in lines:
        if line["kind"] == "microbatch":
            assert (line["forward"], line["backward"]) == (1, 1)
            assert line["state_equal"] and line["grads_equal"]


def test_layouts_that_need_real_te_are_skipped_on_the_standin(capsys):
    lines = run(capsys, "--layout", "transformer-layer-per-layer", "--mode", "patched")
    assert lines == [{"kind": "skipped", "layout": "transformer-layer-per-layer",
                      "why": "needs te.TransformerLayer"}]
