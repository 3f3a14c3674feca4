"""PyTorch Lightning's Transformer Engine precision with torch's checkpoint (issue 33), on the CPU
stand-in of TE: Trainer(precision="transformer-engine") and Fabric swap nn.Linear for te.Linear and
open TE's autocast around the forward only; each block runs through torch.utils.checkpoint. The
blocks are fed the batch itself, whose tensors need no grad: a reentrant checkpoint of them then
records no backward node (torch gives its modules no gradient and warns so). Under fp8audit.te
every microbatch makes 1 forward and 1 backward update, as TE alone does there (the fix once lost
the backward one: the never-recomputed frame held it), and the numerics are TE's own; where the
checkpoint's input needs grad, or the checkpoint is non-reentrant, they equal the same job
without checkpointing, bitwise."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import pytest

lightning = pytest.importorskip("lightning")


@pytest.fixture(scope="module", autouse=True)
def te_distribution(tmp_path_factory):
    """Lightning looks for TE's distribution (transformer_engine>=0.11): the stand-in's."""
    site = tmp_path_factory.mktemp("site")
    info = site / "transformer_engine-2.20.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: transformer_engine\n"
                                   "Version: 2.20.2\n")
    sys.path.append(str(site))
    yield
    sys.path.remove(str(site))


def _run(driver: str, checkpoint: str, mode: str, head: str = "last"):
    import lightning_live
    import torch
    from megatron_live import mode_context
    from te_fix import import_te

    args = Namespace(head=head, layernorm=False, blocks=2, hidden=32, mbs=8, microbatches=2,
                     steps=2, lr=0.05, seed=7)
    _, te, _, manager = import_te(False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    with mode_context(manager, mode) as counter:
        return lightning_live.train(args, driver, checkpoint, counter, manager, te, "cpu")


def _counts(run):
    return [(r["forward"], r["backward"]) for r in run["records"]]


def _same(a, b) -> bool:
    from megatron_live import first_difference

    return first_difference(a["losses"], b["losses"]) is None and \
        first_difference(a["grads"], b["grads"]) is None


@pytest.mark.parametrize("driver", ["trainer", "fabric", "plain"])
def test_fixed_reentrant_checkpoint_fed_the_batch_keeps_the_backward_update_and_te_numerics(
        driver):
    plain = _run(driver, "reentrant", "unpatched")
    fixed = _run(driver, "reentrant", "patched")
    assert not fixed["errors"], fixed["errors"]
    assert _counts(plain) == [(1, 1)] * 4
    assert _counts(fixed) == [(1, 1)] * 4
    assert all(r["stash_left"] == 0 and r["fix_lost"] == 0 for r in fixed["records"])
    assert _same(fixed, plain)


@pytest.mark.parametrize("driver", ["trainer", "fabric"])
def test_fixed_reentrant_checkpoint_whose_input_needs_grad_equals_no_checkpoint(driver):
    fixed = _run(driver, "reentrant", "patched", head="first")
    twin = _run(driver, "none", "patched", head="first")
    assert _counts(fixed) == _counts(twin) == [(1, 1)] * 4
    assert all(not r["fp8_mismatch"] for r in fixed["records"])
    assert _same(fixed, twin)


@pytest.mark.parametrize("driver", ["trainer", "fabric"])
def test_fixed_non_reentrant_checkpoint_whose_input_needs_grad_equals_no_checkpoint(driver):
    plain = _run(driver, "non-reentrant", "unpatched", head="first")
    assert any(r["fp8_mismatch"] for r in plain["records"])  # TE alone recomputes without FP8
    fixed = _run(driver, "non-reentrant", "patched", head="first")
    twin = _run(driver, "none", "patched", head="first")
    assert _counts(fixed) == _counts(twin) == [(1, 1)] * 4
    assert all(not r["fp8_mismatch"] for r in fixed["records"])
    assert _same(fixed, twin)


@pytest.mark.parametrize("driver", ["trainer", "fabric", "plain"])
def test_fixed_non_reentrant_checkpoint_fed_the_batch_is_refused_in_one_line_before_it_runs(
        driver):
    """Real TE keeps a weight's column-wise FP8 copy in the original forward of such a checkpoint
    and not in its recompute: torch raises CheckpointError in the backward, with or without the fix
    (H200, TE 2.20.2: tests/live_te/RESULTS.md). The fix refuses it at the first forward."""
    from fp8audit.te import NotCovered

    fixed = _run(driver, "non-reentrant", "patched")
    assert len(fixed["records"]) == 1 and len(fixed["errors"]) == 1, fixed["errors"]
    error = fixed["errors"][0]["error"]
    assert error.startswith(f"{NotCovered.__name__}: fp8audit.te: torch's non-reentrant "
                            "checkpoint of Transformer Engine modules"), error
    assert "use_reentrant=True" in error and "\n" not in error
    assert _counts(fixed) == [(0, 0)]  # before its first forward update


class _Marks:
    """NVTX as fp8audit.te sends it (fp8audit._nvtx.NVTX): the marks."""

    def __init__(self) -> None:
        self.marks = []

    def mark(self, text):
        self.marks.append(text)

    def range_push(self, text):
        pass

    def range_pop(self):
        pass


def test_the_safety_net_says_at_once_when_the_fix_loses_a_backward_update(monkeypatch, capsys):
    """The fix as it was before issue 33 (the reentrant frame fed the batch reserved the backward
    update and was never recomputed): its safety net prints one line, records the problem and
    sends the agent fp8audit.te.lost for each microbatch."""
    import fp8audit._nvtx
    from fp8audit._markers import HOOK_LOST_MARK
    from fp8audit.te._patch import Controller

    original = Controller.frame_contexts
    monkeypatch.setattr(Controller, "frame_contexts",
                        lambda self, reentrant, inputs_require_grad=True:
                        original(self, reentrant, True))
    marks = _Marks()
    monkeypatch.setattr(fp8audit._nvtx, "NVTX", marks)
    fixed = _run("plain", "reentrant", "patched")
    assert _counts(fixed) == [(1, 0)] * 4
    assert [r["fix_lost"] for r in fixed["records"]] == [1, 2, 3, 4]
    lost = [m for m in marks.marks if m.startswith(HOOK_LOST_MARK)]
    assert lost == [f"{HOOK_LOST_MARK} pass=backward reason=freed-frame"] * 4
    lines = [l for l in capsys.readouterr().err.splitlines() if l.startswith("fp8audit.te:")]
    assert len(lines) == 1 and "the fix lost a backward update" in lines[0], lines
    assert "freed without its recompute" in lines[0]
    assert any("the fix lost a backward update" in v
               for r in fixed["records"] for v in r["fix_violations"])


def _reentrant_then_head(backward: bool, dead_branch: bool = False):
    """One microbatch on the stand-in under the fix: a reentrant te.checkpoint of a te.Linear (its
    frame holds the backward update) then a te.Linear head; `dead_branch`: that checkpoint's output
    is left out of the loss, which comes from a second checkpoint. The backward runs or not; the
    outputs are dropped and collected afterwards."""
    import gc

    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.common import recipe

    torch.manual_seed(0)
    blocks, head = [te.Linear(16, 16) for _ in range(2)], te.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast(enabled=True, recipe=recipe.DelayedScaling()):
        h = te.checkpoint(blocks[0], x, use_reentrant=True)
        if dead_branch:
            h2 = te.checkpoint(blocks[1], x * 2, use_reentrant=True)
            y = head(h2)
        else:
            y = head(h)
    if backward:
        y.float().sum().backward()
    del h, y
    gc.collect()


@pytest.mark.parametrize("run", ["validation-with-grad", "step-skipped"])
def test_the_safety_net_says_nothing_of_a_forward_whose_backward_never_runs(monkeypatch, capsys,
                                                                            run):
    """A forward with grad whose backward never runs (validation without no_grad, a step skipped
    on a NaN loss): TE alone makes no backward update there either, so nothing was lost when its
    checkpoint frame, which held the update, is freed without its recompute."""
    import fp8audit._nvtx
    import fp8audit.te
    from fp8audit._markers import HOOK_LOST_MARK

    marks = _Marks()
    monkeypatch.setattr(fp8audit._nvtx, "NVTX", marks)
    controller = fp8audit.te.patch()
    _reentrant_then_head(backward=True)
    _reentrant_then_head(backward=False)
    if run == "step-skipped":
        _reentrant_then_head(backward=True)
    assert controller.violations == [] and controller.safety.lost == 0
    assert not [m for m in marks.marks if m.startswith(HOOK_LOST_MARK)]
    assert "lost a backward update" not in capsys.readouterr().err
    assert not controller.pending


def test_the_safety_net_reports_a_frame_holding_the_update_freed_after_a_backward_passed_it_by(
        monkeypatch, capsys):
    """The frame that holds the backward update is left out of the loss, and the backward runs
    through the rest of the same forward (another frame is recomputed): the fix made no backward
    update where TE alone makes one; said once the frame is freed."""
    import fp8audit._nvtx
    import fp8audit.te
    from fp8audit._markers import HOOK_LOST_MARK

    marks = _Marks()
    monkeypatch.setattr(fp8audit._nvtx, "NVTX", marks)
    controller = fp8audit.te.patch()
    _reentrant_then_head(backward=True, dead_branch=True)
    assert controller.counts["backward"] == 0 and controller.safety.lost == 1
    assert [m for m in marks.marks if m.startswith(HOOK_LOST_MARK)] == [
        f"{HOOK_LOST_MARK} pass=backward reason=freed-frame"]
    assert "the fix lost a backward update" in capsys.readouterr().err
