"""tests/live_te/megatron_compare.py on synthetic results (no GPU, no Megatron): rows that agree
with the ownership model's prediction (the build's fp8audit on scenarios/megatron/*.textproto)
exit 0; a TE count the model does not predict, a patched run that leaves its twin, a row without
a scenario that raised another exception than the one recorded for it, and an HF recompute outside
FP8 under the patch each make their row NO and exit 1. Under --semantics te-3456
(rows run on TE with PR #3456's scheduling, pr_3456/run.sh): counts the te-3456 model predicts,
with TE's PR state healthy and the fix standing aside in the agent's runs, agree; a count of
te-2.20, an unhealthy or missing PR state, an agent that differs, applied the fix, chose other
semantics or whose job raised, a row cut short by an exception (whatever its counts), and a row
without a scenario that raised another exception than expected or none disagree (exit 1);
malformed input, two agent runs of one row and mode, or a failing `fp8audit model` is one line,
exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Tuple

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


def test_an_unpatched_row_cut_short_by_an_error_disagrees_where_the_model_predicts_it(
        tmp_path, capsys):
    # The one microbatch it recorded equals te-2.20's first: without the error check, a pass.
    _row(tmp_path, "full-uniform", [(3, 8)])
    path = tmp_path / "mc_full-uniform.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for x in lines:
        if x["kind"] == "run" and x["mode"] == "unpatched":
            x["errors"] = [{"step": 0, "microbatch": 0, "error": "RuntimeError: CUDA error"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    code, text = _compare(tmp_path, capsys)
    assert code == 1 and "| full-uniform | raises RuntimeError |" in text and "| NO |" in text


def _raising_row(out: Path, row: str, error: str) -> None:
    """A te-2.20 row whose unpatched run raised ERROR in microbatch 0 (patched: 1/1 to the end)."""
    _row(out, row, [(3, 0)])
    path = out / f"mc_{row}.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for x in lines:
        if x["kind"] == "run" and x["mode"] == "unpatched":
            x["errors"] = [{"step": 0, "microbatch": 0, "error": error}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


@pytest.mark.parametrize("row, error, shown, agree", [
    ("selective-mlp", "IndexError: pop from an empty deque", "raises IndexError", "yes"),
    ("selective-mlp", "RuntimeError: CUDA error", "raises RuntimeError, expected IndexError",
     "NO"),
    ("cuda-graph-te", "IndexError: pop", "raises IndexError; needs a scenario", "NO")])
def test_a_row_without_a_scenario_agrees_only_on_the_exception_recorded_for_it(
        tmp_path, capsys, row, error, shown, agree):
    _raising_row(tmp_path, row, error)
    code, text = _compare(tmp_path, capsys)
    line = next(x for x in text.splitlines() if x.startswith(f"| {row} |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[1:3] == [shown, "no scenario"] and cells[-1] == agree, text
    assert code == (0 if agree == "yes" else 1), text


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


# --semantics te-3456: megatron_live.py --mode unpatched on TE with PR #3456's scheduling.
HEALTHY = {"pending": False, "depth": 0, "slot": None}
PR_COUNTS = {"none": [(1, 1)] * 8, "full-uniform": [(3, 1)] * 8,
             "full-uniform-all": [(2, 1)] * 8, "moe-selective-moe": [(3, 1)] * 8}


def _pr_row(out: Path, row: str, counts: List[Tuple[int, int]],
            state: Optional[Dict[str, Any]] = None, error: Optional[str] = None,
            patched_run: bool = False) -> None:
    state = HEALTHY if state is None else state
    lines: List[Dict[str, Any]] = [
        {"kind": "microbatch", "row": row, "mode": "unpatched", "microbatch": i, "forward": f,
         "backward": b, "stash_left": 0, **state} for i, (f, b) in enumerate(counts)]
    if error:  # the failed microbatch's state is left as TE's exception left it
        lines[-1].update(failed=error, pending=True, slot=12)
    lines.append({"kind": "run", "row": row, "mode": "unpatched", "patched": False,
                  "errors": [{"error": error}] if error else [], "bitwise_equal_to_twin": False})
    if patched_run:
        lines.append({"kind": "run", "row": row, "mode": "patched", "patched": True,
                      "errors": []})
    (out / f"mc_{row}.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _pr_agent(out: Path, name: str, row: str, counts: List[Tuple[int, int]],
              patched: bool = False, chosen: Tuple[str, str] = ("te-3456", "scheduling"),
              error: Optional[str] = None) -> str:
    """megatron_live.py --mode hook --no-twin under fp8audit run [--fix-te]: its run line (error:
    the job's exception, which the script catches, exiting 0) and the report."""
    run = {"kind": "run", "row": row, "mode": "hook", "patched": patched,
           "errors": [{"step": 0, "microbatch": 0, "error": error}] if error else []}
    (out / f"{name}.jsonl").write_text(json.dumps(run) + "\n")
    rows = [{"forward_updates": f, "backward_updates": b} for f, b in counts]
    recording = {"semantics": chosen[0], "semantics_from": chosen[1]}
    (out / f"{name}.json").write_text(json.dumps(
        {"ranks": [{"microbatches": rows, "recording": recording}]}))
    return f"{out / name}.jsonl={out / name}.json"


def _pr_results(out: Path) -> List[str]:
    """pr_3456/run.sh's Megatron rows as the te-3456 model counts them, selective-mlp raising as on
    TE 2.20.2, and its three agents."""
    for row, counts in PR_COUNTS.items():
        _pr_row(out, row, counts)
    _pr_row(out, "selective-core-attn-te", [(1, 1)] * 8)
    _pr_row(out, "selective-mlp", [(1, 0)], error="IndexError: pop from an empty deque")
    return [_pr_agent(out, "agent_full_uniform", "full-uniform", PR_COUNTS["full-uniform"]),
            _pr_agent(out, "agent_full_uniform_fix", "full-uniform", PR_COUNTS["full-uniform"]),
            _pr_agent(out, "agent_moe_fix", "moe-selective-moe", PR_COUNTS["moe-selective-moe"])]


def _compare_pr(out: Path, agents: List[str], capsys) -> tuple:
    import megatron_compare

    argv = [str(out), "--fp8audit", BIN, "--semantics", "te-3456"]
    for agent in agents:
        argv += ["--agent", agent]
    code = megatron_compare.main(argv)
    return code, capsys.readouterr().out


def _pr_line(text: str, row: str) -> List[str]:
    (line,) = [x for x in text.splitlines() if x.startswith(f"| {row} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_pr_rows_the_te_3456_model_predicts_with_the_fix_standing_aside_agree(tmp_path, capsys):
    code, text = _compare_pr(tmp_path, _pr_results(tmp_path), capsys)
    assert code == 0, text
    assert _pr_line(text, "full-uniform") == ["full-uniform", "3/1", "3/1", "3/1", "3/1", "yes",
                                              "0", "no", "yes"]
    assert _pr_line(text, "moe-selective-moe")[1:5] == ["3/1", "3/1", "not run", "3/1"]
    assert _pr_line(text, "selective-mlp")[1:3] == ["raises IndexError", "no scenario"]
    assert _pr_line(text, "selective-mlp")[5:] == ["none succeeded", "0", "no", "yes"]
    assert "- agent_full_uniform_fix (--fix-te): semantics te-3456 (from scheduling), " \
        "fp8audit.te not applied" in text


def test_pr_te_2_20_counts_disagree_with_the_te_3456_model(tmp_path, capsys):
    _pr_row(tmp_path, "full-uniform", [(3, 8)] + [(3, 9)] * 7)  # TE 2.20.2's own counts
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1, text
    assert _pr_line(text, "full-uniform")[1:3] == ["3/8 3/9", "3/1"]
    assert _pr_line(text, "full-uniform")[-1] == "NO"


@pytest.mark.parametrize("state, shown", [
    (dict(HEALTHY, pending=True), "NO"), (dict(HEALTHY, depth=1), "NO"),
    (dict(HEALTHY, slot=3), "NO"), ({}, "no state")])  # {}: a TE without the PR's scheduling
def test_pr_an_unhealthy_or_missing_pr_state_disagrees(tmp_path, capsys, state, shown):
    _pr_row(tmp_path, "none", PR_COUNTS["none"], state=state)
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1, text
    assert _pr_line(text, "none")[5] == shown and _pr_line(text, "none")[-1] == "NO"


@pytest.mark.parametrize("change", [
    {"counts": [(3, 2)] * 8}, {"patched": True}, {"chosen": ("fixed", "patch")},
    {"chosen": ("te-2.20", "te_version")}])
def test_pr_an_agent_that_differs_applied_the_fix_or_chose_other_semantics_disagrees(
        tmp_path, capsys, change):
    _pr_row(tmp_path, "full-uniform", PR_COUNTS["full-uniform"])
    kwargs: Dict[str, Any] = dict(counts=PR_COUNTS["full-uniform"])
    kwargs.update(change)
    agent = _pr_agent(tmp_path, "agent_full_uniform_fix", "full-uniform", **kwargs)
    code, text = _compare_pr(tmp_path, [agent], capsys)
    assert code == 1 and _pr_line(text, "full-uniform")[-1] == "NO", text


def test_pr_a_patched_run_or_an_agent_without_its_row_disagrees(tmp_path, capsys):
    _pr_row(tmp_path, "none", PR_COUNTS["none"], patched_run=True)
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1 and "- none: fp8audit.te applied in its patched run" in text, text
    (tmp_path / "mc_none.jsonl").unlink()
    _pr_row(tmp_path, "none", PR_COUNTS["none"])
    agent = _pr_agent(tmp_path, "agent_full_uniform", "full-uniform", PR_COUNTS["full-uniform"])
    code, text = _compare_pr(tmp_path, [agent], capsys)
    assert code == 1 and "; no mc_full-uniform.jsonl" in text, text


def _script(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "live_te" /
                                               "megatron_compare.py"), str(out), "--fp8audit",
                           BIN, "--semantics", "te-3456", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("case", ["json", "mode", "errors", "pair", "report", "hf",
                                  "duplicate"])
def test_pr_bad_input_is_one_line_and_exit_2(tmp_path, case):
    _pr_row(tmp_path, "none", PR_COUNTS["none"])
    row = tmp_path / "mc_none.jsonl"
    agent = _pr_agent(tmp_path, "agent_none", "none", PR_COUNTS["none"])
    args: List[str] = ["--agent", agent]
    if case == "json":
        row.write_text(row.read_text() + "{not json\n")
    elif case == "mode":
        row.write_text(row.read_text().replace('"mode": "unpatched", ', "", 1))
    elif case == "errors":
        row.write_text(row.read_text().replace('"errors": []', '"errors": "IndexError"'))
    elif case == "pair":
        args = ["--agent", agent.split("=")[0]]
    elif case == "report":
        (tmp_path / "agent_none.json").write_text("{")
    elif case == "duplicate":  # a second plain run of row none: one would hide the other
        args += ["--agent", _pr_agent(tmp_path, "agent_none_again", "none", PR_COUNTS["none"])]
    else:
        args += ["--hf-agent", agent]
    done = _script(tmp_path, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("megatron_compare.py: "), done.stderr


def test_megatron_live_records_the_pr_state_only_on_a_te_with_it():
    import megatron_live

    state = SimpleNamespace(pending_backward_quantization_update=True,
                            quantization_backward_scope_depth=1,
                            backward_quantization_update_callback_task_id=5)
    manager = SimpleNamespace(quantization_state=state)
    assert megatron_live.pr_state(manager) == {"pending": True, "depth": 1, "slot": 5}
    assert megatron_live.pr_state(SimpleNamespace(quantization_state=SimpleNamespace())) == {}


@pytest.mark.parametrize("case", ["error", "failed", "no message", "all failed"])
def test_pr_a_row_cut_short_never_agrees_with_the_model_asked_for_as_many(tmp_path, capsys, case):
    """megatron_live.py stops at the failed microbatch and the model is asked for that many: the
    truncated counts equal the prediction, the row must still be NO."""
    counts = PR_COUNTS["full-uniform"][:1 if case == "all failed" else 2]
    _pr_row(tmp_path, "full-uniform", counts, error="RuntimeError: boom")
    path = tmp_path / "mc_full-uniform.jsonl"
    got = [json.loads(x) for x in path.read_text().splitlines()]
    if case == "failed":  # a microbatch marked failed, the run line's errors empty
        got[-1]["errors"] = []
    elif case == "no message":  # an error without its text, no microbatch marked
        got[-1]["errors"] = [{"step": 0}]
        got[-2].update(failed=None, pending=False, slot=None)
    path.write_text("\n".join(json.dumps(x) for x in got) + "\n")
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1, text
    line = _pr_line(text, "full-uniform")
    assert line[1].startswith("raises ") and line[2] == "3/1" and line[-1] == "NO", text
    if case == "all failed":
        assert line[5] == "none succeeded"


def test_pr_healthy_is_none_where_no_microbatch_succeeded():
    import megatron_compare

    failed = dict(HEALTHY, failed="IndexError: pop from an empty deque")
    assert megatron_compare.pr_healthy([failed]) is None
    assert megatron_compare.pr_healthy([dict(HEALTHY), failed]) is True


@pytest.mark.parametrize("row, error, shown", [
    ("selective-mlp", "RuntimeError: boom", "raises RuntimeError, expected IndexError"),
    ("selective-mlp", "IndexErrorX: boom", "raises IndexErrorX, expected IndexError"),
    ("cuda-graph-te", "IndexError: pop", "raises IndexError; needs a scenario")])
def test_pr_a_row_without_a_scenario_agrees_only_on_the_exception_expected(
        tmp_path, capsys, row, error, shown):
    _pr_row(tmp_path, row, [(1, 0)], error=error)
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1, text
    assert _pr_line(text, row)[1] == shown and _pr_line(text, row)[-1] == "NO", text


def test_pr_selective_mlp_that_runs_says_it_needs_a_scenario(tmp_path, capsys):
    _pr_row(tmp_path, "selective-mlp", [(1, 1)] * 8)  # the edited TE no longer raises there
    code, text = _compare_pr(tmp_path, [], capsys)
    assert code == 1, text
    assert _pr_line(text, "selective-mlp")[1] == "ran 1/1: expected IndexError; needs a scenario"
    assert _pr_line(text, "selective-mlp")[-1] == "NO"


def test_pr_an_agent_whose_job_raised_disagrees(tmp_path, capsys):
    """megatron_live.py catches the job's exception (the hook's, say) and exits 0: the run line's
    errors are all that tell."""
    _pr_row(tmp_path, "full-uniform", PR_COUNTS["full-uniform"])
    agent = _pr_agent(tmp_path, "agent_full_uniform_fix", "full-uniform",
                      PR_COUNTS["full-uniform"], error="RuntimeError: raised by the hook")
    code, text = _compare_pr(tmp_path, [agent], capsys)
    assert code == 1, text
    assert _pr_line(text, "full-uniform")[4] == "3/1, raises RuntimeError"
    assert _pr_line(text, "full-uniform")[-1] == "NO"
    assert "; the job raised RuntimeError: raised by the hook" in text


@pytest.mark.parametrize("binary", ["two lines", "false", "a prediction"])
def test_pr_a_failing_fp8audit_model_is_one_line_and_exit_2(tmp_path, binary):
    """Its first non-empty stderr line, or its exit status where it printed none; a prediction on
    stdout from a run that failed is not used."""
    path = tmp_path / "fp8audit"
    shown = "fp8audit model none.textproto: first: bad scenario"
    if binary == "two lines":
        path.write_text("#!/bin/sh\necho >&2\necho 'first: bad scenario' >&2\n"
                        "echo 'second line' >&2\nexit 1\n")
    elif binary == "a prediction":  # what the row counted, exit 1
        mbs = [{"forward_updates": 1, "backward_updates": 1}] * 8
        path.write_text(f"#!/bin/sh\necho '{json.dumps({'microbatches': mbs})}'\n"
                        "echo 'first: bad scenario' >&2\nexit 1\n")
    else:
        path, shown = Path("/bin/false"), "fp8audit model none.textproto: exit 1"
    if path != Path("/bin/false"):
        path.chmod(0o755)
    _pr_row(tmp_path, "none", PR_COUNTS["none"])
    done = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "live_te" /
                                               "megatron_compare.py"), str(tmp_path),
                           "--fp8audit", str(path), "--semantics", "te-3456"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"megatron_compare.py: {shown}"], done.stderr
