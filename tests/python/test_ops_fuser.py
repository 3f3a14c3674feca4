"""te.ops fusers under a checkpoint (issue 20 item 4), on the CPU stand-in's te.ops: unpatched,
TE's checkpoint hands them to torch's and no backward update runs (as live on TE 2.20.2);
patched, a fuser with DelayedScaling quantizers inside any checkpoint frame is refused with one
line before it computes, and everything else te.ops does runs as before."""

import json
import os

import pytest
import torch

import te_fix
from test_layouts import SMALL

LAYOUT = "ops-sequential-per-layer"


def _te():
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    return te, recipe.DelayedScaling()


def test_unpatched_te_runs_no_backward_update_for_a_checkpointed_fuser(capsys):
    assert te_fix.main(SMALL + ["--layout", LAYOUT, "--mode", "unpatched"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    counts = {(m["forward"], m["backward"]) for m in lines if m["kind"] == "microbatch"}
    twin = next(m["twin_counts"] for m in lines if m["kind"] == "layout")
    assert counts == {(1, 0)} and twin == [[1, 1]]


def test_patched_a_checkpointed_fuser_is_refused_with_one_line_before_any_update(capsys):
    assert te_fix.main(SMALL + ["--layout", LAYOUT, "--mode", "patched"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["kind"], e["microbatch"]) for e in lines] == [("error", 0)]
    error = lines[0]["error"]
    assert error.startswith("NotCovered: fp8audit.te: a te.ops fuser") and "\n" not in error


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_patched_torchs_own_checkpoint_of_a_fuser_is_refused_too(patched, use_reentrant):
    import fp8audit.te

    te, recipe = _te()
    seq = te.ops.Sequential(te.ops.Linear(16, 16))
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe):
        with pytest.raises(fp8audit.te.NotCovered):
            torch.utils.checkpoint.checkpoint(seq, x, use_reentrant=use_reentrant)
    assert fp8audit.te.status()["backward_updates"] == 0


def test_patched_a_fuser_outside_checkpoints_updates_once_each_way(patched):
    import fp8audit.te

    te, recipe = _te()
    seq = te.ops.Sequential(te.ops.Linear(16, 16), te.ops.Linear(16, 16))
    with te.autocast(enabled=True, recipe=recipe):
        y = seq(torch.randn(8, 16, requires_grad=True))
    y.sum().backward()
    status = fp8audit.te.status()
    assert (status["forward_updates"], status["backward_updates"]) == (1, 1)


def test_patched_fusers_without_quantizers_or_fp8_run_inside_a_checkpoint(patched):
    import fp8audit.te

    te, recipe = _te()
    norm = te.ops.Sequential(te.ops.LayerNorm(16))
    linear = te.ops.Sequential(te.ops.Linear(16, 16))
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe):
        a = te.checkpoint(norm, x, use_reentrant=True)  # no quantizer: no stash needed
    with te.autocast(enabled=False):
        b = te.checkpoint(linear, x, use_reentrant=True)  # no FP8: nothing to stash
    (a.sum() + b.sum()).backward()
    assert x.grad is not None and fp8audit.te.status()["violations"] == []


def test_the_refused_row_agrees_in_the_live_table(capsys, tmp_path):
    import te_fix_compare

    assert te_fix.main(SMALL + ["--layout", LAYOUT]) == 1
    results = tmp_path / "fix.jsonl"
    results.write_text(capsys.readouterr().out)
    binary = ["--fp8audit", os.environ["FP8AUDIT_BIN"]]
    assert te_fix_compare.main([str(results)] + binary) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if LAYOUT in line)
    assert row.startswith(f"| after | {LAYOUT} | 1/0 | not modelled |")
    assert "| refused (NotCovered) |" in row and row.endswith("| yes |")
