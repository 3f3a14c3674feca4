"""tests/live_te/megatron_compare.py on synthetic results (no GPU, no Megatron): rows that agree
with the ownership model's prediction (the build's fp8audit on scenarios/megatron/*.textproto)
exit 0; a TE count the model does not predict, a patched run that leaves its twin, and an HF
recompute outside FP8 under the patch each make their row NO and exit 1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

BIN = os.environ.get("FP8AUDIT_BIN", "")
pytestmark = pytest.mark.skipif(not Path(BIN).is_file(), reason="FP8AUDIT_BIN not built")


def _row(out: Path, row: str, unpatched, patched_equal: bool = True) -> None:
    lines = []
    for mode, counts in (("unpatched", unpatched), ("patched", [(1, 1)] * len(unpatched))):
        for i, (f, b) in enumerate(counts):
            lines.append({"kind": "microbatch", "row": row, "mode": mode, "microbatch": i,
                          "forward": f, "backward": b, "stash_left": 0})
        lines.append({"kind": "run", "row": row, "mode": mode, "errors": [],
                      "bitwise_equal_to_twin": patched_equal or mode == "unpatched"})
    (out / f"mc_{row}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _hf(out: Path, patched_off: int) -> None:
    lines = []
    for mode, off in (("unpatched", 14), ("patched", patched_off)):
        lines.append({"kind": "microbatch", "checkpoint": "reentrant", "mode": mode,
                      "forward": 1, "backward": 1, "recomputed": 14,
                      "fp8_mismatch": ["m"] * off})
        lines.append({"kind": "run", "checkpoint": "reentrant", "mode": mode, "errors": [],
                      "loss_first_difference": None if mode == "patched" else [1, 0],
                      "grads_first_difference": None if mode == "patched" else [0, 0],
                      "grads_max_relative_difference": 0.0 if mode == "patched" else 0.6})
    (out / "hf.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _compare(out: Path, capsys) -> tuple:
    import megatron_compare

    code = megatron_compare.main([str(out), "--fp8audit", BIN])
    return code, capsys.readouterr().out


def test_rows_the_model_predicts_and_patched_twins_agree(tmp_path, capsys):
    _row(tmp_path, "full-uniform", [(3, 8)] + [(3, 9)] * 7)
    _row(tmp_path, "none", [(1, 1)] * 8)
    _hf(tmp_path, 0)
    code, text = _compare(tmp_path, capsys)
    assert code == 0, text
    assert "| full-uniform | 3/8 3/9 | 3/8 3/9 |" in text


def test_a_count_the_model_does_not_predict_disagrees(tmp_path, capsys):
    _row(tmp_path, "full-uniform", [(3, 8)] * 8)  # the final norm's extra update is missing
    code, text = _compare(tmp_path, capsys)
    assert code == 1 and "| NO |" in text


def test_a_patched_run_that_leaves_its_twin_disagrees(tmp_path, capsys):
    _row(tmp_path, "none", [(1, 1)] * 8, patched_equal=False)
    code, text = _compare(tmp_path, capsys)
    assert code == 1 and "| NO |" in text


def test_a_patched_hf_recompute_outside_fp8_disagrees(tmp_path, capsys):
    _row(tmp_path, "none", [(1, 1)] * 8)
    _hf(tmp_path, 3)
    code, text = _compare(tmp_path, capsys)
    assert code == 1 and "| reentrant | patched | 1/1 | 3 of 14 |" in text


def _hf_agent(out: Path, name: str, patched: bool, agent_changes, script_changes,
              verdicts=None) -> str:
    """hf_accelerate_live.py --mode hook's lines and the agent's report for one run (2 of its own
    microbatches, then 1 of the twin's)."""
    mine = [{"kind": "microbatch", "checkpoint": "reentrant", "mode": "hook", "forward": 1,
             "backward": 1, "recomputed": 14, "fp8_mismatch": ["m"] * n} for n in script_changes]
    run = {"kind": "run", "checkpoint": "reentrant", "mode": "hook", "patched": patched}
    (out / f"{name}.jsonl").write_text("\n".join(json.dumps(x) for x in mine + [run]) + "\n")
    verdicts = verdicts or ["FAIL" if n else "PASS" for n in agent_changes]
    rows = [{"forward_updates": 1, "backward_updates": 1, "recomputes": 14,
             "recompute_precision_changes": n, "verdict": v}
            for n, v in zip(agent_changes, verdicts)]
    rows.append({"forward_updates": 1, "backward_updates": 1, "verdict": "PASS"})  # the twin
    violations = [{"kind": "RECOMPUTE_PRECISION"} for n in agent_changes if n]
    (out / f"{name}.json").write_text(json.dumps({"ranks": [{"microbatches": rows,
                                                              "violations": violations}]}))
    return f"{out / name}.jsonl={out / name}.json=3"


def _compare_hf_agent(out: Path, pairs, capsys) -> tuple:
    import megatron_compare

    argv = [str(out), "--fp8audit", BIN]
    for pair in pairs:
        argv += ["--hf-agent", pair]
    code = megatron_compare.main(argv)
    return code, capsys.readouterr().out


def test_the_agents_recompute_check_agrees_with_the_scripts_own_view(tmp_path, capsys):
    pairs = [_hf_agent(tmp_path, "u", False, [14, 14], [14, 14]),
             _hf_agent(tmp_path, "f", True, [0, 0], [0, 0])]
    code, text = _compare_hf_agent(tmp_path, pairs, capsys)
    assert code == 0, text
    assert "| reentrant | unpatched | 1/1 | 14 / 14 | 14 / 14 | 2 | 2 of 2 | 3 | yes |" in text
    assert "| reentrant | --fix-te | 1/1 | 14 / 14 | 0 / 0 | 0 | 0 of 2 | 3 | yes |" in text


def test_an_agent_that_misses_a_changed_recompute_or_passes_it_disagrees(tmp_path, capsys):
    missed = _hf_agent(tmp_path, "missed", False, [14, 0], [14, 14])
    passed = _hf_agent(tmp_path, "passed", False, [14, 14], [14, 14], verdicts=["FAIL", "PASS"])
    for pair in (missed, passed):
        code, text = _compare_hf_agent(tmp_path, [pair], capsys)
        assert code == 1 and "| NO |" in text, text


def _precision(out: Path, name: str, changes, code: int) -> str:
    """The report of one megatron_live.py --mode hook run under fp8audit run."""
    rows = [{"forward_updates": 1, "backward_updates": 1, "recomputes": 2,
             "recompute_precision_changes": n} for n in changes]
    violations = [{"kind": "RECOMPUTE_PRECISION"} for n in changes if n]
    (out / f"{name}.json").write_text(json.dumps({"ranks": [{"microbatches": rows,
                                                              "violations": violations}]}))
    return f"selective-core-attn-fp8-dpa={out / name}.json={code}"


def _fp8_dpa_row(out: Path, unpatched_equal: bool) -> None:
    lines = [{"kind": "run", "row": "selective-core-attn-fp8-dpa", "mode": mode, "errors": [],
              "bitwise_equal_to_twin": equal}
             for mode, equal in (("unpatched", unpatched_equal), ("patched", True))]
    (out / "mc_selective-core-attn-fp8-dpa.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n")


def _compare_precision(out: Path, specs, capsys) -> tuple:
    import megatron_compare

    ok = megatron_compare.precision_rows(out, specs)
    return ok, capsys.readouterr().out


def test_an_fp8_change_the_audit_flags_where_the_numerics_leave_the_twin_agrees(tmp_path, capsys):
    _fp8_dpa_row(tmp_path, unpatched_equal=False)
    specs = [_precision(tmp_path, "agent_fp8_dpa", [2, 2], 3),
             _precision(tmp_path, "agent_fp8_dpa_fix", [0, 0], 0)]
    ok, text = _compare_precision(tmp_path, specs, capsys)
    assert ok, text
    assert "| selective-core-attn-fp8-dpa | unpatched | 2 | 2 | 2 | 3 | no | yes |" in text
    assert "| selective-core-attn-fp8-dpa | --fix-te | 2 | 0 | 0 | 0 | yes | yes |" in text


def test_an_fp8_change_flagged_where_the_numerics_equal_the_twin_disagrees(tmp_path, capsys):
    _fp8_dpa_row(tmp_path, unpatched_equal=True)
    ok, text = _compare_precision(tmp_path, [_precision(tmp_path, "agent_u", [2, 2], 3)], capsys)
    assert not ok and "| NO |" in text
    _fp8_dpa_row(tmp_path, unpatched_equal=False)  # and a change the audit misses
    ok, text = _compare_precision(tmp_path, [_precision(tmp_path, "agent_u", [0, 0], 0)], capsys)
    assert not ok and "| NO |" in text
