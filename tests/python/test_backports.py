"""fp8audit.te on a TE release before PR #3394 (TE 2.19.0: stash pairing for eval modules and
no-grad checkpoints), on the CPU stand-in switched to that release's behaviour: unpatched it
fails where 2.19.0 fails live, patched with 2.19.0's backports every layout updates once each way
and equals its no-checkpoint twin bitwise, as on 2.20.2; and the release registry itself."""

import json

import pytest

import te_fix
from conftest import STANDIN, as_release, leave_release
from fp8audit.te import _targets, releases
from te_layouts import cpu_layouts
from test_layouts import SMALL, assert_patched_rows, run

CPU_LAYOUTS = cpu_layouts()
VERSION = "2.19.0+standin"


@pytest.fixture
def te_2_19(monkeypatch):
    """The stand-in behaving as TE 2.19.0, registered with 2.19.0's backports."""
    yield as_release(monkeypatch, "2.19.0", ("3394",))
    leave_release(VERSION)


def test_unpatched_eval_modules_find_no_stash_in_their_recompute_as_te_2_19_does(te_2_19):
    import torch
    import transformer_engine.pytorch as te

    layer = te.Linear(16, 16).eval()
    x = torch.randn(8, 16, requires_grad=True)
    with te.autocast():
        y = te.checkpoint(layer, x, use_reentrant=True)
    with pytest.raises(KeyError, match="global_fp8_buffer_pos_fwd_recompute"):
        y.sum().backward()


@pytest.mark.parametrize("name", CPU_LAYOUTS)
def test_patched_with_the_backports_every_layout_updates_once_and_equals_its_twin(
        name, te_2_19, capsys):
    assert_patched_rows(run(capsys, "--layout", name, "--mode", "patched"), name)


def test_without_the_backports_the_fix_cannot_recompute_an_eval_module(monkeypatch):
    import torch
    import transformer_engine
    import transformer_engine.pytorch as te
    from transformer_engine.pytorch import _release

    import fp8audit.te

    monkeypatch.setattr(_release, "BEFORE_PR_3394", True)
    monkeypatch.setattr(transformer_engine, "__version__", "2.19.0+bare")
    releases.register_source_tree("2.19.0+bare", STANDIN / "transformer_engine" / "pytorch")
    try:
        fp8audit.te.patch()
        layer = te.Linear(16, 16).eval()
        x = torch.randn(8, 16, requires_grad=True)
        with te.autocast():
            y = te.checkpoint(layer, x, use_reentrant=True)
        with pytest.raises(KeyError, match="updated_amax_history_fwd"):  # TE 2.19.0 live: KeyError
            y.sum().backward()
    finally:
        releases.unregister("2.19.0+bare")


def test_the_backports_are_removed_with_the_patch(te_2_19):
    from transformer_engine.pytorch import distributed
    from transformer_engine.pytorch.module.base import TransformerEngineBaseModule

    import fp8audit.te

    before = (TransformerEngineBaseModule.__dict__["prepare_forward"],
              "apply" in distributed._CheckpointFunction.__dict__)
    fp8audit.te.patch()
    assert getattr(TransformerEngineBaseModule.prepare_forward, "__fp8audit__", False)
    assert getattr(distributed._CheckpointFunction.apply, "__fp8audit__", False)
    assert fp8audit.te.unpatch()
    assert (TransformerEngineBaseModule.__dict__["prepare_forward"],
            "apply" in distributed._CheckpointFunction.__dict__) == before


def test_the_reports_next_step_names_the_verified_releases():
    """reports/next_step.cc tells a failing job whether the fix patches its TE: its list is this
    package's releases/ (read from the source, where the list is declared)."""
    import re

    source = (STANDIN.parents[2] / "reports" / "next_step.cc").read_text()
    declared = re.search(r"kFixVerifiedOn\[\] = \{([^}]*)\}", source)
    assert declared, "reports/next_step.cc no longer declares kFixVerifiedOn"
    shipped = tuple(v for v in releases.verified() if not v.endswith("+standin"))
    assert tuple(re.findall(r'"([^"]+)"', declared.group(1))) == shipped


def test_every_verified_release_fingerprints_every_target_and_names_known_backports():
    assert releases.verified()[:6] == ("2.14.1", "2.16.0", "2.17.1", "2.18.0", "2.19.0", "2.20.2")
    for version in releases.verified():
        release = releases.get(version)
        assert set(release.fingerprints) == set(_targets.targets(release.state_layout)), version
        assert set(release.backports) <= set(releases.BACKPORTS), version
    assert releases.get("2.19.0").backports == (releases.EVAL_MODULE_STASH,
                                                releases.INELIGIBLE_CHECKPOINT)
    assert releases.get("2.20.2").backports == ()
    assert releases.get("2.17.1").backports == releases.get("2.19.0").backports
    assert releases.get("2.17.1").recompute_globals == releases.RECOMPUTE_GLOBALS_BEFORE_PR_3284
    assert releases.get("2.19.0").recompute_globals == releases.RECOMPUTE_GLOBALS
    assert releases.get("2.14.1").backports == releases.get("2.17.1").backports
    assert releases.get("2.14.1").recompute_globals == releases.RECOMPUTE_GLOBALS_BEFORE_PR_3284
    assert [releases.get(v).state_layout for v in ("2.14.1", "2.17.1")] == [
        releases.STATE_CLASS_ATTRIBUTES, releases.STATE_DATACLASS]
    with pytest.raises(ValueError, match="unknown backports"):
        releases.Release("9.9.9", {}, ("no-such-backport",))


def test_a_layout_te_itself_fails_is_one_error_line_and_the_run_goes_on(te_2_19, capsys, tmp_path):
    import te_fix_compare

    assert te_fix.main(SMALL + ["--layout", "eval-reentrant", "--layout", "none"]) == 1
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    errors = [line for line in lines if line["kind"] == "error"]
    assert [(e["layout"], e["mode"]) for e in errors] == [("eval-reentrant", "unpatched")]
    assert errors[0]["error"].startswith("KeyError")
    patched = [line for line in lines if line["kind"] == "microbatch"
               and line["layout"] == "eval-reentrant" and line["mode"] == "patched"]
    assert patched and all((m["forward"], m["backward"]) == (1, 1) for m in patched)
    results = tmp_path / "fix.jsonl"
    results.write_text(out)
    assert te_fix_compare.main([str(results), "--semantics", "te-2.19"]) == 0
    table = capsys.readouterr().out
    assert "model te-2.19" in table and "| after | eval-reentrant | TE raises KeyError |" in table
