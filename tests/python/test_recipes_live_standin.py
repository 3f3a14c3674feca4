"""tests/live_te/recipes_live.py and recipes_compare.py (issue 36 item 1's live rows) rehearsed on
TE's CPU stand-in: the script's truth (a forward pre-hook reading FP8's state, the recipe and the
fp8_output / fp8_grad each Linear was called with) equals the audit's rows and verdicts, for a
recompute called with other kwargs under TE's checkpoint, with the same kwargs, and in another FP8
state under torch's; a run whose counts differ, that raised or was cut short, that the audit did
not judge, whose report is another run's, or that ran under --fix-te without the fix in force is a
NO (exit 1); bad input is one line (exit 2).
(The same scripts on the GPU: tests/live_te/RESULTS.md.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from pkgutil_fp8audit import BIN, PYTHON_DIR, ROOT, STANDIN, audit, needs_agent, report

LIVE = ROOT / "tests" / "live_te"
ENV = {"PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), str(STANDIN)]), "CUDA_VISIBLE_DEVICES": ""}
SMALL = ["--device", "cpu", "--hidden", "16", "--microbatches", "3", "--markers"]


def run_pair(tmp_path: Path, name: str, *args: str, codes: tuple = (0, 3)) -> str:
    """recipes_live.py ARGS under the agent: its line and its report, as SCRIPT=REPORT."""
    needs_agent()
    out = tmp_path / name
    r = audit(out, [str(LIVE / "recipes_live.py"), *SMALL, *args], **ENV)
    assert r.returncode in codes, r.stderr
    (tmp_path / f"{name}.json").write_text(r.stdout)
    (tmp_path / f"{name}.report.json").write_text(json.dumps(report(out)))
    return f"{tmp_path / name}.json={tmp_path / name}.report.json"


def compare(*pairs: str) -> subprocess.CompletedProcess:
    """recipes_compare.py over the pairs (options may come first)."""
    return subprocess.run([sys.executable, str(LIVE / "recipes_compare.py"), *pairs],
                          capture_output=True, text=True, timeout=60)


def rows(table: str) -> List[List[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if ": recipe=" in line]


@pytest.mark.parametrize("args, truth, verdicts", [
    (["--checkpoint", "te", "--kwargs", "fp8_output", "--flip"], "3, 3, 3", "FAIL"),
    (["--recipe", "block", "--checkpoint", "te", "--kwargs", "fp8_grad", "--flip"], "3, 3, 3",
     "FAIL"),
    (["--checkpoint", "te", "--kwargs", "fp8_grad", "--flip", "--positional"], "3, 3, 3", "FAIL"),
    (["--checkpoint", "te", "--kwargs", "both"], "3, 0, 0", "PASS"),
    ([], "3, 3, 0", "FAIL"),  # torch's checkpoint: each recompute with FP8 off
])
def test_the_audit_sees_what_the_script_sees(tmp_path: Path, args: List[str], truth: str,
                                             verdicts: str) -> None:
    result = compare(run_pair(tmp_path, "run", *args))
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = rows(result.stdout)
    assert row[1] == truth and row[2] == truth and row[3] == verdicts and row[6] == "yes", row
    assert row[4] == "-", row  # no twin asked for


def test_a_run_whose_counts_differ_is_a_no(tmp_path: Path) -> None:
    pair = run_pair(tmp_path, "run", "--checkpoint", "te", "--kwargs", "fp8_output", "--flip")
    script = Path(pair.split("=")[0])
    line = json.loads(script.read_text())
    line["rows"][1]["kwargs_changes"] = 2  # the script saw one fewer other-kwargs recompute
    script.write_text(json.dumps(line) + "\n")
    result = compare(pair)
    assert result.returncode == 1, result.stdout + result.stderr
    assert rows(result.stdout)[0][6] == "NO"


def test_a_run_that_raised_or_was_cut_short_is_a_no(tmp_path: Path) -> None:
    # A job that raised in microbatch 1 of 3: what both saw before agrees, the run does not.
    pair = run_pair(tmp_path, "run", "--checkpoint", "te", "--kwargs", "fp8_output", "--flip")
    script = Path(pair.split("=")[0])
    line = json.loads(script.read_text())
    line["rows"][1]["failed"] = True
    line["error"] = "RuntimeError: raised in the recompute"
    script.write_text(json.dumps(line) + "\n")
    result = compare(pair)
    assert result.returncode == 1 and "the script raised: RuntimeError" in result.stdout
    line["error"], line["rows"] = "", line["rows"][:2]  # two of three, no error said
    del line["rows"][1]["failed"]
    script.write_text(json.dumps(line) + "\n")
    result = compare(pair)
    assert result.returncode == 1 and "2 of 3 microbatches ran" in result.stdout


def test_a_run_the_audit_did_not_judge_is_a_no(tmp_path: Path) -> None:
    # DelayedScaling on the stand-in without its updates marked: NOTHING AUDITED (exit 2), the
    # recomputes seen alike; no verdict, so no agreement.
    pair = run_pair(tmp_path, "run", "--recipe", "delayed", codes=(2,))
    result = compare(pair)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the audit did not judge it (OUTCOME_NOTHING_AUDITED" in result.stdout


def test_a_report_of_another_run_or_a_fix_not_in_force_is_a_no(tmp_path: Path) -> None:
    flipped = run_pair(tmp_path, "a", "--checkpoint", "te", "--kwargs", "fp8_grad", "--flip")
    same = run_pair(tmp_path, "b", "--checkpoint", "te", "--kwargs", "fp8_grad")
    result = compare(flipped.split("=")[0] + "=" + same.split("=")[1])
    assert result.returncode == 1 and "the report is another run's" in result.stdout
    result = compare(same + "=fix")  # said to run under --fix-te: the fix must have been in force
    assert result.returncode == 1 and "the fix was not in force" in result.stdout
    assert compare("--fix-may-refuse", same + "=fix").returncode == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text("not json\n")
    (tmp_path / "r.json").write_text("{}")
    for args in (["nopair"], [f"{tmp_path / 's.json'}={tmp_path / 'r.json'}"],
                 [f"{tmp_path / 's.json'}={tmp_path / 'r.json'}=other"]):
        result = compare(*args)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr


def test_the_one_call_script_runs_each_layout_plain_and_under_the_fix(tmp_path: Path) -> None:
    # run_recipes_live.sh as the GPU machine runs it, on the stand-in: every run tabled, all
    # agreeing; the stand-in's TE is no release the fix patches, so --fix-te runs unpatched.
    needs_agent()
    env = dict(os.environ, **ENV, RECIPES="current", DEVICE="cpu", PYTHON=sys.executable)
    result = subprocess.run(["bash", str(LIVE / "run_recipes_live.sh"), str(BIN.parent.parent),
                             str(tmp_path / "out")], env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert len(table) == 8 and all(row[6] == "yes" for row in table), table
    assert [row[3] for row in table] == ["FAIL"] * 6 + ["PASS"] * 2
    # Against each layout's twin: a recompute with FP8 off (torch's checkpoint, the fix refused
    # here) computes otherwise; one that reproduces its forward does not. (The stand-in's Linear
    # ignores fp8_output and fp8_grad, so the flipped rows between them are not asserted here.)
    twin = [row[4] for row in table]
    assert twin[0].startswith("no (") and twin[1].startswith("no ("), table
    assert twin[6:] == ["yes", "yes"], table
    # Each --fix-te run says the fix was refused (the stand-in is no release it patches).
    assert sum(row[0].endswith("--fix-te (refused)") for row in table) == 4, table


def test_the_twin_tells_a_recompute_that_reproduces_its_forward_from_one_that_does_not(
        tmp_path: Path) -> None:
    twin = tmp_path / "twin.pt"

    def script(*args: str) -> dict:
        r = subprocess.run([sys.executable, str(LIVE / "recipes_live.py"), *SMALL, *args],
                           env=dict(os.environ, **ENV), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert script("--no-checkpoint", "--grads", str(twin))["twin"] is None
    same = script("--checkpoint", "te", "--twin-grads", str(twin))["twin"]
    assert same == {"equal": True, "max_relative_difference": 0.0, "error": ""}
    fp8_off = script("--twin-grads", str(twin))["twin"]  # torch's checkpoint: FP8 off
    assert fp8_off["equal"] is False and fp8_off["max_relative_difference"] > 0, fp8_off
    # No twin (it failed): the row says so, and the script's truth is still printed.
    missing = script("--checkpoint", "te", "--twin-grads", str(tmp_path / "none.pt"))
    assert missing["twin"]["error"] == "no twin (FileNotFoundError)" and missing["rows"], missing


def test_flip_without_kwargs_is_refused() -> None:
    result = subprocess.run([sys.executable, str(LIVE / "recipes_live.py"), "--device", "cpu",
                             "--flip"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, **ENV))
    assert result.returncode == 2 and "--flip needs --kwargs" in result.stderr
