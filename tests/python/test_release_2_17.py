"""fp8audit.te on TE 2.17.1, before PR #3284 (the recompute globals renamed, the region tracked
apart from FP8: TE 2.19) as well as PR #3394, on the CPU stand-in switched to that release's
behaviour: unpatched it fails where 2.17.1 fails live, and the model's te-2.17 says so; patched
with 2.17.1's release profile every layout updates once each way and equals its twin."""

import json
import os

import pytest

import te_fix
from conftest import as_release, leave_release
from fp8audit.te import releases
from te_layouts import cpu_layouts
from test_layouts import SMALL, assert_patched_rows, run

CPU_LAYOUTS = cpu_layouts()
VERSION = "2.17.1+standin"


@pytest.fixture
def te_2_17(monkeypatch):
    """The stand-in behaving as TE 2.17.1, registered with 2.17.1's backports and globals."""
    yield as_release(monkeypatch, "2.17.1", ("3394", "3284"))
    leave_release(VERSION)


def _autocast_inside_checkpoint():
    import torch
    import transformer_engine.pytorch as te

    layer = te.Linear(16, 16)

    def body(x):
        with te.autocast():
            return layer(x)

    x = torch.randn(8, 16, requires_grad=True)
    return te.checkpoint(body, x, use_reentrant=True)


def test_unpatched_an_autocast_opened_inside_the_checkpoint_leaves_its_recompute_no_stash(te_2_17):
    y = _autocast_inside_checkpoint()
    with pytest.raises(KeyError, match="global_fp8_buffer_pos_fwd_recompute"):
        y.sum().backward()


def test_patched_the_recompute_globals_are_set_by_the_releases_names(te_2_17):
    import torch
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch import distributed

    import fp8audit.te

    seen = []
    layer = te.Linear(16, 16)

    def body(x):
        seen.append((distributed._FP8_ACTIVATION_RECOMPUTE_ENABLED,
                     distributed._FP8_ACTIVATION_RECOMPUTE_PHASE))
        with te.autocast():
            return layer(x)

    fp8audit.te.patch()
    x = torch.randn(8, 16, requires_grad=True)
    te.checkpoint(body, x, use_reentrant=True).sum().backward()
    assert seen == [(True, False), (True, True)]  # the original forward, then its recompute
    assert not distributed._FP8_ACTIVATION_RECOMPUTE_ENABLED
    assert not distributed._IN_ACTIVATION_RECOMPUTE_REGION  # 2.19's names are left alone


@pytest.mark.parametrize("name", CPU_LAYOUTS)
def test_patched_every_layout_updates_once_and_equals_its_twin(name, te_2_17, capsys):
    assert_patched_rows(run(capsys, "--layout", name, "--mode", "patched"), name)


def inner_autocast_table(capsys, tmp_path, semantics: str) -> str:
    """te_fix.py over three layouts on the stand-in as a release before PR #3284, which raises
    (only) in the unpatched inner autocast; the table of those rows against `semantics`, which
    must predict that raise where it comes."""
    import te_fix_compare

    layouts = ["none", "inner-autocast-reentrant", "reentrant-per-layer"]
    assert te_fix.main(SMALL + sum((["--layout", n] for n in layouts), [])) == 1
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    errors = [(e["layout"], e["mode"]) for e in lines if e["kind"] == "error"]
    assert errors == [("inner-autocast-reentrant", "unpatched")]
    results = tmp_path / "fix.jsonl"
    results.write_text(out)
    binary = ["--fp8audit", os.environ["FP8AUDIT_BIN"]]
    assert te_fix_compare.main([str(results), "--semantics", semantics] + binary) == 0
    table = capsys.readouterr().out
    assert ("| after | inner-autocast-reentrant | TE raises KeyError | raises in microbatch 0 |"
            in table)
    return str(results)


def test_the_model_of_te_2_17_predicts_where_te_raises(te_2_17, capsys, tmp_path):
    import te_fix_compare

    results = inner_autocast_table(capsys, tmp_path, "te-2.17")
    # te-2.19's model predicts a recompute there: it disagrees with this release.
    binary = ["--fp8audit", os.environ["FP8AUDIT_BIN"]]
    assert te_fix_compare.main([results, "--semantics", "te-2.19"] + binary) == 1
    assert "| TE raises KeyError | no raise |" in capsys.readouterr().out


def test_a_release_profile_names_known_recompute_globals_only():
    with pytest.raises(ValueError, match="unknown recompute globals"):
        releases.Release("9.9.9", {}, (), ("_REGION", "_PHASE"))
